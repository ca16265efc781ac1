"""A continuous label through the daily stages: diabetes progression, raw CSV to the day's shards.

The stages the fused DAG runs a day (`lakeprep_jobs.fused`), in one Spark session, over
the three days of tests/data/pipelines/diabetes.yaml (`label: {column: progression,
type: continuous, bins: 4}`): validate quarantines a progression that is not a number,
preprocess writes the value as `target` and its quartile of the day as `label`, sample
keeps exactly half of each quartile.
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
    """The lake after the three days' daily stages."""
    spark = local_spark.get()
    from tests.data import diabetes

    root = tmp_path_factory.mktemp("diabetes-lake")
    lake = f"file://{root}"
    diabetes.land(lake, bad_rows={diabetes.DAYS[-1]: [BAD_ROW]})
    spec = spec_mod.load_spec(DIABETES)
    reports: dict = {}
    for day in diabetes.DAYS:
        plan = [{"stage": s, "argv": _stage_argv(spec, s, lake, day)} for s in spec_mod.DAILY_STAGES]
        reports[day] = fused.run_plan(spark, fused.parse_plan(json.dumps(plan)))
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
