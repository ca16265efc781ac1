"""A continuous label through a real Airflow run: diabetes progression, regressed.

One `airflow dags test lakeprep_diabetes` of the dataset's first day, landed with a patient
whose progression is not a number (the window's two earlier days are before the spec's
`start_date`, so the window is that day), then `predict` from a copy of the model folder
alone. Every expected value is computed here from the landed CSV, not read from the
stage that wrote it. The stage chain without Airflow, over all three days:
tests/spark_jobs/test_continuous_label.py.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import statistics
import sys
from fractions import Fraction
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import AIRFLOW_ENV, REPO, VENV_BIN, describe_command, run_command
from tests.data import diabetes

pytestmark = pytest.mark.integration
DAY = diabetes.DAYS[0]
NOT_A_NUMBER = "high"
BAD_ROW = ["999", "50", "1", "25.0", "90.0", "180", "100.0", "50.0", "4.0", "4.5", "90", NOT_A_NUMBER]
BINS = 4  # tests/data/pipelines/diabetes.yaml: label.bins
WORLD_SIZE = 2  # training.world_size


@pytest.fixture(scope="module")
def diabetes_run(airflow_db, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("diabetes-lake")
    diabetes.land(f"file://{root}", [DAY], bad_rows={DAY: [BAD_ROW]})
    env = {
        **os.environ,
        **AIRFLOW_ENV,
        "AIRFLOW_VAR_LAKEPREP_LAKE_ROOT": f"file://{root}",
        "LAKEPREP_PIPELINES_DIR": str(REPO / "tests" / "data" / "pipelines"),
    }
    result = run_command(
        [str(VENV_BIN / "airflow"), "dags", "test", "lakeprep_diabetes", DAY], env=env, timeout=900
    )
    out = result.stdout + result.stderr
    assert "state=success" in out, describe_command(result.args, "exit code 0", result.stdout, result.stderr)
    return root


def partition(root: Path, stage: str) -> Path:
    return root / stage / "diabetes" / f"dt={DAY}"


def read(root: Path, stage: str, name: str) -> dict:
    return json.loads((partition(root, stage) / name).read_text())


def landed(root: Path) -> dict[str, str]:
    """Patient -> progression, as the landed CSV has it."""
    with (partition(root, "raw") / "part-00000.csv").open(newline="") as f:
        return {row["Patient"]: row["Y"] for row in csv.DictReader(f)}


def quartiles(values: dict[str, float]) -> dict[str, int]:
    """Each patient's quantile bin of the day: ranked by value, then id; the first n mod 4
    bins one patient larger (Spark's ntile, which preprocess uses)."""
    order = sorted(values, key=lambda patient: (values[patient], patient))
    n = len(order)
    sizes = [n // BINS + (b < n % BINS) for b in range(BINS)]
    bins = [b for b, size in enumerate(sizes) for _ in range(size)]
    return dict(zip(order, bins, strict=True))


def sampled(root: Path) -> list[dict]:
    return pq.read_table(partition(root, "sample"), columns=["id", "split", "label", "target"]).to_pylist()


def test_the_progression_that_is_not_a_number_is_quarantined_and_each_quartile_sampled_exactly(diabetes_run):
    raw = landed(diabetes_run)
    report = read(diabetes_run, "validate", "_lakeprep_report.json")
    assert (report["rows_in"], report["rows_quarantined"]) == (len(raw), 1)
    assert report["quarantine_reasons"] == {"label progression is not a finite number": 1}
    values = {k: float(v) for k, v in raw.items() if v != NOT_A_NUMBER}
    bins = quartiles(values)
    before = {str(b): list(bins.values()).count(b) for b in range(BINS)}
    sample = read(diabetes_run, "sample", "_lakeprep_report.json")
    assert sample["class_counts_before"] == before
    # fraction 0.5 of each quartile, exactly (half, rounded up).
    assert sample["class_counts_after"] == {b: (n + 1) // 2 for b, n in before.items()}
    rows = sampled(diabetes_run)
    assert {str(b): sum(r["label"] == b for r in rows) for b in range(BINS)} == sample["class_counts_after"]
    assert all(r["label"] == bins[r["id"]] and r["target"] == values[r["id"]] for r in rows)


def test_the_transform_standardises_the_target_by_the_train_rows_landed_values(diabetes_run):
    raw = landed(diabetes_run)
    train = [float(raw[r["id"]]) for r in sampled(diabetes_run) if r["split"] == "train"]
    transform = read(diabetes_run, "fit_transform", "transform.json")
    assert transform["fitted_on"]["rows"] == len(train)
    target = transform["label"]["target"]
    assert transform["label"]["type"] == "continuous" and transform["label"]["classes"] == [0, 1, 2, 3]
    assert (target["column"], target["rows"]) == ("target", len(train))
    assert target["mean"] == float(sum(map(Fraction, train)) / len(train))
    assert target["std"] == pytest.approx(statistics.stdev(train), rel=1e-12)


def test_each_rank_gets_equal_rows_and_steps_and_the_trainer_scores_a_regression(diabetes_run):
    manifest = read(diabetes_run, "export_shards", "manifest.json")
    assert manifest["window"]["complete"] == [DAY] and len(manifest["window"]["before_start"]) == 2
    rows = sampled(diabetes_run)
    for split, planned in manifest["splits"].items():
        plan = planned["plan"]
        assert plan["world_size"] == WORLD_SIZE, split
        per_rank = [sum(e["rows"] for e in planned["shards"] if e["rank"] == r) for r in range(WORLD_SIZE)]
        assert per_rank == [plan["rows_per_rank"]] * WORLD_SIZE, split
        assert plan["steps_per_rank"] == math.ceil(plan["rows_per_rank"] / plan["batch_size"]), split
        # Every sampled row of the split counted by its bin (the bins are never balanced).
        kept = [r for r in rows if r["split"] == split]
        assert planned["class_counts"] == {str(b): sum(r["label"] == b for r in kept) for b in range(BINS)}
    # The trainer's two ranks took the same steps: the plan's per epoch.
    metrics = read(diabetes_run, "models", "metrics.json")
    steps = len(metrics["history"]) * manifest["splits"]["train"]["plan"]["steps_per_rank"]
    assert read(diabetes_run, "models", "telemetry.json")["steps_per_rank"] == [steps] * WORLD_SIZE
    mean = read(diabetes_run, "fit_transform", "transform.json")["label"]["target"]["mean"]
    for split in ("validation", "test"):
        scores = metrics[split]
        assert "accuracy" not in scores and scores["rows"] == manifest["splits"][split]["rows"], split
        assert all(isinstance(scores[k], float) for k in ("mae", "rmse")), split
        assert scores["baseline"]["predict"] == "train mean" and scores["baseline"]["mean"] == mean, split
        assert {"mae", "rmse", "r2"} <= set(scores["baseline"]), split
    summary = (diabetes_run / "reports" / "diabetes" / f"dt={DAY}" / "summary.md").read_text()
    assert f"trainer: validation MAE {metrics['validation']['mae']:.3f}" in summary
    assert "label bins (4 quantiles of progression: strata, not classes)" in summary


def test_a_copy_of_the_model_folder_alone_prints_values_for_raw_rows(diabetes_run, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(partition(diabetes_run, "models"), model)
    raw = partition(diabetes_run, "raw") / "part-00000.csv"
    lines = raw.read_text().splitlines()
    few = tmp_path / "few.csv"
    few.write_text("\n".join([lines[0], *lines[1:4], lines[-1]]) + "\n")  # three patients, the bad row
    argv = [sys.executable, "-m", "lakeprep_train.predict", "--model", str(model), "--input", str(few)]
    result = run_command(argv, timeout=300, env={**os.environ, **AIRFLOW_ENV}, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 4 and all(isinstance(r["prediction"], float) for r in rows)
    assert all(math.isfinite(r["prediction"]) and "probabilities" not in r for r in rows)
    values = landed(diabetes_run)
    assert [r.get("label") for r in rows[:3]] == [float(values[r["id"]]) for r in rows[:3]]
    assert rows[3]["id"] == BAD_ROW[0] and "label" not in rows[3]
    assert rows[3]["label_reason"] == f"label progression is not a finite number: {NOT_A_NUMBER}"
