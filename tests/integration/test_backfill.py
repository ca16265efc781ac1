"""A backfill under the real scheduler: parallel runs export what one-by-one runs export.

`airflow backfill create` (the CLI, talking to the stack's PostgreSQL) creates the runs;
the stack's scheduler executes them with up to `MAX_ACTIVE_RUNS` at once, so later days
reach `wait_for_window` while earlier days are still sampling. In that first pass one
day's daily task is killed mid-write (SIGKILL of its spark-submit JVM, a transient
failure as a lost node or the OOM killer would cause): Airflow retries it, and the
retry must complete the day. The same backfill is then run again with
`--reprocess-behavior completed --max-active-runs 1`: the same days, one after another
(each run starts after the previous one ended, checked). Every manifest and every shard
file of the second pass must equal the first byte for byte: the parallel runs (and the
retried day) saw the same window as sequential ones (docs/PIPELINE.md, "The window when
runs overlap"), and a rerun of the same runs rewrites identical bytes (docs/MANIFEST.md,
"What is deterministic"). So each day ran twice (three times for the killed one) with
identical results.

The DAG is `lakeprep_flights_backfill` (tests/integration/conftest.py, `BACKFILL_SPEC`):
flights with its stages fused and a 5 s retry delay, its own lake folders, so no other
test's days enter its windows. Cost on 2 idle cores: about 30-40 s per day and pass.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import posixpath
import signal
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote, urlparse

import psutil
import pytest

from lakeprep_airflow.dag_factory import FUSED_DAILY_TASK
from lakeprep_airflow.spec import lake_uri
from lakeprep_contracts import layout
from tests.conftest import run_command
from tests.export_files import named_files
from tests.integration.conftest import BACKFILL_SPEC
from tests.integration.test_airflow_services import BROKEN_STATES, _log_tails

pytestmark = pytest.mark.integration
DAG_ID = f"lakeprep_{BACKFILL_SPEC}"
TRAIN_DAG_ID = f"{DAG_ID}_train"
DAILY_TASK = FUSED_DAILY_TASK  # the fused daily stages
FIRST, LAST = dt.date(2013, 2, 1), dt.date(2013, 2, 2)
KILLED_DAY = "2013-02-02"
MAX_ACTIVE_RUNS = 3
# About 40 s a day on 2 idle cores; generous for a machine shared with other work.
PASS_TIMEOUT_S_PER_DAY = 300


def _days() -> list[str]:
    return [(FIRST + dt.timedelta(days=i)).isoformat() for i in range((LAST - FIRST).days + 1)]


def _cli_env(stack: dict) -> dict[str, str]:
    """The stack's own environment for an `airflow` CLI (its airflow.cfg, not the tests' SQLite)."""
    inherited = {
        k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__") and k not in ("AIRFLOW_HOME",)
    }
    return {
        **inherited,
        **stack["env"],
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }


def _backfill(stack: dict, *extra: str) -> str:
    argv = [
        str(Path(sys.executable).parent / "airflow"),
        "backfill",
        "create",
        "--dag-id",
        DAG_ID,
        "--from-date",
        FIRST.isoformat(),
        "--to-date",
        LAST.isoformat(),
        *extra,
    ]
    done = run_command(argv, env=_cli_env(stack), timeout=300, check=False)
    assert done.returncode == 0, f"{' '.join(argv)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _run_id(day: str) -> str:
    return f"backfill__{day}T00:00:00+00:00"


def _wait_for_backfill(
    client, airflow_home: str, days: list[str], may_retry: tuple[str, str] | None = None
) -> dict[str, dict]:
    """Every day's run, once all are final; fails early with log tails when a task breaks.

    `may_retry` = (day, task id): that task may be up for retry (the injected failure).
    """
    timeout = PASS_TIMEOUT_S_PER_DAY * len(days)
    deadline = time.monotonic() + timeout
    pending = set(days)
    runs: dict[str, dict] = {}
    while pending:
        for day in sorted(pending):
            run_id = _run_id(day)
            run = client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}")
            tis = client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances")[
                "task_instances"
            ]
            broken = BROKEN_STATES & {
                ti["state"]
                for ti in tis
                if not ((day, ti["task_id"]) == may_retry and ti["state"] == "up_for_retry")
            }
            if run["state"] == "failed" or broken:
                logs = _log_tails(client, airflow_home, run_id, tis, dag_id=DAG_ID)
                pytest.fail(f"backfill run {run_id} is {run['state']}, tasks {broken}\n{logs}")
            if run["state"] == "success":
                runs[day] = run
                pending.discard(day)
        if pending and time.monotonic() > deadline:
            pytest.fail(f"backfill runs of {sorted(pending)} not done after {timeout} s")
        time.sleep(5)
    return runs


def _wait_for_backfill_closed(client) -> None:
    """Until the scheduler marks the DAG's backfills complete: only one may run per DAG.

    Its runs ending is not enough: the scheduler sets `completed_at` in a periodic check.
    """
    deadline = time.monotonic() + 180
    while open_ := [
        b for b in client.get("/api/v2/backfills", dag_id=DAG_ID)["backfills"] if not b["completed_at"]
    ]:
        assert time.monotonic() < deadline, f"backfills still open 180 s after their runs ended: {open_}"
        time.sleep(3)


def _export_dir(lake_root: str, day: str) -> Path:
    return Path(urlparse(lake_uri(lake_root, "export_shards", BACKFILL_SPEC, day)).path)


class DailyTaskKiller(threading.Thread):
    """SIGKILLs the spark-submit JVM of `day`'s daily task once, as soon as it is writing.

    Writing: the day's validate partition is staged or committed (so the kill lands in
    validate's write or in a later stage of the same submission). The JVM is found by
    its command line, which holds the fused plan with the day's output paths.
    """

    def __init__(self, lake_root: str, day: str) -> None:
        super().__init__(daemon=True)
        self.validate = Path(urlparse(lake_uri(lake_root, "validate", BACKFILL_SPEC, day)).path)
        # Only the daily plan writes validate's partition (a window plan reads sample/).
        self.marker = f"validate/{BACKFILL_SPEC}/dt={day}"
        self.day = day
        self.killed: list[str] = []
        self.stop = threading.Event()

    def _writing(self) -> bool:
        staging = self.validate.parent / layout.STAGING_DIR
        return self.validate.is_dir() or any(staging.glob(f"dt={self.day}-*"))

    def _driver(self) -> tuple[psutil.Process, str] | None:
        """The day's driver JVM (SparkSubmit), not the launcher JVM spark-class runs first."""
        for proc in psutil.process_iter(["name", "cmdline"]):
            cmdline = " ".join(proc.info["cmdline"] or [])
            if (
                "java" in (proc.info["name"] or "")
                and "org.apache.spark.deploy.SparkSubmit" in cmdline
                and "org.apache.spark.launcher.Main" not in cmdline
                and "fused.py" in cmdline
                and self.marker in cmdline
            ):
                return proc, cmdline
        return None

    def run(self) -> None:
        while not self.stop.is_set() and not self.killed:
            found = self._driver()
            if found is not None and self._writing():
                proc, cmdline = found
                try:
                    proc.send_signal(signal.SIGKILL)
                except psutil.Error:  # it ended just now: look again
                    continue
                self.killed.append(cmdline[:300])  # once: the retry must run undisturbed
            time.sleep(0.25)


