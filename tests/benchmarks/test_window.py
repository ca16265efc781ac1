"""Part `window` (benchmarks/window.py): the run's tasks from the DAG, its days, its figures.

The Spark submissions themselves run in the full benchmark; here the commands are compared
as lists, the days are landed small, and a Python task (`check_drift`) runs as the child
the part measures, on a lake of synthetic statistics (tests/plugins/test_drift_operator.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from benchmarks import environment, report, window
from tests.plugins.test_drift_operator import SPEC, land_day

FLIGHTS_SPEC = environment.FLIGHTS_SPEC
ID_KEY = ["year", "month", "day", "carrier", "flight", "origin", "sched_dep_time"]


def _inputs(cmd: list[str]) -> list[str]:
    return [cmd[i + 1] for i, part in enumerate(cmd) if part == "--input"]


def _child(task: str, days: int, spec: Path = FLIGHTS_SPEC) -> list[str]:
    """The argv after the interpreter of the child that runs a Python task's `execute`."""
    return [
        *("-m", "benchmarks.window", "--spec", str(spec), "--task", task),
        *("--lake-root", "file:///lake", "--ds", "2013-01-04", "--days", str(days)),
    ]


def test_the_run_tasks_are_the_dags_and_each_window_task_reads_the_window_it_is_given():
    daily, tasks = window.run_tasks(FLIGHTS_SPEC)
    assert [t.task_id for t in daily] == ["validate", "preprocess", "sample"]
    assert [t.task_id for t in tasks] == ["check_drift", "fit_transform", "export_shards"]
    lake = "file:///lake"
    kind, cmd = window.task_command(daily[0], lake_root=lake, run_ds="2013-01-02", days=1)
    assert kind == "spark" and Path(cmd[0]).name == "spark-submit"
    assert cmd[cmd.index("--name") + 1] == "lakeprep-validate-bench"
    assert _inputs(cmd) == [f"{lake}/raw/flights/dt=2013-01-02"]
    # The window's tasks run Python in the worker (check_drift; fit_transform and the
    # prepared export, WindowStageOperator): the child that calls their execute.
    for task in tasks:
        kind, cmd = window.task_command(task, lake_root=lake, run_ds="2013-01-04", days=3)
        assert kind == "python" and cmd[1:] == _child(task.task_id, 3), task.task_id
    # What wait_for_window decides for the child: every day of the window complete.
    assert window.window_decision("2013-01-04", 3)["complete"] == ["2013-01-02", "2013-01-03", "2013-01-04"]


def test_fused_stages_are_measured_as_the_fused_tasks(tmp_path):
    spec = tmp_path / "flights.yaml"
    text = FLIGHTS_SPEC.read_text()
    spec.write_text(text.replace("spark:\n  conf:", "spark:\n  fuse_stages: true\n  conf:", 1))
    daily, tasks = window.run_tasks(spec)
    assert [t.task_id for t in daily] == ["prepare_day"]
    assert [t.task_id for t in tasks] == ["check_drift", "fit_and_export"]
    kind, cmd = window.task_command(daily[0], lake_root="file:///lake", run_ds="2013-01-03", days=2)
    plan = json.loads(cmd[cmd.index("--plan") + 1])
    assert kind == "spark" and [p["stage"] for p in plan] == ["validate", "preprocess", "sample"]
    kind, cmd = window.task_command(tasks[1], lake_root="file:///lake", run_ds="2013-01-04", days=2)
    assert kind == "python" and cmd[1:] == _child("fit_and_export", 2, spec)


def _ids(lake: Path, day: str) -> set[tuple]:
    parts = sorted((lake / "raw" / "flights" / f"dt={day}").glob("part-*.csv"))
    table = pa.concat_tables([pacsv.read_csv(p) for p in parts]).select(ID_KEY)
    return set(zip(*(table.column(c).to_pylist() for c in ID_KEY), strict=True))


def test_each_day_has_its_own_rows_the_same_whatever_the_longest_window_and_is_landed_once(tmp_path):
    days = window.days_of(3)
    assert days == ["2013-01-01", "2013-01-02", "2013-01-03"]
    landed = window.land_days(tmp_path / "a", 400, 5, days)
    ids = [_ids(tmp_path / "a", d) for d in days]
    assert [len(i) for i in ids] == [400, 400, 400]
    assert not (ids[0] & ids[1] or ids[1] & ids[2] or ids[0] & ids[2])  # no id read once for two days
    shorter = window.land_days(tmp_path / "b", 400, 5, days[:2])
    assert shorter == {d: landed[d] for d in days[:2]}  # day i does not depend on the longest window
    part = tmp_path / "a" / "raw" / "flights" / "dt=2013-01-02" / "part-00000.csv"
    before = part.stat().st_mtime_ns
    assert window.land_days(tmp_path / "a", 400, 5, days) == landed
    assert part.stat().st_mtime_ns == before  # reused, not written again
    assert window.land_days(tmp_path / "a", 300, 5, days[1:2])["2013-01-02"]["rows"] == 300


