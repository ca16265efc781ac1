"""The suite's own isolation (tests/conftest.py, issue 31).

A Spark session stopped by one test (or by the standalone master) is replaced for the
next; a command fails naming itself, its exit code and its stderr, and ends with its
whole process tree; what a test leaves running is found, even after init adopted it,
and ended at the end of the session.

The session tests stop and replace this worker's shared session on purpose: they check
that the next user gets a live one, so they leave the worker as they found it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import (
    LOCAL_MASTER,
    REPO,
    CommandFailed,
    _spark_gateway_pid,
    end_process_tree,
    leftover_processes,
    run_command,
)

# --------------------------------------------------------------------------- spark

_STOPPED_BY_AN_EARLIER_TEST: list[object] = []


def test_a_context_the_jvm_stopped_is_replaced(local_spark, spark):
    starts = local_spark.starts
    # As StandaloneSchedulerBackend.dead does when the master drops the application:
    # stopped in the JVM, while Python still holds what looks like a live context.
    spark.sparkContext._jsc.sc().stop()
    assert spark.sparkContext._jsc is not None

    again = local_spark.get()
    assert again is not spark
    assert again.range(5).count() == 5
    assert again.sparkContext.master == LOCAL_MASTER
    assert local_spark.starts == starts + 1
    assert local_spark.get() is again  # live: kept, not started again


def test_one_test_stops_the_shared_session(spark):
    _STOPPED_BY_AN_EARLIER_TEST.append(spark)
    spark.stop()  # what a job's main() does with the session getOrCreate handed it


def test_the_next_test_gets_a_live_local_session(spark):
    assert all(spark is not stopped for stopped in _STOPPED_BY_AN_EARLIER_TEST)
    df = spark.createDataFrame([(1, "a"), (2, "b")], "id INT, name STRING")
    assert df.count() == 2
    assert spark.sparkContext.master == LOCAL_MASTER
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"


def test_a_session_on_another_master_is_not_taken_for_the_local_one(local_spark):
    from pyspark.sql import SparkSession

    local_spark.stop()
    # Stands for a driver on the standalone cluster that a test left active: getOrCreate
    # would hand it to whoever asks next, whatever master they asked for.
    other = SparkSession.builder.master("local[1]").appName("lakeprep-tests-other").getOrCreate()
    assert SparkSession.builder.master(LOCAL_MASTER).getOrCreate().sparkContext.master == "local[1]"

    session = local_spark.get()
    assert session.sparkContext.master == LOCAL_MASTER
    assert other.sparkContext._jsc is None  # stopped to make room
    assert session.range(3).count() == 3


def test_a_dead_gateway_jvm_is_launched_again(local_spark, spark):
    from pyspark import SparkContext

    gateway = SparkContext._gateway.proc
    gateway.kill()  # as the kernel's OOM killer would
    gateway.wait(timeout=60)

    again = local_spark.get()
    assert again.range(4).count() == 4
    assert _spark_gateway_pid() not in (None, gateway.pid)


# --------------------------------------------------------------------------- commands


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_for(path: Path, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().endswith("\n")):
        assert time.monotonic() < deadline, f"{path} was not written in {timeout} s"
        time.sleep(0.05)
    return path.read_text()


def test_a_failed_command_names_itself_its_exit_code_and_its_stderr():
    code = (
        "import sys; print('progress on stdout'); print('the reason it failed', file=sys.stderr); sys.exit(3)"
    )
    argv = [sys.executable, "-c", code]
    with pytest.raises(CommandFailed) as failed:
        run_command(argv, timeout=120)
    message = str(failed.value)
    assert message.startswith(shlex.join(argv) + "\nexit code 3\n")
    assert "the reason it failed" in message
    assert "progress on stdout" in message


def test_only_the_tail_of_a_long_stderr_is_kept():
    code = "import sys; [print(f'line {i:05d}', file=sys.stderr) for i in range(20000)]; sys.exit(1)"
    with pytest.raises(CommandFailed) as failed:
        run_command([sys.executable, "-c", code], timeout=120)
    message = str(failed.value)
    assert "line 19999" in message and "line 00000" not in message
    assert len(message) < 10_000


def test_without_check_the_exit_code_and_output_come_back():
    code = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(4)"
    done = run_command([sys.executable, "-c", code], timeout=120, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (4, "out\n", "err\n")


# A command that starts a child in its process group and one that left it (setsid, as a
# daemon does), writes their pids, then waits: as `airflow dags test` waits on spark-submit.
TREE = textwrap.dedent(
    """
    import subprocess, sys, time
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    inside = subprocess.Popen(sleeper)
    outside = subprocess.Popen(sleeper, start_new_session=True)
    with open(sys.argv[1], "w") as pids:
        pids.write(f"{inside.pid} {outside.pid}\\n")
    time.sleep(600)
    """
)


def test_a_timeout_ends_the_commands_whole_tree_and_says_so(tmp_path):
    pids_file = tmp_path / "pids"
    began = time.monotonic()
    with pytest.raises(CommandFailed, match=r"timed out after 10 s") as failed:
        run_command([sys.executable, "-c", TREE, pids_file], timeout=10)
    assert time.monotonic() - began < 120
    pids = [int(pid) for pid in _wait_for(pids_file, timeout=1).split()]
    assert [pid for pid in pids if _running(pid)] == []
    assert all(f"pid {pid}," in str(failed.value) for pid in pids)


class Interrupted(BaseException):
    """Stands for pytest-timeout's Failed or a KeyboardInterrupt while the command runs."""


