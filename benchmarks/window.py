"""(g) Each day's work done once: a run at an N-day window against the same run at 1 day.

    python -m benchmarks --only window --rows 100000 --window-days 1 4 --reps 1

Issue 30: a run's work over its window (docs/PIPELINE.md: `check_drift`, `fit_transform`,
`export_shards`, or `fit_and_export` when fused) should cost about what one day costs, so
a run at a 30-day window stays within 1.2x of the same run at a 1-day window. This part
measures it: per repetition, the run's own day through the daily tasks, and the window
tasks once at each window length, side by side; a run at N days is the daily tasks plus
the window tasks at N.

**Days.** The run is the day `generate.DS + (longest - 1)`; its window of N days ends
there. The days are consecutive slices of one draw (`generate.draw_indices` over all
their rows), so an id never repeats across days (a repeated id would be read once, from
the later day: `export_shards.mark_superseded`, and the window would shrink), and day i
holds the same rows whatever the longest window. Each day is landed and run through the
daily tasks once; a later run reuses the days `prepared.json` records with the same rows,
seed, spec and jobs code.

**Tasks.** They come from the DAG the spec builds (`dag_factory.build_dag`): the daily
ones between `wait_for_partition` and `wait_for_window`, the window ones between
`wait_for_window` and `gpu_training_handoff`. Each runs as a child process measured by
`run_child`, whatever it runs: a `SparkSubmitOperator` as the spark-submit the provider's
hook builds after the operator prepared it (as `spark_prep` submits the stages); any other
operator, a task that runs Python in the worker (`check_drift`; `fit_transform` and a
`prepared` export, `WindowStageOperator`), as `python -m benchmarks.window`, which builds
the same DAG and calls the operator's `execute` with the run's id, the window decision as
`wait_for_window`'s XCom and an event per outlet Asset, as the task runner gives them. A
Python task counts its `execute` alone (its wall and CPU time, the child's own and its
children's): the child's imports and DAG build stand for the Airflow task around it, which
the Spark tasks leave out too. *Spark CPU* sums the spark-submits (local mode: driver and
executors in one tree), *CPU* every task.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import generate
from benchmarks.environment import FLIGHTS_SPEC, REPO, child_env, use_child_env
from benchmarks.measure import child_result, emit_result, run_child, summary
from lakeprep_contracts import layout

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator

RUN_ID = "bench__window"
WINDOW_SENSOR = "wait_for_window"
# The DAG's tasks between these (exclusive) are the daily and the window work of a run.
DAILY_BOUNDS = ("wait_for_partition", WINDOW_SENSOR)
WINDOW_BOUNDS = (WINDOW_SENSOR, "gpu_training_handoff")
DEFAULT_WINDOW_DAYS = (1, 30)
TARGET_RATIO = 1.2  # a run at N days <= this x the run at 1 day (issue 30)
TARGET_DAYS = 30  # the window the target is about (`window.days`' default)
PREPARED = "prepared.json"


def days_of(longest: int) -> list[str]:
    """The days a run at a `longest`-day window reads, oldest first, from `generate.DS`."""
    first = dt.date.fromisoformat(generate.DS)
    return [(first + dt.timedelta(days=i)).isoformat() for i in range(longest)]


def window_decision(run_ds: str, days: int) -> dict[str, list[str]]:
    """What `wait_for_window` decides when every day of the window sampled."""
    from lakeprep_airflow.sensors.window import empty_window
    from lakeprep_airflow.spec import window_dates

    window = empty_window(window_dates(run_ds, days))
    window["complete"] = list(window["days"])
    return window


def spec_overrides(days: int) -> dict[str, str]:
    """The trigger-form override a run at `days` days gets (rendered templates are strings)."""
    return {"window.days": str(days)}


def run_tasks(spec_path: Path = FLIGHTS_SPEC) -> tuple[list[BaseOperator], list[BaseOperator]]:
    """(daily tasks, window tasks) of the DAG the spec builds, in pipeline order."""
    from lakeprep_airflow.dag_factory import build_dag
    from lakeprep_airflow.spec import load_spec

    dag = build_dag(load_spec(spec_path))
    order = [t.task_id for t in dag.topological_sort()]

    def between(bounds: tuple[str, str]) -> list[BaseOperator]:
        start, stop = (order.index(b) for b in bounds)
        return [dag.get_task(t) for t in order[start + 1 : stop]]

    return between(DAILY_BOUNDS), between(WINDOW_BOUNDS)


def _bind(task: BaseOperator, lake_root: str, run_ds: str, days: int) -> None:
    """Render the run's fields (RunSpecMixin's four, the templates Airflow would render)."""
    task.lake_root = lake_root
    task.run_ds = run_ds
    task.overrides = spec_overrides(days)
    if hasattr(task, "name"):  # the Spark provider's `--name`, templated on the run id
        task.name = f"lakeprep-{task.task_id}-bench"


def task_command(task: BaseOperator, *, lake_root: str, run_ds: str, days: int) -> tuple[str, list[str]]:
    """(`spark` or `python`, the command that runs `task` for `run_ds` at a `days`-day window)."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    _bind(task, lake_root, run_ds, days)
    if isinstance(task, SparkSubmitOperator):
        use_child_env()  # the spark_default connection the children get
        window = window_decision(run_ds, days) if _reads_window(task) else None
        task.prepare_submission(RUN_ID, window)
        return "spark", task._get_hook()._build_spark_submit_command(task.application)
    return "python", [
        sys.executable,
        "-m",
        "benchmarks.window",
        "--spec",
        task.spec_path,
        "--task",
        task.task_id,
        "--lake-root",
        lake_root,
        "--ds",
        run_ds,
        "--days",
        str(days),
    ]


