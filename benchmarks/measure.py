"""Run one child process and measure it: wall time and peak memory.

Peak memory is taken two ways, because a spark-submit is a process tree (the launcher
script, the JVM driver, the Python driver it forks, Python workers):

- `peak_rss_mb`: the highest sum of RSS over the whole tree, sampled every 50 ms with
  psutil (what the machine had to hold at once; a spike shorter than 50 ms can be missed);
- `max_rss_mb`: the kernel's `ru_maxrss` from `wait4` for that child: the peak of the
  largest single process of the tree (exact, but not a sum).

`cpu_s` is user + system CPU time from the same `wait4` (the child and the descendants
it waited for): on a shared machine it moves much less with the load than wall time.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

SAMPLE_INTERVAL_S = 0.05


class ChildFailed(RuntimeError):
    """A measured child exited non-zero; the message carries its command and log tail."""


@dataclass
class Measured:
    wall_s: float
    peak_rss_mb: float
    max_rss_mb: float
    cpu_s: float = 0.0
    stdout_tail: str = ""
    # With `watch`: the highest sum of RSS of the watched process's descendants (not the
    # process itself) while the child ran, e.g. the executors a standalone worker starts.
    watched_peak_rss_mb: float | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("stdout_tail")
        if out["watched_peak_rss_mb"] is None:
            out.pop("watched_peak_rss_mb")
        return out


def _tree_rss(proc: psutil.Process) -> int:
    """Sum of RSS over the tree, each address space once.

    A JVM starts a child (Hadoop's local file system runs `rm`, `chmod`...) with
    posix_spawn, a vfork: until the child execs it shares the JVM's memory and reports the
    JVM's RSS, so a plain sum counts a 4 GB driver twice whenever a sample falls in that
    window (two "JVMs" with the same 3.88 GB `RssAnon`: a 16 M-row export_shards read as
    9.6 GB). A child with its parent's virtual size and RSS
    shares its parent's memory (within 5 %: the two are read a moment apart): it is skipped.
    """
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    sizes: dict[int, tuple[int, int, int]] = {}
    for p in procs:
        try:
            mi = p.memory_info()
            sizes[p.pid] = (p.ppid(), mi.rss, mi.vms)
        except psutil.Error:
            pass
    return sum(rss for ppid, rss, vms in sizes.values() if not _shares_parent_memory(ppid, rss, vms, sizes))


def _shares_parent_memory(ppid: int, rss: int, vms: int, sizes: dict[int, tuple[int, int, int]]) -> bool:
    parent = sizes.get(ppid)
    # The same address space has the same virtual size; the RSS is read a moment apart
    # from the parent's, so it may have moved a little.
    return parent is not None and vms == parent[2] and abs(rss - parent[1]) <= 0.05 * parent[1]


def _descendants_rss(proc: psutil.Process) -> int:
    """Sum of RSS of `proc`'s children's trees, `proc` itself left out."""
    try:
        children = proc.children()
    except psutil.Error:
        return 0
    return sum(_tree_rss(child) for child in children)


def _kill_tree(pid: int) -> None:
    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.Error:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=10)


def run_child(
    cmd: Sequence[str],
    *,
    env: dict[str, str],
    log: Path,
    cwd: Path | None = None,
    timeout_s: float = 7200,
    watch: int | None = None,
) -> Measured:
    """Run `cmd`, its output to `log`; raise ChildFailed (with the log tail) on a non-zero exit.

    `watch`: the pid of a process outside the child's tree whose descendants the child
    makes work (a standalone Spark worker's executors): their peak RSS is sampled too.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    peak = 0
    watched_peak = 0
    with open(log, "wb") as out:
        start = time.perf_counter()
        popen = subprocess.Popen(list(cmd), env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        stop = threading.Event()

        def sample() -> None:
            nonlocal peak, watched_peak
            try:
                proc = psutil.Process(popen.pid)
                watched = None if watch is None else psutil.Process(watch)
            except psutil.Error:
                return
            while not stop.is_set():
                peak = max(peak, _tree_rss(proc))
                if watched is not None:
                    watched_peak = max(watched_peak, _descendants_rss(watched))
                stop.wait(SAMPLE_INTERVAL_S)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        deadline = start + timeout_s
        try:
            while True:
                pid, status, usage = os.wait4(popen.pid, os.WNOHANG)
                if pid:
                    break
                if time.perf_counter() > deadline:
                    raise ChildFailed(f"timed out after {timeout_s} s: {' '.join(cmd)} (log {log})")
                time.sleep(0.01)
        except BaseException:  # a timeout, or the harness interrupted: leave no JVM behind
            _kill_tree(popen.pid)
            raise
        finally:
            stop.set()
            sampler.join()
        wall = time.perf_counter() - start
        popen.returncode = os.waitstatus_to_exitcode(status)
    tail = log.read_text(errors="replace")[-4000:]
    if popen.returncode != 0:
        raise ChildFailed(f"exit {popen.returncode}: {' '.join(cmd)}\nlog {log}, last lines:\n{tail}")
    # ru_maxrss is in KiB on Linux.
    return Measured(
        wall_s=round(wall, 3),
        peak_rss_mb=round(peak / 2**20, 1),
        max_rss_mb=round(usage.ru_maxrss / 1024, 1),
        cpu_s=round(usage.ru_utime + usage.ru_stime, 3),
        stdout_tail=tail,
        watched_peak_rss_mb=None if watch is None else round(watched_peak / 2**20, 1),
    )


RESULT_MARK = "LAKEPREP_BENCH_RESULT "


def emit_result(payload: dict[str, Any]) -> None:
    """How a Python child hands its own numbers back (one marked JSON line on stdout)."""
    print(RESULT_MARK + json.dumps(payload, sort_keys=True), flush=True)


def child_result(measured: Measured) -> dict[str, Any]:
    for line in reversed(measured.stdout_tail.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK) :])
    raise ChildFailed(f"child printed no {RESULT_MARK.strip()} line; last output:\n{measured.stdout_tail}")


def summary(values: Sequence[float]) -> dict[str, float | int]:
    """Median and spread (min, max, and the relative half-range) of the repetitions."""
    values = [float(v) for v in values]
    med = statistics.median(values)
    return {
        "n": len(values),
        "median": round(med, 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
        "spread_pct": round(100 * (max(values) - min(values)) / (2 * med), 1) if med else 0.0,
    }
