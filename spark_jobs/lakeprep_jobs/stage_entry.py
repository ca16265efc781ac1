"""A stage's entry point: its declaration (`Stage`), its prepared call and how it runs.

Each stage module declares one `STAGE`; its own `main` (`stage_main`) and the fused
submission (`lakeprep_jobs.fused`) run it through the same `prepare` and `run_stage`:
argv parsed and params built before Spark starts, then the stage's `run` in the session,
its failure recorded (`lakeprep_jobs.failure`) and its Spark jobs named after it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from lakeprep_jobs.failure import failure_recorded
from lakeprep_jobs.session import configure_logging, log, log_as, start_session
from lakeprep_jobs.stage_args import StageArgs, params_from, parse_args

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclasses.dataclass(frozen=True)
class Stage:
    """A stage's entry point: its name, its argv help line, its params dataclass and its `run`.

    Each stage module declares one (`STAGE`); its own `main` and the fused submission
    (`lakeprep_jobs.fused`) run it through the same `prepare` and `run_stage`.
    """

    name: str
    description: str
    params_cls: type
    run: Callable[[SparkSession, list[str], str, Any], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class StageCall:
    """One parsed invocation of a stage: its argv and its params, built before Spark starts."""

    stage: Stage
    args: StageArgs
    params: Any


def prepare(stage: Stage, argv: Sequence[str] | None) -> StageCall:
    """Parse a stage's argv and build its params: an unknown or missing key fails here."""
    args = parse_args(argv, stage.description)
    with failure_recorded(args.error_file):
        params = params_from(stage.params_cls, args.params)
    return StageCall(stage=stage, args=args, params=params)


STAGE_PROPERTY = "lakeprep.stage"  # the Spark local property naming the stage that runs


def run_stage(spark: SparkSession, call: StageCall) -> dict[str, Any]:
    """Run one prepared stage in `spark`, its log lines under its own name; return its report."""
    log_as(call.stage.name)
    args = call.args
    # Every Spark job the stage starts carries its name (Spark UI's job properties, the
    # event log's `SparkListenerJobStart`): in a fused submission, which stage ran which job.
    sc = spark.sparkContext
    sc.setLocalProperty(STAGE_PROPERTY, call.stage.name)
    try:
        with failure_recorded(args.error_file):
            log.info("inputs %s -> output %s", ", ".join(args.inputs), args.output)
            report = call.stage.run(spark, args.inputs, args.output, call.params)
            log.info(
                "rows in %s, out %s, quarantined %s",
                report.get("rows_in"),
                report.get("rows_out"),
                report.get("rows_quarantined"),
            )
            log.info("report: %s", json.dumps(report, sort_keys=True))
    finally:
        sc.setLocalProperty(STAGE_PROPERTY, None)
    return report


def stage_main(argv: Sequence[str] | None, stage: Stage) -> None:
    """Parse argv, build the session, run the stage, stop the session in `finally`."""
    configure_logging(stage.name)
    call = prepare(stage, argv)
    with failure_recorded(call.args.error_file):
        spark = start_session(f"lakeprep-{stage.params_cls.__name__}")
    try:
        run_stage(spark, call)
    finally:
        spark.stop()