def _snapshot(lake_root: str, days: list[str]) -> dict[str, dict]:
    """Per day: the manifest's bytes and the sha256 of every file it names as stored."""
    out = {}
    for day in days:
        folder = _export_dir(lake_root, day)
        manifest = (folder / layout.MANIFEST).read_bytes()
        files = named_files(folder, json.loads(manifest))
        out[day] = {"manifest": manifest, "files": files}
    return out


def _overlapping(runs: dict[str, dict]) -> int:
    """How many pairs of runs were running at the same time."""
    spans = [
        (dt.datetime.fromisoformat(r["start_date"]), dt.datetime.fromisoformat(r["end_date"]))
        for r in runs.values()
    ]
    return sum(1 for i, a in enumerate(spans) for b in spans[i + 1 :] if a[0] < b[1] and b[0] < a[1])


def test_a_parallel_backfill_exports_what_sequential_reruns_export(airflow_stack):
    from lakeprep_airflow.demo_data import land
    from lakeprep_train.manifest import load_manifest, verify_shards

    lake_root, client, home = (
        airflow_stack["lake_root"],
        airflow_stack["client"],
        airflow_stack["airflow_home"],
    )
    days = _days()
    land(lake_root, FIRST, LAST)
    client.wait_for_dag(DAG_ID)
    client.patch(f"/api/v2/dags/{DAG_ID}", {"is_paused": False}, update_mask="is_paused")
    # The exports' asset events would queue training runs that compete for the 2 cores;
    # a paused DAG is not queued. Put back as found (another test unpauses it for itself).
    client.wait_for_dag(TRAIN_DAG_ID)
    train_paused = client.get(f"/api/v2/dags/{TRAIN_DAG_ID}")["is_paused"]
    client.patch(f"/api/v2/dags/{TRAIN_DAG_ID}", {"is_paused": True}, update_mask="is_paused")
    killer = DailyTaskKiller(lake_root, KILLED_DAY)
    try:
        started = time.monotonic()
        killer.start()
        _backfill(airflow_stack, "--max-active-runs", str(MAX_ACTIVE_RUNS))
        parallel = _wait_for_backfill(client, home, days, may_retry=(KILLED_DAY, DAILY_TASK))
        parallel_s = time.monotonic() - started
        killer.stop.set()
        first = _snapshot(lake_root, days)
        # The killed try's staged output is gone: its retry removed it before writing.
        lake = Path(urlparse(lake_root).path)
        assert not list(lake.glob(f"*/{BACKFILL_SPEC}/{layout.STAGING_DIR}/dt=*")), "staging left behind"
        _wait_for_backfill_closed(client)
        assert killer.killed, f"no kill landed in {KILLED_DAY}'s {DAILY_TASK}"
        killed = client.get(
            f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(_run_id(KILLED_DAY), safe='')}/taskInstances/{DAILY_TASK}"
        )
        assert (killed["state"], killed["try_number"]) == ("success", 2), killed

        started = time.monotonic()
        _backfill(airflow_stack, "--max-active-runs", "1", "--reprocess-behavior", "completed")
        sequential = _wait_for_backfill(client, home, days)
        sequential_s = time.monotonic() - started
        second = _snapshot(lake_root, days)
    finally:
        killer.stop.set()
        client.patch(f"/api/v2/dags/{DAG_ID}", {"is_paused": True}, update_mask="is_paused")
        client.patch(f"/api/v2/dags/{TRAIN_DAG_ID}", {"is_paused": train_paused}, update_mask="is_paused")
    print(f"parallel pass {parallel_s:.0f} s, sequential pass {sequential_s:.0f} s")

    assert _overlapping(parallel) >= 1, f"the first pass ran no two days at once: {parallel}"
    assert _overlapping(sequential) == 0, f"the second pass overlapped: {sequential}"
    for day in days:  # the reprocessed runs are the same runs (cleared), not new ones
        assert sequential[day]["dag_run_id"] == parallel[day]["dag_run_id"] == _run_id(day)
        assert sequential[day]["run_type"] == "backfill"

    for i, day in enumerate(days):
        manifest = json.loads(first[day]["manifest"])
        window = manifest["window"]
        assert manifest["logical_date"] == day and manifest["run_id"] == _run_id(day)
        # Complete: every backfilled day up to this one; the window's January days
        # have neither a run nor a partition.
        assert window["complete"] == days[: i + 1], window
        assert window["failed"] == [] and window["before_start"] == []
        assert window["missing"] == [d for d in window["days"] if d < days[0]]
        assert [s["uri"].rsplit("dt=", 1)[-1] for s in manifest["source_partitions"]] == days[: i + 1]
        assert verify_shards(load_manifest(str(_export_dir(lake_root, day) / layout.MANIFEST))) == []
        listed = {
            posixpath.normpath(s["path"]): s["sha256"]
            for split in manifest["splits"].values()
            for s in split["shards"]
        }
        assert listed == first[day]["files"] and len(listed) >= 3

        # The sequential pass: the same manifest and the same shard bytes.
        assert second[day]["files"] == first[day]["files"], day
        assert second[day]["manifest"] == first[day]["manifest"], day
