"""lakeprep on the real loopback cluster: HDFS (NameNode + DataNode) and Spark standalone.

The cluster comes from `hadoop/cluster.py` (the session fixture `hdfs_spark_cluster` in
conftest.py). Every lake path here is `hdfs://`, the Spark master is
`spark://127.0.0.1:7077`, and Airflow reads HDFS through the provider's WebHDFS hook.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import subprocess
import threading
import time
import uuid

import pytest
from airflow.sdk.exceptions import AirflowSensorTimeout

from lakeprep_airflow import lake_fs
from lakeprep_airflow.demo_data import land_partition
from lakeprep_airflow.partition_status import LakeUnreachableError
from lakeprep_airflow.sensors.partition import PartitionSensor
from tests.conftest import AIRFLOW_ENV, VENV_BIN, describe_command, run_command
from tests.integration.conftest import cluster_module

pytestmark = pytest.mark.integration
DAY = "2013-01-01"


@pytest.fixture(scope="module")
def hdfs_lake(hdfs_spark_cluster) -> str:
    """A fresh lake on HDFS, landed by the demo data command: one real day plus references."""
    root = f"hdfs://127.0.0.1:{cluster_module.Ports.from_env().nn_rpc}/lake/it-{uuid.uuid4().hex[:8]}"
    run_command(
        [VENV_BIN / "python", "-m", "lakeprep_airflow.demo_data", "--lake", root, "--from", DAY, "--to", DAY],
        env={**os.environ, **AIRFLOW_ENV, **hdfs_spark_cluster["env"]},
        timeout=300,
    )
    return root


def hdfs_fs() -> lake_fs.WebHdfsFS:
    return lake_fs.WebHdfsFS("webhdfs_default")


def path_of(uri: str) -> str:
    return lake_fs.resolve(uri)[1]


@pytest.fixture(scope="module")
def hdfs_day_run(airflow_db, hdfs_spark_cluster, hdfs_lake) -> str:
    env = {
        **os.environ,
        **AIRFLOW_ENV,
        **hdfs_spark_cluster["env"],
        "AIRFLOW_VAR_LAKEPREP_LAKE_ROOT": hdfs_lake,
    }
    result = run_command(
        [VENV_BIN / "airflow", "dags", "test", "lakeprep_flights", DAY], env=env, timeout=1200
    )
    out = result.stdout + result.stderr
    assert "state=success" in out, describe_command(result.args, "exit code 0", result.stdout, result.stderr)
    assert "--master spark://127.0.0.1:7077" in out  # the stages really went to the cluster
    return hdfs_lake


def test_whole_dag_on_hdfs_and_spark_standalone(hdfs_day_run):
    fs = hdfs_fs()
    export = path_of(f"{hdfs_day_run}/export_shards/flights/dt={DAY}")
    manifest = json.loads(fs.read_bytes(f"{export}/manifest.json"))
    assert manifest["logical_date"] == DAY
    assert manifest["source_partitions"][-1]["uri"] == f"{hdfs_day_run}/sample/flights/dt={DAY}"
    for split, entry in manifest["splits"].items():
        per_rank = entry["plan"]["rows_per_rank"]
        assert (
            sum(s["rows"] for s in entry["shards"]) == entry["rows"] == per_rank * entry["plan"]["world_size"]
        )
        for shard in entry["shards"]:
            data = fs.read_bytes(posixpath.normpath(f"{export}/{shard['path']}"))  # read back from HDFS
            assert len(data) == shard["bytes"], (split, shard["path"])
            assert hashlib.sha256(data).hexdigest() == shard["sha256"]
    validate = json.loads(
        fs.read_bytes(path_of(f"{hdfs_day_run}/validate/flights/dt={DAY}") + "/_lakeprep_report.json")
    )
    assert validate["rows_in"] == validate["rows_out"] + validate["rows_quarantined"] > 0
    metrics = json.loads(fs.read_bytes(path_of(f"{hdfs_day_run}/models/flights/dt={DAY}") + "/metrics.json"))
    assert metrics["validation"]["rows"] == manifest["splits"]["validation"]["rows"]
    assert not fs.exists(path_of(f"{hdfs_day_run}/validate/flights/_staging")) or not fs.list_dir(
        path_of(f"{hdfs_day_run}/validate/flights/_staging")
    )


def _late_writer(uri: str, delay: float) -> threading.Thread:
    import pandas as pd

    def write() -> None:
        time.sleep(delay)
        land_partition(hdfs_fs(), path_of(uri), pd.DataFrame({"a": [1, 2, 3]}))

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_sensor_waits_for_a_partition_that_lands_later(hdfs_spark_cluster, hdfs_lake):
    uri = f"{hdfs_lake}/raw/late/dt={DAY}"
    writer = _late_writer(uri, delay=4)
    sensor = PartitionSensor(task_id="wait", uri=uri, poke_interval=1, timeout=90, mode="poke")
    assert sensor.poke({}) is False
    assert sensor._last_seen.endswith("partition directory does not exist")
    started = time.monotonic()
    sensor.execute({})
    writer.join()
    assert time.monotonic() - started >= 2  # it really waited
    assert sensor._last_seen == f"{uri}: _SUCCESS present, 1 data file(s), 8 bytes"


def test_deferrable_trigger_waits_on_hdfs(hdfs_spark_cluster, hdfs_lake):
    import asyncio

    from lakeprep_airflow.triggers.partition import PartitionCompleteTrigger

    uri = f"{hdfs_lake}/raw/late-deferred/dt={DAY}"
    writer = _late_writer(uri, delay=3)
    trigger = PartitionCompleteTrigger(
        uri=uri, min_files=1, min_bytes=1, poke_interval=1, deadline=time.time() + 90
    )

    async def first_event():
        async for event in trigger.run():
            return event.payload

    event = asyncio.run(first_event())
    writer.join()
    assert event["status"] == "complete", event


def test_sensor_times_out_naming_the_uri(hdfs_spark_cluster, hdfs_lake):
    uri = f"{hdfs_lake}/raw/never/dt={DAY}"
    sensor = PartitionSensor(task_id="wait", uri=uri, poke_interval=1, timeout=3, mode="poke")
    with pytest.raises(AirflowSensorTimeout, match=f"partition {uri} was not complete"):
        sensor.execute({})


def test_namenode_down_fails_clearly_and_leaves_nothing_half_written(hdfs_spark_cluster, hdfs_lake, tmp_path):
    """Stop the real NameNode: the sensor and a Spark stage fail naming the endpoint."""
    from lakeprep_airflow.operators.spark_stage import SparkStageOperator
    from lakeprep_airflow.spec import load_spec, stage_io

    spec_path = str(cluster_module.REPO / "pipelines" / "flights.yaml")
    raw = f"{hdfs_lake}/raw/flights/dt={DAY}"
    # A stage whose output does not exist yet, to check that no partial output appears.
    inputs, output = stage_io(load_spec(spec_path), "validate", lake_root=hdfs_lake, ds=DAY)
    assert inputs == [raw]
    assert hdfs_fs().exists(path_of(raw))
    output = output.replace("/validate/", "/validate_nn_down/")

    cluster_module.stop_service("namenode")
    try:
        with pytest.raises(LakeUnreachableError, match=r"WebHDFS endpoint http://127\.0\.0\.1:9870"):
            PartitionSensor(task_id="wait", uri=raw, timeout=60).poke({})

        op = SparkStageOperator(
            task_id="validate", stage="validate", spec_path=spec_path, lake_root=hdfs_lake, run_ds=DAY
        )
        with pytest.raises(LakeUnreachableError, match="cannot reach HDFS"):
            op._check_input(raw)

        # The Spark job itself, submitted to the standalone master while HDFS is down.
        job = _submit_validate(hdfs_spark_cluster["env"], raw, output, spec_path, hdfs_lake)
        assert job.returncode != 0
        # Hadoop names the endpoint by its resolved name: "Call From vm/127.0.0.1 to
        # localhost:8020 failed on connection exception: ... Connection refused".
        assert re.search(
            r"to (localhost|127\.0\.0\.1):8020 failed on connection exception", job.stdout + job.stderr
        )
    finally:
        cluster_module.up()
    assert not hdfs_fs().exists(path_of(output))
    staging = path_of(output.rsplit("/", 1)[0] + "/_staging")
    assert not hdfs_fs().exists(staging) or hdfs_fs().list_dir(staging) == []

    # The retry, once the NameNode is back: the stage completes its partition.
    retry = _submit_validate(hdfs_spark_cluster["env"], raw, output, spec_path, hdfs_lake)
    assert retry.returncode == 0, retry.stderr[-3000:]
    assert hdfs_fs().exists(path_of(output) + "/_SUCCESS")


def test_spark_master_down_fails_naming_it_and_the_retry_after_it_returns_succeeds(
    hdfs_spark_cluster, hdfs_lake
):
    """Stop the standalone master (and its worker): the submission fails naming the master.

    Spark's standalone client tries to register 3 times, 20 s each, before giving up, so
    this takes about a minute. Then `up()` restarts both and the same submission succeeds.
    """
    from lakeprep_airflow.spec import load_spec, stage_io

    spec_path = str(cluster_module.REPO / "pipelines" / "flights.yaml")
    raw = f"{hdfs_lake}/raw/flights/dt={DAY}"
    _, output = stage_io(load_spec(spec_path), "validate", lake_root=hdfs_lake, ds=DAY)
    output = output.replace("/validate/", "/validate_master_down/")
    master = hdfs_spark_cluster["env"]["AIRFLOW_CONN_SPARK_DEFAULT"]
    assert master.startswith("spark://127.0.0.1:")

    for service in ("spark-worker", "spark-master"):
        cluster_module.stop_service(service)
    try:
        job = _submit_validate(hdfs_spark_cluster["env"], raw, output, spec_path, hdfs_lake)
        assert job.returncode != 0
        endpoint = master.removeprefix("spark://")
        assert re.search(rf"Failed to connect to master {re.escape(endpoint)}", job.stdout + job.stderr), (
            job.stderr[-3000:]
        )
        assert "All masters are unresponsive" in job.stdout + job.stderr
    finally:
        cluster_module.up()
    assert not hdfs_fs().exists(path_of(output))

    retry = _submit_validate(hdfs_spark_cluster["env"], raw, output, spec_path, hdfs_lake)
    assert retry.returncode == 0, retry.stderr[-3000:]
    assert hdfs_fs().exists(path_of(output) + "/_SUCCESS")


def _submit_validate(
    cluster_env: dict, raw: str, output: str, spec_path: str, lake: str
) -> subprocess.CompletedProcess:
    from lakeprep_airflow import jobs_package
    from lakeprep_airflow.operators.spark_stage import stage_argv
    from lakeprep_airflow.spec import load_spec, stage_params

    params = stage_params(load_spec(spec_path), "validate", lake_root=lake, ds=DAY, run_id="it")
    cmd = [
        str(VENV_BIN / "spark-submit"),
        "--master",
        cluster_env["AIRFLOW_CONN_SPARK_DEFAULT"],
        # Fail fast instead of Hadoop's default 10 connection retries per call.
        "--conf",
        "spark.hadoop.ipc.client.connect.max.retries=1",
        "--conf",
        "spark.hadoop.ipc.client.connect.retry.interval=200",
        "--py-files",
        str(jobs_package.build_zip()),
        str(jobs_package.stage_script("validate")),
        *stage_argv([raw], output, params),
    ]
    env = {**os.environ, **AIRFLOW_ENV, **cluster_env}
    return run_command(cmd, env=env, timeout=300, check=False)
