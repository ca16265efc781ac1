"""The loopback HDFS + Spark standalone cluster of hadoop/cluster.py serves real clients.

The module starts the cluster once (fetching Hadoop 3.5.0 from Maven Central on first
use), then talks to it the way the pipeline does: Airflow's WebHDFSHook over WebHDFS,
and spark-submit against the standalone master writing Parquet to hdfs://.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.conftest import run_command
from tests.integration.conftest import cluster_module

REPO = Path(__file__).resolve().parents[2]


cluster = cluster_module
PORTS = cluster.Ports.from_env()  # the defaults unless LAKEPREP_*_PORT say otherwise


@pytest.mark.integration
def test_status_reports_every_service_up(hdfs_spark_cluster: dict) -> None:
    report = cluster.status()

    assert {name: row["up"] for name, row in report.items()} == {
        "namenode": True,
        "datanode": True,
        "spark-master": True,
        "spark-worker": True,
    }
    assert {name: row["pid"] for name, row in report.items()} == hdfs_spark_cluster["pids"]


@pytest.mark.integration
def test_up_twice_keeps_the_running_daemons(hdfs_spark_cluster: dict) -> None:
    again = cluster.up()

    assert again["started"] == []
    assert again["pids"] == hdfs_spark_cluster["pids"]


@pytest.mark.integration
def test_webhdfs_hook_round_trip(hdfs_spark_cluster: dict, tmp_path: Path) -> None:
    from airflow.providers.apache.hdfs.hooks.webhdfs import WebHDFSHook

    local = tmp_path / "hello.txt"
    local.write_bytes(b"lakeprep says hello\n")
    folder = f"/tmp/test-webhdfs-{uuid.uuid4().hex}"
    hook = WebHDFSHook()  # webhdfs_default, from AIRFLOW_CONN_WEBHDFS_DEFAULT
    try:
        hook.load_file(str(local), f"{folder}/hello.txt")

        assert hook.check_for_path(f"{folder}/hello.txt")
        assert not hook.check_for_path(f"{folder}/absent.txt")
        assert hook.read_file(f"{folder}/hello.txt") == b"lakeprep says hello\n"
    finally:
        hook.get_conn().delete(folder, recursive=True)


@pytest.mark.integration
def test_spark_connection_points_at_the_standalone_master(hdfs_spark_cluster: dict) -> None:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    # The provider's URI parsing is the contract AIRFLOW_CONN_SPARK_DEFAULT must meet.
    master = SparkSubmitHook(conn_id="spark_default")._resolve_connection()["master"]

    assert master == f"spark://127.0.0.1:{PORTS.spark_master}"


SMOKE_JOB = """
import sys

from pyspark.sql import SparkSession

path, app_name = sys.argv[1], sys.argv[2]
spark = SparkSession.builder.appName(app_name).getOrCreate()
try:
    spark.range(1000).selectExpr("id", "id % 7 AS bucket").write.mode("overwrite").parquet(path)
    back = spark.read.parquet(path)
    print(f"ROWS={back.count()} BUCKETS={back.select('bucket').distinct().count()}")
finally:
    spark.stop()
"""


@pytest.mark.integration
def test_spark_submit_writes_and_reads_parquet_on_hdfs(hdfs_spark_cluster: dict, tmp_path: Path) -> None:
    from airflow.providers.apache.hdfs.hooks.webhdfs import WebHDFSHook

    job = tmp_path / "smoke_job.py"
    job.write_text(SMOKE_JOB)
    unique = uuid.uuid4().hex
    app_name = f"lakeprep-cluster-smoke-{unique}"
    folder = f"/tmp/test-spark-{unique}"
    env = {
        **os.environ,  # the fixture exported the cluster's client_env() (HADOOP_CONF_DIR...)
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYSPARK_PYTHON": sys.executable,  # also lets spark-submit find the venv's pyspark
    }
    command = [
        str(Path(sys.executable).parent / "spark-submit"),
        *("--master", f"spark://127.0.0.1:{PORTS.spark_master}"),
        *("--conf", "spark.executor.memory=512m", "--conf", "spark.ui.enabled=false"),
        str(job),
        f"hdfs://127.0.0.1:{PORTS.nn_rpc}{folder}",
        app_name,
    ]
    hdfs = WebHDFSHook().get_conn()
    try:
        done = run_command(command, env=env, timeout=300, check=False)

        assert done.returncode == 0, done.stderr[-4000:]
        assert "ROWS=1000 BUCKETS=7" in done.stdout
        parts = [name for name in hdfs.list(folder) if name.endswith(".parquet")]
        assert parts, f"no Parquet files in {folder}: {hdfs.list(folder)}"
        # HADOOP_CONF_DIR (client-conf) reached the writers: one replica, not the default 3.
        assert {hdfs.status(f"{folder}/{name}")["replication"] for name in parts} == {1}
    finally:
        hdfs.delete(folder, recursive=True)

    # It ran on the standalone cluster, not in local mode.
    master_json = f"http://127.0.0.1:{PORTS.spark_master_ui}/json/"
    with urllib.request.urlopen(master_json, timeout=10) as response:
        master = json.load(response)
    assert app_name in {app["name"] for app in master["completedapps"]}


@pytest.mark.integration
def test_yarn_serves_its_queues_and_its_nodemanager_stops_quickly(yarn_cluster: dict) -> None:
    """ResourceManager and NodeManager up (readiness: an ACTIVE RM, a RUNNING node), the
    queues and the node's size as configured, and `down`'s NodeManager stop well under its
    own 15 s of shutdown waits."""
    import time

    report = cluster.status(yarn=True)
    assert report["resourcemanager"]["up"] and report["nodemanager"]["up"]
    rm = f"http://127.0.0.1:{PORTS.rm_http}/ws/v1/cluster"
    with urllib.request.urlopen(f"{rm}/scheduler", timeout=10) as response:
        queues = json.load(response)["scheduler"]["schedulerInfo"]["queues"]["queue"]
    assert sorted(queue["queueName"] for queue in queues) == ["default", "ml"]
    with urllib.request.urlopen(f"{rm}/nodes", timeout=10) as response:
        (node,) = json.load(response)["nodes"]["node"]
    assert node["state"] == "RUNNING"
    assert node["totalResource"]["memory"] == cluster.NM_MEMORY_MB
    assert yarn_cluster["env"]["SPARK_CONF_DIR"].endswith("spark-yarn")
    assert json.loads(yarn_cluster["env"]["AIRFLOW_CONN_SPARK_DEFAULT"])["host"] == "yarn"

    began = time.monotonic()
    assert cluster.stop_service("nodemanager") is True
    stopped_in = time.monotonic() - began
    assert not cluster.status(yarn=True)["nodemanager"]["up"]
    again = cluster.up(yarn=True)
    assert again["started"] == ["nodemanager"]
    assert stopped_in < 8, f"the NodeManager took {stopped_in:.1f} s to stop"
