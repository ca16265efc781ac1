"""The schedule: with catchup on, the scheduler creates and completes the daily runs by itself.

The stack's specs include `flights_catchup` (tests/integration/conftest.py): flights with
catchup on and a two-day range, stages fused, its own DAG and lake folders, the same raw data. Nobody
triggers anything: the test lands the two days, unpauses the DAG, and waits for the
scheduler's runs. Exactly one `scheduled` run per day of the range, each successful, each
with a complete manifest, and none for a day outside the range.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from urllib.parse import quote, urlparse

import pytest

from lakeprep_airflow.spec import lake_uri
from lakeprep_contracts import layout
from tests.integration.conftest import CATCHUP_DAYS, CATCHUP_SPEC
from tests.integration.test_airflow_services import BROKEN_STATES, _log_tails

pytestmark = pytest.mark.integration
DAG_ID = f"lakeprep_{CATCHUP_SPEC}"
# About 70-80 s a day on 2 idle cores; generous for a machine shared with other work.
TIMEOUT_S_PER_DAY = 420


def _runs(client) -> list[dict]:
    return client.get(f"/api/v2/dags/{DAG_ID}/dagRuns", order_by="logical_date")["dag_runs"]


def test_the_scheduler_catches_up_on_the_range_by_itself(airflow_stack):
    from lakeprep_airflow.demo_data import land
    from lakeprep_train.manifest import load_manifest, verify_shards

    lake_root, client, home = (
        airflow_stack["lake_root"],
        airflow_stack["client"],
        airflow_stack["airflow_home"],
    )
    days = list(CATCHUP_DAYS)
    land(lake_root, dt.date.fromisoformat(days[0]), dt.date.fromisoformat(days[-1]))
    client.wait_for_dag(DAG_ID)
    assert client.get(f"/api/v2/dags/{DAG_ID}")["is_paused"], "a new DAG must start paused"
    assert _runs(client) == [], "a paused DAG has no runs"
    # The retraining DAG stays paused (its asset events would compete for the 2 cores).
    client.wait_for_dag(f"{DAG_ID}_train")
    client.patch(f"/api/v2/dags/{DAG_ID}", {"is_paused": False}, update_mask="is_paused")
    try:
        deadline = time.monotonic() + TIMEOUT_S_PER_DAY * len(days)
        while True:
            runs = _runs(client)
            for run in runs:
                run_id = quote(run["dag_run_id"], safe="")
                tis = client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances")["task_instances"]
                broken = BROKEN_STATES & {ti["state"] for ti in tis}
                if run["state"] == "failed" or broken:
                    logs = _log_tails(client, home, run["dag_run_id"], tis, dag_id=DAG_ID)
                    pytest.fail(
                        f"scheduled run {run['dag_run_id']} is {run['state']}, tasks {broken}\n{logs}"
                    )
            if len(runs) >= len(days) and all(r["state"] == "success" for r in runs):
                break
            assert time.monotonic() < deadline, (
                f"runs not done after {TIMEOUT_S_PER_DAY * len(days)} s: {runs}"
            )
            time.sleep(5)
    finally:
        client.patch(f"/api/v2/dags/{DAG_ID}", {"is_paused": True}, update_mask="is_paused")

    assert [r["run_type"] for r in runs] == ["scheduled"] * len(days), runs
    assert [r["logical_date"][:10] for r in runs] == days, runs
    for day in days:
        folder = Path(urlparse(lake_uri(lake_root, "export_shards", CATCHUP_SPEC, day)).path)
        manifest = json.loads((folder / layout.MANIFEST).read_text())
        assert manifest["logical_date"] == day and manifest["run_id"].startswith("scheduled__")
        assert manifest["window"]["complete"] == [d for d in days if d <= day]
        assert verify_shards(load_manifest(str(folder / layout.MANIFEST))) == []
        model = Path(urlparse(lake_uri(lake_root, "models", CATCHUP_SPEC, day)).path)
        assert (model / "_SUCCESS").is_file(), f"no committed model for {day}: {model}"
