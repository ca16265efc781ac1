"""Part `small` (e): a small day's stages run as the DAG the spec builds runs them.

The daily stages are spark-submits; the window's run in the Airflow worker without Spark
(`WindowStageOperator`), so the part measures them as part `window` measures a Python
task. Here the submissions and the worker tasks are recorded instead of run (the real
ones run in tests/benchmarks/test_day_profile.py and the full benchmark), and the
figures and the page are computed from known measurements.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import report, run, spark_prep, window

STAGES = list(spark_prep.STAGES)


@pytest.fixture
def recorded(monkeypatch, tmp_path):
    """Submissions and worker tasks recorded, not run; every stage's report says 10 rows."""
    monkeypatch.setenv("LAKEPREP_BENCH_DIR", str(tmp_path / "work"))
    monkeypatch.setattr(spark_prep, "WORK", tmp_path / "work")
    seen: dict[str, list] = {"spark": [], "python": []}

    def submit(cmd, log, executors):
        seen["spark"].append(cmd)
        return {"wall_s": 1.0, "cpu_s": 1.0, "peak_rss_mb": 1.0}

    def run_task(task, lake, ds, days, log):
        seen["python"].append((task.task_id, task.spec_path, days))
        return {"kind": "python", "wall_s": 0.1, "cpu_s": 0.1, "peak_rss_mb": 1.0}

    monkeypatch.setattr(spark_prep, "_submit", submit)
    monkeypatch.setattr(window, "run_task", run_task)
    monkeypatch.setattr(spark_prep, "_report", lambda uri: {"rows_in": 10, "rows_out": 10, "stage_uri": uri})
    return seen


def _plan(cmd: list[str]) -> list[str]:
    return [p["stage"] for p in json.loads(cmd[cmd.index("--plan") + 1])]


def test_fused_the_day_is_one_submission_and_the_window_one_task_in_the_worker(recorded, tmp_path):
    out = spark_prep.run_dag(tmp_path / "lake", "2013-01-01", tmp_path / "logs", fused=True)
    assert list(out["submissions"]) == ["validate+preprocess+sample"]
    assert list(out["tasks"]) == ["fit_transform+export_shards"]
    assert list(out["stages"]) == STAGES
    (cmd,) = recorded["spark"]
    assert _plan(cmd) == ["validate", "preprocess", "sample"]
    # The worker task is the fused DAG's, from the spec with spark.fuse_stages on.
    ((task_id, spec_path, days),) = recorded["python"]
    assert task_id == "fit_and_export" and days == 1
    assert Path(spec_path) == spark_prep.fused_spec() != spark_prep.FLIGHTS_SPEC


def test_separate_the_daily_stages_are_submitted_and_the_window_stages_run_in_the_worker(recorded, tmp_path):
    out = spark_prep.run_dag(tmp_path / "lake", "2013-01-01", tmp_path / "logs", fused=False)
    assert list(out["submissions"]) == ["validate", "preprocess", "sample"]
    assert list(out["tasks"]) == ["fit_transform", "export_shards"]  # check_drift runs no stage
    assert [task for task, _, _ in recorded["python"]] == ["fit_transform", "export_shards"]
    assert out["stages"]["export_shards"]["rows_out"] == 10


def test_twice_repeats_the_submissions_plan_and_leaves_the_worker_task_out(recorded, tmp_path):
    out = spark_prep.run_dag(tmp_path / "lake", "2013-01-01", tmp_path / "logs", fused=True, repeat=2)
    assert list(out["submissions"]) == ["validate+preprocess+sample"] and out["tasks"] == {}
    (cmd,) = recorded["spark"]
    assert _plan(cmd) == ["validate", "preprocess", "sample"] * 2
    assert recorded["python"] == []


def _way(spark: list[float], worker: list[float]) -> dict:
    def m(s: float) -> dict:
        return {"wall_s": s, "cpu_s": s * 1.5, "peak_rss_mb": 500.0}

    rows = {st: {"rows_in": 900, "rows_out": 900, "rows_quarantined": 0} for st in STAGES}
    return {
        "submissions": {f"s{i}": m(s) for i, s in enumerate(spark)},
        "tasks": {f"t{i}": m(s) for i, s in enumerate(worker)},
        "stages": rows,
    }


def test_the_small_day_judges_the_fused_spark_time_against_one_empty_submission(monkeypatch, tmp_path):
    ways = {
        (False, 1): _way([4.0, 5.0, 3.0], [0.5, 1.5]),  # staged: three submissions, two worker tasks
        (True, 1): _way([6.0], [1.0]),  # fused: one submission, one worker task
        (True, 2): _way([8.5], []),  # the plan twice in one session
    }
    monkeypatch.setattr(spark_prep, "run_dag", lambda lake, ds, logs, *, fused, repeat=1: ways[fused, repeat])
    monkeypatch.setattr(spark_prep, "run_empty", lambda lake, ds, logs: {"wall_s": 2.0, "cpu_s": 2.0})
    small = run._small_day(tmp_path, tmp_path / "logs", 0, 1)
    med = {k: v["median"] for k, v in small.items() if isinstance(v, dict) and "median" in v}
    assert med["fused_spark_s"] == 6.0 and med["fused_s"] == 7.0
    assert med["fused_spark_vs_empty"] == 3.0 and med["fused_vs_empty"] == 3.5
    assert med["fused_spark_cpu_vs_empty"] == 4.5  # 9 CPU-s against 2
    assert (
        med["separate_spark_s"] == 12.0
        and med["separate_s"] == 14.0
        and med["separate_spark_vs_empty"] == 6.0
    )
    assert med["warm_s"] == 2.5 and med["warm_vs_empty"] == 1.25  # twice 8.5 - once 6.0
    assert med["fused_vs_separate"] == 0.5
    assert small["rows"] == 900 and small["same_row_counts"] is True
    assert small["tasks"]["fused"] == {"spark": ["s0"], "worker": ["t0"]}

    text = "\n".join(report._targets({"scales": {}, "small_day": small}))
    assert (
        "fused: its Spark time (one submission) within 2x of one empty submission | 3.0x | **missed** |"
        in text
    )
    assert "with its task in the worker (`fit_and_export`'s execute), x one empty submission | 3.5x |" in text
    section = "\n".join(report._small_day_section({"small_day": small}))
    assert (
        "| fused tasks (s0 submitted; t0 in the worker) | 6.00 s | 3.00x | 9.00 s | 4.50x | 7.00 s | 3.50x |"
        in section
    )


def test_the_profile_times_a_worker_task_beside_the_profiled_submission():
    task = {"kind": "python", "wall_s": 0.4, "cpu_s": 0.3, "process_wall_s": 3.2, "peak_rss_mb": 300.0}
    lines = report._profile_table("The small day:", {"fit_transform+export_shards": task})
    (row,) = [line for line in lines if line.startswith("| fit_transform+export_shards")]
    assert "in the Airflow worker, no Spark" in row and "| 0.4 s | 0 |" in row and "3.2 s" in row
