"""lakeprep benchmarks: ratios against the floor, measured side by side in one run.

    python -m benchmarks                 # full mode (1 M, 4 M, 16 M rows), writes benchmarks/RESULTS.md
    python -m benchmarks --quick         # 20 k rows, one repetition: the smoke check `make test` runs

Every measurement runs in a fresh child process (a spark-submit, or a Python child), so
its peak memory is the child's own; warm-up runs are discarded, repetitions alternate
between the measured thing and its floor so that the machine's noise hits both alike.
"""
