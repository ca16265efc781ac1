"""Shared fixtures: one Spark session, one Airflow home and database, one demo lake per run.

Airflow reads its configuration when first imported, so the environment is set here,
at collection time, before any test module imports `airflow`.

Isolation (issue 31): the Spark session is started again when something stopped it, a
command a fixture or test runs ends with its whole process tree and fails naming itself
(`run_command`), and whatever a test started and left running is ended when the session
ends (`no_process_outlives_the_session`).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import psutil
    from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent

_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="lakeprep-airflow-home-"))
AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(_AIRFLOW_HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
    "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
    "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[2]"}',
    "PYSPARK_PYTHON": sys.executable,
    "PYTHONPATH": os.pathsep.join(str(REPO / d) for d in ("plugins", "spark_jobs", "training", "contracts")),
    "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    "LAKEPREP_CACHE_DIR": str(_AIRFLOW_HOME / "cache"),
}
os.environ.update(AIRFLOW_ENV)
# Every process this pytest process starts inherits its pid here (each xdist worker sets
# its own): the end-of-session guard finds by it the children whose parent died and left
# them to init, out of the process tree.
OWNER_ENV = "LAKEPREP_TEST_OWNER"
os.environ[OWNER_ENV] = str(os.getpid())


def _fast_spark_startup() -> None:
    """Every spark-submit of the run starts from a class-data archive (about half the start-up).

    Set here, before any process starts, so that the stages Airflow runs, the stack's
    services and the benchmarks' children inherit it (lakeprep_airflow.spark_startup). The
    archive is kept beside the venv whose Spark it was dumped from; an explicit
    SPARK_SUBMIT_OPTS is left alone.
    """
    if "SPARK_SUBMIT_OPTS" in os.environ:
        return
    from lakeprep_airflow import spark_startup  # on pytest's pythonpath (pyproject.toml)

    archive = spark_startup.ensure_archive(VENV_BIN.parent / "lakeprep-cache")
    os.environ["SPARK_SUBMIT_OPTS"] = spark_startup.java_options(archive)


_fast_spark_startup()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_AIRFLOW_HOME, ignore_errors=True)


# `make test` runs the suite in two pytest-xdist workers (`-n 2 --no-loadscope-reorder`):
# most of a serial run waits on one JVM or one service while the other core idles. Each
# worker is a whole pytest process with its own Airflow home, SQLite database, cache and
# Spark session (this file runs in each). The services stay one per run: the scheduler
# below sends every module that uses one of them to the same worker, in collection order
# (a module may reuse what an earlier one left, e.g. `stack_day_run`); every other module
# is a unit of its own, so its module fixtures run once.
SERVICE_FIXTURES = ("airflow_stack", "hdfs_spark_cluster")  # tests/integration/conftest.py


@functools.cache  # the controller asks once per test
def module_group(module: str) -> str:
    """The scheduling unit of a test module (a path from the repository root): the service
    fixture it names, else the module itself.

    By name in the module's source, because xdist's controller schedules by node id and
    collects nothing; each worker checks it against the fixtures the tests really use.
    """
    source = (REPO / module).read_text()
    return next((name for name in SERVICE_FIXTURES if re.search(rf"\b{name}\b", source)), module)


def _queue_rank(group: str) -> int:
    """Longest first, since xdist hands the units out in this order: the services' groups
    (minutes of runs each), then the other integration and benchmark modules, then the rest."""
    if group in SERVICE_FIXTURES:
        return SERVICE_FIXTURES.index(group)
    return len(SERVICE_FIXTURES) + (0 if group.startswith(("tests/integration/", "tests/benchmarks/")) else 1)


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """xdist's scope scheduling with `module_group` as the scope (its `loadgroup` marks do
    not reach the controller under pytest 9.2, which no longer lets a plugin rename nodes)."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return module_group(nodeid.split("::", 1)[0])

    return ModuleGroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # a serial run keeps pytest's order
    used: dict[str, set[str]] = {}
    for item in items:
        used.setdefault(item.path.relative_to(REPO).as_posix(), set()).update(item.fixturenames)
    groups = {module: module_group(module) for module in used}
    for module, fixtures in used.items():
        for name in SERVICE_FIXTURES:
            if name in fixtures and groups[module] != name:
                raise pytest.UsageError(
                    f"{module} uses the fixture {name!r} (through another fixture) without naming it: "
                    f"name it in the module, so that the scheduler keeps the module with its service"
                )
    items.sort(key=lambda item: _queue_rank(groups[item.path.relative_to(REPO).as_posix()]))


