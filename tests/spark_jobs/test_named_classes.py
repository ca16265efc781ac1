"""Named classes end to end: iris with the species by name, raw CSV to `predict`.

The stage chain the fused DAG runs (tests/integration/test_penguins.py runs it under
Airflow): the daily stages in one Spark session (`lakeprep_jobs.fused`), the window's
stages in the worker (`WindowStageOperator`'s `_run_stage`, over the worker's lake),
the reference trainer, then `predict` on a raw day. The spec is
tests/data/pipelines/iris.yaml: `label.classes: [setosa, versicolor, virginica]`.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lakeprep_airflow import spec as spec_mod
from lakeprep_jobs import fused

REPO = Path(__file__).resolve().parents[2]
IRIS = REPO / "tests" / "data" / "pipelines" / "iris.yaml"
CLASSES = ["setosa", "versicolor", "virginica"]
UNSEEN = "Setosa"  # not a class: names compare exactly
BAD_ROW = ["999", "5.0", "3.4", "1.5", "0.2", UNSEEN]


def _stage_argv(spec, stage: str, lake: str, day: str) -> list[str]:
    inputs, output = spec_mod.stage_io(spec, stage, lake_root=lake, ds=day)
    params = spec_mod.stage_params(spec, stage, lake_root=lake, ds=day, run_id="t")
    argv = [a for uri in inputs for a in ("--input", uri)]
    return [*argv, "--output", output, "--params", json.dumps(params)]


@pytest.fixture(scope="module")
def iris_lake(local_spark, tmp_path_factory) -> tuple[Path, dict]:
    """The lake after the three days' daily stages and the last day's window stages."""
    spark = local_spark.get()
    from lakeprep_airflow.operators.window_stage import _run_stage
    from lakeprep_airflow.worker_lake import WorkerLake
    from tests.data import iris

    root = tmp_path_factory.mktemp("iris-lake")
    lake = f"file://{root}"
    iris.land(lake, bad_rows={iris.DAYS[-1]: [BAD_ROW]})
    spec = spec_mod.load_spec(IRIS)
    reports: dict = {}
    for day in iris.DAYS:
        plan = [{"stage": s, "argv": _stage_argv(spec, s, lake, day)} for s in spec_mod.DAILY_STAGES]
        reports[day] = fused.run_plan(spark, fused.parse_plan(json.dumps(plan)))
    day = iris.DAYS[-1]
    window = {"days": list(iris.DAYS), "complete": list(iris.DAYS), "failed": [], "missing": []}
    window["before_start"] = []
    for stage in spec_mod.WINDOW_STAGES:
        inputs, output = spec_mod.stage_io(spec, stage, lake_root=lake, ds=day, window_days=iris.DAYS)
        params = spec_mod.stage_params(spec, stage, lake_root=lake, ds=day, run_id="t", window=window)
        reports[stage] = _run_stage(stage, WorkerLake(), inputs, output, params)
    return root, reports


def _raw_species(root: Path, day: str) -> list[str]:
    with (root / "raw" / "iris" / f"dt={day}" / "part-00000.csv").open(newline="") as f:
        return [row["Species"] for row in csv.DictReader(f)]


def test_a_species_outside_the_classes_is_quarantined_naming_the_column_and_value(iris_lake):
    from tests.data import iris

    root, reports = iris_lake
    report = reports[iris.DAYS[-1]]["validate"]
    assert (report["rows_in"], report["rows_quarantined"]) == (51, 1)
    assert report["quarantine_reasons"] == {f"label species not in {CLASSES}": 1}
    quarantine = pq.read_table(root / "validate" / "iris" / f"dt={iris.DAYS[-1]}" / "_quarantine")
    assert quarantine.column("_reason").to_pylist() == [f"label species not in {CLASSES}: {UNSEEN}"]
    assert all(reports[d]["validate"]["rows_quarantined"] == 0 for d in iris.DAYS[:-1])


def test_sampling_counts_each_named_class_by_its_id_exactly(iris_lake):
    from tests.data import iris

    root, reports = iris_lake
    for day in iris.DAYS:
        species = [s for s in _raw_species(root, day) if s in CLASSES]
        before = {str(i): species.count(name) for i, name in enumerate(CLASSES)}
        sample = reports[day]["sample"]
        assert sample["class_counts_before"] == before, day
        # class_counts: {setosa: 10} keeps exactly 10 setosa; the others whole.
        assert sample["class_counts_after"] == {"0": 10, "1": before["1"], "2": before["2"]}, day
        rows = pq.read_table(root / "sample" / "iris" / f"dt={day}").column("label").to_pylist()
        assert sorted(set(rows)) == [0, 1, 2] and rows.count(0) == 10, day


def test_the_transform_carries_the_id_to_class_map(iris_lake):
    from tests.data import iris

    root, reports = iris_lake
    day = iris.DAYS[-1]
    transform = json.loads((root / "fit_transform" / "iris" / f"dt={day}" / "transform.json").read_text())
    label = {"column": "species", "output": "label", "classes": [0, 1, 2], "names": CLASSES}
    assert transform["label"] == label
    manifest = json.loads((root / "export_shards" / "iris" / f"dt={day}" / "manifest.json").read_text())
    assert manifest["label"]["classes"] == [0, 1, 2]
    train = manifest["splits"]["train"]["class_counts"]
    assert sorted(train) == ["0", "1", "2"] and all(n > 0 for n in train.values())


def test_trained_model_predicts_species_names(iris_lake, tmp_path, capsys):
    from lakeprep_train import predict, train
    from tests.data import iris

    root, _ = iris_lake
    day = iris.DAYS[-1]
    manifest = root / "export_shards" / "iris" / f"dt={day}" / "manifest.json"
    model = tmp_path / "model"
    argv = ["--manifest", str(manifest), "--output", str(model), "--epochs", "3", "--device", "cpu"]
    assert train.main(argv) == 0
    raw = root / "raw" / "iris" / f"dt={day}" / "part-00000.csv"
    out = tmp_path / "predictions.jsonl"
    assert predict.main(["--model", str(model), "--input", str(raw), "--output", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    species = _raw_species(root, day)
    assert len(rows) == len(species) == 51
    assert all(r["prediction"] in CLASSES and sorted(r["probabilities"]) == CLASSES for r in rows)
    # A present class is the row's label, by name; the unseen one is scored without it.
    assert [r.get("label") for r in rows] == [s if s in CLASSES else None for s in species]
    assert [r.get("label_reason") for r in rows if "label_reason" in r] == [
        f"label species not in {CLASSES}: {UNSEEN}"
    ]
    parquet = tmp_path / "predictions.parquet"
    assert predict.main(["--model", str(model), "--input", str(raw), "--output", str(parquet)]) == 0
    table = pq.read_table(parquet)
    assert table.column("prediction").to_pylist() == [r["prediction"] for r in rows]
    assert {f"probability__{c}" for c in CLASSES} <= set(table.column_names)
