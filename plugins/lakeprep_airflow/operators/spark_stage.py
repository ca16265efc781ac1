"""`SparkStageOperator`: submit one lakeprep Spark stage through the Spark provider.

A thin subclass of `SparkSubmitOperator`: the Airflow connection carries the master,
deploy mode, queue and Kerberos settings, explicit arguments override it, and the
provider does the submitting, log streaming, masking and killing. What this class adds
is the lakeprep contract: it re-reads and re-validates the dataset spec when the task
starts (with the run's trigger-form overrides), derives the stage's inputs, output and
`--params` JSON from it, ships `lakeprep_jobs` (with `lakeprep_contracts`) as a zip,
and returns the stage's row accounting (`_lakeprep_report.json`) as its XCom.

Window stages (`fit_transform`, `export_shards`) read the days that `wait_for_window`
decided (its XCom), so both see the same days and the manifest can name the others.
A failed stage fails the task with the stage's own message first (the job writes it to
`--error-file`, a local file in client mode); spark-submit's command line and log tail
stay in the chained cause.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException

from lakeprep_airflow import jobs_package, lake_fs
from lakeprep_airflow import spec as spec_mod
from lakeprep_airflow.run_spec import RUN_SPEC_FIELDS, RunSpecMixin, parse_overrides

__all__ = ["SparkStageOperator", "StageFailed", "parse_overrides", "stage_argv"]
from lakeprep_airflow.partition_status import check_partition

if TYPE_CHECKING:
    from airflow.sdk import Context


def stage_argv(
    inputs: Sequence[str], output: str, params: dict[str, Any], error_file: str | None = None
) -> list[str]:
    """The argv contract every `lakeprep_jobs` stage parses (see `common.parse_args`)."""
    argv: list[str] = []
    for uri in inputs:
        argv += ["--input", uri]
    argv += ["--output", output, "--params", json.dumps(params, sort_keys=True, separators=(",", ":"))]
    return [*argv, "--error-file", error_file] if error_file else argv


class StageFailed(AirflowException):
    """A stage's job failed; the message is the job's own error, not spark-submit's."""


