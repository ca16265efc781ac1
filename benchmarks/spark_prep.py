"""(a) The staged Spark preparation against its floor, each submitted as the operator does.

(e) also submits the five stages as the two fused submissions (`run_fused`), as the
operator builds them with `stages=` (the spec's `spark.fuse_stages`).

The five stages' commands are built by `SparkStageOperator` itself (`prepare_submission`,
then the Spark provider's `SparkSubmitHook._build_spark_submit_command`, which is what
`SparkSubmitOperator.execute` runs): the same `--master` from the `spark_default`
connection, the spec's and the operator's `--conf`, the content-addressed jobs zip as
`--py-files`, the stage script and its argv. Only the Airflow task around it is left
out (its start-up is not Spark's). The floor and the empty submission reuse that
command line with another application, so they get the same session settings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import event_log
from benchmarks.environment import FLIGHTS_SPEC, REPO, child_env, use_child_env
from benchmarks.measure import run_child

STAGES = ("validate", "preprocess", "sample", "fit_transform", "export_shards")
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


def _operator(stage: str, lake_root: str, ds: str):
    from lakeprep_airflow.operators.spark_stage import SparkStageOperator

    return SparkStageOperator(
        task_id=stage,
        stage=stage,
        spec_path=str(FLIGHTS_SPEC),
        lake_root=lake_root,
        run_ds=ds,
        name=f"lakeprep-{stage}-bench",
    )


def stage_command(stage: str, lake_root: str, ds: str) -> tuple[list[str], str]:
    """(spark-submit argv as the operator runs it, the stage's output URI)."""
    from lakeprep_airflow.spec import load_spec

    use_child_env()
    op = _operator(stage, lake_root, ds)
    days = load_spec(FLIGHTS_SPEC).data["window"]["days"]
    window = window_for(ds, days) if stage in ("fit_transform", "export_shards") else None
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
    for stages, window in ((DAILY_STAGES, None), (WINDOW_STAGES, window_for(ds, days))):
        op = SparkStageOperator(
            task_id="fused",
            stages=stages,
            spec_path=str(FLIGHTS_SPEC),
            lake_root=lake_root,
            run_ds=ds,
            name=f"lakeprep-{'+'.join(stages)}-bench",
        )
        op.prepare_submission(RUN_ID, window)
        cmd = op._get_hook()._build_spark_submit_command(op.application)
        if repeat > 1:
            at = cmd.index("--plan") + 1
            cmd[at] = json.dumps(json.loads(cmd[at]) * repeat, separators=(",", ":"))
        out.append((stages, cmd, [call.output for call in op.stage_calls]))
    return out


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
    from lakeprep_jobs.validate import CSV_DEFAULTS

    spec = load_spec(FLIGHTS_SPEC)
    options = {**CSV_DEFAULTS, **spec.source.get("options", {})}
    raw = expand(spec.source["uri"], lake_root=lake_root, ds=ds)
    validate_cmd, _ = stage_command("validate", lake_root, ds)
    args = ["--input", raw, "--output", output, "--options", json.dumps(options, sort_keys=True)]
    return _with_application(validate_cmd, FLOOR_SCRIPT, args, "lakeprep-bench-floor")


def empty_command(lake_root: str, ds: str) -> list[str]:
    validate_cmd, _ = stage_command("validate", lake_root, ds)
    return _with_application(validate_cmd, EMPTY_SCRIPT, [], "lakeprep-bench-empty")


def _report(output_uri: str) -> dict[str, Any]:
    path = Path(output_uri.removeprefix("file://")) / "_lakeprep_report.json"
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
