"""Where the benchmark runs: the repository's folders, the children's environment, the machine."""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# Generated data, logs and scratch output: gitignored (see .gitignore), never committed.
WORK = Path(os.environ.get("LAKEPREP_BENCH_DIR") or REPO / ".bench")
SOURCE_DIRS = ("plugins", "spark_jobs", "training", "contracts")
FLIGHTS_SPEC = REPO / "pipelines" / "flights.yaml"
SPARK_MASTER = "local[2]"
# The heap of every submission's driver JVM, which in local mode is also the only executor
# (`SPARK_DRIVER_MEMORY`, read by spark-submit's launcher; the same for the floor, the
# stages and the empty submission). Spark's 1 GiB default failed export_shards at 4 M rows
# with OutOfMemoryError (a sort-based aggregation's spill readers) while fit_transform and
# export_shards cached their inputs; 4 GiB was used until they stopped (efcf3dc). A JVM
# grows its heap up to this bound when the shuffles' sort buffers can use it, so a stage's
# peak memory is this setting once the data is large enough: export_shards at 16 M rows
# peaked at 5249 MB with 4 GiB and 3221 MB with 2 GiB, in 125 s and 121 s.
DRIVER_MEMORY = "2g"
# What `other_master` puts over the embedded default while a part runs against another
# Spark master (the standalone cluster of benchmarks.driver_memory).
_MASTER_ENV: dict[str, str] = {}


def put_sources_on_path() -> None:
    """The project's roots, as the Makefile's PYTHONPATH has them (for `python -m benchmarks`)."""
    for name in reversed(SOURCE_DIRS):
        path = str(REPO / name)
        if path not in sys.path:
            sys.path.insert(0, path)


def child_env(**extra: str) -> dict[str, str]:
    """The environment of every child: the Makefile's embedded default (Spark local[2])."""
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(WORK / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW_CONN_SPARK_DEFAULT": f'{{"conn_type": "spark", "host": "{SPARK_MASTER}"}}',
        "SPARK_DRIVER_MEMORY": DRIVER_MEMORY,
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join([str(REPO), *(str(REPO / d) for d in SOURCE_DIRS)]),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "LAKEPREP_CACHE_DIR": str(WORK / "cache"),
        # The harness builds commands through the Spark provider, which logs each at INFO.
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        **_MASTER_ENV,
    }
    env.update(extra)
    return env


@contextlib.contextmanager
def other_master(env: dict[str, str]) -> Iterator[None]:
    """Children, and the commands this process builds for them, use `env` (a Spark
    connection to another master and what goes with it) instead of local[2] for the block."""
    saved = {key: os.environ.get(key) for key in (*env, "AIRFLOW_CONN_SPARK_DEFAULT")}
    outer = dict(_MASTER_ENV)  # nested: the enclosing block's master again after this one
    _MASTER_ENV.update(env)
    try:
        yield
    finally:
        _MASTER_ENV.clear()
        _MASTER_ENV.update(outer)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def use_child_env() -> None:
    """Make this process see what its children see (the Spark connection, AIRFLOW_HOME)."""
    os.environ.update(child_env())
    (WORK / "airflow").mkdir(parents=True, exist_ok=True)
    put_sources_on_path()


@contextlib.contextmanager
def work_folder_lock() -> Iterator[None]:
    """Hold `WORK` for this run: two runs on one folder would overwrite each other's lake.

    Each run commits the stages' partitions under `WORK/data/<scale>/`, so a second run
    on the same folder (a second terminal, a `--only profile` beside a full run) rewrites
    the partitions the first is timing and reading. An advisory `flock`, released when the
    process ends however it ends; another folder (`LAKEPREP_BENCH_DIR`) runs beside it.
    """
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / ".run.lock"
    with open(path, "a+", encoding="utf-8") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise SystemExit(
                f"benchmarks: {WORK} is in use by a run still going ({holder}); wait for it, "
                "or give this run its own folder with LAKEPREP_BENCH_DIR"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()}: {' '.join(sys.argv)}\n")
        lock.flush()
        yield


@contextlib.contextmanager
def demo_startup() -> Iterator[str]:
    """The children's spark-submits start as `make demo`'s do, from the class-data archive.

    A demo-sized day is what `make demo` and the test suite run with
    `lakeprep_airflow.spark_startup`'s JVM options (docs/PIPELINE.md, "Faster JVM
    start-ups"), so the small-day parts measure it that way, and the empty submission they
    compare against gets the same options. The archive is the one `make demo` keeps in the
    virtual environment (`<venv>/lakeprep-cache/`, dumped once). An explicit
    SPARK_SUBMIT_OPTS wins, as in the Makefile. Yields the options in force.
    """
    given = os.environ.get("SPARK_SUBMIT_OPTS")
    if given is not None:
        yield given
        return
    put_sources_on_path()
    from lakeprep_airflow import spark_startup

    options = spark_startup.java_options(spark_startup.ensure_archive(Path(sys.prefix) / "lakeprep-cache"))
    os.environ["SPARK_SUBMIT_OPTS"] = options
    try:
        yield options
    finally:
        os.environ.pop("SPARK_SUBMIT_OPTS", None)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _version(module: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(module)
    except metadata.PackageNotFoundError:
        return None


def _java_version() -> str | None:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = (out.stderr or out.stdout).splitlines()
    return first[0].strip() if first else None


def machine() -> dict[str, Any]:
    """The machine as /proc tells it, the load when the run started, and the versions."""
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _mem_total_gib(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "kernel": platform.release(),
        "python": platform.python_version(),
        "java": _java_version(),
        "versions": {
            name: _version(name)
            for name in (
                "pyspark",
                "apache-airflow",
                "apache-airflow-providers-apache-spark",
                "pyarrow",
                "numpy",
                "pandas",
                "torch",
                "polars",
                "scikit-learn",
            )
        },
        "spark_master": SPARK_MASTER,
        "driver_memory": DRIVER_MEMORY,
        # e.g. the class-data archive of lakeprep_airflow.spark_startup: it halves start-ups
        "spark_submit_opts": os.environ.get("SPARK_SUBMIT_OPTS") or None,
    }