def _reads_window(task: BaseOperator) -> bool:
    from lakeprep_airflow.spec import WINDOW_STAGES

    return bool(set(getattr(task, "stages", ())) & set(WINDOW_STAGES))


def run_task(task: BaseOperator, lake: Path, run_ds: str, days: int, log: Path) -> dict[str, Any]:
    """Run one task as a measured child: its kind, wall and CPU time (a Python task's
    `execute` alone, the whole child beside as `process_*`), peak RSS of its tree."""
    kind, cmd = task_command(task, lake_root=f"file://{lake}", run_ds=run_ds, days=days)
    m = run_child(cmd, env=child_env(), log=log, cwd=REPO)
    out = {"kind": kind, "wall_s": m.wall_s, "cpu_s": m.cpu_s, "peak_rss_mb": m.peak_rss_mb}
    if kind == "python":
        own = child_result(m)
        out = {**out, "process_wall_s": m.wall_s, "process_cpu_s": m.cpu_s, **own}
    return out


def totals(tasks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Tasks run one after another: their wall and CPU summed, Spark's apart, the highest peak."""
    return {
        "tasks": tasks,
        "wall_s": round(sum(t["wall_s"] for t in tasks.values()), 3),
        "cpu_s": round(sum(t["cpu_s"] for t in tasks.values()), 3),
        "spark_cpu_s": round(sum(t["cpu_s"] for t in tasks.values() if t["kind"] == "spark"), 3),
        "peak_rss_mb": max((t["peak_rss_mb"] for t in tasks.values()), default=0.0),
    }


def _export_rows(lake: Path, run_ds: str) -> dict[str, Any]:
    """The export's row accounting: the N-day window's rows, read from its report."""
    from lakeprep_airflow.spec import REPORT_NAME, lake_uri, load_spec

    name = load_spec(FLIGHTS_SPEC).name
    uri = lake_uri(f"file://{lake}", "export_shards", name, run_ds)
    report = json.loads((Path(uri.removeprefix("file://")) / REPORT_NAME).read_text())
    return {k: report.get(k) for k in ("rows_in", "rows_out")}


def run_daily(lake: Path, run_ds: str, logs: Path) -> dict[str, Any]:
    """The day's daily tasks, in order (each re-commits the day's partitions)."""
    daily, _ = run_tasks()
    return totals({t.task_id: run_task(t, lake, run_ds, 1, logs / f"daily-{t.task_id}.log") for t in daily})


def run_window(lake: Path, run_ds: str, days: int, logs: Path) -> dict[str, Any]:
    """The run's window tasks at a `days`-day window, in order, and what the export wrote."""
    _, window = run_tasks()
    tasks = {t.task_id: run_task(t, lake, run_ds, days, logs / f"w{days}-{t.task_id}.log") for t in window}
    return {**totals(tasks), "export": _export_rows(lake, run_ds)}


# --------------------------------------------------------------------------- the days


def land_days(lake: Path, rows: int, seed: int, days: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Land each day's raw partition (`rows` rows each) and the reference tables; a day whose
    partition and record say the same rows and seed is kept. Returns day -> what was landed."""
    record_path = lake / "generated_days.json"
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    wanted = {"rows": rows, "seed": seed, "version": generate.GENERATOR_VERSION}
    first = dt.date.fromisoformat(generate.DS)
    todo = [
        d
        for d in days
        if {k: record.get(d, {}).get(k) for k in wanted} != wanted
        or not (lake / "raw" / "flights" / f"dt={d}" / layout.SUCCESS).is_file()
    ]
    if todo:
        # Day 0 with the reference tables, as `generate.land` lands one day.
        if generate.DS in todo:
            meta = generate.land(lake, rows, seed)
            record[generate.DS] = {
                **wanted,
                **{k: meta[k] for k in ("files", "bytes", "sha256", "null_labels")},
            }
        later = [d for d in todo if d != generate.DS]
        if later:
            import pyarrow as pa

            real = generate._real_flights()
            last = max((dt.date.fromisoformat(d) - first).days for d in later)
            index, copy = generate.draw_indices(real.num_rows, rows * (last + 1), seed)
            for d in later:
                i = (dt.date.fromisoformat(d) - first).days
                take = slice(i * rows, (i + 1) * rows)
                table = real.take(pa.array(index[take]))
                flight = table.column("flight").to_numpy() + generate.FLIGHT_STRIDE * copy[take]
                table = table.set_column(table.schema.get_field_index("flight"), "flight", pa.array(flight))
                record[d] = {**wanted, **_write_partition(lake / "raw" / "flights" / f"dt={d}", table)}
        record_path.write_text(json.dumps(record, indent=2, sort_keys=True))
    return {d: record[d] for d in days}


def _write_partition(partition: Path, table: Any) -> dict[str, Any]:
    partition.mkdir(parents=True, exist_ok=True)
    for old in partition.iterdir():
        old.unlink()
    n_files = max(1, math.ceil(table.num_rows / generate.ROWS_PER_FILE))
    per_file = math.ceil(table.num_rows / n_files)
    files = []
    for i in range(n_files):
        files.append(partition / f"part-{i:05d}.csv")
        generate._write_csv(table.slice(i * per_file, per_file), files[-1])
    (partition / layout.SUCCESS).write_bytes(b"")
    return {
        "files": len(files),
        "bytes": sum(p.stat().st_size for p in files),
        "sha256": generate._sha256(files),
        "null_labels": table.column("arr_delay").null_count,
    }


def _fingerprint(landed: dict[str, Any]) -> dict[str, Any]:
    """What a prepared day depends on: its raw rows, the spec, the jobs code."""
    from lakeprep_airflow import jobs_package
    from lakeprep_airflow.spec import config_hash, load_spec

    use_child_env()
    return {
        "raw_sha256": landed["sha256"],
        "config_hash": config_hash(load_spec(FLIGHTS_SPEC)),
        "jobs_zip": jobs_package.build_zip().name,
    }


def prepare_days(lake: Path, rows: int, seed: int, days: Sequence[str], logs: Path) -> dict[str, Any]:
    """Land the days and run each through the daily tasks once; reuse the days prepared
    before with the same fingerprint. Returns day -> its fingerprint and, when it ran here,
    the daily tasks' figures (not part of the run's figures)."""
    from lakeprep_airflow.spec import lake_uri, load_spec

    landed = land_days(lake, rows, seed, days)
    record_path = lake / PREPARED
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    name = load_spec(FLIGHTS_SPEC).name
    out = {}
    for day in days:
        want = _fingerprint(landed[day])
        sample = Path(lake_uri(f"file://{lake}", "sample", name, day).removeprefix("file://"))
        done = record.get(day, {})
        if done.get("fingerprint") == want and (sample / layout.SUCCESS).is_file():
            out[day] = {**done, "reused": True}
            continue
        daily = run_daily(lake, day, logs / day)
        record[day] = {"fingerprint": want, "daily": daily}
        record_path.write_text(json.dumps(record, indent=2, sort_keys=True))
        out[day] = {**record[day], "reused": False}
    return out


# --------------------------------------------------------------------------- the figures


def run_figures(rep: dict[str, Any], window_days: Sequence[int]) -> dict[str, Any]:
    """One repetition's run at each window length (the daily tasks plus the window tasks at
    N) and its ratios to the run at 1 day: CPU, Spark CPU, wall; the window tasks' alone too."""
    daily = rep["daily"]
    out = {}
    base = None
    for n in sorted(window_days):
        window = rep[f"window_{n}"]
        run = {k: round(daily[k] + window[k], 3) for k in ("wall_s", "cpu_s", "spark_cpu_s")}
        if n == 1:
            base = (run, window)
        if base is None:
            raise ValueError(f"window days {list(window_days)} must include 1, the run it is compared to")
        run_1, window_1 = base
        for k in ("wall_s", "cpu_s", "spark_cpu_s"):
            run[f"{k[:-2]}_ratio"] = round(run[k] / run_1[k], 3) if run_1[k] else None
            run[f"window_{k[:-2]}_ratio"] = round(window[k] / window_1[k], 3) if window_1[k] else None
        out[str(n)] = run
    return out


