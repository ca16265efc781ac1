"""Shared fixtures: one Spark session, one Airflow home and database, one demo lake per run.

Airflow reads its configuration when first imported, so the environment is set here,
at collection time, before any test module imports `airflow`.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

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


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the run: 2 threads, few shuffle partitions, no UI, UTC."""
    from pyspark.sql import SparkSession

    from lakeprep_airflow.operators.spark_stage import JIT_JAVA_OPTIONS

    # py4j logs "Closing down clientserver connection" at INFO while the interpreter shuts
    # down, after pytest closed its log handlers ("--- Logging error ---" noise).
    logging.getLogger("py4j").setLevel(logging.WARNING)

    session = (
        SparkSession.builder.master("local[2]")
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
    yield session
    session.stop()


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated SQLite metadata database in this run's AIRFLOW_HOME."""
    subprocess.run(
        [str(VENV_BIN / "airflow"), "db", "migrate"],
        check=True,
        env={**os.environ, **AIRFLOW_ENV},
        capture_output=True,
        timeout=300,
    )
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
