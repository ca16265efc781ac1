"""A Spark stage killed with SIGKILL while it writes: nothing partial is visible, the retry cleans up.

`validate` runs for real (spark-submit, local mode) through `SparkStageOperator.execute`;
once its staging folder holds files, the driver JVM is killed with SIGKILL, as the OOM
killer or a lost node would. Whatever moment the kill lands on, the partition must be
either absent or complete (`_SUCCESS` inside). The retry must remove the killed
attempt's staging folder and write what a clean run writes.
"""

from __future__ import annotations

import datetime as dt
import signal
import threading
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from lakeprep_contracts import layout
from tests.conftest import REPO

pytestmark = pytest.mark.integration
DAY = "2013-01-01"


def lake_with_day(root: Path) -> tuple[str, Path]:
    from lakeprep_airflow.demo_data import land

    uri = f"file://{root}"
    land(uri, dt.date.fromisoformat(DAY), dt.date.fromisoformat(DAY))
    return uri, root / "validate" / "flights"


def validate_op(lake: str):
    from lakeprep_airflow.operators.spark_stage import SparkStageOperator

    return SparkStageOperator(
        task_id="validate",
        stage="validate",
        spec_path=str(REPO / "pipelines" / "flights.yaml"),
        lake_root=lake,
        run_ds=DAY,
    )


def spark_jvms(lake_path: Path) -> list[psutil.Process]:
    """This test's spark-submit JVMs: java processes whose command line names the lake."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if "java" in proc.name() and str(lake_path) in cmdline:
            found.append(proc)
    return found


def table_of(partition: Path):
    return pq.read_table(partition).sort_by("flight_id")  # the spec's id column


def test_a_killed_stage_exposes_nothing_partial_and_its_retry_cleans_up(tmp_path):
    clean_lake, clean_out = lake_with_day(tmp_path / "clean")
    validate_op(clean_lake).execute({"run_id": "clean"})

    lake, out = lake_with_day(tmp_path / "killed")
    staging = out / layout.STAGING_DIR
    failure: list[BaseException] = []

    def run() -> None:
        try:
            validate_op(lake).execute({"run_id": "killed"})
        except BaseException as err:  # the killed spark-submit fails the task
            failure.append(err)

    attempt = threading.Thread(target=run)
    attempt.start()
    killed = False
    deadline = time.monotonic() + 240
    while attempt.is_alive() and time.monotonic() < deadline and not killed:
        staged = [p for p in staging.glob(f"dt={DAY}-*/*")] if staging.exists() else []
        if staged:
            for jvm in spark_jvms(tmp_path / "killed"):
                jvm.send_signal(signal.SIGKILL)
                killed = True
        time.sleep(0.01)
    attempt.join(timeout=120)
    assert killed, "the stage finished before anything was staged to kill"
    assert failure, "the killed attempt did not fail the task"

    # Nothing partial: no partition, or a complete one (if the kill came after the rename).
    partition = out / f"dt={DAY}"
    assert not partition.exists() or (partition / layout.SUCCESS).exists()
    leftovers = list(staging.glob(f"dt={DAY}-*"))
    assert leftovers, "the killed attempt's staging folder should still be there before the retry"

    report = validate_op(lake).execute({"run_id": "retry"})
    assert list(staging.glob(f"dt={DAY}-*")) == []  # the retry removed the killed attempt's folder
    assert (partition / layout.SUCCESS).exists()
    clean = clean_out / f"dt={DAY}"
    assert report["rows_out"] == len(table_of(clean))
    assert table_of(partition).equals(table_of(clean))

    # The same side files (report, stats, quarantine, _SUCCESS); part files have random names.
    def side_files(folder: Path) -> list[str]:
        return sorted(p.name for p in folder.iterdir() if "part-" not in p.name)

    assert side_files(partition) == side_files(clean)
