"""The tree sampler counts each address space once (measure._tree_rss)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from benchmarks.measure import _shares_parent_memory, _tree_rss, run_child


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


def test_run_child_samples_the_watched_process_descendants_apart(tmp_path):
    # A "worker" outside the measured child's tree holds 100 MiB itself; while the child
    # runs, the worker's own child (an "executor") holds 150 MiB. Only the executor counts.
    executor = "import time; b = bytearray(150 * 2**20); b[::4096] = b'x' * len(b[::4096]); time.sleep(30)"
    worker_code = (
        "import subprocess, sys, time; b = bytearray(100 * 2**20); b[::4096] = b'x' * len(b[::4096]); "
        f"open(sys.argv[1], 'w').close(); time.sleep(float(sys.argv[2])); "
        f"c = subprocess.Popen([sys.executable, '-c', {executor!r}]); time.sleep(30)"
    )
    started = tmp_path / "started"
    worker = subprocess.Popen([sys.executable, "-c", worker_code, str(started), "0.5"])
    try:
        deadline = time.monotonic() + 10
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        child = [sys.executable, "-c", "import time; time.sleep(3)"]
        m = run_child(child, env=dict(os.environ), log=tmp_path / "child.log", watch=worker.pid)
        assert 140 < m.watched_peak_rss_mb < 200, m
        assert m.peak_rss_mb < 100, m  # the child's own tree, not the watched one
        assert "watched_peak_rss_mb" in m.to_json()
        plain = run_child([sys.executable, "-c", "pass"], env=dict(os.environ), log=tmp_path / "plain.log")
        assert "watched_peak_rss_mb" not in plain.to_json()
    finally:
        for c in psutil.Process(worker.pid).children(recursive=True):
            c.kill()
        worker.kill()
        worker.wait()


def test_another_master_applies_to_the_children_for_its_block_and_nests(monkeypatch):
    from benchmarks import environment

    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    key = "AIRFLOW_CONN_SPARK_DEFAULT"
    default = environment.child_env()[key]
    assert "local[2]" in default
    with environment.other_master({key: "spark://127.0.0.1:7077", "SPARK_LOCAL_IP": "127.0.0.1"}):
        assert environment.child_env()[key] == "spark://127.0.0.1:7077"
        with environment.other_master({key: "local[1]"}):
            assert environment.child_env()[key] == "local[1]"
        # The enclosing block's master again, and what came with it.
        assert environment.child_env()[key] == "spark://127.0.0.1:7077"
        assert environment.child_env()["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert environment.child_env()[key] == default
    assert "SPARK_LOCAL_IP" not in environment.child_env()