class SparkStageOperator(RunSpecMixin, SparkSubmitOperator):
    """Run one lakeprep stage (`validate` ... `export_shards`) for one logical date.

    :param stage: the stage name, one of `lakeprep_airflow.spec.STAGES`.
    :param spec_path: path of the dataset's YAML spec on the worker. (templated)
    :param lake_root: lake root URI; defaults to the `lakeprep_lake_root` Variable. (templated)
    :param run_ds: the partition date, YYYY-MM-DD; defaults to the run's logical date. (templated)
    :param overrides: dotted spec paths to values, typically from `params`
        (`{"stages.sample.seed": "{{ params.seed }}"}`), validated like the file. (templated)
    :param webhdfs_conn_id: connection used to read the stage report from `hdfs://` lakes.
    :param kwargs: passed to `SparkSubmitOperator` (`conn_id`, `conf`, resources, ...).
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, *RUN_SPEC_FIELDS)

    def __init__(self, *, stage: str, window_task_id: str = "wait_for_window", **kwargs: Any) -> None:
        if stage not in spec_mod.STAGES:
            raise ValueError(f"stage {stage!r} must be one of {spec_mod.STAGES}")
        kwargs.setdefault("name", f"lakeprep-{stage}-{{{{ run_id | replace(':', '') }}}}")
        super().__init__(**kwargs)
        self.stage = stage
        self.window_task_id = window_task_id
        self._error_file: str | None = None

    def prepare_submission(
        self, run_id: str, window: dict[str, list[str]] | None = None
    ) -> tuple[list[str], str]:
        """Validate the spec and fill `application`, `py_files`, `application_args`, `conf`.

        `window` is `wait_for_window`'s decision (window stages only). Returns (inputs,
        output). Split from `execute` so tests can compare argv as lists.
        """
        spec = self.run_spec()
        lake_root = self.lake_root_uri()
        windowed = self.stage in spec_mod.WINDOW_STAGES
        if windowed and not window:
            raise ValueError(f"stage {self.stage} needs the window decided by task {self.window_task_id!r}")
        inputs, output = spec_mod.stage_io(
            spec,
            self.stage,
            lake_root=lake_root,
            ds=self.run_ds,
            window_days=window["complete"] if windowed else None,
        )
        params = spec_mod.stage_params(
            spec, self.stage, lake_root=lake_root, ds=self.run_ds, run_id=run_id, window=window
        )
        self.application = str(jobs_package.stage_script(self.stage))
        self.py_files = str(jobs_package.build_zip())
        self.application_args = stage_argv(inputs, output, params, self._error_file)
        # The spec's Spark settings first (its time zone as the session's, so timestamps
        # without an offset and calendar functions use the dataset's zone); the
        # operator's own `conf` wins.
        self.conf = {
            "spark.sql.session.timeZone": spec.data.get("time_zone", "UTC"),
            **spec.data.get("spark", {}).get("conf", {}),
            **(self.conf or {}),
        }
        return inputs, output

    def _check_connection(self) -> None:
        # The provider silently falls back to `--master yarn` when the connection is
        # missing; on a machine without YARN that fails far from the cause.
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            BaseHook.get_connection(self._conn_id)
        except AirflowNotFoundException as err:
            raise ValueError(
                f"Spark connection {self._conn_id!r} is not defined; set AIRFLOW_CONN_"
                f'{self._conn_id.upper()} (e.g. \'{{"conn_type": "spark", "host": "local[*]"}}\' '
                "or 'spark://spark-master:7077') or create it in the UI"
            ) from err

    def _check_input(self, uri: str) -> None:
        """The partition this stage needs is complete, before a Spark driver starts.

        Fails fast and names the problem: a missing partition, or (LakeUnreachableError)
        the endpoint of a NameNode that does not answer.
        """
        status = check_partition(uri, webhdfs_conn_id=self.webhdfs_conn_id)
        if not status.has_marker:
            raise FileNotFoundError(f"stage {self.stage} needs a complete partition: {status.describe()}")

    def _window(self, context: Context) -> dict[str, list[str]] | None:
        if self.stage not in spec_mod.WINDOW_STAGES:
            return None
        return context["ti"].xcom_pull(task_ids=self.window_task_id)

    def execute(self, context: Context) -> dict[str, Any]:
        fd, self._error_file = tempfile.mkstemp(prefix=f"lakeprep-{self.stage}-", suffix=".error")
        os.close(fd)
        try:
            inputs, output = self.prepare_submission(context["run_id"], self._window(context))
            self._check_connection()
            # The run's own day is always the last input (window stages read earlier days too).
            self._check_input(inputs[-1])
            self.log.info("stage %s: %s", self.stage, " ".join(self.application_args))
            try:
                super().execute(context)
            except AirflowException as err:
                with open(self._error_file, encoding="utf-8") as f:
                    message = f.read().strip()
                if message:
                    raise StageFailed(f"stage {self.stage} failed: {message}") from err
                raise
        finally:
            os.unlink(self._error_file)
            self._error_file = None
        fs, path = lake_fs.resolve(output, webhdfs_conn_id=self.webhdfs_conn_id)
        report = json.loads(fs.read_bytes(lake_fs.join(path, spec_mod.REPORT_NAME)))
        self.log.info(
            "stage %s: rows in %s, out %s, quarantined %s",
            self.stage,
            report.get("rows_in"),
            report.get("rows_out"),
            report.get("rows_quarantined"),
        )
        self._describe_outlet_events(context, output)
        return report

    def _describe_outlet_events(self, context: Context, output: str) -> None:
        """Give each outlet Asset's event the partition it stands for (its `extra`).

        Airflow emits the events only when the task succeeds, so they always name a
        committed partition. Asset-triggered consumers have no logical date: the date
        and the manifest's URI come from here (`lakeprep_airflow.retrain`).
        """
        from airflow.sdk import Asset

        from lakeprep_airflow.retrain import export_event_extra

        assets = [outlet for outlet in self.outlets if isinstance(outlet, Asset)]
        if not assets:
            return
        spec = self.run_spec()
        extra = export_event_extra(
            dataset=spec.name, ds=self.run_ds, partition_uri=output, config_hash=spec_mod.config_hash(spec)
        )
        for asset in assets:
            context["outlet_events"][asset].extra = extra
