"""The second real dataset end to end: Palmer penguins, nothing shared with flights.

Messy headers (`Culmen Length (mm)`), `NA` nulls, three classes and a free-text column,
through two real Airflow runs (the second's window reads the first's day), then served
from the model folder alone with `predict`, whose rejections must be validate's. The spec
fuses its stages (`spark.fuse_stages`): each run is one spark-submit, `prepare_day`, and one
task in the worker without Spark, `fit_and_export`, so this is also the fused mode's
end-to-end test.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from lakeprep_airflow.dag_factory import pipeline_tasks
from tests.conftest import AIRFLOW_ENV, REPO, VENV_BIN, describe_command, run_command
from tests.data import penguins

pytestmark = pytest.mark.integration
DAYS = ("2007-11-16", "2007-11-27")  # 16 and 18 penguins
# The run's tasks are the fused DAG's (tests/dags/test_dag_integrity.py pins that list).
FUSED_TASKS = set(pipeline_tasks(fused=True))


@pytest.fixture(scope="module")
def penguin_runs(airflow_db, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The lake after both runs, and each run's `airflow dags test` output."""
    root = tmp_path_factory.mktemp("penguin-lake")
    penguins.land(f"file://{root}", DAYS)
    outputs = {day: run_day(root, day) for day in DAYS}
    return root, outputs


def run_day(root: Path, day: str) -> str:
    """`airflow dags test lakeprep_penguins <day>` on the lake at `root`; its output."""
    env = {
        **os.environ,
        **AIRFLOW_ENV,
        "AIRFLOW_VAR_LAKEPREP_LAKE_ROOT": f"file://{root}",
        "LAKEPREP_PIPELINES_DIR": str(REPO / "tests" / "data" / "pipelines"),
    }
    result = run_command(
        [str(VENV_BIN / "airflow"), "dags", "test", "lakeprep_penguins", day],
        env=env,
        timeout=900,
    )
    out = result.stdout + result.stderr
    assert "state=success" in out, describe_command(result.args, "exit code 0", result.stdout, result.stderr)
    return out


@pytest.fixture(scope="module")
def penguin_lake(penguin_runs) -> Path:
    return penguin_runs[0]


def read(root: Path, stage: str, day: str, name: str) -> dict:
    return json.loads((root / stage / "penguins" / f"dt={day}" / name).read_text())


def test_each_run_is_two_spark_submissions_of_the_fused_stages(penguin_runs):
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(TaskInstance.run_id, TaskInstance.task_id, TaskInstance.state)
            .filter(TaskInstance.dag_id == "lakeprep_penguins")
            .all()
        )
    by_run: dict[str, dict[str, str]] = {}
    for run_id, task_id, state in rows:
        by_run.setdefault(run_id, {})[task_id] = state
    assert len(by_run) == len(DAYS)
    for tasks in by_run.values():
        assert set(tasks) == FUSED_TASKS and set(tasks.values()) == {"success"}
    for day, out in penguin_runs[1].items():
        # The provider logs each spark-submit command once: fused.py for the daily stages;
        # the window's run in the worker (a prepared export needs no Spark).
        commands = [line for line in out.splitlines() if "Spark-Submit cmd:" in line]
        assert len(commands) == 1, (day, commands)
        assert "lakeprep_jobs/fused.py --plan" in commands[0] and "sample" in commands[0], day
        assert "fit_transform" not in commands[0] and "export_shards" not in commands[0], day
        assert "stage preprocess: rows in" in out and "stage export_shards: rows in" in out, day


def test_messy_headers_and_na_tokens_validate(penguin_lake):
    report = read(penguin_lake, "validate", DAYS[1], "_lakeprep_report.json")
    assert report["rows_in"] == 18
    assert report["rows_in"] == report["rows_out"] + report["rows_quarantined"]
    stats = read(penguin_lake, "validate", DAYS[1], "_stats.json")
    # "Culmen Length (mm)" arrived as culmen_length_mm, typed; "NA" counted as null.
    assert stats["columns"]["culmen_length_mm"]["kind"] == "numeric"
    assert 30 < stats["columns"]["culmen_length_mm"]["mean"] < 60
    # 16 of the day's 18 field notes are "NA" or blank: null, not the string "NA".
    assert (stats["columns"]["comments"]["count"], stats["columns"]["comments"]["nulls"]) == (2, 16)


