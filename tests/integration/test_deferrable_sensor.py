"""The deferrable sensor through Airflow's own deferral path.

`airflow dags test` runs a deferred task's trigger inline, then resumes the task in
`execute_complete`: the same calls the triggerer makes, without a triggerer process.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import threading
import time

import pytest

from tests.conftest import AIRFLOW_ENV, VENV_BIN, run_command

pytestmark = pytest.mark.integration
DEFERRING_DAG = "lakeprep_test_deferrable"

DAG_FILE = """
import pendulum
from airflow.sdk import DAG
from lakeprep_airflow.sensors.partition import PartitionSensor

with DAG("{dag_id}", schedule=None, start_date=pendulum.datetime(2013, 1, 1)):
    PartitionSensor(task_id="wait_for_partition", uri="{uri}", deferrable=True,
                    poke_interval=0.5, timeout={timeout}, retries=0)
"""


def run_dag(tmp_path, dag_id: str, uri: str, timeout: int) -> subprocess.CompletedProcess[str]:
    dag_file = tmp_path / f"{dag_id}.py"
    dag_file.write_text(DAG_FILE.format(dag_id=dag_id, uri=uri, timeout=timeout))
    return run_command(
        [
            str(VENV_BIN / "airflow"),
            "dags",
            "test",
            dag_id,
            "2013-01-01",
            "-f",
            str(dag_file),
        ],
        env={**os.environ, **AIRFLOW_ENV, "AIRFLOW__CORE__DAGS_FOLDER": str(tmp_path)},
        timeout=300,
        check=False,
    )


def task_state(airflow_home, dag_id: str) -> str | None:
    """The sensor's state in the metadata DB; the connection is closed at once, so this
    reader never holds a lock that would stall Airflow's own writes."""
    with contextlib.closing(sqlite3.connect(str(airflow_home / "airflow.db"), timeout=30)) as db:
        rows = db.execute("SELECT state FROM task_instance WHERE dag_id = ?", (dag_id,)).fetchall()
    return rows[0][0] if rows else None


def test_deferred_sensor_resumes_when_the_partition_lands(airflow_db, tmp_path):
    part = tmp_path / "raw" / "dt=2013-01-01"

    def land_once_deferred() -> None:
        # Land only after the task's first run has ended in a deferral (its state in the
        # metadata DB), so the partition is found by the trigger, not by the first poke.
        deadline, seen_running = time.monotonic() + 120, False
        while time.monotonic() < deadline:
            state = task_state(airflow_db, DEFERRING_DAG)
            if seen_running and state != "running":
                break  # the first execute() ended: it deferred (dags test may show it queued)
            seen_running = seen_running or state == "running"
            time.sleep(0.1)
        part.mkdir(parents=True)
        (part / "part-0.csv").write_text("a\n1\n")
        (part / "_SUCCESS").write_text("")

    writer = threading.Thread(target=land_once_deferred, daemon=True)
    writer.start()
    result = run_dag(tmp_path, DEFERRING_DAG, f"file://{part}", timeout=120)
    writer.join()
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "state=success" in out
    assert "partition complete:" in out  # execute_complete ran with the trigger's event


def test_deferred_sensor_times_out_naming_the_partition(airflow_db, tmp_path):
    uri = f"file://{tmp_path}/never/dt=2013-01-01"
    result = run_dag(tmp_path, "lakeprep_test_deferrable_timeout", uri, timeout=2)
    out = result.stdout + result.stderr
    assert "state=failed" in out, out[-4000:]
    assert f"partition {uri} was not complete" in out
