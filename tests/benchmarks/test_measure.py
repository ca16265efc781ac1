"""The tree sampler counts each address space once (measure._tree_rss)."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from benchmarks.measure import _shares_parent_memory, _tree_rss


def test_a_vforked_child_is_not_counted_twice():
    # pid: (ppid, rss, vms); 11 is a child in its vfork window (the JVM's sizes), 12 a
    # forked worker with memory of its own.
    sizes = {10: (1, 4_000, 9_000), 11: (10, 4_050, 9_000), 12: (10, 300, 9_000)}
    kept = [
        pid for pid, (ppid, rss, vms) in sizes.items() if not _shares_parent_memory(ppid, rss, vms, sizes)
    ]
    assert kept == [10, 12]


CHILD = "import time; b = bytearray(100 * 2**20); time.sleep(30)"
PARENT = (
    "import subprocess, sys, time; b = bytearray(200 * 2**20); "
    f"c = subprocess.Popen([sys.executable, '-c', {CHILD!r}]); time.sleep(30)"
)


def test_the_tree_sum_includes_children_with_memory_of_their_own():
    p = subprocess.Popen([sys.executable, "-c", PARENT])
    try:
        root = psutil.Process(p.pid)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _tree_rss(root) < 300 * 2**20:
            time.sleep(0.1)
        assert 300 * 2**20 < _tree_rss(root) < 400 * 2**20
    finally:
        for c in psutil.Process(p.pid).children(recursive=True):
            c.kill()
        p.kill()
        p.wait()
