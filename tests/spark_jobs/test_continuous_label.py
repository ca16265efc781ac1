"""A continuous label end to end: diabetes progression, raw CSV to `predict`.

The stages the fused DAG runs a day (`lakeprep_jobs.fused`), in one Spark session, over
the three days of tests/data/pipelines/diabetes.yaml (`label: {column: progression,
type: continuous, bins: 4}`): validate quarantines a progression that is not a number,
preprocess writes the value as `target` and its quartile of the day as `label`, sample
keeps exactly half of each quartile. Then the window's stages in the worker
(`WindowStageOperator`'s `_run_stage`): fit_transform standardises the target on the
train split, export_shards names the days' files (the bins strata, the value the
trainer's label); the reference trainer regresses it and `predict` prints values.
tests/integration/test_diabetes.py runs it under Airflow.
"""

from __future__ import annotations

import csv
import json
import statistics
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from lakeprep_airflow import spec as spec_mod
from lakeprep_jobs import fused

REPO = Path(__file__).resolve().parents[2]
DIABETES = REPO / "tests" / "data" / "pipelines" / "diabetes.yaml"
NOT_A_NUMBER = "high"
BAD_ROW = ["999", "50", "1", "25.0", "90.0", "180", "100.0", "50.0", "4.0", "4.5", "90", NOT_A_NUMBER]


def _stage_argv(spec, stage: str, lake: str, day: str) -> list[str]:
    inputs, output = spec_mod.stage_io(spec, stage, lake_root=lake, ds=day)
    params = spec_mod.stage_params(spec, stage, lake_root=lake, ds=day, run_id="t")
    argv = [a for uri in inputs for a in ("--input", uri)]
    return [*argv, "--output", output, "--params", json.dumps(params)]


@pytest.fixture(scope="module")
def diabetes_lake(local_spark, tmp_path_factory) -> tuple[Path, dict]:
    """The lake after the three days' daily stages and the last day's window stages."""
    spark = local_spark.get()
    from lakeprep_airflow.operators.window_stage import _run_stage
    from lakeprep_airflow.worker_lake import WorkerLake
    from tests.data import diabetes

    root = tmp_path_factory.mktemp("diabetes-lake")
    lake = f"file://{root}"
    diabetes.land(lake, bad_rows={diabetes.DAYS[-1]: [BAD_ROW]})
    spec = spec_mod.load_spec(DIABETES)
    reports: dict = {}
    for day in diabetes.DAYS:
        plan = [{"stage": s, "argv": _stage_argv(spec, s, lake, day)} for s in spec_mod.DAILY_STAGES]
        reports[day] = fused.run_plan(spark, fused.parse_plan(json.dumps(plan)))
    day = diabetes.DAYS[-1]
    window = {"days": list(diabetes.DAYS), "complete": list(diabetes.DAYS), "failed": [], "missing": []}
    window["before_start"] = []
    for stage in spec_mod.WINDOW_STAGES:
        inputs, output = spec_mod.stage_io(spec, stage, lake_root=lake, ds=day, window_days=diabetes.DAYS)
        params = spec_mod.stage_params(spec, stage, lake_root=lake, ds=day, run_id="t", window=window)
        reports[stage] = _run_stage(stage, WorkerLake(), inputs, output, params)
    return root, reports


def _raw_targets(root: Path, day: str) -> dict[str, str]:
    with (root / "raw" / "diabetes" / f"dt={day}" / "part-00000.csv").open(newline="") as f:
        return {row["Patient"]: row["Y"] for row in csv.DictReader(f)}


def test_a_progression_that_is_not_a_number_is_quarantined_naming_the_column_and_value(diabetes_lake):
    from tests.data import diabetes

    root, reports = diabetes_lake
    report = reports[diabetes.DAYS[-1]]["validate"]
    assert (report["rows_in"], report["rows_quarantined"]) == (148, 1)
    assert report["quarantine_reasons"] == {"label progression is not a finite number": 1}
    quarantine = pq.read_table(root / "validate" / "diabetes" / f"dt={diabetes.DAYS[-1]}" / "_quarantine")
    assert quarantine.column("_reason").to_pylist() == [
        f"label progression is not a finite number: {NOT_A_NUMBER}"
    ]


