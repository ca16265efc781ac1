"""`WindowStageOperator`: the window's stages in the Airflow worker, without Spark.

`fit_transform` merges the window's per-day statistics and `export_shards` (the
`prepared` layout, docs/MANIFEST.md) writes a manifest naming rows of the days' files:
neither needs a Spark job, so neither pays a JVM and a session. The operator runs the
stage modules' own `run_on` (`lakeprep_jobs.fit_transform`, `lakeprep_jobs.export_manifest`)
over the worker's lake (`lakeprep_airflow.worker_lake`), with the inputs, output and
params a `SparkStageOperator` would pass (`spec.stage_io`, `spec.stage_params`), the
window decided by `wait_for_window`. The partitions are the same either way; each stage
commits its own by staging and rename (`lakeprep_jobs.lake.PartitionCommit`).

A stage that refuses its input or parameters (`lakeprep_jobs.failure.is_refusal`) fails the
task without retries, as a Spark stage does; anything else (an unreachable NameNode, a
day not committed yet) is retried.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from lakeprep_airflow import spec as spec_mod
from lakeprep_airflow.lineage import StageLineageMixin
from lakeprep_airflow.operators.spark_stage import StageFailed, StageRefused, chosen_stages, log_rows
from lakeprep_airflow.run_spec import RUN_SPEC_FIELDS, RunSpecMixin

if TYPE_CHECKING:
    from airflow.sdk import Context


def export_layout(spec: spec_mod.DatasetSpec) -> str:
    """`prepared` or `encoded`: what the spec's export writes (`stages.export_shards.shards`)."""
    return spec.stages["export_shards"]["shards"]


def runs_in_worker(spec: spec_mod.DatasetSpec, stages: Sequence[str]) -> bool:
    """Whether `stages` (window stages) need no Spark for this spec."""
    return all(s == "fit_transform" or export_layout(spec) == "prepared" for s in stages)


def _run_stage(
    stage: str, lake: Any, inputs: list[str], output: str, params: dict[str, Any]
) -> dict[str, Any]:
    from lakeprep_jobs import export_manifest, export_shards, fit_transform, stage_args

    if stage == "fit_transform":
        return fit_transform.run_on(
            lake, inputs, output, stage_args.params_from(fit_transform.FitParams, params)
        )
    p = stage_args.params_from(export_shards.ExportParams, params)
    if p.shards != "prepared":
        raise ValueError(
            f"export_shards writes {p.shards} shards for this run (stages.export_shards.shards), "
            "which Spark writes; "
            "the DAG runs it in the worker, as the spec read at parse time asked. Set "
            "stages.export_shards.shards: encoded in the spec file to run it in Spark"
        )
    return export_manifest.run_on(lake, inputs, output, p)


class WindowStageOperator(RunSpecMixin, StageLineageMixin, BaseOperator):
    """Run `fit_transform` and/or `export_shards` (a manifest) for one date, in the worker.

    :param stage: `fit_transform` or `export_shards`.
    :param stages: instead of `stage`: both, in order, in one task (`spark.fuse_stages`).
    :param window_task_id: the task whose XCom is the window decision.
    :param spec_path: path of the dataset's YAML spec on the worker. (templated)
    :param lake_root: lake root URI; defaults to the `lakeprep_lake_root` Variable. (templated)
    :param run_ds: the partition date, YYYY-MM-DD; defaults to the run's logical date. (templated)
    :param overrides: dotted spec paths to values from the trigger form. (templated)
    :param webhdfs_conn_id: connection used for `hdfs://` lakes.
    """

    template_fields: Sequence[str] = RUN_SPEC_FIELDS
    ui_color = "#e8f0fe"

    def __init__(
        self,
        *,
        stage: str | None = None,
        stages: Sequence[str] | None = None,
        window_task_id: str = "wait_for_window",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stages = chosen_stages(stage, stages)
        if any(s not in spec_mod.WINDOW_STAGES for s in self.stages):
            raise ValueError(
                f"stages {list(self.stages)}: only the window's {spec_mod.WINDOW_STAGES} run here"
            )
        self.fused = stages is not None
        self.window_task_id = window_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        from lakeprep_airflow.retrain import describe_export_events
        from lakeprep_airflow.worker_lake import WorkerLake
        from lakeprep_jobs import failure

        spec = self.run_spec()
        lake_root = self.lake_root_uri()
        window = context["ti"].xcom_pull(task_ids=self.window_task_id)
        if not window:
            raise ValueError(
                f"stages {'+'.join(self.stages)} need the window decided by task {self.window_task_id!r}"
            )
        lake = WorkerLake(self.webhdfs_conn_id)
        reports: dict[str, dict[str, Any]] = {}
        output = ""
        for stage in self.stages:
            inputs, output = spec_mod.stage_io(
                spec, stage, lake_root=lake_root, ds=self.run_ds, window_days=window["complete"]
            )
            params = spec_mod.stage_params(
                spec, stage, lake_root=lake_root, ds=self.run_ds, run_id=context["run_id"], window=window
            )
            self.log.info(
                "stage %s: %d input(s) %s .. %s -> %s", stage, len(inputs), inputs[0], inputs[-1], output
            )
            try:
                report = _run_stage(stage, lake, inputs, output, params)
            except Exception as err:
                error_class = StageRefused if failure.is_refusal(err) else StageFailed
                raise error_class(f"stage {stage} failed: {type(err).__name__}: {err}") from err
            log_rows(self.log, stage, report)
            reports[stage] = report
        describe_export_events(context, self.outlets, spec, ds=self.run_ds, partition_uri=output)
        return reports if self.fused else reports[self.stages[0]]