def test_an_interrupted_command_ends_with_its_tree(tmp_path, monkeypatch):
    pids_file = tmp_path / "pids"

    def interrupted(self, input=None, timeout=None):
        _wait_for(pids_file)
        raise Interrupted

    monkeypatch.setattr(subprocess.Popen, "communicate", interrupted)
    with pytest.raises(Interrupted):
        run_command([sys.executable, "-c", TREE, pids_file], timeout=600)
    monkeypatch.undo()
    pids = [int(pid) for pid in pids_file.read_text().split()]
    assert [pid for pid in pids if _running(pid)] == []


# --------------------------------------------------------------------------- leftovers


def test_a_child_adopted_by_init_is_still_found_and_ended():
    code = (
        "import subprocess, sys; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid)"
    )
    # Not run_command: it would end the orphan with its group. Its parent exits at once.
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    orphan = int(done.stdout)
    try:
        assert orphan not in [p.pid for p in psutil.Process().children(recursive=True)]
        assert orphan in [p.pid for p in leftover_processes()]  # by the owner mark it inherited
    finally:
        ended = end_process_tree(psutil.Process(orphan), grace_s=5)
    assert not _running(orphan)
    assert ended and ended[0].startswith(f"pid {orphan},")


def test_the_spark_gateway_is_no_leftover(spark):
    gateway = _spark_gateway_pid()
    assert gateway is not None and _running(gateway)
    assert gateway not in [p.pid for p in leftover_processes()]


LEAKY_TEST = textwrap.dedent(
    """
    import subprocess, sys

    def test_leaves_a_process_running(tmp_path_factory):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open({pid_file!r}, "w") as out:
            out.write(f"{{child.pid}}\\n")
    """
)


def test_the_session_guard_ends_what_tests_left_and_warns_naming_it(tmp_path):
    """A pytest session of its own, with the guard from tests/conftest.py and one test
    that leaves a child running: the child is ended when that session ends, and named."""
    pid_file = tmp_path / "leftover.pid"
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import no_process_outlives_the_session, pytest_sessionfinish  # noqa: F401\n"
    )
    (tmp_path / "test_leaky.py").write_text(LEAKY_TEST.format(pid_file=str(pid_file)))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q"]
    argv += ["--rootdir", tmp_path, "-c", tmp_path / "pytest.ini", tmp_path / "test_leaky.py"]
    done = run_command(argv, cwd=tmp_path, env=env, timeout=300)
    leftover = int(pid_file.read_text())
    assert not _running(leftover)
    assert "LeftoverProcessWarning" in done.stdout, done.stdout
    assert f"pid {leftover}," in done.stdout and "time.sleep(600)" in done.stdout, done.stdout
