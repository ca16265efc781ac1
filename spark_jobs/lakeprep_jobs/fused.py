"""Several stages in one submission: one Spark session, each stage run as its own script would.

    spark-submit --py-files lakeprep_jobs.zip lakeprep_jobs/fused.py \
        --plan '[{"stage": "validate", "argv": ["--input", ..., "--output", ..., "--params", ...]},
                 {"stage": "preprocess", "argv": [...]}, {"stage": "sample", "argv": [...]}]' \
        [--error-file PATH]

The spec's `spark.fuse_stages` (docs/PIPELINE.md#fused-stages): a small partition spends
most of a stage's time starting a JVM and a session, so the daily stages share one
submission and the window stages another. Each plan entry's `argv` is exactly the
stage's own argv (`stage_args.parse_args`, its `--error-file` included), and each stage runs
through the same `stage_entry.prepare` and `stage_entry.run_stage` as its own `main`: the same
params, the same reads of the previous stage's committed partition, the same atomic
commit of its own, so the outputs are the separate stages' outputs. Every stage's params
are built before the session starts (a bad key in the last stage fails before the first
commits). A failing stage writes its own error file and stops the plan: the stages
before it stay committed, the later ones do not run. `--error-file` receives what fails
outside a stage (the plan itself, the session's start).
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lakeprep_contracts import submission
from lakeprep_jobs import failure, session, stage_entry

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_STAGE_NAME = re.compile(r"^[a-z][a-z_]*$")


def load_stage(name: str) -> stage_entry.Stage:
    """The `STAGE` declared by the module `lakeprep_jobs.<name>`."""
    found = None
    if _STAGE_NAME.match(name):
        try:
            found = getattr(importlib.import_module(f"lakeprep_jobs.{name}"), "STAGE", None)
        except ModuleNotFoundError:
            found = None
    if not isinstance(found, stage_entry.Stage) or found.name != name:
        raise ValueError(f"plan names stage {name!r}: no lakeprep_jobs module of that name declares a STAGE")
    return found


def parse_plan(text: str) -> list[stage_entry.StageCall]:
    """The plan's stages, each parsed and its params built (nothing touches Spark yet)."""
    try:
        plan = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"--plan is not valid JSON: {err}") from err
    if not isinstance(plan, list) or not plan:
        raise ValueError(
            f'--plan must be a non-empty JSON list of {{"stage": ..., "argv": [...]}}, got {text[:80]!r}'
        )
    calls = []
    for i, entry in enumerate(plan):
        if (
            not isinstance(entry, dict)
            or set(entry) != {"stage", "argv"}
            or not isinstance(entry["argv"], list)
        ):
            raise ValueError(f'--plan entry {i} must be {{"stage": NAME, "argv": [ARG, ...]}}, got {entry!r}')
        calls.append(stage_entry.prepare(load_stage(entry["stage"]), [str(a) for a in entry["argv"]]))
    return calls


def run_plan(spark: SparkSession, calls: Sequence[stage_entry.StageCall]) -> dict[str, dict[str, Any]]:
    """Run the stages in order in `spark`; stage -> report. The first failure stops the plan."""
    reports = {}
    for call in calls:
        try:
            reports[call.stage.name] = stage_entry.run_stage(spark, call)
        except Exception as err:
            done = ", ".join(reports) or "none"
            err.add_note(f"lakeprep: stage {call.stage.name} failed; committed before it: {done}")
            raise
        # The next stage starts without this one's cached data, as a new submission would.
        spark.catalog.clearCache()
    return reports


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", required=True, help='JSON list of {"stage": NAME, "argv": [ARG, ...]}')
    parser.add_argument("--error-file", help="local file that receives a failure outside the stages")
    ns = parser.parse_args(submission.decode_argv(argv))  # YARN cluster mode: encoded
    session.configure_logging("fused")
    with failure.failure_recorded(ns.error_file):
        calls = parse_plan(ns.plan)
        names = [call.stage.name for call in calls]
        spark = session.start_session(f"lakeprep-{'+'.join(names)}")
    try:
        run_plan(spark, calls)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
