"""`SparkStageOperator`: submit a lakeprep Spark stage (or several, fused) through the Spark provider.

A thin subclass of `SparkSubmitOperator`: the Airflow connection carries the master,
deploy mode, queue and Kerberos settings, explicit arguments override it, and the
provider does the submitting, log streaming, masking and killing. What this class adds
is the lakeprep contract: it re-reads and re-validates the dataset spec when the task
starts (with the run's trigger-form overrides), derives the stage's inputs, output and
`--params` JSON from it, ships `lakeprep_jobs` (with `lakeprep_contracts`) as a zip,
and returns the stage's row accounting (`_lakeprep_report.json`) as its XCom.

Fused (`stages=`, the spec's `spark.fuse_stages`, docs/PIPELINE.md#fused-stages):
consecutive stages of one kind share one submission, `lakeprep_jobs/fused.py` with a
plan of each stage's own argv (`fused_argv`), so a small partition pays one JVM start-up
instead of three (daily) or two (window). Only the first stage's input is checked before
the submission (the others are produced inside it); the XCom is stage -> report.

Window stages (`fit_transform`, `export_shards`) read the days that `wait_for_window`
decided (its XCom), so both see the same days and the manifest can name the others.
A failed stage fails the task with the stage's own message first, naming the stage (the
job writes it to the stage's `--error-file`, a local file in client mode, and prints it
on the driver's stderr: `lakeprep_contracts.stage_errors`); spark-submit's command line and
log tail, or YARN's diagnostics, stay in the chained cause. When the job says the error refuses
the input or the parameters (a ContractError, a FitError, bad `--params`, a value Spark
cannot cast: `lakeprep_jobs.failure.is_refusal`), the task fails without retries
(`StageRefused`); a spark-submit that dies without such a refusal (a NameNode or master
that does not answer, a lost executor, a killed driver) is retried as usual.

YARN cluster mode (`spark://yarn?deploy-mode=cluster&queue=...` with the connection extra
`yarn_resourcemanager_webapp_address`, docs/CLUSTERS.md): the driver runs in a YARN
container. The provider's `yarn_track_via_rm_api` is on unless given: spark-submit returns
once YARN accepted the application, the task polls the ResourceManager, a retry of a task
whose application still runs (or succeeded) reconnects to it instead of submitting again,
and `on_kill` kills the application through the ResourceManager's REST API. When the
application has ended, the task copies the driver container's stdout and stderr from the
NodeManager into its own log (`yarn_driver_log`) and finds the stage's error record there.
The argv travels base64-encoded (`lakeprep_contracts.submission`): YARN's launch script
does not pass JSON with backslashes through.
YARN does not start a second driver after a failed one (`spark.yarn.maxAppAttempts=1`
unless the conf says otherwise): retries are Airflow's, and a refusal must fail once.

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
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import requests
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from lakeprep_airflow import jobs_package, lake_fs
from lakeprep_airflow import spec as spec_mod
from lakeprep_airflow.lineage import SparkLineageMixin
from lakeprep_airflow.run_spec import RUN_SPEC_FIELDS, RunSpecMixin, parse_overrides
from lakeprep_contracts import stage_errors, submission

__all__ = [
    "SparkOutputLog",
    "SparkStageOperator",
    "StageCall",
    "StageFailed",
    "StageRefused",
    "fused_argv",
    "parse_overrides",
    "spark_jvm_conf",
    "spark_log_conf",
    "stage_argv",
]
from lakeprep_airflow.partition_status import check_partition

if TYPE_CHECKING:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.sdk import Context
    from requests.auth import AuthBase


def stage_argv(
    inputs: Sequence[str], output: str, params: dict[str, Any], error_file: str | None = None
) -> list[str]:
    """The argv contract every `lakeprep_jobs` stage parses (see `stage_args.parse_args`)."""
    argv: list[str] = []
    for uri in inputs:
        argv += ["--input", uri]
    argv += ["--output", output, "--params", json.dumps(params, sort_keys=True, separators=(",", ":"))]
    return [*argv, "--error-file", error_file] if error_file else argv


def fused_argv(plan: Sequence[tuple[str, Sequence[str]]], error_file: str | None = None) -> list[str]:
    """The argv of `lakeprep_jobs/fused.py`: (stage, that stage's own `stage_argv`), in order."""
    entries = [{"stage": stage, "argv": list(argv)} for stage, argv in plan]
    argv = ["--plan", json.dumps(entries, separators=(",", ":"))]
    return [*argv, "--error-file", error_file] if error_file else argv


def log_rows(log: Any, stage: str, report: dict[str, Any]) -> None:
    """The task log's line for a stage's report: its rows in, out and quarantined."""
    log.info(
        "stage %s: rows in %s, out %s, quarantined %s",
        stage,
        report.get("rows_in"),
        report.get("rows_out"),
        report.get("rows_quarantined"),
    )


def chosen_stages(stage: str | None, stages: Sequence[str] | None) -> tuple[str, ...]:
    """The operator's stages: one, or consecutive stages of one kind (daily or window), in order."""
    if (stage is None) == (stages is None):
        raise ValueError(
            f"give stage= (one stage) or stages= (several in one submission), not both or neither; "
            f"got stage={stage!r}, stages={stages!r}"
        )
    chosen = (stage,) if stage is not None else tuple(stages or ())
    for name in chosen or ("",):
        if name not in spec_mod.STAGES:
            raise ValueError(f"stage {name!r} must be one of {spec_mod.STAGES}")
    for kind in (spec_mod.DAILY_STAGES, spec_mod.WINDOW_STAGES):
        start = kind.index(chosen[0]) if chosen[0] in kind else None
        if start is not None and chosen != kind[start : start + len(chosen)]:
            raise ValueError(
                f"stages {list(chosen)} must be consecutive stages of one kind, in pipeline order: "
                f"daily {list(spec_mod.DAILY_STAGES)} or window {list(spec_mod.WINDOW_STAGES)}"
            )
    return chosen


class StageCall(NamedTuple):
    """One stage of a submission: what it reads, what it commits, the argv its job parses."""

    stage: str
    inputs: list[str]
    output: str
    argv: list[str]


DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
EXECUTOR_JAVA_OPTIONS = "spark.executor.extraJavaOptions"
# Whole-stage code generation compiles each stage of a query into one Java method, and a
# contract of a few dozen columns typed and checked per row gives a method past 8,000
# bytes of bytecode, which HotSpot never JIT-compiles by default (DontCompileHugeMethods):
# the JVM interprets it for every row. Compiling it made validate's typing and checking
# of 1 M rows 3x faster (docs/PIPELINE.md, "Generated code the JIT compiles"). Spark's alternative knob,
# spark.sql.codegen.hugeMethodLimit=8000, drops such plans to per-operator code instead,
# which measured slower here. Driver and executors both run generated code.
JIT_JAVA_OPTIONS = "-XX:-DontCompileHugeMethods"


def with_java_options(conf: Mapping[str, str], key: str, options: str) -> dict[str, str]:
    """`conf` with `options` placed before the JVM options `conf[key]` already has.

    The JVM keeps the last of repeated options, so an explicit one in `conf` wins. Added
    once: options prepared before (a task preparing its submission again) are not repeated.
    """
    given = " ".join((conf.get(key) or "").replace(options, "", 1).split())
    return {**conf, key: f"{options} {given}" if given else options}


def spark_jvm_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """`conf` plus the JIT option every stage's driver and executors run with (JIT_JAVA_OPTIONS)."""
    for key in (DRIVER_JAVA_OPTIONS, EXECUTOR_JAVA_OPTIONS):
        conf = with_java_options(conf, key, JIT_JAVA_OPTIONS)
    return dict(conf)


def spark_log_conf(conf: Mapping[str, str], level: str, config_uri: str) -> dict[str, str]:
    """`conf` plus what makes Spark log at `level`, configured by the log4j2 file `config_uri`.

    The driver (the spark-submit JVM in local and client mode, whose output is the task
    log) reads the file from its start: `-Dlog4j2.configurationFile`, placed before the
    options `conf` already has so an explicit one wins. Executors on a cluster start
    before `--files` reach them; they get the level from the driver (`spark.log.level`,
    synced to them by `lakeprep_jobs.session`). An explicit `spark.log.level` wins too.
    """
    driver = f"-Dlog4j2.configurationFile={config_uri} -Dlakeprep.spark.log.level={level}"
    return with_java_options(
        {"spark.log.level": level, "spark.executor.syncLogLevel.enabled": "true", **conf},
        DRIVER_JAVA_OPTIONS,
        driver,
    )


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


def _temp_file(prefix: str, suffix: str) -> str:
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=suffix)
    os.close(fd)
    return path


