"""Part `profile`: where a small day's time goes: the fused DAG's tasks, its submission under py-spy.

    python -m benchmarks --only profile           (the harness part, on the 900-row day)

The DAG the spec builds with `spark.fuse_stages` runs the day's stages as one submission
(`prepare_day`: validate, preprocess, sample) and the window's as one task in the Airflow
worker without Spark (`fit_and_export`, a `WindowStageOperator`; docs/PIPELINE.md "Where
the stages run"). The worker task is measured as part `window` measures a Python task
(`window.run_task`: its `execute`'s wall and CPU time, the whole child beside). The
submission runs once with `spark.eventLog.enabled` and under `py-spy record --subprocesses
--idle --threads` (py-spy follows every process the launcher starts; a Python wrapper,
`benchmarks.driver_start`, is the root, since the launcher itself is bash and Java). From
the Python driver's main thread (wall-clock samples, waiting included) and the event log:

- *before the driver*: the launcher and the JVM until the Python driver runs, timed by
  the wrapper (from its start of the launcher until a descendant runs the driver script;
  py-spy's own start before that is not counted). The *sampled total* is this plus the
  driver's samples;
- *session start* (`session.start_session`: the SparkContext and its JVM side) and *stop*;
- per stage, the samples under `stage_entry.run_stage`, split into *in Spark jobs* (the union of
  the intervals of the jobs that carry the stage's `lakeprep.stage` property, from the
  event log), *JVM outside jobs* (the stage's samples waiting on py4j less its jobs' time:
  analysis, planning, the file system, Parquet footers) and *Python on the driver* (the
  samples not waiting on py4j); the lakeprep lines that wait longest on the JVM;
- *other*: the driver's imports, the plan's parsing.

The raw py-spy samples (`py-spy.txt`, flamegraph.pl's input) and the event logs stay in
the part's log folder.
"""

from __future__ import annotations

import collections
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from benchmarks import event_log, spark_prep, window
from benchmarks.environment import REPO, child_env
from benchmarks.measure import run_child

RATE_HZ = 100  # py-spy samples per second and thread
STAGE_PROPERTY = "lakeprep.stage"  # lakeprep_jobs.stage_entry.STAGE_PROPERTY (not imported: no pyspark here)
_STAGE_FRAME = re.compile(r"lakeprep_jobs/(\w+)\.py:\d+\)$")
_LAKEPREP_FRAME = re.compile(r"^(\S+) \(.*lakeprep_jobs/(\w+\.py):(\d+)\)$")
DRIVER_SCRIPT = "lakeprep_jobs/fused.py"  # the Python driver of a fused submission
POLL_S = 0.02  # how often the wrapper (`benchmarks.driver_start`) looks for the driver


def py_spy() -> str | None:
    found = Path(sys.executable).with_name("py-spy")
    return str(found) if found.is_file() else shutil.which("py-spy")


def job_intervals(folder: Path) -> dict[str, list[tuple[int, int]]]:
    """stage -> [(submitted ms, completed ms)] of the jobs in the event logs under `folder`."""
    started: dict[int, tuple[str, int]] = {}
    out: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    for event in event_log.events(folder):
        kind = event.get("Event")
        if kind == "SparkListenerJobStart":
            stage = (event.get("Properties") or {}).get(STAGE_PROPERTY) or "(no stage)"
            started[event["Job ID"]] = (stage, event["Submission Time"])
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in started:
            stage, begin = started.pop(event["Job ID"])
            out[stage].append((begin, event["Completion Time"]))
    return dict(out)


def union_s(intervals: list[tuple[int, int]]) -> float:
    """Seconds covered by the intervals (ms), overlaps counted once."""
    total, end = 0, None
    for begin, finish in sorted(intervals):
        if end is None or begin > end:
            total += finish - begin
            end = finish
        elif finish > end:
            total += finish - end
            end = finish
    return total / 1000


def _frames(line: str) -> tuple[list[str], int]:
    stack, count = line.rstrip("\n").rsplit(" ", 1)
    return stack.split(";"), int(count)


def classify(samples: Path) -> dict[str, Any]:
    """The driver's main-thread samples by phase and stage (counts of samples)."""
    phases: collections.Counter[str] = collections.Counter()
    stages: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    waits: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    workers: set[str] = set()
    for line in samples.read_text().splitlines():
        frames, count = _frames(line)
        procs = [f for f in frames if f.startswith("process ")]
        if any("pyspark.daemon" in p for p in procs):
            workers.add(procs[-1].split(":", 1)[0])
            continue
        thread = next((f for f in frames if f.startswith("thread (")), "")
        if not thread.endswith("MainThread"):
            continue
        # The wrapper (the root, alone; its arguments name the driver too) is not the driver,
        # nor is any other Python the launcher runs (find_spark_home.py).
        if len(procs) == 1 or DRIVER_SCRIPT not in procs[-1]:
            continue
        code = frames[frames.index(thread) + 1 :]
        at = next((i for i, f in enumerate(code) if f.startswith("run_stage (")), None)
        if at is not None and at + 1 < len(code) and (m := _STAGE_FRAME.search(code[at + 1])):
            stage = m.group(1)
            in_jvm = any("/py4j/" in f for f in code)
            stages[stage]["jvm" if in_jvm else "python"] += count
            if in_jvm:
                site = next(
                    (f"{g[2]}:{g[3]} {g[1]}" for f in reversed(code) if (g := _LAKEPREP_FRAME.match(f))), "?"
                )
                waits[stage][site] += count
        elif any(f.startswith("start_session (") for f in code):
            phases["session_start"] += count
        elif any(f.startswith("stop (") and "pyspark" in f for f in code):
            phases["session_stop"] += count
        else:
            phases["other"] += count
    return {
        "phases": dict(phases),
        "stages": {s: dict(c) for s, c in stages.items()},
        "waits": {s: c.most_common(4) for s, c in waits.items()},
        "workers": len(workers),
    }