def summarize(runs: list[dict[str, Any]], window_days: Sequence[int]) -> dict[str, Any]:
    """Medians over the repetitions: the daily tasks, each window length's tasks and run."""

    keys = ("wall_s", "cpu_s", "spark_cpu_s", "peak_rss_mb")
    ratios = ("wall_ratio", "cpu_ratio", "spark_cpu_ratio", "window_wall_ratio", "window_cpu_ratio")
    daily = runs[-1]["daily"]["tasks"]
    out: dict[str, Any] = {
        "daily": {
            **{k: summary([r["daily"][k] for r in runs]) for k in keys},
            "tasks": {t: {"kind": v["kind"]} for t, v in daily.items()},
            "order": list(daily),  # results.json sorts the keys of `tasks`
        },
        "windows": {},
    }
    for n in sorted(window_days):
        w = [r[f"window_{n}"] for r in runs]
        figures = [r["figures"][str(n)] for r in runs]
        out["windows"][str(n)] = {
            **{k: summary([x[k] for x in w]) for k in keys},
            "tasks": {
                t: {
                    "kind": v["kind"],
                    **{k: summary([x["tasks"][t][k] for x in w]) for k in ("wall_s", "cpu_s")},
                }
                for t, v in w[-1]["tasks"].items()
            },
            "order": list(w[-1]["tasks"]),
            "export": w[-1]["export"],
            "run": {
                **{k: summary([f[k] for f in figures]) for k in ("wall_s", "cpu_s", "spark_cpu_s")},
                **{
                    k: summary([f[k] for f in figures])
                    for k in ratios
                    if all(f[k] is not None for f in figures)
                },
            },
        }
    return out


