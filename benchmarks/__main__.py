"""`python -m benchmarks [--quick] [--rows N ...] [--reps R] [--only spark input parse single_node]`."""

from benchmarks.run import main

main()