def profile_submission(cmd: list[str], folder: Path, order: tuple[str, ...]) -> dict[str, Any]:
    """One submission under py-spy with the event log; the breakdown in seconds, the stages
    in `order` (the plan's; py-spy's raw samples come in no particular order)."""
    events = folder / "events"
    samples = folder / "py-spy.txt"
    started = folder / "driver_start.json"
    spy = py_spy()
    if spy is None:
        raise RuntimeError("py-spy is not installed (requirements-dev.txt); `make venv` installs it")
    profiled = [
        spy,
        "record",
        "--subprocesses",
        "--idle",
        "--threads",
        "--full-filenames",
        "--rate",
        str(RATE_HZ),
        "--format",
        "raw",
        "--output",
        str(samples),
        "--",
        sys.executable,
        "-m",
        "benchmarks.driver_start",
        str(started),
        DRIVER_SCRIPT,
        str(POLL_S),
        cmd[0],
        *event_log.conf_args(events),
        *cmd[1:],
    ]
    m = run_child(profiled, env=child_env(), log=folder / "submission.log", cwd=REPO)
    got = classify(samples)
    jobs = job_intervals(events)
    sec = 1 / RATE_HZ
    driver = (sum(got["phases"].values()) + sum(sum(c.values()) for c in got["stages"].values())) * sec
    # py-spy exits 0 whatever its command did: the wrapper records the submission's exit code.
    wrapped = json.loads(started.read_text()) if started.is_file() else {}
    if wrapped.get("returncode") != 0:
        raise RuntimeError(
            f"the profiled submission failed (exit code {wrapped.get('returncode')}); "
            f"see {folder / 'submission.log'}"
        )
    before_driver = wrapped["driver_after_s"]
    if before_driver is None:
        raise RuntimeError(
            f"no Python driver running {DRIVER_SCRIPT} was seen during the submission; "
            f"see {folder / 'submission.log'}"
        )
    stages = {}
    for stage, counts in sorted(got["stages"].items(), key=lambda kv: order.index(kv[0])):
        jvm, python = counts.get("jvm", 0) * sec, counts.get("python", 0) * sec
        in_jobs = union_s(jobs.get(stage, []))
        stages[stage] = {
            "wall_s": round(jvm + python, 2),
            "jobs": len(jobs.get(stage, [])),
            "in_jobs_s": round(in_jobs, 2),
            "jvm_outside_jobs_s": round(max(jvm - in_jobs, 0.0), 2),
            "python_s": round(python, 2),
            "longest_jvm_waits": [(site, round(n * sec, 2)) for site, n in got["waits"].get(stage, [])],
        }
    phases = {k: round(v * sec, 2) for k, v in got["phases"].items()}
    return {
        "wall_s": m.wall_s,  # includes py-spy's own start (about a second)
        "cpu_s": m.cpu_s,
        "sampled_s": round(before_driver + driver, 2),
        "before_driver_s": round(before_driver, 2),
        "session_start_s": phases.get("session_start", 0.0),
        "session_stop_s": phases.get("session_stop", 0.0),
        "driver_other_s": phases.get("other", 0.0),
        "stages": stages,
        "python_workers": got["workers"],
        "untagged_jobs": len(jobs.get("(no stage)", [])),  # jobs run outside `stage_entry.run_stage`
    }


def run(lake: Path, ds: str, logs: Path) -> dict[str, Any]:
    """The fused DAG's tasks for the day in `lake`, in order: a spark-submit profiled once,
    a task run in the worker measured once (`kind` says which)."""
    out = {}
    for task in spark_prep.dag_tasks(spark_prep.fused_spec()):
        name = "+".join(task.stages)
        folder = logs / name
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        kind, cmd = window.task_command(task, lake_root=f"file://{lake}", run_ds=ds, days=1)
        if kind == "spark":
            out[name] = {"kind": kind, **profile_submission(cmd, folder, tuple(task.stages))}
        else:
            out[name] = window.run_task(task, lake, ds, 1, folder / "task.log")
    return out


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", type=Path, required=True)
    parser.add_argument("--ds", default="2013-01-01")
    parser.add_argument(
        "--logs", type=Path, required=True, help="folder for py-spy's samples, the event log, the task logs"
    )
    parser.add_argument("--json", type=Path, help="write the breakdown here (default: stdout)")
    args = parser.parse_args()
    text = json.dumps(run(args.lake, args.ds, args.logs), indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
