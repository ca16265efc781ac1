"""One stage as it is now against the same stage at an earlier commit, side by side in one session.

    python -m benchmarks.stage_ab --stage validate --base 89abf4b --rows 1000000 --reps 3 --warmup 1

For a change inside a stage: both versions run the stage's `run` alternately in one
local Spark session (`local[2]`, the spec's `spark.conf`, the harness's driver heap), on
the same committed input partition of a generated lake, each committing to a scratch
partition of its own, so start-up, the page cache and the machine's load hit both alike.
What part `spark`'s tables cannot show (one submission per stage, its start-up and the
machine's noise around it), this does: the stage's own cost before and after, as a ratio
per repetition (after / before), wall and CPU time (the driver's JVM and Python).

The earlier version is the stage's module at `--base` (`git show`), loaded beside the
current one; the modules it imports (`lakeprep_jobs.stage_entry`, ...) are today's, so it
compares changes made inside the stage's module. Both get the params the spec builds
today. The input partitions come from the harness's lake for `--rows` (`.bench/data/`);
missing ones are prepared first by the five stages' spark-submits. Prints one line per
run and a JSON summary; both versions must report the same row counts.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import generate, spark_prep
from benchmarks.environment import DRIVER_MEMORY, REPO, WORK, use_child_env, work_folder_lock
from benchmarks.measure import summary
from lakeprep_contracts import layout, pipeline


def module_at(stage: str, commit: str) -> Any:
    """The stage's module as it was at `commit`, importable beside today's."""
    rel = f"spark_jobs/lakeprep_jobs/{stage}.py"
    source = subprocess.run(
        ["git", "show", f"{commit}:{rel}"], cwd=REPO, capture_output=True, text=True, check=False
    )
    if source.returncode != 0:
        raise SystemExit(f"stage_ab: no {rel} at {commit!r}: {source.stderr.strip()}")
    path = WORK / "stage_ab" / f"{stage}_{commit}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source.stdout)
    name = f"lakeprep_jobs._{stage}_at_{commit}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def _cpu_s() -> float:
    """CPU seconds of this process and its children (the driver JVM, Python workers)."""
    import psutil

    me = psutil.Process()
    procs = [me, *me.children(recursive=True)]
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def _session(conf: dict[str, str]) -> Any:
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("lakeprep-stage-ab")
        .config("spark.driver.memory", DRIVER_MEMORY)
        .config("spark.ui.enabled", "false")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.stage_ab", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--stage", required=True, choices=spark_prep.STAGES)
    parser.add_argument("--base", required=True, help="the commit whose version of the stage is the baseline")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="discarded repetitions (the JVM's first plans)")
    args = parser.parse_args(argv)

    use_child_env()
    current = importlib.import_module(f"lakeprep_jobs.{args.stage}")
    versions = {"before": module_at(args.stage, args.base), "after": current}
    from lakeprep_airflow.spec import load_spec
    from lakeprep_jobs import stage_args, stage_entry

    lake = WORK / "data" / f"flights-{args.rows}-s{args.seed}"
    generate.land(lake, args.rows, args.seed)
    ds = generate.DS
    spec = load_spec(spark_prep.FLIGHTS_SPEC)
    window = (
        spark_prep.window_for(ds, spec.data["window"]["days"])
        if args.stage in pipeline.WINDOW_STAGES
        else None
    )
    op = spark_prep._operator(args.stage, f"file://{lake}", ds)
    op.prepare_submission(spark_prep.RUN_ID, window)
    [call] = op.stage_calls
    if not all((Path(uri.removeprefix("file://")) / layout.SUCCESS).is_file() for uri in call.inputs):
        print(f"stage_ab: preparing the stages' partitions in {lake}", flush=True)
        spark_prep.run_stages(lake, ds, WORK / "stage_ab" / "logs")
    parsed = stage_entry.prepare(current.STAGE, call.argv)
    spark = _session({"spark.sql.session.timeZone": spec.data.get("time_zone", "UTC"), **op.conf})
    runs: list[dict[str, Any]] = []
    try:
        for rep in range(args.warmup + args.reps):
            run_: dict[str, Any] = {}
            # Alternating which goes first: neither always finds the other's cached pages.
            order = ("before", "after") if rep % 2 == 0 else ("after", "before")
            for name in order:
                module = versions[name]
                params = stage_args.params_from(module.STAGE.params_cls, parsed.args.params)
                output = f"file://{WORK}/stage_ab/out/{args.stage}-{name}"
                wall, cpu = time.monotonic(), _cpu_s()
                report = module.STAGE.run(spark, parsed.args.inputs, output, params)
                run_[name] = {
                    "wall_s": round(time.monotonic() - wall, 3),
                    "cpu_s": round(_cpu_s() - cpu, 3),
                    **{k: report.get(k) for k in ("rows_in", "rows_out", "rows_quarantined")},
                }
                spark.catalog.clearCache()
                label = "warm-up" if rep < args.warmup else f"rep {rep - args.warmup + 1}/{args.reps}"
                print(f"stage_ab {label} {name}: {json.dumps(run_[name])}", flush=True)
            run_["wall_ratio"] = round(run_["after"]["wall_s"] / run_["before"]["wall_s"], 3)
            run_["cpu_ratio"] = round(run_["after"]["cpu_s"] / run_["before"]["cpu_s"], 3)
            if rep >= args.warmup:
                runs.append(run_)
    finally:
        spark.stop()
    rows = {
        name: {k: runs[-1][name][k] for k in ("rows_in", "rows_out", "rows_quarantined")} for name in versions
    }
    result = {
        "stage": args.stage,
        "base": args.base,
        "head": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip(),
        "rows": args.rows,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "runs": runs,
        "wall_ratio": summary([r["wall_ratio"] for r in runs]),
        "cpu_ratio": summary([r["cpu_ratio"] for r in runs]),
        "same_rows": rows["before"] == rows["after"],
    }
    print(json.dumps(result, indent=2), flush=True)
    if not result["same_rows"]:
        raise SystemExit(f"stage_ab: the versions reported different rows: {rows}")
    return result


if __name__ == "__main__":
    with work_folder_lock():  # it may prepare partitions in the harness's lake
        run()