LOCAL_MASTER = "local[2]"


def _start_local_session() -> SparkSession:
    """A new local Spark session: 2 threads, few shuffle partitions, no UI, UTC."""
    from pyspark.sql import SparkSession

    from lakeprep_airflow.operators.spark_stage import JIT_JAVA_OPTIONS

    # py4j logs "Closing down clientserver connection" at INFO while the interpreter shuts
    # down, after pytest closed its log handlers ("--- Logging error ---" noise).
    logging.getLogger("py4j").setLevel(logging.WARNING)

    return (
        SparkSession.builder.master(LOCAL_MASTER)
        .appName("lakeprep-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # Schemeless paths stay local even after the HDFS tests exported their
        # HADOOP_CONF_DIR (whose fs.defaultFS is the loopback NameNode).
        .config("spark.hadoop.fs.defaultFS", "file:///")
        .config("spark.driver.memory", "1g")
        # As every stage's submission runs (SparkStageOperator): generated code JIT-compiled.
        .config("spark.driver.extraJavaOptions", JIT_JAVA_OPTIONS)
        .getOrCreate()
    )


def _is_live_local(session: SparkSession) -> bool:
    """Whether the session's context runs, in this JVM, on `LOCAL_MASTER`.

    Asks the JVM: a context the standalone master stopped (`StandaloneSchedulerBackend.dead`
    stops it from a thread of its own, `SparkContext.stopInNewThread`) still looks alive
    from Python, and `getOrCreate` hands out an active context whatever master it was
    asked for (a test's session on the cluster would be taken for ours).
    """
    from py4j.protocol import Py4JError

    jsc = session.sparkContext._jsc
    if jsc is None:  # stopped from Python
        return False
    try:
        context = jsc.sc()
        return not context.isStopped() and context.master() == LOCAL_MASTER
    except (Py4JError, OSError):  # the gateway JVM is gone (py4j raises ConnectionRefusedError as it is)
        return False


def stop_in_process_spark(*, jvm: bool = False) -> None:
    """Stop this process's Spark session and context, whoever started them, however dead.

    `SparkSession.stop` clears the class-level state that `getOrCreate` reuses; when the
    gateway JVM itself is gone it cannot, so that state is dropped here and the next
    session launches a new gateway. ``jvm``: end a live gateway JVM too, so that the next
    session starts one that reads the environment's Spark configuration as it is now
    (spark-submit reads `SPARK_CONF_DIR` when it launches the JVM, not per session).
    """
    from py4j.protocol import Py4JError
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    session, context = SparkSession._instantiatedSession, SparkContext._active_spark_context
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    gateway_gone = proc is not None and proc.poll() is not None
    if not gateway_gone:
        try:
            if session is not None:
                session.stop()
            elif context is not None:
                context.stop()
        except (Py4JError, OSError):  # py4j raises ConnectionRefusedError as it is
            gateway_gone = True
    if gateway_gone or (jvm and gateway is not None):
        if context is not None:
            context._jsc = None
            if getattr(context, "_accumulatorServer", None) is not None:
                context._accumulatorServer.shutdown()
                context._accumulatorServer = None
        SparkSession._instantiatedSession = None
        SparkSession._activeSession = None
        SparkContext._active_spark_context = None
        SparkContext._gateway = None
        SparkContext._jvm = None
        try:
            gateway.shutdown()
        except (Py4JError, OSError) as err:
            logging.getLogger(__name__).warning("closing a dead Py4J gateway: %s", err)
        _close_gateway_process(gateway)


def _close_gateway_process(gateway) -> None:
    """End a Py4J gateway's JVM: it exits at EOF on its stdin (PythonGatewayServer)."""
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        end_process_tree(proc)


class LocalSpark:
    """The run's one local Spark session, started again whenever it is found dead.

    A test may stop the session (a job's `main` calls `spark.stop()`; `getOrCreate` in
    code under test hands it our session), or leave another one active (a driver on the
    standalone cluster), and the cluster may stop a context connected to it. Each test
    that asks for `spark` gets a live local session: the one of the run while it lives,
    a new one otherwise (`starts` counts them).
    """

    def __init__(self) -> None:
        self._session: SparkSession | None = None
        self.starts = 0

    def get(self) -> SparkSession:
        if self._session is not None and _is_live_local(self._session):
            return self._session
        stop_in_process_spark()
        self._session = _start_local_session()
        self.starts += 1
        if not _is_live_local(self._session):
            raise RuntimeError(
                f"a new Spark session is not live on {LOCAL_MASTER}: master "
                f"{self._session.sparkContext.master!r}, stopped {self._session.sparkContext._jsc is None}"
            )
        return self._session

    def stop(self, *, jvm: bool = False) -> None:
        """Stop the in-process session (ours or another), and with ``jvm`` its gateway JVM;
        the next `get` starts one again."""
        stop_in_process_spark(jvm=jvm)
        self._session = None


@pytest.fixture(scope="session")
def local_spark() -> Iterator[LocalSpark]:
    sessions = LocalSpark()
    yield sessions
    sessions.stop()


@pytest.fixture
def spark(local_spark: LocalSpark) -> SparkSession:
    """A live local Spark session (`local[2]`, few shuffle partitions, no UI, UTC).

    The same session for the whole run unless an earlier test left it stopped or replaced
    it (issue 31: the standalone master stopped a worker's context, and every later Spark
    test on that worker failed); then a new one. A probe of three Py4J calls per test.
    """
    return local_spark.get()


# --------------------------------------------------------------------------- processes


class CommandFailed(AssertionError):
    """A command exited non-zero or ran past its timeout; the message says which, and why."""


def _tail(text: str | bytes | None, chars: int) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    text = (text or "").rstrip()
    return text if len(text) <= chars else "..." + text[-chars:]


def describe_command(
    argv: Sequence[str],
    outcome: str,
    stdout: str | bytes | None,
    stderr: str | bytes | None,
    *,
    tail_chars: int = 4000,
) -> str:
    """The command, what became of it, and the tails of its stderr and stdout."""
    return (
        f"{shlex.join(str(arg) for arg in argv)}\n{outcome}\n"
        f"--- stderr (last {tail_chars} chars) ---\n{_tail(stderr, tail_chars) or '(empty)'}\n"
        f"--- stdout (last {tail_chars} chars) ---\n{_tail(stdout, tail_chars) or '(empty)'}"
    )


def _describe_process(process: psutil.Process) -> str:
    import psutil

    try:
        age = time.time() - process.create_time()
        argv = shlex.join(process.cmdline()) or process.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return f"pid {process.pid} (gone)"
    return f"pid {process.pid}, {age:.0f} s old: {argv[:300]}"


def end_process_tree(root: subprocess.Popen | psutil.Process, grace_s: float = 10.0) -> list[str]:
    """SIGTERM a process, its process group (if it leads one) and every descendant; SIGKILL
    what is left after `grace_s`. Returns a line for each process it found.

    The group reaches the descendants that already lost their parent, the descendant list
    those that left the group (a daemon's `setsid`). The grace lets a JVM run its shutdown
    hooks (Spark deletes its temp dirs). A `Popen` root is reaped through its own `wait`.
    """
    import psutil

    try:
        tree = psutil.Process(root.pid)
        descendants = tree.children(recursive=True)
        found = [_describe_process(tree), *(_describe_process(p) for p in descendants)]
    except psutil.NoSuchProcess:  # the root is gone (or a zombie not yet reaped)
        descendants, found = [], []
    try:
        pgid = os.getpgid(root.pid)
    except ProcessLookupError:
        pgid = None
    own_group = pgid if pgid == root.pid and pgid != os.getpgrp() else None  # never pytest's

    def send(sig: signal.Signals) -> None:
        if own_group is not None:
            try:
                os.killpg(own_group, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for process in (root, *descendants):
            try:
                process.send_signal(sig)
            except (psutil.NoSuchProcess, ProcessLookupError):
                pass

    def all_gone(timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        if isinstance(root, subprocess.Popen):
            try:
                root.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return False
            others = descendants
        else:
            others = [root, *descendants]
        _, alive = psutil.wait_procs(others, timeout=max(0.0, deadline - time.monotonic()))
        return not alive

    send(signal.SIGTERM)
    if not all_gone(grace_s):
        send(signal.SIGKILL)
        all_gone(5.0)
    return found


def run_command(
    argv: Sequence[str | os.PathLike[str]],
    *,
    timeout: float,
    check: bool = True,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command to its end, its text output captured; `subprocess.run` for fixtures and tests.

    The command runs in a session of its own, and whatever ends it early (its timeout,
    pytest-timeout, Ctrl-C) ends its whole tree: `subprocess.run` kills only the process it
    started, so an `airflow dags test` killed at its timeout would leave its spark-submit
    (the driver JVM and the Python driver) running on (issue 31). What the command left
    in its process group when it exited is killed too. With `check`, a non-zero exit
    raises `CommandFailed` naming the command, the exit code and the stderr tail; a
    timeout raises it whatever `check` says.
    """
    argv = [os.fspath(arg) for arg in argv]
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        ended = end_process_tree(process)
        try:  # what it wrote before the kill; a straggler holding the pipes is not waited for
            stdout, stderr = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            stdout, stderr = "", ""
        outcome = f"timed out after {timeout:g} s; ended its processes:\n  " + "\n  ".join(ended)
        raise CommandFailed(describe_command(argv, outcome, stdout, stderr)) from None
    except BaseException:
        end_process_tree(process)
        raise
    # The command exited, but what it started in its session may live on.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if check and process.returncode != 0:
        raise CommandFailed(describe_command(argv, f"exit code {process.returncode}", stdout, stderr))
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def _spark_gateway_pid() -> int | None:
    """The Py4J gateway JVM of this process's Spark, if one was launched: it exits with the
    interpreter (EOF on its stdin), so it is no leftover."""
    if "pyspark" not in sys.modules:
        return None
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    return proc.pid if proc is not None and proc.poll() is None else None


# multiprocessing's helpers live as long as the interpreter that started them, and end with it.
_INTERPRETER_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def leftover_processes(owner: int | None = None) -> list[psutil.Process]:
    """Processes this pytest process started, directly or not, that still run.

    Its descendants, and the processes that carry its pid in `OWNER_ENV` (inherited, so a
    child whose parent was killed is found after init adopted it). Not the Spark gateway
    JVM and its children, nor multiprocessing's helpers: those end with the interpreter.
    """
    import psutil

    owner = os.getpid() if owner is None else owner
    me = psutil.Process(owner)
    found = {p.pid: p for p in me.children(recursive=True)}
    uid = os.getuid()
    for process in psutil.process_iter(["uids"]):
        if process.pid in found or process.pid == owner or process.info["uids"] is None:
            continue
        if process.info["uids"].real != uid:
            continue
        try:
            if process.environ().get(OWNER_ENV) == str(owner):
                found[process.pid] = process
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    spared: set[int] = set()
    gateway = _spark_gateway_pid() if owner == os.getpid() else None
    if gateway is not None:
        try:
            spared |= {gateway, *(p.pid for p in psutil.Process(gateway).children(recursive=True))}
        except psutil.NoSuchProcess:
            pass
    leftovers = []
    for pid, process in sorted(found.items()):
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            command = " ".join(process.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if pid in spared or any(helper in command for helper in _INTERPRETER_HELPERS):
            continue
        leftovers.append(process)
    return leftovers


class LeftoverProcessWarning(pytest.PytestWarning):
    """Tests left processes running at the end of the session; the guard ended them."""


@pytest.fixture(scope="session", autouse=True)
def no_process_outlives_the_session() -> Iterator[None]:
    """At the end of the session (after every other fixture's teardown), end what the tests
    started and left running, and say so as a warning in pytest's summary.

    The safety net under `run_command` and the fixtures' own teardown: a spark-submit
    JVM of a run was still running 85 minutes after the suite had ended (issue 31).
    """
    yield
    import psutil

    leftovers = leftover_processes()
    pids = {process.pid for process in leftovers}
    ended = []
    for process in leftovers:
        try:
            if process.ppid() in pids:  # ended with its parent's tree
                continue
        except psutil.NoSuchProcess:
            continue
        ended += end_process_tree(process)
    if ended:
        warnings.warn(
            LeftoverProcessWarning(
                f"{len(ended)} process(es) started by this test session were still running at "
                "its end and were ended:\n  " + "\n  ".join(ended)
            ),
            stacklevel=1,
        )


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated SQLite metadata database in this run's AIRFLOW_HOME."""
    run_command([VENV_BIN / "airflow", "db", "migrate"], env={**os.environ, **AIRFLOW_ENV}, timeout=300)
    return _AIRFLOW_HOME


@pytest.fixture(scope="session")
def demo_lake(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A file:// lake with the real flights of 2013-01-01..02 and the reference tables."""
    import datetime as dt

    from lakeprep_airflow.demo_data import land

    root = tmp_path_factory.mktemp("lake")
    uri = f"file://{root}"
    land(uri, dt.date(2013, 1, 1), dt.date(2013, 1, 2))
    return uri
