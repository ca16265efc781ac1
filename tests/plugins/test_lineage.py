"""OpenLineage of lakeprep's operators: datasets by lake URI, facets, the Spark listener's conf."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from lakeprep_airflow import lineage
from lakeprep_airflow import spec as spec_mod
from lakeprep_airflow.operators.drift import DriftCheckOperator
from lakeprep_airflow.operators.handoff import GpuTrainingHandoffOperator
from lakeprep_airflow.operators.report import RunReportOperator
from lakeprep_airflow.operators.spark_stage import SparkStageOperator
from lakeprep_airflow.operators.window_stage import WindowStageOperator
from lakeprep_airflow.sensors.partition import PartitionSensor

REPO = Path(__file__).resolve().parents[2]
FLIGHTS = str(REPO / "pipelines" / "flights.yaml")
DAY = "2013-01-02"


def names(datasets) -> list[tuple[str, str]]:
    return [(d.namespace, d.name) for d in datasets]


def commit(lake: Path, stage: str, day: str, report: dict, **files: bytes) -> Path:
    part = lake / stage / "flights" / f"dt={day}"
    part.mkdir(parents=True)
    (part / "_lakeprep_report.json").write_text(json.dumps(report))
    for name, data in files.items():
        (part / name).write_bytes(data)
    (part / "_SUCCESS").write_bytes(b"")
    return part


def test_lake_uris_are_named_as_openlineage_names_files_and_hdfs():
    assert lineage.dataset_id("file:///lake/sample/flights/dt=2013-01-02/") == (
        "file",
        "/lake/sample/flights/dt=2013-01-02",
    )
    assert lineage.dataset_id("hdfs://nn:8020/lake/raw/flights/dt=2013-01-02") == (
        "hdfs://nn:8020",
        "/lake/raw/flights/dt=2013-01-02",
    )
    with pytest.raises(ValueError, match="must be file:///path"):
        lineage.dataset_id("s3:/no-bucket")


def test_a_fused_day_reads_raw_and_references_and_writes_three_partitions(tmp_path):
    lake = tmp_path / "lake"
    root = lake.as_uri()
    raw = f"{root}/raw/flights/dt={DAY}"
    commit(lake, "validate", DAY, {"inputs": [raw]})
    commit(
        lake,
        "preprocess",
        DAY,
        {
            "inputs": [f"{root}/validate/flights/dt={DAY}"],
            "reference_snapshots": {"planes": {"uri": f"{root}/reference/planes", "snapshot": None}},
        },
    )
    commit(lake, "sample", DAY, {"inputs": [f"{root}/preprocess/flights/dt={DAY}"]})
    op = SparkStageOperator(
        task_id="prepare_day",
        stages=["validate", "preprocess", "sample"],
        spec_path=FLIGHTS,
        lake_root=root,
        run_ds=DAY,
    )

    done = op.get_openlineage_facets_on_complete(None)

    # What the day read from outside the task; the partitions it wrote and read back are outputs.
    assert names(done.inputs) == [
        ("file", f"{lake}/raw/flights/dt={DAY}"),
        ("file", f"{lake}/reference/planes"),
    ]
    assert names(done.outputs) == [
        ("file", f"{lake}/{s}/flights/dt={DAY}") for s in ("validate", "preprocess", "sample")
    ]
    facet = done.run_facets["lakeprep"]
    assert (facet.dataset, facet.ds, facet.stages) == ("flights", DAY, ["validate", "preprocess", "sample"])
    assert facet.configHash == spec_mod.config_hash(spec_mod.load_spec(FLIGHTS))
    assert facet.transformSha256 is None
    # START: the spec's wiring, before any report exists.
    start = op.get_openlineage_facets_on_start()
    assert names(start.inputs) == [("file", f"{lake}/raw/flights/dt={DAY}")]
    assert names(start.outputs) == names(done.outputs)


def test_the_window_stages_name_the_days_read_and_the_transform_they_hold(tmp_path):
    lake = tmp_path / "lake"
    root = lake.as_uri()
    days = [f"{root}/sample/flights/dt=2013-01-01", f"{root}/sample/flights/dt={DAY}"]
    transform = b'{"fitted": true}'
    digest = hashlib.sha256(transform).hexdigest()
    fit = commit(lake, "fit_transform", DAY, {"inputs": days}, **{"transform.json": transform})
    manifest = {"transform": {"uri": "transform.json", "sha256": digest}}
    commit(
        lake,
        "export_shards",
        DAY,
        {"inputs": days, "transform": f"{fit.as_uri()}/transform.json"},
        **{"manifest.json": json.dumps(manifest).encode(), "transform.json": transform},
    )
    kw = {"spec_path": FLIGHTS, "lake_root": root, "run_ds": DAY}
    fitted = WindowStageOperator(task_id="fit_transform", stage="fit_transform", **kw)
    export = WindowStageOperator(task_id="export_shards", stage="export_shards", **kw)

    fit_done = fitted.get_openlineage_facets_on_complete(None)
    export_done = export.get_openlineage_facets_on_complete(None)

    assert names(fit_done.inputs) == [
        ("file", f"{lake}/sample/flights/dt=2013-01-01"),
        ("file", f"{lake}/sample/flights/dt={DAY}"),
    ]
    assert names(fit_done.outputs) == [("file", str(fit))]
    assert fit_done.outputs[0].facets["lakeprepTransform"].sha256 == digest
    assert fit_done.run_facets["lakeprep"].transformSha256 == digest
    # The export reads the days and the fitted transform's partition.
    assert names(export_done.inputs) == [*names(fit_done.inputs), ("file", str(fit))]
    assert export_done.run_facets["lakeprep"].transformSha256 == digest
    # START does not know the window's days yet (wait_for_window's XCom): the output only.
    start = export.get_openlineage_facets_on_start()
    assert start.inputs == [] and names(start.outputs) == [("file", f"{lake}/export_shards/flights/dt={DAY}")]
    # FAIL repeats START: a failed stage committed nothing, an older report is another run's.
    assert names(export.get_openlineage_facets_on_failure(None).inputs) == []


def test_the_handoff_reads_the_export_and_writes_the_model(tmp_path):
    lake = tmp_path / "lake"
    commit(
        lake,
        "export_shards",
        DAY,
        {},
        **{"manifest.json": b'{"transform": {"uri": "transform.json", "sha256": "ab"}}'},
    )
    op = GpuTrainingHandoffOperator(
        task_id="gpu_training_handoff", spec_path=FLIGHTS, lake_root=lake.as_uri(), run_ds=DAY
    )
    done = op.get_openlineage_facets_on_complete(None)
    assert names(done.inputs) == [("file", f"{lake}/export_shards/flights/dt={DAY}")]
    assert names(done.outputs) == [("file", f"{lake}/models/flights/dt={DAY}")]
    assert done.run_facets["lakeprep"].transformSha256 == "ab"


def test_check_drift_reads_the_statistics_it_compared_and_writes_its_report(tmp_path):
    lake = tmp_path / "lake"
    root = lake.as_uri()
    stats = [
        f"{root}/{stage}/flights/dt={day}/_stats.json"
        for day in ("2013-01-01", DAY)
        for stage in ("validate", "preprocess")
    ]
    commit(lake, "check_drift", DAY, {}, **{"drift.json": json.dumps({"stats_files": stats}).encode()})
    op = DriftCheckOperator(task_id="check_drift", spec_path=FLIGHTS, lake_root=root, run_ds=DAY)

    done = op.get_openlineage_facets_on_complete(None)

    assert names(done.inputs) == [("file", str(Path(u).parent).removeprefix("file:")) for u in stats]
    assert names(done.outputs) == [("file", f"{lake}/check_drift/flights/dt={DAY}")]
    assert names(op.get_openlineage_facets_on_start().inputs) == [
        ("file", f"{lake}/validate/flights/dt={DAY}")
    ]


def test_the_run_report_reads_the_runs_partitions_and_writes_the_report():
    op = RunReportOperator(
        task_id="write_report", spec_path=FLIGHTS, lake_root="hdfs://nn:8020/lake", run_ds=DAY
    )
    done = op.get_openlineage_facets_on_complete(None)
    read = ("validate", "preprocess", "sample", "fit_transform", "export_shards", "check_drift", "models")
    assert names(done.inputs) == [("hdfs://nn:8020", f"/lake/{s}/flights/dt={DAY}") for s in read]
    assert names(done.outputs) == [("hdfs://nn:8020", f"/lake/reports/flights/dt={DAY}")]


def test_the_partition_sensor_names_the_raw_partition():
    sensor = PartitionSensor(
        task_id="wait_for_partition", uri="hdfs://nn:8020/lake/raw/flights/dt=2013-01-02"
    )
    assert names(sensor.get_openlineage_facets_on_start().inputs) == [
        ("hdfs://nn:8020", "/lake/raw/flights/dt=2013-01-02")
    ]


def test_provider_transports_become_the_listeners_settings():
    assert lineage.spark_transport_conf(
        {"type": "file", "log_file_path": "/x/events.jsonl", "append": True}
    ) == {
        "spark.openlineage.transport.type": "file",
        "spark.openlineage.transport.location": "/x/events.jsonl",
    }
    http = {
        "type": "http",
        "url": "http://marquez:5000",
        "endpoint": "api/v1/lineage",
        "auth": {"type": "api_key", "apiKey": "k"},
    }
    assert lineage.spark_transport_conf(http) == {
        "spark.openlineage.transport.type": "http",
        "spark.openlineage.transport.url": "http://marquez:5000",
        "spark.openlineage.transport.endpoint": "api/v1/lineage",
        "spark.openlineage.transport.auth.type": "api_key",
        "spark.openlineage.transport.auth.apiKey": "k",
    }
    assert lineage.spark_transport_conf({"type": "console"}) == {
        "spark.openlineage.transport.type": "console"
    }
    assert lineage.spark_transport_conf({"type": "kafka", "topic": "t"}) is None
    with pytest.raises(ValueError, match="log_file_path"):
        lineage.spark_transport_conf({"type": "file"})


@pytest.fixture
def provider_conf(monkeypatch):
    """The provider's `[openlineage]` settings from the environment, its caches cleared around."""
    from airflow.providers.openlineage import conf

    def configure(**env: str) -> None:
        for key, value in env.items():
            monkeypatch.setenv(f"AIRFLOW__OPENLINEAGE__{key.upper()}", value)
        for name in ("transport", "is_disabled", "config_path", "namespace"):
            cached = getattr(conf, name)
            if hasattr(cached, "cache_clear"):
                cached.cache_clear()

    configure()
    yield configure
    monkeypatch.undo()
    configure()