def test_a_python_task_runs_its_execute_in_the_measured_child_at_the_window_given(tmp_path):
    spec = tmp_path / "pipelines" / "toy.yaml"
    spec.parent.mkdir()
    spec.write_text(SPEC.replace("ACTION", "warn"))
    lake = tmp_path / "lake"
    for ds in ("2013-01-02", "2013-01-03", "2013-01-04"):
        land_day(lake, ds)
    _, tasks = window.run_tasks(spec)
    [drift] = [t for t in tasks if t.task_id == "check_drift"]
    written = lake / "check_drift" / "toy" / "dt=2013-01-04" / "drift.json"
    seen = {}
    for days in (1, 3):
        measured = window.run_task(drift, lake, "2013-01-04", days, tmp_path / f"drift-{days}.log")
        assert measured["kind"] == "python"
        # The execute alone, inside the whole child's time.
        assert 0 < measured["wall_s"] < measured["process_wall_s"]
        assert 0 <= measured["cpu_s"] <= measured["process_cpu_s"]
        seen[days] = json.loads(written.read_text())["stats_files"]
    assert len(seen[1]) == 2  # the day's validate and preprocess statistics
    assert len(seen[3]) == 6  # and those of the two earlier days of a 3-day window


def _rep(daily: tuple, **windows: tuple) -> dict:
    def part(wall, cpu, spark):
        return {"wall_s": wall, "cpu_s": cpu, "spark_cpu_s": spark}

    return {"daily": part(*daily), **{k: part(*v) for k, v in windows.items()}}


def test_a_run_is_its_daily_and_window_tasks_compared_with_the_run_at_one_day():
    rep = _rep((10.0, 20.0, 18.0), window_1=(10.0, 20.0, 16.0), window_4=(14.0, 28.0, 24.0))
    figures = window.run_figures(rep, [1, 4])
    assert figures["1"]["cpu_ratio"] == 1.0
    four = figures["4"]
    assert (four["wall_s"], four["cpu_s"], four["spark_cpu_s"]) == (24.0, 48.0, 42.0)
    assert four["cpu_ratio"] == 1.2 and four["spark_cpu_ratio"] == 1.235 and four["wall_ratio"] == 1.2
    assert four["window_cpu_ratio"] == 1.4
    with pytest.raises(ValueError, match=r"must include 1"):
        window.run_figures(_rep((1, 1, 1), window_2=(1, 1, 1)), [2])


def _window_part(cpu_ratio: float) -> dict:
    def s(v):
        return {"n": 1, "median": v, "min": v, "max": v, "spread_pct": 0.0}

    task = {"kind": "spark", "wall_s": s(5.0), "cpu_s": s(9.0)}
    windows = {
        str(n): {
            "wall_s": s(10.0),
            "cpu_s": s(18.0),
            "spark_cpu_s": s(18.0),
            "peak_rss_mb": s(900.0),
            # As results.json has them: `tasks` sorted by name, `order` the pipeline's.
            "tasks": {"export_shards": task, "fit_transform": task},
            "order": ["fit_transform", "export_shards"],
            "export": {"rows_in": 1000 * n, "rows_out": 900 * n},
            "run": {
                "wall_s": s(30.0),
                "cpu_s": s(40.0),
                "spark_cpu_s": s(40.0),
                **(
                    {}
                    if n == 1
                    else {k: s(cpu_ratio) for k in ("cpu_ratio", "spark_cpu_ratio", "wall_ratio")}
                ),
            },
        }
        for n in (1, 4)
    }
    daily = {"cpu_s": s(22.0), "tasks": {"validate": {"kind": "spark"}}}
    return {"window_days": [1, 4], "run_ds": "2013-01-04", "daily": daily, "windows": windows}


@pytest.mark.parametrize(("ratio", "verdict"), [(1.1, "met"), (1.9, "**missed**")])
def test_the_target_is_judged_on_the_ratio_at_the_longest_window_it_names(ratio, verdict):
    results = {"scales": {"100000": {"window": _window_part(ratio)}}}
    rows = report._window_targets(results)
    cpu = next(r for r in rows if "CPU time at" in r and "Spark" not in r)
    assert "4 days against 1, 100,000 rows a day" in cpu
    assert f"{ratio:.2f}x" in cpu and cpu.endswith(f"| {verdict} |")
    section = "\n".join(report._window_section(results))
    assert "| 4 days | 3,600 |" in section  # the rows the 4-day window exported
    assert "window tasks: fit_transform (spark), export_shards (spark)." in section  # pipeline order


def test_the_target_at_thirty_days_is_projected_from_the_window_tasks_growth():
    part = _window_part(1.1)
    # Window tasks 18 s at 1 day and 27 s at 4 days: 3 s a day more; the run at 1 day 40 s.
    part["windows"]["4"]["cpu_s"]["median"] = 27.0
    rows = report._window_targets({"scales": {"100000": {"window": part}}})
    (projected,) = [r for r in rows if "projected" in r]
    assert "at 30 days" in projected and "1 to 4 days" in projected
    assert "| 3.17x |" in projected and projected.endswith("| **missed** |")  # (40 + 29 * 3) / 40
    part["windows"]["4"]["cpu_s"]["median"] = 18.5
    rows = report._window_targets({"scales": {"100000": {"window": part}}})
    assert [r for r in rows if "projected" in r][0].endswith("| met |")  # (40 + 29 / 6) / 40 = 1.12