def test_the_window_reads_both_days_and_fits_one_transform(penguin_lake):
    manifest = read(penguin_lake, "export_shards", DAYS[1], "manifest.json")
    assert manifest["window"]["complete"] == list(DAYS)
    assert manifest["label"]["classes"] == [0, 1, 2]
    transform = read(penguin_lake, "fit_transform", DAYS[1], "transform.json")
    assert transform["fitted_on"]["partitions"] == [
        f"file://{penguin_lake}/sample/penguins/dt={d}" for d in DAYS
    ]
    assert {e["name"] for e in transform["numeric"]} >= {"culmen_length_mm", "body_mass_g"}
    assert {e["name"] for e in transform["categorical"]} == {"island", "clutch_completion", "sex"}
    assert [e["name"] for e in transform["text"]] == ["comments"]
    drift = read(penguin_lake, "check_drift", DAYS[1], "drift.json")
    assert drift["reference_partitions"] == [f"file://{penguin_lake}/validate/penguins/dt={DAYS[0]}"]
    assert drift["features"]["culmen_length_mm"]["metric"] == "psi"


def test_the_model_folder_serves_raw_records_with_validates_reasons(penguin_lake, tmp_path):
    model = penguin_lake / "models" / "penguins" / f"dt={DAYS[1]}"
    assert (model / "transform.json").exists() and (model / "model.pt").exists()
    raw = penguin_lake / "raw" / "penguins" / f"dt={DAYS[1]}" / "part-00000.csv"
    out = tmp_path / "predictions.jsonl"
    result = run_command(
        [
            sys.executable,
            "-m",
            "lakeprep_train.predict",
            "--model",
            str(model),
            "--input",
            str(raw),
            "--output",
            str(out),
        ],
        timeout=300,
        env={**os.environ, **AIRFLOW_ENV},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 18
    validate = read(penguin_lake, "validate", DAYS[1], "_lakeprep_report.json")
    rejected = [r for r in rows if r.get("reason")]
    assert len(rejected) == validate["rows_quarantined"]
    reasons = {}
    for r in rejected:
        kind = r["reason"].split(":", 1)[0]
        reasons[kind] = reasons.get(kind, 0) + 1
    assert reasons == validate["quarantine_reasons"]
    accepted = [r for r in rows if not r.get("reason")]
    assert accepted and all(r["prediction"] in (0, 1, 2) for r in accepted)


def _export(root: Path, day: str) -> tuple[dict, dict[str, str]]:
    """The day's manifest, and the sha256 of every file it names as stored."""
    from tests.export_files import named_files

    folder = root / "export_shards" / "penguins" / f"dt={day}"
    manifest = json.loads((folder / "manifest.json").read_text())
    return manifest, named_files(folder, manifest)


def _apart_from_the_run(manifest: dict) -> dict:
    """What must not change between runs of one day (docs/MANIFEST.md: the run id and the
    sha256 of transform.json, which records it, differ by design)."""
    return {**manifest, "run_id": None, "transform": {**manifest["transform"], "sha256": None}}


def test_the_same_day_run_again_gives_the_same_export(penguin_lake):
    """Idempotence: another run of the second day rewrites the same manifest and shards, no row twice."""
    import pyarrow.parquet as pq

    from lakeprep_contracts import layout

    day = DAYS[1]
    first, first_files = _export(penguin_lake, day)
    run_day(penguin_lake, day)
    again, files = _export(penguin_lake, day)
    assert files == first_files and len(files) >= 3
    assert _apart_from_the_run(again) == _apart_from_the_run(first)
    folder = penguin_lake / "export_shards" / "penguins" / f"dt={day}"
    ids = [
        i
        for split in first["splits"].values()
        for s in split["shards"]
        for i in pq.read_table(folder / s["path"]).slice(s.get("offset", 0), s["rows"])[layout.ID].to_pylist()
    ]
    listed = sum(s["rows"] for split in first["splits"].values() for s in split["shards"])
    assert len(ids) == listed and len(set(ids)) == len(ids), "a row appears twice"