# --------------------------------------------------------------------------- the Python child


class _WindowXCom:
    """The `ti` a task's `execute` sees: `wait_for_window`'s XCom is the window decision."""

    def __init__(self, window: dict[str, list[str]]) -> None:
        self.window = window

    def xcom_pull(self, task_ids: str | Sequence[str] | None = None, **_: Any) -> Any:
        return self.window if task_ids == WINDOW_SENSOR else None


def _cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(argv: Sequence[str] | None = None) -> None:
    """Run one task of the DAG the spec builds, as the worker would: `execute` with the run's
    context; print its own wall and CPU time (`emit_result`)."""
    from collections import defaultdict
    from types import SimpleNamespace

    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--task", required=True, help="task id in the DAG the spec builds")
    parser.add_argument("--lake-root", required=True)
    parser.add_argument("--ds", required=True)
    parser.add_argument("--days", type=int, required=True, help="the window's length")
    args = parser.parse_args(argv)
    daily, window = run_tasks(args.spec)
    found = [t for t in (*daily, *window) if t.task_id == args.task]
    if not found:
        known = [t.task_id for t in (*daily, *window)]
        raise SystemExit(f"task {args.task!r} is not a daily or window task of {args.spec}: {known}")
    (task,) = found
    _bind(task, args.lake_root, args.ds, args.days)
    context = {
        "run_id": RUN_ID,
        "ds": args.ds,
        "ti": _WindowXCom(window_decision(args.ds, args.days)),
        "outlet_events": defaultdict(SimpleNamespace),
        "params": {},
    }
    cpu, start = _cpu_s(), time.perf_counter()
    task.execute(context)
    emit_result({"wall_s": round(time.perf_counter() - start, 3), "cpu_s": round(_cpu_s() - cpu, 3)})


if __name__ == "__main__":
    from benchmarks.environment import put_sources_on_path

    put_sources_on_path()
    main()
