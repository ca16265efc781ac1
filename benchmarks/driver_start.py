"""The root process of a profiled submission: runs it, and times how long until its Python driver runs.

    python -m benchmarks.driver_start <json file> <driver script> <poll seconds> <command...>

`day_profile` starts this under `py-spy record --subprocesses` (py-spy needs a Python root:
the launcher itself is bash and Java). It runs the command and, every `poll seconds`, looks
for a descendant whose command line is `python .../<driver script>`, as spark-submit's JVM
starts the driver. The seconds from the command's start until then (the launcher and the
JVM before the driver) go into the JSON file as `driver_after_s` (`null` when no driver
ran), with the command's exit code as `returncode` (py-spy exits 0 whatever its command
did); the exit code is also this process's.

A wall clock, not a difference of sample counts: py-spy samples each process on its own
schedule, and under load one process's count falls a second or more behind another's, so
the wrapper's samples less the driver's came out below zero.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence

import psutil


def runs_script(process: psutil.Process, script: str) -> bool:
    """Whether `process` is a Python interpreter running `script` (its first argument)."""
    try:
        argv = process.cmdline()
    except psutil.Error:  # gone, or not yet exec'd into the driver
        return False
    return len(argv) > 1 and argv[1].endswith(script)


def wait_for_driver(child: subprocess.Popen, script: str, poll_s: float) -> float | None:
    """Seconds after `child` started until a descendant runs `script`; None if `child` ended first."""
    start = time.monotonic()
    try:
        root = psutil.Process(child.pid)
    except psutil.Error:
        return None
    while child.poll() is None:
        try:
            descendants = root.children(recursive=True)
        except psutil.Error:  # a process of the tree ended while it was walked: look again
            descendants = []
        if any(runs_script(p, script) for p in descendants):
            return time.monotonic() - start
        time.sleep(poll_s)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 4:
        raise SystemExit(__doc__.splitlines()[2].strip())
    out, script, poll_s, command = args[0], args[1], float(args[2]), args[3:]
    child = subprocess.Popen(command)
    try:
        after = wait_for_driver(child, script, poll_s)
        code = child.wait()
    finally:
        if child.poll() is None:
            child.kill()
    with open(out, "w") as f:
        json.dump({"driver_after_s": None if after is None else round(after, 3), "returncode": code}, f)
    return code


if __name__ == "__main__":
    sys.exit(main())