DRIVER_LOG_FILES = ("stdout", "stderr")  # the stages' own lines go to stdout, Spark's to stderr


def yarn_driver_log(
    rm_url: str, application_id: str, auth: AuthBase | None = None, timeout: float = 30
) -> list[tuple[str, str]]:
    """(title, text) of each driver log file of a YARN application, every attempt's, from
    its NodeManager's web services.

    In cluster mode the driver is the application master: the ResourceManager names each
    attempt's container and node (`/ws/v1/cluster/apps/<id>/appattempts`), the NodeManager
    serves the container's files while it keeps them (`/ws/v1/node/containerlogs/<container>/
    <file>`: with log aggregation off for `yarn.nodemanager.log.retain-seconds`; with it on,
    the NodeManager reads the aggregated copy). Raises `requests.RequestException` or
    `ValueError` when a service does not answer as documented.
    """
    response = requests.get(
        f"{rm_url}/ws/v1/cluster/apps/{application_id}/appattempts", auth=auth, timeout=timeout
    )
    response.raise_for_status()
    attempts = (response.json().get("appAttempts") or {}).get("appAttempt") or []
    logs = []
    for attempt in attempts:
        container, node = attempt.get("containerId"), attempt.get("nodeHttpAddress")
        if not container or not node:
            raise ValueError(
                f"{application_id} attempt {attempt.get('id')} names no container or node: {attempt}"
            )
        base = node if "://" in node else f"http://{node}"
        for name in DRIVER_LOG_FILES:
            url = f"{base}/ws/v1/node/containerlogs/{container}/{name}"
            file = requests.get(url, auth=auth, timeout=timeout)
            file.raise_for_status()
            logs.append((f"{container} {name} (attempt {attempt.get('id')}, node {node})", file.text))
    return logs


