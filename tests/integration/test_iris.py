"""Named classes through a real Airflow run: iris with the species by name.

One `airflow dags test lakeprep_iris` of the day that holds a flower of a species the
spec does not list (`Setosa`), then `predict` from the model folder alone. The stage
chain without Airflow, over all three days: tests/spark_jobs/test_named_classes.py.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import AIRFLOW_ENV, REPO, VENV_BIN, describe_command, run_command
from tests.data import iris

pytestmark = pytest.mark.integration
DAY = iris.DAYS[-1]
CLASSES = ["setosa", "versicolor", "virginica"]
UNSEEN = "Setosa"


@pytest.fixture(scope="module")
def iris_run(airflow_db, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("iris-lake")
    iris.land(f"file://{root}", [DAY], bad_rows={DAY: [["999", "5.0", "3.4", "1.5", "0.2", UNSEEN]]})
    env = {
        **os.environ,
        **AIRFLOW_ENV,
        "AIRFLOW_VAR_LAKEPREP_LAKE_ROOT": f"file://{root}",
        "LAKEPREP_PIPELINES_DIR": str(REPO / "tests" / "data" / "pipelines"),
    }
    result = run_command(
        [str(VENV_BIN / "airflow"), "dags", "test", "lakeprep_iris", DAY], env=env, timeout=900
    )
    out = result.stdout + result.stderr
    assert "state=success" in out, describe_command(result.args, "exit code 0", result.stdout, result.stderr)
    return root


def read(root: Path, stage: str, name: str) -> dict:
    return json.loads((root / stage / "iris" / f"dt={DAY}" / name).read_text())


def test_the_unseen_species_is_quarantined_and_each_species_sampled_exactly(iris_run):
    with (iris_run / "raw" / "iris" / f"dt={DAY}" / "part-00000.csv").open(newline="") as f:
        species = [r["Species"] for r in csv.DictReader(f)]
    report = read(iris_run, "validate", "_lakeprep_report.json")
    assert (report["rows_in"], report["rows_quarantined"]) == (51, 1)
    assert report["quarantine_reasons"] == {f"label species not in {CLASSES}": 1}
    sample = read(iris_run, "sample", "_lakeprep_report.json")
    before = {str(i): species.count(name) for i, name in enumerate(CLASSES)}
    assert sample["class_counts_after"] == {"0": 10, "1": before["1"], "2": before["2"]}
    assert read(iris_run, "fit_transform", "transform.json")["label"]["names"] == CLASSES


def test_the_model_folder_predicts_species_by_name(iris_run, tmp_path):
    model = iris_run / "models" / "iris" / f"dt={DAY}"
    raw = iris_run / "raw" / "iris" / f"dt={DAY}" / "part-00000.csv"
    out = tmp_path / "predictions.jsonl"
    argv = [sys.executable, "-m", "lakeprep_train.predict", "--model", str(model), "--input", str(raw)]
    result = run_command(
        [*argv, "--output", str(out)], timeout=300, env={**os.environ, **AIRFLOW_ENV}, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 51 and all(r["prediction"] in CLASSES for r in rows)
    assert [r["label_reason"] for r in rows if "label_reason" in r] == [
        f"label species not in {CLASSES}: {UNSEEN}"
    ]