def test_preprocess_writes_the_value_as_target_and_its_quartile_of_the_day_as_label(diabetes_lake):
    from tests.data import diabetes

    root, _ = diabetes_lake
    for day in diabetes.DAYS:
        raw = {k: float(v) for k, v in _raw_targets(root, day).items() if v != NOT_A_NUMBER}
        rows = pq.read_table(root / "preprocess" / "diabetes" / f"dt={day}").to_pylist()
        assert {r["id"]: r["target"] for r in rows} == raw, day
        # ntile: sizes differ by one at most, the larger bins first; bins ordered by value.
        n = len(rows)
        sizes = [sum(r["label"] == b for r in rows) for b in range(4)]
        assert sizes == [n // 4 + (b < n % 4) for b in range(4)], day
        by_bin = [sorted(r["target"] for r in rows if r["label"] == b) for b in range(4)]
        assert all(by_bin[b][-1] <= by_bin[b + 1][0] for b in range(3)), day


def test_sampling_keeps_exactly_half_of_each_quartile_and_each_split_share(diabetes_lake):
    from tests.data import diabetes

    root, reports = diabetes_lake
    for day in diabetes.DAYS:
        sample = reports[day]["sample"]
        before = sample["class_counts_before"]
        assert sorted(before) == ["0", "1", "2", "3"], day
        assert sample["class_counts_after"] == {b: (n + 1) // 2 for b, n in before.items()}, day
        table = pq.read_table(root / "sample" / "diabetes" / f"dt={day}")
        assert "target" in table.column_names
        kept = table.column("label").to_pylist()
        assert {str(b): kept.count(b) for b in range(4)} == sample["class_counts_after"], day
        # stratify_splits: each quartile's kept rows split 80/10/10 exactly (largest remainder).
        for b, n in sample["class_counts_after"].items():
            cells = [sample["splits"][s][b] for s in ("train", "validation", "test")]
            assert sum(cells) == n and abs(cells[0] - 0.8 * n) < 1, (day, b, cells)


def _partition(root: Path, stage: str, day: str) -> Path:
    return root / stage / "diabetes" / f"dt={day}"


def _sampled(root: Path) -> list[dict]:
    """Every sampled row of the window: id, split, label (its bin) and target."""
    from tests.data import diabetes

    return [
        row
        for day in diabetes.DAYS
        for row in pq.read_table(
            _partition(root, "sample", day), columns=["id", "split", "label", "target"]
        ).to_pylist()
    ]


def test_the_window_fit_standardises_the_target_by_the_train_rows_mean_and_std(diabetes_lake):
    from tests.data import diabetes

    root, reports = diabetes_lake
    day = diabetes.DAYS[-1]
    label = json.loads((_partition(root, "fit_transform", day) / "transform.json").read_text())["label"]
    train = [r["target"] for r in _sampled(root) if r["split"] == "train"]
    assert reports["fit_transform"]["fitted_on_rows"] == len(train)
    target = label.pop("target")
    assert label == {
        "column": "progression",
        "output": "label",
        "classes": [0, 1, 2, 3],
        "type": "continuous",
    }
    assert (target["column"], target["rows"]) == ("target", len(train))
    # The exact mean of the train rows' values (correctly rounded), their sample deviation.
    assert target["mean"] == float(sum(map(Fraction, train)) / len(train))
    assert target["std"] == pytest.approx(statistics.stdev(train), rel=1e-12)


def test_the_export_counts_bins_as_strata_and_the_loader_gives_each_rows_value(diabetes_lake):
    from lakeprep_train.dataset import RankBatches
    from lakeprep_train.manifest import load_manifest, with_transform_document
    from tests.data import diabetes

    root, _ = diabetes_lake
    export = _partition(root, "export_shards", diabetes.DAYS[-1])
    raw = json.loads((export / "manifest.json").read_text())
    sampled = _sampled(root)
    assert raw["label"]["classes"] == [0, 1, 2, 3]
    for split, planned in raw["splits"].items():
        rows = [r for r in sampled if r["split"] == split]
        # Every sampled row of the split, counted per bin (the spec balances nothing).
        assert planned["class_counts"] == {str(b): sum(r["label"] == b for r in rows) for b in range(4)}, (
            split
        )
    assert raw["class_weights"] == dict.fromkeys(["0", "1", "2", "3"], 1.0)
    manifest = with_transform_document(load_manifest(str(export / "manifest.json")))
    target = {r["id"]: r["target"] for r in sampled}
    for split in ("train", "validation", "test"):
        plan = manifest.split(split).plan
        for rank in range(plan.world_size):  # the spec's two ranks, each its planned rows
            batches = list(
                RankBatches(manifest, split, rank, world_size=plan.world_size, shuffle=False, with_ids=True)
            )
            assert all(b.label.dtype.is_floating_point for b in batches), split
            ids = np.concatenate([b.ids for b in batches])
            values = np.concatenate([b.label.numpy() for b in batches])
            assert len(ids) == plan.rows_per_rank, (split, rank)
            assert values.tolist() == [np.float32(target[i]) for i in ids], (split, rank)


def test_a_regression_trains_on_the_export_and_predict_prints_values_on_the_labels_scale(
    diabetes_lake, tmp_path
):
    import torch

    from lakeprep_train import predict, train
    from lakeprep_train.evaluate import evaluate_split
    from lakeprep_train.manifest import load_manifest, with_transform_document
    from tests.data import diabetes

    root, _ = diabetes_lake
    day = diabetes.DAYS[-1]
    manifest_path = _partition(root, "export_shards", day) / "manifest.json"
    model = tmp_path / "model"
    args = ["--manifest", str(manifest_path), "--output", str(model), "--epochs", "3", "--device", "cpu"]
    assert train.main([*args, "--seed", "3"]) == 0
    metrics = json.loads((model / "metrics.json").read_text())
    for split in ("validation", "test"):
        scores = metrics[split]
        assert "accuracy" not in scores and {"mae", "rmse", "r2"} <= set(scores), split
        assert scores["baseline"]["predict"] == "train mean", split

    raw = _partition(root, "raw", day) / "part-00000.csv"
    out = tmp_path / "predictions.jsonl"
    assert predict.main(["--model", str(model), "--input", str(raw), "--output", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    values = _raw_targets(root, day)
    assert len(rows) == len(values) == 148
    assert all(isinstance(r["prediction"], float) and "probabilities" not in r for r in rows)
    # The row's own value as its label, the one that is not a number scored without it.
    assert {r["id"]: r.get("label") for r in rows} == {
        k: None if v == NOT_A_NUMBER else float(v) for k, v in values.items()
    }
    assert [r["label_reason"] for r in rows if "label_reason" in r] == [
        f"label progression is not a finite number: {NOT_A_NUMBER}"
    ]
    # What the trainer's evaluation gives the test split's rows, predict gives them from raw.
    loaded = predict.load_model(str(model))
    manifest = with_transform_document(load_manifest(str(manifest_path)))
    evaluated = evaluate_split(loaded.model, manifest, "test", torch.device("cpu"), per_row=True)
    by_id = {r["id"]: r["prediction"] for r in rows}
    tested = [i for i in evaluated["outputs"] if i in by_id]
    assert tested and len(tested) == len(
        [r for r in _sampled(root) if r["split"] == "test" and r["id"] in by_id]
    )
    for i in tested:
        assert by_id[i] == pytest.approx(evaluated["outputs"][i], rel=1e-5, abs=1e-4), i


def test_check_drift_judges_the_days_label_values_against_the_windows_by_psi(diabetes_lake):
    from lakeprep_airflow.operators.drift import DriftCheckOperator
    from tests.data import diabetes

    root, reports = diabetes_lake
    for day in diabetes.DAYS:
        stats = json.loads((_partition(root, "validate", day) / "_stats.json").read_text())
        label = stats["columns"]["progression"]
        values = [float(v) for v in _raw_targets(root, day).values() if v != NOT_A_NUMBER]
        assert (label["kind"], label["count"], label["nulls"]) == ("numeric", len(values), 0), day
        assert label["mean"] == pytest.approx(statistics.fmean(values), rel=1e-12), day
        assert (label["min"], label["max"]) == (min(values), max(values)), day
    op = DriftCheckOperator(
        task_id="check_drift", spec_path=str(DIABETES), lake_root=f"file://{root}", run_ds="{{ ds }}"
    )
    context = {"ds": diabetes.DAYS[-1], "run_id": "t"}
    op.render_template_fields(context)
    report = op.execute(context)
    feature = report["features"]["progression"]  # the label, judged last
    assert list(report["features"])[-1] == "progression"
    assert (feature["kind"], feature["metric"], feature["reference_days"]) == ("numeric", "psi", 2)
    # Patients dealt to days in turn: the third day's progression is distributed as the first two's.
    assert feature["status"] == "ok" and feature["value"] < feature["threshold"]
    assert feature["rows"] == reports[diabetes.DAYS[-1]]["validate"]["rows_out"]
