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

Task logs stay short: Spark logs at the spec's `spark.log_level` (WARN unless asked,
`spark_jobs/log4j2.properties`), the stage's own lines (`lakeprep <stage>: ...`) at INFO,
and each line of spark-submit's output reaches the Airflow log at the level it carries.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException

from lakeprep_airflow import jobs_package, lake_fs
from lakeprep_airflow import spec as spec_mod
from lakeprep_airflow.run_spec import RUN_SPEC_FIELDS, RunSpecMixin, parse_overrides

__all__ = [
    "SparkOutputLog",
    "SparkStageOperator",
    "StageFailed",
    "parse_overrides",
    "spark_log_conf",
    "stage_argv",
]
from lakeprep_airflow.partition_status import check_partition

if TYPE_CHECKING:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
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


def spark_log_conf(conf: Mapping[str, str], level: str, config_uri: str) -> dict[str, str]:
    """`conf` plus what makes Spark log at `level`, configured by the log4j2 file `config_uri`.

    The driver (the spark-submit JVM in local and client mode, whose output is the task
    log) reads the file from its start: `-Dlog4j2.configurationFile`, placed before the
    options `conf` already has so an explicit one wins. Executors on a cluster start
    before `--files` reach them; they get the level from the driver (`spark.log.level`,
    synced to them by `lakeprep_jobs.common`). An explicit `spark.log.level` wins too.
    """
    driver = f"-Dlog4j2.configurationFile={config_uri} -Dlakeprep.spark.log.level={level}"
    given = conf.get("spark.driver.extraJavaOptions") or ""
    given = given.removeprefix(driver).strip()  # prepared before: added once
    return {
        "spark.log.level": level,
        "spark.executor.syncLogLevel.enabled": "true",
        **conf,
        "spark.driver.extraJavaOptions": f"{driver} {given}" if given else driver,
    }


# Spark's log4j2 layout (and the stages' Python logging): `26/01/31 12:00:00 WARN Utils: ...`.
_LEVELLED_LINE = re.compile(r"^\d{2}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} (?P<level>[A-Z]+) ")
_LEVELS = {
    "WARN": "warning",
    "WARNING": "warning",
    "ERROR": "error",
    "FATAL": "critical",
    "CRITICAL": "critical",
}


class SparkOutputLog:
    """The hook's logger, logging spark-submit's output lines at the level they carry.

    `SparkSubmitHook._process_spark_submit_log` logs every output line as `log.info(line)`,
    so Spark's WARN and ERROR lines would be INFO in Airflow and the UI's WARNING filter
    would hide them. A line with a level header goes at that level (Spark's
    TRACE/DEBUG/INFO stay INFO, as the provider logs them), the header-less lines after
    it (a stack trace, a multi-line message) at the same, a Python traceback at ERROR.
    The hook's own messages (with arguments) pass through unchanged.
    """

    def __init__(self, log: Any) -> None:
        self._log = log
        self._level = "info"

    def info(self, msg: Any, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs or not isinstance(msg, str):
            return self._log.info(msg, *args, **kwargs)
        header = _LEVELLED_LINE.match(msg)
        if header:
            self._level = _LEVELS.get(header["level"], "info")
        elif msg.startswith("Traceback (most recent call last)"):
            self._level = "error"
        return getattr(self._log, self._level)(msg)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


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
        conf = {
            "spark.sql.session.timeZone": spec.data.get("time_zone", "UTC"),
            **spec.data.get("spark", {}).get("conf", {}),
            **(self.conf or {}),
        }
        self.conf = spark_log_conf(conf, spec.data["spark"]["log_level"], self._log4j2_config_uri())
        return inputs, output

    def _log4j2_config_uri(self) -> str:
        """Where the driver reads the stages' log4j2 file.

        Local and client mode: on this worker. Cluster mode: the copy `--files` ships,
        which YARN puts into the driver's working directory before its JVM starts.
        """
        config = jobs_package.log4j2_config()
        if self._resolved_deploy_mode() != "cluster":
            return config.as_uri()
        shipped = [f for f in (self.files or "").split(",") if f]
        if str(config) not in shipped:
            self.files = ",".join([*shipped, str(config)])
        return config.name

    def _resolved_deploy_mode(self) -> str | None:
        """The deploy mode the provider's hook will use: this operator's, else the connection's."""
        if self._deploy_mode:
            return self._deploy_mode
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            return BaseHook.get_connection(self._conn_id).extra_dejson.get("deploy-mode")
        except AirflowNotFoundException:
            return None  # `_check_connection` names the missing connection

    def _get_hook(self) -> SparkSubmitHook:
        hook = super()._get_hook()
        # LoggingMixin keeps the logger in `_log`: the hook logs through the wrapper.
        hook._log = SparkOutputLog(hook.log)
        return hook

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
