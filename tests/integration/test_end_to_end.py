"""The whole DAG for one real day: Airflow run, spark-submit for every stage, the trainer."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.conftest import AIRFLOW_ENV, VENV_BIN

pytestmark = pytest.mark.integration
DAY = "2013-01-01"


def airflow(*args: str, lake: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **AIRFLOW_ENV, "AIRFLOW_VAR_LAKEPREP_LAKE_ROOT": lake}
    return subprocess.run(
        [str(VENV_BIN / "airflow"), *args], env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def day_run(airflow_db, demo_lake):
    result = airflow("dags", "test", "lakeprep_flights", DAY, lake=demo_lake)
    tail = (result.stdout + result.stderr)[-6000:]
    assert result.returncode == 0, tail
    assert "state=success" in result.stdout + result.stderr, tail
    return Path(urlparse(demo_lake).path)


def report(lake: Path, stage: str) -> dict:
    return json.loads((lake / stage / "flights" / f"dt={DAY}" / "_lakeprep_report.json").read_text())


def test_rows_are_accounted_for_through_every_stage(day_run):
    raw_lines = (day_run / "raw" / "flights" / f"dt={DAY}" / "part-00000.csv").read_text().splitlines()
    validate = report(day_run, "validate")
    assert validate["rows_in"] == len(raw_lines) - 1  # header
    assert validate["rows_in"] == validate["rows_out"] + validate["rows_quarantined"]
    # Cancelled flights have no arrival delay, hence no label: quarantined with the reason.
    assert validate["quarantine_reasons"] == {"null label (delayed)": validate["rows_quarantined"]}
    assert validate["rows_quarantined"] > 0
    previous = validate["rows_out"]
    for stage in ("preprocess", "sample"):
        r = report(day_run, stage)
        assert r["rows_in"] == previous, stage
        assert r["rows_in"] == r["rows_out"] + r["rows_quarantined"] + r.get("rows_sampled_out", 0), stage
        previous = r["rows_out"]
    sample = report(day_run, "sample")
    assert sample["class_counts_after"]["1"] == sample["class_counts_before"]["1"]
    assert sample["class_counts_after"]["0"] < sample["class_counts_before"]["0"]


def test_one_transform_fitted_on_the_train_split_of_the_window(day_run):
    transform = json.loads(
        (day_run / "fit_transform" / "flights" / f"dt={DAY}" / "transform.json").read_text()
    )
    sample = report(day_run, "sample")
    assert transform["fitted_on"]["rows"] == sum(sample["splits"]["train"].values())
    assert transform["fitted_on"]["partitions"][-1].endswith(f"/sample/flights/dt={DAY}")
    by_name = {e["name"]: e for e in transform["categorical"]}
    assert by_name["carrier"]["encoding"] == "vocab" and by_name["dest"]["encoding"] == "hash"
    assert "UA" in by_name["carrier"]["vocabulary"]
    # 2013-01-01 was a Tuesday (Spark's dayofweek: 3) in New York, evening flights too:
    # their UTC time_hour is already 2013-01-02, so a UTC session would say Wednesday.
    assert by_name["day_of_week"]["vocabulary"] == ["3"]
    assert (day_run / "fit_transform" / "flights" / f"dt={DAY}" / "spark_model" / "metadata").is_dir()
    # The window of the first day: the run's own day; the 29 before are before start_date.
    manifest = json.loads((day_run / "export_shards" / "flights" / f"dt={DAY}" / "manifest.json").read_text())
    assert manifest["window"]["complete"] == [DAY] and len(manifest["window"]["before_start"]) == 29
    drift = json.loads((day_run / "check_drift" / "flights" / f"dt={DAY}" / "drift.json").read_text())
    assert drift["status"] == "no_reference" and "distance" in drift["features"]


def test_manifest_is_complete_and_checks_against_its_shards(day_run):
    from lakeprep_train.manifest import load_manifest, verify_shards

    path = day_run / "export_shards" / "flights" / f"dt={DAY}" / "manifest.json"
    raw = json.loads(path.read_text())
    assert raw["dataset"] == "flights" and raw["logical_date"] == DAY
    assert raw["run_id"].startswith("manual__")
    assert {f["role"] for f in raw["features"]} == {"numeric", "categorical", "text"}
    train = raw["splits"]["train"]
    assert (
        train["rows"]
        == report(day_run, "sample")["splits"]["train"]["0"]
        + report(day_run, "sample")["splits"]["train"]["1"]
    )
    assert train["plan"]["steps_per_rank"] >= 1
    assert verify_shards(load_manifest(str(path))) == []


def test_trainer_metrics_beat_nothing_silently(day_run):
    metrics = json.loads((day_run / "models" / "flights" / f"dt={DAY}" / "metrics.json").read_text())
    val = metrics["validation"]
    assert (
        val["rows"]
        == json.loads((day_run / "export_shards" / "flights" / f"dt={DAY}" / "manifest.json").read_text())[
            "splits"
        ]["validation"]["rows"]
    )
    assert 0 <= val["accuracy"] <= 1 and 0 <= val["auc"] <= 1
    assert 0.5 <= metrics["baseline"]["accuracy"] <= 1
    assert len(metrics["train_loss"]) == 3  # the spec's epochs
    telemetry = json.loads((day_run / "models" / "flights" / f"dt={DAY}" / "telemetry.json").read_text())
    assert telemetry["classification"] in {
        "input-bound",
        "compute-bound",
        "memory-bound",
        "communication-bound",
    }
    assert (day_run / "models" / "flights" / f"dt={DAY}" / "model.pt").stat().st_size > 0


def test_invalid_trigger_conf_is_refused(airflow_db, demo_lake):
    result = airflow(
        "dags", "test", "lakeprep_flights", DAY, "-c", '{"sample_fraction": 5}', lake=demo_lake, timeout=300
    )
    assert result.returncode != 0
    assert "sample_fraction" in result.stdout + result.stderr


def test_run_summary_shows_the_day(day_run):
    from lakeprep_airflow import summary

    day = summary.collect(f"file://{day_run}", "flights", DAY)
    validate = report(day_run, "validate")
    assert day["stages"]["validate"] == {k: validate[k] for k in ("rows_in", "rows_out", "rows_quarantined")}
    assert day["training"]["bottleneck"].endswith("-bound")
    text = summary.render(day)
    row = f"| validate | {validate['rows_in']} | {validate['rows_out']} | {validate['rows_quarantined']} |"
    assert row in text
    assert "vs majority-class baseline" in text and day["manifest"] in text
    assert day["transform"]["uri"] in text and "distance: psi" in text
    summary.write(f"file://{day_run}", day)
    assert (day_run / "reports" / "flights" / f"dt={DAY}" / "summary.md").read_text() == text
