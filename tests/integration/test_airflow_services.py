"""One day of lakeprep_flights under the real services: scheduler, api-server, PostgreSQL.

Unlike test_end_to_end (``airflow dags test``, in one process on SQLite), the run here is
triggered over REST with a logged-in user and executed by the scheduler's LocalExecutor,
each task in its own task runner talking to the Execution API.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
import requests

from lakeprep_airflow.operators.retrain_handoff import run_folder_name
from lakeprep_airflow.spec import lake_uri
from lakeprep_contracts import layout

pytestmark = pytest.mark.integration
DAG_ID = "lakeprep_flights"
TRAIN_DAG_ID = "lakeprep_flights_train"
DAY = "2013-01-01"  # the start date: the 29 earlier days of the window are before it
RUN_TIMEOUT_S = 480
# Any of these ends the wait: the DAG retries every task twice, 2 minutes apart.
BROKEN_STATES = {"failed", "up_for_retry", "upstream_failed"}


def _log_tails(
    client,
    airflow_home: str,
    run_id: str,
    task_instances: list[dict],
    states: set[str] = BROKEN_STATES,
    dag_id: str = DAG_ID,
) -> str:
    """The last lines of the latest attempt of each task in `states`, from the REST API (or its files)."""
    parts = []
    for ti in task_instances:
        if ti["state"] not in states:
            continue
        task_id, attempt = ti["task_id"], max(ti["try_number"], 1)
        text = client.task_log(dag_id, run_id, task_id, attempt, ti.get("map_index", -1))
        if not text.strip() or text.startswith("(GET"):
            files = sorted(
                Path(airflow_home, "logs").glob(f"dag_id={dag_id}/run_id={run_id}/task_id={task_id}/*")
            )
            text += "\n" + (files[-1].read_text(errors="replace") if files else "(no log file)")
        # A failed task's last line carries the whole exception with its JVM stack: cut lines.
        lines = [line if len(line) <= 2000 else line[:2000] + " ..." for line in text.splitlines()[-60:]]
        parts.append(f"--- {task_id} ({ti['state']}, try {attempt}) ---\n" + "\n".join(lines))
    return "\n".join(parts)


def _wait_for_run(client, airflow_home: str, run_id: str, dag_id: str = DAG_ID) -> tuple[dict, list[dict]]:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        run = client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
        tis = client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
        states = {ti["task_id"]: ti["state"] for ti in tis}
        if run["state"] in ("success", "failed") or BROKEN_STATES & set(states.values()):
            return run, tis
        if time.monotonic() > deadline:
            stuck = _log_tails(
                client, airflow_home, run_id, tis, {"running", "up_for_reschedule", "deferred"}, dag_id
            )
            pytest.fail(
                f"run {run_id} still {run['state']} after {RUN_TIMEOUT_S} s; tasks: {states}\n{stuck}"
            )
        time.sleep(3)


def test_anonymous_requests_are_refused(airflow_stack):
    response = requests.get(f"{airflow_stack['base_url']}/api/v2/dags", timeout=30)
    assert response.status_code in (401, 403), response.text
    wrong = requests.post(
        f"{airflow_stack['base_url']}/auth/token",
        json={"username": airflow_stack["username"], "password": "not-the-password"},
        timeout=30,
    )
    assert wrong.status_code in (401, 403), wrong.text


def test_scheduler_runs_a_triggered_day_end_to_end(airflow_stack):
    from lakeprep_airflow.demo_data import land

    lake_root, client = airflow_stack["lake_root"], airflow_stack["client"]
    land(lake_root, dt.date.fromisoformat(DAY), dt.date.fromisoformat(DAY))

    for dag_id in (DAG_ID, TRAIN_DAG_ID):  # the train DAG must be unpaused to be queued by the asset
        client.wait_for_dag(dag_id)
        unpaused = client.patch(f"/api/v2/dags/{dag_id}", {"is_paused": False}, update_mask="is_paused")
        assert unpaused["is_paused"] is False
    run_id = f"stack__{DAY}"
    # The run report's tests share this run (conftest's stack_day_run): whichever comes
    # first triggers it, the other waits for it.
    if client.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}").status_code == 404:
        created = client.post(
            f"/api/v2/dags/{DAG_ID}/dagRuns",
            {
                "dag_run_id": run_id,
                "logical_date": f"{DAY}T00:00:00Z",
                "conf": {"sample_fraction": 0.8, "seed": 3},
            },
        )
        assert created["dag_run_id"] == run_id and created["run_type"] == "manual"

    run, tis = _wait_for_run(client, airflow_stack["airflow_home"], run_id)
    states = {ti["task_id"]: ti["state"] for ti in tis}
    logs = _log_tails(client, airflow_stack["airflow_home"], run_id, tis)
    assert run["state"] == "success", f"run {run_id} is {run['state']}; tasks {states}\n{logs}"
    tasks = {task["task_id"] for task in client.get(f"/api/v2/dags/{DAG_ID}/tasks")["tasks"]}
    assert set(states) == tasks and set(states.values()) == {"success"}, f"{states}\n{logs}"

    export = Path(urlparse(lake_uri(lake_root, "export_shards", "flights", DAY)).path)
    manifest = json.loads((export / layout.MANIFEST).read_text())
    assert manifest["run_id"] == run_id and manifest["logical_date"] == DAY
    # The trigger's conf reached the Spark job: 20% of the day sampled away (the spec says 1.0).
    sample = json.loads(
        (Path(urlparse(lake_uri(lake_root, "sample", "flights", DAY)).path) / layout.REPORT).read_text()
    )
    assert sample["rows_sampled_out"] == pytest.approx(0.2 * sample["rows_in"], abs=10), sample

    # The export's Asset event, through the scheduler: it queues lakeprep_flights_train,
    # whose run has no logical date and trains the partition named in the event's extra.
    (event,) = client.get("/api/v2/assets/events", source_dag_id=DAG_ID, source_run_id=run_id)["asset_events"]
    assert event["extra"]["ds"] == DAY and event["extra"]["config_hash"] == manifest["config_hash"]

    def runs_of_event() -> list[dict]:
        """Train runs triggered by this export's event (other tests' days trigger their own)."""
        found = []
        for candidate in client.get(f"/api/v2/dags/{TRAIN_DAG_ID}/dagRuns")["dag_runs"]:
            path = f"/api/v2/dags/{TRAIN_DAG_ID}/dagRuns/{candidate['dag_run_id']}/upstreamAssetEvents"
            if event["id"] in {e["id"] for e in client.get(path)["asset_events"]}:
                found.append(candidate)
        return found

    deadline = time.monotonic() + 120
    while not (train_runs := runs_of_event()):
        assert time.monotonic() < deadline, "the export's asset event queued no run of the train DAG"
        time.sleep(3)
    (train_run,) = train_runs
    assert train_run["run_type"] == "asset_triggered" and train_run["logical_date"] is None
    train_run, train_tis = _wait_for_run(
        client, airflow_stack["airflow_home"], train_run["dag_run_id"], TRAIN_DAG_ID
    )
    train_logs = _log_tails(
        client, airflow_stack["airflow_home"], train_run["dag_run_id"], train_tis, dag_id=TRAIN_DAG_ID
    )
    assert train_run["state"] == "success", f"{train_run}\n{train_logs}"
    retrained = Path(urlparse(lake_root).path) / layout.MODELS / "flights" / "retrain" / f"dt={DAY}"
    model = retrained / run_folder_name(train_run["dag_run_id"])  # one folder per train run
    assert (model / layout.SUCCESS).exists()
    metrics = json.loads((model / "metrics.json").read_text())
    assert metrics["manifest"].endswith(f"export_shards/flights/dt={DAY}/manifest.json")
    assert metrics["config_hash"] == manifest["config_hash"]