class StageFailed(AirflowException):
    """A stage's job failed; the message is the job's own error, not spark-submit's. Retried."""


class StageRefused(StageFailed, AirflowFailException):
    """A stage's job refused its input or parameters: the task fails without retries.

    The same partition and parameters give the same refusal; Airflow fails an
    AirflowFailException at once, whatever `retries` says (task_runner.py
    `_run_task_and_map_outcome`).
    """


def read_error_file(path: str) -> tuple[str, bool] | None:
    """The job's error in `path` and whether it is a refusal; None when the job wrote none.

    The job writes `{"error": ..., "refusal": ...}` (`lakeprep_jobs.failure.failure_recorded`);
    any other text is taken as the message of an error worth a retry.
    """
    text = Path(path).read_text(encoding="utf-8").strip()
    if not text:
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return text, False
    if not isinstance(doc, dict) or not isinstance(doc.get("error"), str):
        return text, False
    return doc["error"].strip(), doc.get("refusal") is True


class SparkStageOperator(RunSpecMixin, SparkLineageMixin, SparkSubmitOperator):
    """Run one lakeprep stage (`validate` ... `export_shards`), or several in one submission, for one date.

    :param stage: the stage name, one of `lakeprep_airflow.spec.STAGES`.
    :param stages: instead of `stage`: consecutive stages of one kind (`validate, preprocess,
        sample` or `fit_transform, export_shards`), run in one spark-submit
        (`lakeprep_jobs/fused.py`); each commits its partition as its own task would.
    :param spec_path: path of the dataset's YAML spec on the worker. (templated)
    :param lake_root: lake root URI; defaults to the `lakeprep_lake_root` Variable. (templated)
    :param run_ds: the partition date, YYYY-MM-DD; defaults to the run's logical date. (templated)
    :param overrides: dotted spec paths to values, typically from `params`
        (`{"stages.sample.seed": "{{ params.seed }}"}`), validated like the file. (templated)
    :param window_task_id: the task whose XCom is the window (window stages only).
    :param webhdfs_conn_id: connection used to read the stage report from `hdfs://` lakes.
    :param kwargs: passed to `SparkSubmitOperator` (`conn_id`, `conf`, resources, ...).
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, *RUN_SPEC_FIELDS)

    def __init__(
        self,
        *,
        stage: str | None = None,
        stages: Sequence[str] | None = None,
        window_task_id: str = "wait_for_window",
        **kwargs: Any,
    ) -> None:
        chosen = chosen_stages(stage, stages)
        kwargs.setdefault("name", f"lakeprep-{'+'.join(chosen)}-{{{{ run_id | replace(':', '') }}}}")
        # YARN cluster mode needs the provider's RM tracking; on unless given (`_get_hook`).
        self._track_yarn_by_default = "yarn_track_via_rm_api" not in kwargs
        super().__init__(**kwargs)
        self.stage = stage  # None when fused
        self.stages = chosen
        self.fused = stages is not None
        self.window_task_id = window_task_id
        self.stage_calls: list[StageCall] = []
        self._error_files: dict[str, str] = {}
        self._plan_error_file: str | None = None
        self._driver_on_yarn = False  # the driver runs in a YARN container (set by `execute`)
        self._driver_records: dict[str, dict[str, Any]] = {}  # error file -> record, from its log

    @property
    def label(self) -> str:
        """`sample`, or `validate+preprocess+sample` when fused: the stages in messages."""
        return "+".join(self.stages)

    def prepare_submission(
        self, run_id: str, window: dict[str, list[str]] | None = None
    ) -> tuple[list[str], str]:
        """Validate the spec and fill `application`, `py_files`, `application_args`, `conf`.

        `window` is `wait_for_window`'s decision (window stages only). Returns the inputs of
        the (first) stage and the output of the (last) one; each stage's own are in
        `stage_calls`. Split from `execute` so tests can compare argv as lists.
        """
        spec = self.run_spec()
        lake_root = self.lake_root_uri()
        on_yarn = self._yarn_cluster_mode()
        windowed = self.stages[0] in spec_mod.WINDOW_STAGES
        if windowed and not window:
            raise ValueError(f"stage {self.label} needs the window decided by task {self.window_task_id!r}")
        calls = []
        for stage in self.stages:
            inputs, output = spec_mod.stage_io(
                spec,
                stage,
                lake_root=lake_root,
                ds=self.run_ds,
                window_days=window["complete"] if windowed else None,
            )
            params = spec_mod.stage_params(
                spec, stage, lake_root=lake_root, ds=self.run_ds, run_id=run_id, window=window
            )
            argv = stage_argv(inputs, output, params, self._error_files.get(stage))
            calls.append(StageCall(stage, inputs, output, argv))
        self.stage_calls = calls
        if self.fused:
            self.application = str(jobs_package.stage_script(jobs_package.FUSED_JOB))
            self.application_args = fused_argv([(c.stage, c.argv) for c in calls], self._plan_error_file)
        else:
            self.application = str(jobs_package.stage_script(calls[0].stage))
            self.application_args = calls[0].argv
        if on_yarn:  # YARN's launch script mangles backslashes and quotes (`submission`)
            self.application_args = submission.encode_argv(self.application_args)
        self.py_files = str(jobs_package.build_zip())
        # The spec's Spark settings first (its time zone as the session's, so timestamps
        # without an offset and calendar functions use the dataset's zone); the
        # operator's own `conf` wins.
        conf = {
            "spark.sql.session.timeZone": spec.data.get("time_zone", "UTC"),
            # Retries are Airflow's: a second driver of the same application would run a
            # refused stage twice, and is not what the task's `retries` say.
            **({"spark.yarn.maxAppAttempts": "1"} if on_yarn else {}),
            **spec.data.get("spark", {}).get("conf", {}),
            **(self.conf or {}),
        }
        level = spec.data["spark"]["log_level"]
        self.conf = spark_log_conf(spark_jvm_conf(conf), level, self._log4j2_config_uri())
        return calls[0].inputs, calls[-1].output

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

    def _yarn_cluster_mode(self) -> bool:
        """Whether the driver runs in a YARN container: the provider's own reading of the
        connection and this operator's `deploy_mode` (no spark-submit runs)."""
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        hook = SparkSubmitHook(
            conn_id=self._conn_id, deploy_mode=self._deploy_mode, spark_binary=self._spark_binary
        )
        return hook._is_yarn_cluster_mode

    def _get_hook(self) -> SparkSubmitHook:
        hook = super()._get_hook()
        # LoggingMixin keeps the logger in `_log`: the hook logs through the wrapper.
        hook._log = SparkOutputLog(hook.log)
        if hook._is_yarn_cluster_mode and self._track_yarn_by_default:
            # The provider refuses YARN cluster mode with durable=True (its default) without
            # RM tracking; with it, spark-submit does not wait and `on_kill` kills through
            # the RM's REST API (there may be no `yarn` CLI on the worker).
            hook._yarn_track_via_rm_api = True
        return hook

    def poll_until_complete(self, external_id: Any, context: Context) -> None:
        """The provider's polling; then, in YARN cluster mode, the driver's log into the task log."""
        try:
            super().poll_until_complete(external_id, context)
        finally:
            if self._driver_on_yarn and self._hook is not None:
                self._copy_driver_log(self._hook, str(external_id))

    def _copy_driver_log(self, hook: SparkSubmitHook, application_id: str) -> None:
        """Log the driver's stdout and stderr line by line (at the levels they carry) and
        keep the stages' error records from them. A log that cannot be fetched is a
        warning: the application's own outcome decides the task."""
        try:
            logs = yarn_driver_log(hook._get_yarn_rm_base_url(), application_id, hook._resolved_yarn_rm_auth)
        except (requests.RequestException, ValueError) as err:
            self.log.warning("the driver log of YARN application %s was not fetched: %s", application_id, err)
            return
        for title, text in logs:
            self.log.info("driver log %s:", title)
            lines = text.splitlines()
            output = SparkOutputLog(self.log)
            for line in lines:
                output.info(line)
            self._driver_records.update(stage_errors.records_in(lines))

    def _recorded_error(self, path: str) -> tuple[str, bool] | None:
        """The job's error for error file `path`: from the driver's log (YARN cluster mode,
        where the file stays in the driver's container), else from the local file."""
        if path in self._driver_records:
            record = self._driver_records[path]
            return record["error"].strip(), record.get("refusal") is True
        return None if self._driver_on_yarn else read_error_file(path)

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
        """The partition this (first) stage needs is complete, before a Spark driver starts.

        Fails fast and names the problem: a missing partition, or (LakeUnreachableError)
        the endpoint of a NameNode that does not answer. A fused submission's later
        stages read what its earlier ones commit inside it: only the first is checked.
        """
        status = check_partition(uri, webhdfs_conn_id=self.webhdfs_conn_id)
        if not status.has_marker:
            raise FileNotFoundError(f"stage {self.stages[0]} needs a complete partition: {status.describe()}")

    def _window(self, context: Context) -> dict[str, list[str]] | None:
        if self.stages[0] not in spec_mod.WINDOW_STAGES:
            return None
        return context["ti"].xcom_pull(task_ids=self.window_task_id)

    def _failure(self) -> StageFailed | None:
        """The failed stage's own error, naming it; else what failed outside the stages.

        StageRefused when the job recorded a refusal of the input or the parameters.
        """
        for stage, path in self._error_files.items():
            if found := self._recorded_error(path):
                message, refusal = found
                return (StageRefused if refusal else StageFailed)(f"stage {stage} failed: {message}")
        if self._plan_error_file and (found := self._recorded_error(self._plan_error_file)):
            message, refusal = found
            return (StageRefused if refusal else StageFailed)(
                f"stages {', '.join(self.stages)} failed before a stage ran: {message}"
            )
        return None

    def execute(self, context: Context) -> dict[str, Any]:
        """Submit, then return the report: the stage's, or stage -> report when fused."""
        self._driver_on_yarn = self._yarn_cluster_mode()
        self._driver_records = {}
        if self._driver_on_yarn:
            # Paths in the driver container's working directory; the records come back
            # through the driver's log (`_copy_driver_log`).
            self._error_files = {stage: f"lakeprep-{stage}.error" for stage in self.stages}
            self._plan_error_file = f"lakeprep-{self.label}.error" if self.fused else None
        else:
            self._error_files = {stage: _temp_file(f"lakeprep-{stage}-", ".error") for stage in self.stages}
            self._plan_error_file = _temp_file(f"lakeprep-{self.label}-", ".error") if self.fused else None
        try:
            inputs, _ = self.prepare_submission(context["run_id"], self._window(context))
            self._check_connection()
            # The run's own day is always the last input (window stages read earlier days too).
            self._check_input(inputs[-1])
            for call in self.stage_calls:
                self.log.info("stage %s: %s", call.stage, " ".join(call.argv))
            try:
                super().execute(context)
            except (AirflowException, RuntimeError) as err:  # RuntimeError: a failed YARN application
                failure = self._failure()
                if failure:
                    raise failure from err
                raise
        finally:
            for path in [*self._error_files.values(), self._plan_error_file]:
                if path and not self._driver_on_yarn:
                    os.unlink(path)
            self._error_files, self._plan_error_file = {}, None
        reports = {}
        for call in self.stage_calls:
            fs, path = lake_fs.resolve(call.output, webhdfs_conn_id=self.webhdfs_conn_id)
            report = json.loads(fs.read_bytes(lake_fs.join(path, spec_mod.REPORT_NAME)))
            log_rows(self.log, call.stage, report)
            reports[call.stage] = report
        # The last stage's partition is what the task publishes (export_shards' manifest).
        self._describe_outlet_events(context, self.stage_calls[-1].output)
        return reports if self.fused else reports[self.stages[0]]

    def _describe_outlet_events(self, context: Context, output: str) -> None:
        """The export's Asset events name the committed partition (`retrain.describe_export_events`)."""
        from lakeprep_airflow.retrain import describe_export_events

        describe_export_events(context, self.outlets, self.run_spec(), ds=self.run_ds, partition_uri=output)