def test_the_listener_joins_the_submission_only_when_lineage_is_on(provider_conf, monkeypatch, tmp_path):
    jar = tmp_path / "openlineage-spark.jar"
    jar.write_bytes(b"jar")
    monkeypatch.setenv(lineage.SPARK_LISTENER_JAR_ENV, str(jar))
    monkeypatch.setattr(
        "airflow.providers.openlineage.utils.spark._get_parent_job_information_as_spark_properties",
        lambda context: {"spark.openlineage.parentRunId": context["ti"].run},
    )
    context = {"ti": SimpleNamespace(run="0193-task-run")}
    given = {"spark.jars": "/opt/extra.jar", "spark.openlineage.namespace": "spec-ns"}
    assert lineage.spark_listener_conf(given, context) == given  # no transport: lineage is off

    events = tmp_path / "events.jsonl"
    provider_conf(
        transport=json.dumps({"type": "file", "log_file_path": str(events), "append": True}), namespace="lake"
    )
    conf = lineage.spark_listener_conf(given, context)

    assert conf["spark.extraListeners"] == lineage.SPARK_LISTENER_CLASS
    assert conf["spark.jars"] == f"/opt/extra.jar,{jar}"
    assert conf["spark.openlineage.transport.location"] == str(events)
    assert conf["spark.openlineage.parentRunId"] == "0193-task-run"
    assert conf["spark.openlineage.namespace"] == "spec-ns"  # the spec's own setting wins
    assert conf["spark.driver.extraJavaOptions"] == lineage.SPARK_LISTENER_JAVA_OPTIONS
    # Prepared twice (a retry), the listener and jar are listed once.
    assert lineage.spark_listener_conf(conf, context)["spark.jars"] == conf["spark.jars"]


def test_a_missing_jar_is_named_and_the_stage_runs_without_the_listener(
    provider_conf, monkeypatch, tmp_path, caplog
):
    monkeypatch.setenv(lineage.SPARK_LISTENER_JAR_ENV, str(tmp_path / "absent.jar"))
    with pytest.raises(FileNotFoundError, match="LAKEPREP_OPENLINEAGE_SPARK_JAR"):
        lineage.listener_jar()
    provider_conf(transport='{"type": "console"}')
    given = {"spark.sql.shuffle.partitions": "4"}
    assert lineage.spark_listener_conf(given, {"ti": None}) == given
    assert "without the OpenLineage listener" in caplog.text and "absent.jar" in caplog.text
