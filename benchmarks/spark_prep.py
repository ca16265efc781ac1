"""(a) The staged Spark preparation against its floor, each submitted as the operator does.

(a) submits all five stages, the window's too, so that the floor comparison is Spark's
preparation of the day whatever the DAG runs in the worker; `run_fused` submits them as
the two fused plans `SparkStageOperator` builds with `stages=`.

The five stages' commands are built by `SparkStageOperator` itself (`prepare_submission`,
then the Spark provider's `SparkSubmitHook._build_spark_submit_command`, which is what
`SparkSubmitOperator.execute` runs): the same `--master` from the `spark_default`
connection, the spec's and the operator's `--conf`, the content-addressed jobs zip as
`--py-files`, the stage script and its argv. Only the Airflow task around it is left
out (its start-up is not Spark's). The floor and the empty submission reuse that
command line with another application, so they get the same session settings.

(e) runs the stages as the DAG the spec builds runs them (`run_dag`): its spark-submits as
submissions, its tasks that run in the Airflow worker without Spark (`WindowStageOperator`:
`fit_transform` and a `prepared` export, docs/PIPELINE.md "Where the stages run") as the
Python tasks they are, measured as part `window` measures them (`window.run_task`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import event_log, window
from benchmarks.environment import FLIGHTS_SPEC, REPO, WORK, child_env, use_child_env
from benchmarks.measure import run_child
from lakeprep_contracts import layout, pipeline

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator

STAGES = pipeline.STAGES
DAILY_STAGES = pipeline.DAILY_STAGES  # the day's own submission (`prepare_day`): statistics and shards
RUN_ID = "bench__run"
FLOOR_SCRIPT = REPO / "benchmarks" / "jobs" / "floor.py"
EMPTY_SCRIPT = REPO / "benchmarks" / "jobs" / "empty.py"
TOP_SITES = 4  # call sites kept per submission from its event log (the passes run)


@dataclass(frozen=True)
class Executors:
    """Submissions to a cluster whose executors are processes of their own (not the
    driver's JVM, as in local mode): what each adds to its command (`--conf`), and the
    worker whose children, the executors, are sampled apart (`executor_peak_rss_mb`)."""

    conf: tuple[str, ...]
    worker_pid: int


def _submit(cmd: list[str], log: Path, executors: Executors | None) -> dict[str, Any]:
    """Run one submission, measured; with `executors`, its executors' peak memory beside."""
    if executors is None:
        return run_child(cmd, env=child_env(), log=log, cwd=REPO).to_json()
    m = run_child(
        [cmd[0], *executors.conf, *cmd[1:]], env=child_env(), log=log, cwd=REPO, watch=executors.worker_pid
    ).to_json()
    m["executor_peak_rss_mb"] = m.pop("watched_peak_rss_mb")
    return m


def window_for(ds: str, days: int) -> dict[str, list[str]]:
    """What `wait_for_window` decides for a run whose earlier days are before the start date."""
    from lakeprep_airflow.spec import window_dates

    dates = window_dates(ds, days)
    return {"days": dates, "complete": [ds], "failed": [], "missing": [], "before_start": dates[:-1]}


# The five stages as submissions: the export materialised in Spark (`encoded`), as the
# preparation parts measure it and the input part reads it (encoded shards, their floors).
ENCODED_EXPORT = {"stages.export_shards.shards": "encoded"}


def _operator(stage: str, lake_root: str, ds: str):
    from lakeprep_airflow.operators.spark_stage import SparkStageOperator

    return SparkStageOperator(
        task_id=stage,
        stage=stage,
        spec_path=str(FLIGHTS_SPEC),
        lake_root=lake_root,
        run_ds=ds,
        overrides=ENCODED_EXPORT,
        name=f"lakeprep-{stage}-bench",
    )


def stage_command(stage: str, lake_root: str, ds: str) -> tuple[list[str], str]:
    """(spark-submit argv as the operator runs it, the stage's output URI)."""
    from lakeprep_airflow.spec import load_spec

    use_child_env()
    op = _operator(stage, lake_root, ds)
    days = load_spec(FLIGHTS_SPEC).data["window"]["days"]
    window = window_for(ds, days) if stage in pipeline.WINDOW_STAGES else None
    _, output = op.prepare_submission(RUN_ID, window)
    return op._get_hook()._build_spark_submit_command(op.application), output


def fused_commands(
    lake_root: str, ds: str, repeat: int = 1
) -> list[tuple[tuple[str, ...], list[str], list[str]]]:
    """(stages, spark-submit argv, each stage's output) of the fused daily and window tasks.

    `repeat` > 1 runs the plan that many times in the one session (the later passes
    re-commit the same outputs): what a day costs in a JVM that is already warm."""
    from lakeprep_airflow.operators.spark_stage import SparkStageOperator
    from lakeprep_airflow.spec import DAILY_STAGES, WINDOW_STAGES, load_spec

    use_child_env()
    days = load_spec(FLIGHTS_SPEC).data["window"]["days"]
    out = []
    for stages, decided in ((DAILY_STAGES, None), (WINDOW_STAGES, window_for(ds, days))):
        op = SparkStageOperator(
            task_id="fused",
            stages=stages,
            spec_path=str(FLIGHTS_SPEC),
            lake_root=lake_root,
            run_ds=ds,
            overrides=ENCODED_EXPORT,
            name=f"lakeprep-{'+'.join(stages)}-bench",
        )
        op.prepare_submission(RUN_ID, decided)
        cmd = _repeated(op._get_hook()._build_spark_submit_command(op.application), repeat)
        out.append((stages, cmd, [call.output for call in op.stage_calls]))
    return out


def _repeated(cmd: list[str], repeat: int) -> list[str]:
    """A fused submission whose plan runs `repeat` times in its one session."""
    if repeat > 1:
        at = cmd.index("--plan") + 1
        cmd = [*cmd[:at], json.dumps(json.loads(cmd[at]) * repeat, separators=(",", ":")), *cmd[at + 1 :]]
    return cmd


def fused_spec() -> Path:
    """The flights spec with `spark.fuse_stages` on, written under the work folder: the DAG
    it builds has the fused tasks (the choice is made when the DAG is parsed, from the file)."""
    import yaml

    data = yaml.safe_load(FLIGHTS_SPEC.read_text())
    data.setdefault("spark", {})["fuse_stages"] = True
    path = WORK / "pipelines-fused" / FLIGHTS_SPEC.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def dag_tasks(spec: Path) -> list[BaseOperator]:
    """The tasks of the DAG `spec` builds that run the five stages, in pipeline order."""
    daily, window_tasks = window.run_tasks(spec)
    return [t for t in (*daily, *window_tasks) if set(getattr(t, "stages", ())) & set(STAGES)]


def run_dag(lake: Path, ds: str, logs: Path, *, fused: bool, repeat: int = 1) -> dict[str, Any]:
    """The five stages as the DAG the spec builds runs them (`fused`: with `spark.fuse_stages`),
    for a day whose window is itself: per spark-submit (`submissions`) and per task run in
    the worker (`tasks`, `window.run_task`) its time and memory, per stage its row counts.

    `repeat` > 1 runs each submission's plan that many times in its session (`fused_commands`)
    and leaves the worker tasks out: they have no session to warm."""
    out: dict[str, Any] = {"submissions": {}, "tasks": {}, "stages": {}}
    suffix = f"-x{repeat}" if repeat > 1 else ""
    for task in dag_tasks(fused_spec() if fused else FLIGHTS_SPEC):
        name = "+".join(task.stages)
        kind, cmd = window.task_command(task, lake_root=f"file://{lake}", run_ds=ds, days=1)
        if kind == "spark":
            out["submissions"][name] = _submit(_repeated(cmd, repeat), logs / f"{name}{suffix}.log", None)
        elif repeat > 1:
            continue
        else:
            out["tasks"][name] = window.run_task(task, lake, ds, 1, logs / f"{name}.log")
        for stage in task.stages:
            report = _report(stage_output(lake, stage, ds))
            out["stages"][stage] = {k: report.get(k) for k in ("rows_in", "rows_out", "rows_quarantined")}
    return out


def stage_output(lake: Path, stage: str, ds: str) -> str:
    """The URI of the partition `stage` writes for `ds` in `lake` (the flights spec's dataset)."""
    from lakeprep_airflow.spec import lake_uri, load_spec

    return lake_uri(f"file://{lake}", stage, load_spec(FLIGHTS_SPEC).name, ds)


def _with_application(stage_cmd: list[str], script: Path, args: list[str], name: str) -> list[str]:
    """The operator's command line for `validate`, running another application."""
    cmd = list(stage_cmd)
    at = next(i for i, part in enumerate(cmd) if part.endswith("lakeprep_jobs/validate.py"))
    cmd = [*cmd[:at], str(script), *args]
    if "--name" in cmd:
        cmd[cmd.index("--name") + 1] = name
    return cmd


def floor_command(lake_root: str, ds: str, output: str) -> list[str]:
    from lakeprep_airflow.spec import expand, load_spec
    from lakeprep_contracts.records import csv_options

    spec = load_spec(FLIGHTS_SPEC)
    options = csv_options(spec.source.get("options", {}))
    raw = expand(spec.source["uri"], lake_root=lake_root, ds=ds)
    validate_cmd, _ = stage_command("validate", lake_root, ds)
    args = ["--input", raw, "--output", output, "--options", json.dumps(options, sort_keys=True)]
    return _with_application(validate_cmd, FLOOR_SCRIPT, args, "lakeprep-bench-floor")


def empty_command(lake_root: str, ds: str) -> list[str]:
    validate_cmd, _ = stage_command("validate", lake_root, ds)
    return _with_application(validate_cmd, EMPTY_SCRIPT, [], "lakeprep-bench-empty")


def _report(output_uri: str) -> dict[str, Any]:
    path = Path(output_uri.removeprefix("file://")) / layout.REPORT
    return json.loads(path.read_text())


def _with_event_log(cmd: list[str], folder: Path | None) -> list[str]:
    return [cmd[0], *event_log.conf_args(folder), *cmd[1:]] if folder else cmd


def _event_log(folder: Path) -> dict[str, Any]:
    """A submission's totals and the call sites its jobs spent the most time in."""
    return {
        **event_log.summarize(folder),
        "call_sites": event_log.by_call_site(event_log.job_times(folder))[:TOP_SITES],
    }


def run_stages(
    lake: Path, ds: str, logs: Path, events: Path | None = None, executors: Executors | None = None
) -> dict[str, Any]:
    """One pass of the five stages, in order; per stage its time, memory and row counts.

    With `events`, each submission also writes Spark's event log there (the `--passes` run);
    with `executors`, it runs on that cluster (`Executors`).
    """
    lake_root = f"file://{lake}"
    out: dict[str, Any] = {}
    for stage in STAGES:
        cmd, output = stage_command(stage, lake_root, ds)
        folder = events / stage if events else None
        m = _submit(_with_event_log(cmd, folder), logs / f"{stage}.log", executors)
        report = _report(output)
        out[stage] = {
            **m,
            "rows_in": report.get("rows_in"),
            "rows_out": report.get("rows_out"),
            "rows_quarantined": report.get("rows_quarantined"),
        }
        if folder:
            out[stage]["event_log"] = _event_log(folder)
    return out


def run_fused(
    lake: Path, ds: str, logs: Path, repeat: int = 1, executors: Executors | None = None
) -> dict[str, Any]:
    """The five stages as the two fused submissions (`spark.fuse_stages`); per submission its
    time and memory, per stage its row counts (from its report, as `run_stages` has them).
    `repeat`: see `fused_commands`; `executors`: see `run_stages`."""
    out: dict[str, Any] = {"submissions": {}, "stages": {}}
    for stages, cmd, outputs in fused_commands(f"file://{lake}", ds, repeat):
        name = "+".join(stages)
        suffix = f"-x{repeat}" if repeat > 1 else ""
        out["submissions"][name] = _submit(cmd, logs / f"fused-{name}{suffix}.log", executors)
        for stage, output in zip(stages, outputs, strict=True):
            report = _report(output)
            out["stages"][stage] = {k: report.get(k) for k in ("rows_in", "rows_out", "rows_quarantined")}
    return out


def run_floor(lake: Path, ds: str, logs: Path, events: Path | None = None) -> dict[str, Any]:
    cmd = floor_command(f"file://{lake}", ds, f"file://{lake}/bench_floor/flights/dt={ds}")
    folder = events / "floor" if events else None
    out = run_child(_with_event_log(cmd, folder), env=child_env(), log=logs / "floor.log", cwd=REPO).to_json()
    if folder:
        out["event_log"] = _event_log(folder)
    return out


def run_empty(lake: Path, ds: str, logs: Path, executors: Executors | None = None) -> dict[str, Any]:
    return _submit(empty_command(f"file://{lake}", ds), logs / "empty.log", executors)


def manifest_uri(lake: Path, ds: str) -> str:
    return f"file://{lake}/export_shards/flights/dt={ds}/manifest.json"
