"""lakeprep on the loopback cluster's YARN: every stage's driver in a YARN container.

The ResourceManager and NodeManager come from `hadoop/cluster.py` (`yarn_cluster` in
conftest.py, started for this module only), the lake is on its HDFS, and Spark goes to
YARN in cluster deploy mode through the connection `client_env(yarn=True)` gives:
`{"host": "yarn", "extra": {"deploy-mode": "cluster", "queue": "ml",
"yarn_resourcemanager_webapp_address": ...}}`. The DAG runs fused (one daily
submission; the window's stages run in the Airflow worker), so the module makes four
submissions in all.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import re
import threading
import time
import urllib.request
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from lakeprep_airflow import lake_fs
from tests.conftest import AIRFLOW_ENV, REPO, VENV_BIN, describe_command, run_command
from tests.integration.conftest import FAST, cluster_module

pytestmark = pytest.mark.integration
DAY = "2013-01-01"
SPEC = "flights_yarn"  # a fused copy of flights: DAG lakeprep_flights_yarn, lake folders <stage>/flights_yarn


@pytest.fixture(scope="module")
def yarn_pipelines(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A pipelines folder holding only the fused copy of the flights spec (its retries 5 s
    apart, as the stack's copies: `FAST`)."""
    folder = tmp_path_factory.mktemp("yarn-pipelines")
    flights = yaml.safe_load((REPO / "pipelines" / "flights.yaml").read_text())
    data = {**flights, "name": SPEC, **FAST}
    data["spark"] = {**flights.get("spark", {}), **FAST["spark"]}
    (folder / f"{SPEC}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return str(folder)


@pytest.fixture(scope="module")
def yarn_lake(hdfs_spark_cluster, yarn_cluster) -> str:
    """A fresh lake on HDFS with one real day plus the reference tables.

    Names `hdfs_spark_cluster` so that xdist runs this module with the cluster's others
    (tests/conftest.py `module_group`)."""
    root = f"hdfs://127.0.0.1:{cluster_module.Ports.from_env().nn_rpc}/lake/yarn-{uuid.uuid4().hex[:8]}"
    run_command(
        [VENV_BIN / "python", "-m", "lakeprep_airflow.demo_data", "--lake", root, "--from", DAY, "--to", DAY],
        env={**os.environ, **AIRFLOW_ENV, **yarn_cluster["env"]},
        timeout=300,
    )
    return root


def rm_get(path: str) -> dict:
    url = f"http://127.0.0.1:{cluster_module.Ports.from_env().rm_http}/ws/v1/cluster/{path}"
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def lakeprep_apps() -> list[dict]:
    return [
        app for app in (rm_get("apps")["apps"] or {}).get("app", []) if app["name"].startswith("lakeprep-")
    ]


def path_of(uri: str) -> str:
    return lake_fs.resolve(uri)[1]


def partition_table(uri: str):
    """A partition's rows from HDFS, in a fixed order (part files have random names)."""
    fs = lake_fs.WebHdfsFS("webhdfs_default")
    folder = path_of(uri)
    parts = [e.name for e in fs.list_dir(folder) if e.name.startswith("part-")]
    tables = [pq.read_table(io.BytesIO(fs.read_bytes(posixpath.join(folder, name)))) for name in parts]
    return pa.concat_tables(tables).sort_by("flight_id")


@pytest.fixture(scope="module")
def yarn_day_run(airflow_db, yarn_cluster, yarn_lake, yarn_pipelines) -> dict:
    """`airflow dags test lakeprep_flights_yarn <day>` with Spark on YARN; the lake and the output."""
    env = {
        **os.environ,
        **AIRFLOW_ENV,
        **yarn_cluster["env"],
        "AIRFLOW_VAR_LAKEPREP_LAKE_ROOT": yarn_lake,
        "LAKEPREP_PIPELINES_DIR": yarn_pipelines,
    }
    before = {app["id"] for app in lakeprep_apps()}
    result = run_command(
        [VENV_BIN / "airflow", "dags", "test", f"lakeprep_{SPEC}", DAY], env=env, timeout=1200
    )
    out = result.stdout + result.stderr
    assert "state=success" in out, describe_command(result.args, "exit code 0", result.stdout, result.stderr)
    apps = [app for app in lakeprep_apps() if app["id"] not in before]
    return {"lake": yarn_lake, "out": out, "apps": apps}


def test_whole_dag_on_hdfs_and_yarn(yarn_day_run):
    """The fused day is one YARN application, driver in a container, in the connection's
    queue; its driver's log is in the task log; the export and the model are on HDFS."""
    lake, out, apps = yarn_day_run["lake"], yarn_day_run["out"], yarn_day_run["apps"]
    assert "--master yarn" in out and "--deploy-mode cluster" in out and "--queue ml" in out
    # One submission: the daily stages fused (the window's run in the Airflow worker).
    assert [app["name"].startswith("lakeprep-validate+preprocess+sample-") for app in apps] == [True], apps
    (app,) = apps
    assert (app["queue"], app["state"], app["finalStatus"]) == ("root.ml", "FINISHED", "SUCCEEDED")
    assert app["amContainerLogs"]  # the driver ran in a container of the NodeManager
    # The driver's own lines (written in the container) reached the task log.
    assert f"driver log container_{app['id'].removeprefix('application_')}_01_000001 stdout" in out
    assert re.search(r"lakeprep validate: rows in \d+, out \d+, quarantined \d+", out)

    fs = lake_fs.WebHdfsFS("webhdfs_default")
    export = path_of(f"{lake}/export_shards/{SPEC}/dt={DAY}")
    manifest = json.loads(fs.read_bytes(f"{export}/manifest.json"))
    assert manifest["logical_date"] == DAY
    assert manifest["source_partitions"][-1]["uri"] == f"{lake}/sample/{SPEC}/dt={DAY}"
    assert all(entry["rows"] > 0 for entry in manifest["splits"].values())
    metrics = json.loads(fs.read_bytes(path_of(f"{lake}/models/{SPEC}/dt={DAY}") + "/metrics.json"))
    assert metrics["validation"]["rows"] == manifest["splits"]["validation"]["rows"]


def yarn_validate(lake: str, pipelines: str, day: str = DAY):
    from lakeprep_airflow.operators.spark_stage import SparkStageOperator

    return SparkStageOperator(
        task_id="validate",
        stage="validate",
        spec_path=f"{pipelines}/{SPEC}.yaml",
        lake_root=lake,
        run_ds=day,
        status_poll_interval=1,  # the provider polls YARN every 10 s at least
    )


def test_on_kill_kills_the_yarn_application_and_the_retry_equals_a_clean_run(
    yarn_day_run, yarn_env, yarn_pipelines
):
    lake = yarn_day_run["lake"]
    validated = f"{lake}/validate/{SPEC}/dt={DAY}"
    clean = partition_table(validated)  # the DAG's run: a clean run of the same stage

    op = yarn_validate(lake, yarn_pipelines)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            op.execute({"run_id": "killed"})
        except BaseException as err:
            failure.append(err)

    attempt = threading.Thread(target=run)
    attempt.start()
    deadline = time.monotonic() + 240
    app_id = None
    while time.monotonic() < deadline and attempt.is_alive():
        hook = op._hook
        # The provider takes the id from spark-submit's lines as they come; the RM knows
        # it once spark-submit has submitted it.
        app_id = hook._yarn_application_id if hook else None
        if app_id and app_id in {app["id"] for app in lakeprep_apps() if app["state"] == "RUNNING"}:
            break
        time.sleep(0.5)
    assert app_id, "no YARN application was submitted"
    op.on_kill()  # what Airflow calls when the task is stopped
    attempt.join(timeout=120)
    assert not attempt.is_alive()
    app = rm_get(f"apps/{app_id}")["app"]
    assert app["state"] == "KILLED", app
    assert failure and "KILLED" in str(failure[0].__cause__ or failure[0]), failure

    report = yarn_validate(lake, yarn_pipelines).execute({"run_id": "retry"})
    assert report["status"] == "complete"
    assert partition_table(validated).equals(clean)
    fs = lake_fs.WebHdfsFS("webhdfs_default")
    staging = path_of(f"{lake}/validate/{SPEC}/_staging")
    assert not fs.exists(staging) or fs.list_dir(staging) == []


class RecordingLog:
    """Stands in for the operator's logger: records (level, message)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, level: str):
        return lambda msg, *args, **kwargs: self.lines.append((level, msg % args if args else msg))


def test_a_failing_stage_on_yarn_fails_with_its_own_error(
    yarn_day_run, yarn_env, yarn_pipelines, monkeypatch
):
    """A contract violation inside the driver's container: the task fails at once with the
    stage's message (from the driver's log), YARN's verdict in the cause, the driver's log
    lines in the task log at their own levels."""
    import pandas as pd
    from airflow.sdk.exceptions import AirflowFailException

    from lakeprep_airflow.demo_data import land_partition
    from lakeprep_airflow.operators.spark_stage import SparkStageOperator, StageRefused

    lake, bad_day = yarn_day_run["lake"], "2013-01-05"
    raw = f"{lake}/raw/flights/dt={bad_day}"
    land_partition(lake_fs.WebHdfsFS("webhdfs_default"), path_of(raw), pd.DataFrame({"a": [1, 2, 3]}))
    op = yarn_validate(lake, yarn_pipelines, day=bad_day)
    log = RecordingLog()
    monkeypatch.setattr(SparkStageOperator, "log", property(lambda self: log))
    with pytest.raises(StageRefused) as err:
        op.execute({"run_id": "bad"})
    assert isinstance(err.value, AirflowFailException)
    assert str(err.value).startswith(
        f"stage validate failed: ContractError: partition {raw}: required column(s)"
    )
    assert "FAILED" in str(err.value.__cause__)
    (app,) = [a for a in lakeprep_apps() if a["id"] == op._hook._yarn_application_id]
    assert (app["queue"], app["finalStatus"]) == ("root.ml", "FAILED")
    assert any(
        level == "info" and f"INFO lakeprep validate: inputs {raw} -> " in line for level, line in log.lines
    )
    assert any(level == "error" and line.startswith("Traceback") for level, line in log.lines)
    # The stage's failed report only, never a complete partition.
    refused = path_of(f"{lake}/validate/{SPEC}/dt={bad_day}")
    assert not lake_fs.WebHdfsFS("webhdfs_default").exists(f"{refused}/_SUCCESS")


def test_torch_distributor_trains_two_cpu_ranks_on_yarn(yarn_env, local_spark, tmp_path):
    """The `spark` training backend with the YARN connection: the Airflow worker is the
    driver (client mode, the distributor runs in-process), the two ranks a barrier stage
    on the NodeManager's executor."""
    from tests.integration.test_spark_backend import RUN_DS, spark_handoff

    # An Airflow task is a new process; this test's worker may hold a JVM that an earlier
    # test launched with another cluster's spark-defaults.conf, which the next session
    # would reuse without YARN's (one executor of two cores): the barrier stage then waits
    # for a second slot that never comes. End it, as a new task process would start clean.
    local_spark.stop(jvm=True)
    lake, op = spark_handoff(tmp_path, export_world_size=2, world_size=2, num_processes=2)
    before = {app["id"] for app in lakeprep_apps()}
    try:
        result = op.execute({})
    finally:
        local_spark.stop(jvm=True)  # the later tests' sessions do not inherit YARN's JVM
    metrics = result["metrics"]
    assert metrics["world_size"] == 2 and metrics["device"] == "cpu"
    model = lake / "models" / "flights" / f"dt={RUN_DS}"
    assert json.loads((model / "telemetry.json").read_text())["steps_per_rank"] == [2, 2]
    (app,) = [app for app in lakeprep_apps() if app["id"] not in before]
    assert app["name"] == f"lakeprep-train-flights-{RUN_DS}"
    assert (app["queue"], app["finalStatus"]) == ("root.ml", "SUCCEEDED")  # the connection's queue
