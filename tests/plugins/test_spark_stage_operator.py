from __future__ import annotations

import dataclasses
import json
import os
import zipfile
from pathlib import Path

import pytest

from lakeprep_airflow import jobs_package
from lakeprep_airflow.operators.spark_stage import SparkStageOperator, parse_overrides, stage_argv

REPO = Path(__file__).resolve().parents[2]
FLIGHTS = str(REPO / "pipelines" / "flights.yaml")


def make_op(stage: str = "sample", **kw) -> SparkStageOperator:
    kw.setdefault("lake_root", "hdfs://nn:8020/lake")
    kw.setdefault("run_ds", "2013-01-02")
    kw.setdefault("spec_path", FLIGHTS)
    return SparkStageOperator(task_id=stage, stage=stage, **kw)


def test_stage_argv_is_the_job_contract():
    assert stage_argv(["a", "b"], "out", {"z": 1, "a": [1]}) == [
        "--input",
        "a",
        "--input",
        "b",
        "--output",
        "out",
        "--params",
        '{"a":[1],"z":1}',
    ]


def test_overrides_are_parsed_as_json_scalars():
    assert parse_overrides({"x": "0.5", "y": "7", "z": "true", "w": "abc"}) == {
        "x": 0.5,
        "y": 7,
        "z": True,
        "w": "abc",
    }


def test_prepare_submission_builds_argv_from_spec_and_overrides():
    op = make_op(overrides={"stages.sample.seed": "11", "stages.sample.fraction": "0.25"})
    inputs, output = op.prepare_submission("scheduled__2013-01-02")
    assert inputs == ["hdfs://nn:8020/lake/preprocess/flights/dt=2013-01-02"]
    assert output == "hdfs://nn:8020/lake/sample/flights/dt=2013-01-02"
    args = op.application_args
    assert args[:4] == ["--input", inputs[0], "--output", output]
    params = json.loads(args[args.index("--params") + 1])
    assert params["seed"] == 11
    assert params["fraction"] == 0.25
    assert params["class_fractions"] == {}  # flights balances in the export, train only
    assert op.application.endswith("spark_jobs/lakeprep_jobs/sample.py")
    assert op.conf["spark.sql.shuffle.partitions"] == "4"
    assert op.conf["spark.sql.session.timeZone"] == "America/New_York"  # the spec's time_zone


def test_window_stages_read_the_days_wait_for_window_decided():
    window = {
        "days": ["2013-01-01", "2013-01-02"],
        "complete": ["2013-01-02"],
        "failed": ["2013-01-01"],
        "missing": [],
        "before_start": [],
    }
    op = make_op(stage="export_shards")
    with pytest.raises(ValueError, match="needs the window decided by task 'wait_for_window'"):
        op.prepare_submission("r")
    inputs, output = op.prepare_submission("r", window)
    assert inputs == ["hdfs://nn:8020/lake/sample/flights/dt=2013-01-02"]
    params = json.loads(op.application_args[op.application_args.index("--params") + 1])
    assert params["window"]["failed"] == ["2013-01-01"]
    assert params["transform_uri"] == "hdfs://nn:8020/lake/fit_transform/flights/dt=2013-01-02/transform.json"
    assert params["balance"]["strategy"] == "undersample" and params["balance"]["seed"] == 7
    fit = make_op(stage="fit_transform")
    fit_inputs, fit_output = fit.prepare_submission("r", window)
    assert fit_inputs == inputs and fit_output.endswith("/fit_transform/flights/dt=2013-01-02")


def test_a_failed_stage_fails_the_task_with_the_stages_own_message(monkeypatch, tmp_path):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk.exceptions import AirflowException

    from lakeprep_airflow.operators.spark_stage import StageFailed

    part = tmp_path / "preprocess" / "flights" / "dt=2013-01-02"
    part.mkdir(parents=True)
    (part / "_SUCCESS").write_text("")
    op = make_op(lake_root=f"file://{tmp_path}")
    monkeypatch.setattr(op, "_check_connection", lambda: None)

    def failing_submit(self, context):
        # What the job's stage_main does on failure, then spark-submit's own error.
        error_file = self.application_args[self.application_args.index("--error-file") + 1]
        Path(error_file).write_text("ContractError: partition x: required column(s) ['carrier'] missing")
        raise AirflowException("Cannot execute: spark-submit --master local[2] ... Error code is: 1.")

    monkeypatch.setattr(SparkSubmitOperator, "execute", failing_submit)
    with pytest.raises(StageFailed) as err:
        op.execute({"run_id": "r"})
    assert str(err.value).startswith("stage sample failed: ContractError: partition x: required column(s)")
    assert "Cannot execute" in str(err.value.__cause__)


def execute_failing_with(monkeypatch, tmp_path, error: BaseException | None) -> SparkStageOperator:
    """Execute a `sample` task whose spark-submit exits 1 after the job recorded `error`
    as every stage does (`lakeprep_jobs.failure.failure_recorded`); None: spark-submit dies
    before the job records anything (a master that does not answer, a killed driver)."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk.exceptions import AirflowException

    from lakeprep_jobs import failure

    part = tmp_path / "preprocess" / "flights" / "dt=2013-01-02"
    part.mkdir(parents=True)
    (part / "_SUCCESS").write_text("")
    op = make_op(lake_root=f"file://{tmp_path}")
    monkeypatch.setattr(op, "_check_connection", lambda: None)

    def failing_submit(self, context):
        if error is not None:
            error_file = self.application_args[self.application_args.index("--error-file") + 1]
            with pytest.raises(type(error)), failure.failure_recorded(error_file):
                raise error
        raise AirflowException("Cannot execute: spark-submit --master local[2] ... Error code is: 1.")

    monkeypatch.setattr(SparkSubmitOperator, "execute", failing_submit)
    op.execute({"run_id": "r"})
    raise AssertionError("the task did not fail")


def _refusals():
    from lakeprep_jobs import stage_args
    from lakeprep_jobs.validate import ContractError

    @dataclasses.dataclass(frozen=True)
    class SampleParams:
        fraction: float

    try:
        stage_args.params_from(SampleParams, {"fractoin": 0.5})
    except ValueError as err:
        bad_params = err
    return [
        ContractError("partition x: required column(s) ['carrier'] missing"),
        bad_params,
        TypeError("'<' not supported between instances of 'str' and 'int'"),
        # A JVM error pyspark does not convert keeps the Java text, `Caused by:` included.
        Exception(
            "An error occurred while calling o87.parquet.\n: org.apache.spark.SparkException: Job aborted "
            "due to stage failure: Task 0 in stage 2.0 failed 4 times\nCaused by: "
            'java.lang.NumberFormatException: For input string: "12,50"'
        ),
        Exception("[CANNOT_PARSE_TIMESTAMP] Text '2013-02-30' could not be parsed. SQLSTATE: 22007"),
    ]


@pytest.mark.parametrize("case", range(5))
def test_a_refusal_of_the_input_or_the_parameters_fails_the_task_without_retries(monkeypatch, tmp_path, case):
    from airflow.sdk.exceptions import AirflowFailException

    from lakeprep_airflow.operators.spark_stage import StageFailed, StageRefused

    error = _refusals()[case]
    with pytest.raises(StageRefused) as err:
        execute_failing_with(monkeypatch, tmp_path, error)
    # Airflow's task runner fails an AirflowFailException at once, whatever `retries` says.
    assert isinstance(err.value, AirflowFailException) and isinstance(err.value, StageFailed)
    assert str(err.value) == f"stage sample failed: {type(error).__name__}: {error}"
    assert "Cannot execute" in str(err.value.__cause__)


@pytest.mark.parametrize(
    "error",
    [
        ConnectionError(
            "Call From worker/10.0.0.5 to namenode:8020 failed on connection exception: "
            "java.net.ConnectException: Connection refused"
        ),
        RuntimeError(
            "Job aborted due to stage failure: Task 3 in stage 1.0 failed 4 times: ExecutorLostFailure "
            "(executor 2 exited caused by one of the running tasks) Reason: Container killed"
        ),
        OSError("could not rename file:/lake/_staging/dt=2013-01-02-ab12 to file:/lake/dt=2013-01-02"),
    ],
    ids=["namenode-down", "executor-lost", "rename"],
)
def test_a_fault_of_the_cluster_fails_the_task_for_a_retry(monkeypatch, tmp_path, error):
    from airflow.sdk.exceptions import AirflowFailException

    from lakeprep_airflow.operators.spark_stage import StageFailed

    with pytest.raises(StageFailed) as err:
        execute_failing_with(monkeypatch, tmp_path, error)
    assert not isinstance(err.value, AirflowFailException)
    assert str(err.value) == f"stage sample failed: {type(error).__name__}: {error}"


def test_a_spark_submit_that_dies_without_a_refusal_is_retried(monkeypatch, tmp_path):
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    with pytest.raises(AirflowException, match="Cannot execute: spark-submit") as err:
        execute_failing_with(monkeypatch, tmp_path, None)
    assert not isinstance(err.value, AirflowFailException)


def test_a_value_spark_cannot_cast_is_a_refusal(spark, monkeypatch, tmp_path):
    """What Spark itself raises for a bad value under ANSI casts (Spark 4's default), through
    the job's error file to the task: failed without retries."""
    from airflow.sdk.exceptions import AirflowFailException
    from pyspark.sql import functions as F

    df = spark.createDataFrame([("7",), ("12,50",)], "dep_delay string")
    try:
        df.select(F.col("dep_delay").cast("double").cast("int")).collect()
    except Exception as err:  # pyspark's NumberFormatException, or a Py4JJavaError on older Sparks
        cast_error = err
    else:
        raise AssertionError("Spark cast '12,50' to a number")
    with pytest.raises(AirflowFailException, match=r"stage sample failed: .*CAST_INVALID_INPUT.*'12,50'"):
        execute_failing_with(monkeypatch, tmp_path, cast_error)


def test_a_spec_refused_at_task_start_fails_without_retries(tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    from lakeprep_airflow.spec import SpecError

    op = make_op(lake_root=f"file://{tmp_path}", overrides={"stages.sample.fraction": "1.5"})
    with pytest.raises(AirflowFailException, match=r"stages\.sample\.fraction: 1\.5 is greater than") as err:
        op.execute({"run_id": "r"})
    assert isinstance(err.value, SpecError)  # still names the file and the field
    edited = tmp_path / "flights.yaml"
    edited.write_text(Path(FLIGHTS).read_text().replace("  days: 30", "  days: 0"))
    op = make_op(lake_root=f"file://{tmp_path}", spec_path=str(edited))
    with pytest.raises(
        AirflowFailException, match=r"flights\.yaml: invalid dataset spec:\n  window\.days: 0"
    ):
        op.execute({"run_id": "r"})


def test_a_spec_file_that_cannot_be_read_is_retried(tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    from lakeprep_airflow.spec import SpecError

    op = make_op(spec_path=str(tmp_path / "not-mounted-yet" / "flights.yaml"))
    with pytest.raises(SpecError, match="cannot read dataset spec") as err:
        op.execute({"run_id": "r"})
    assert not isinstance(err.value, AirflowFailException)


def test_operator_conf_overrides_the_spec_conf():
    op = make_op(conf={"spark.sql.shuffle.partitions": "64"})
    op.prepare_submission("r")
    assert op.conf["spark.sql.shuffle.partitions"] == "64"


def test_bad_override_is_refused_before_submission():
    op = make_op(overrides={"stages.sample.fraction": "1.5"})
    with pytest.raises(ValueError, match=r"stages\.sample\.fraction: 1\.5 is greater than the maximum"):
        op.prepare_submission("r")


def test_missing_lake_root_says_how_to_configure_it():
    op = make_op(lake_root="")
    with pytest.raises(ValueError, match="AIRFLOW_VAR_LAKEPREP_LAKE_ROOT"):
        op.prepare_submission("r")


def test_unknown_stage_is_refused():
    with pytest.raises(ValueError, match="stage 'train' must be one of"):
        make_op(stage="train")


def test_spark_submit_command_takes_master_from_connection(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_LAKEPREP_TEST_SPARK", "spark://127.0.0.1:7077?deploy-mode=client")
    op = make_op(stage="validate", conn_id="lakeprep_test_spark")
    op.prepare_submission("r")
    cmd = op._get_hook()._build_spark_submit_command(op.application)
    assert cmd[:3] == ["spark-submit", "--master", "spark://127.0.0.1:7077"]
    assert cmd[cmd.index("--py-files") + 1] == op.py_files
    assert cmd[cmd.index(op.application) + 1 :] == op.application_args


def test_missing_spark_connection_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_NO_SUCH_SPARK", raising=False)
    op = make_op(conn_id="no_such_spark")
    with pytest.raises(ValueError, match="Spark connection 'no_such_spark' is not defined"):
        op._check_connection()


def test_jobs_zip_holds_every_stage_and_is_content_addressed(tmp_path):
    first = jobs_package.build_zip(out_dir=tmp_path)
    assert jobs_package.build_zip(out_dir=tmp_path) == first
    names = set(zipfile.ZipFile(first).namelist())
    stages = ("validate", "preprocess", "sample", "fit_transform", "export_shards", "transform", "fused")
    shared = ("stage_entry", "stage_args", "failure", "session", "lake", "lake_io", "parquet_io")
    assert {f"lakeprep_jobs/{m}.py" for m in (*stages, *shared)} <= names
    # The contracts travel with the jobs: modules and the JSON Schemas they read.
    assert {"lakeprep_contracts/layout.py", "lakeprep_contracts/schemas/transform.schema.json"} <= names
    jobs = tmp_path / "jobs"
    (jobs / "lakeprep_jobs").mkdir(parents=True)
    (jobs / "lakeprep_jobs" / "__init__.py").write_text("")
    other = jobs_package.build_zip(jobs_dir=jobs, out_dir=tmp_path)
    assert other != first
    with pytest.raises(FileNotFoundError, match="LAKEPREP_SPARK_JOBS_DIR"):
        jobs_package.build_zip(jobs_dir=tmp_path / "missing", out_dir=tmp_path)


def test_incomplete_input_partition_fails_before_submission(tmp_path):
    part = tmp_path / "preprocess" / "flights" / "dt=2013-01-02"
    part.mkdir(parents=True)
    (part / "part-0.parquet").write_bytes(b"x")
    op = make_op(lake_root=f"file://{tmp_path}")
    inputs, _ = op.prepare_submission("r")
    needs = r"stage sample needs a complete partition: .*_SUCCESS missing"
    with pytest.raises(FileNotFoundError, match=needs):
        op._check_input(inputs[-1])
    (part / "_SUCCESS").write_text("")
    op._check_input(inputs[-1])


def test_spark_logs_at_the_specs_level_from_the_stages_log4j2_file(monkeypatch):
    config = jobs_package.log4j2_config()
    op = make_op(stage="validate")
    op.prepare_submission("r")
    assert op.conf["spark.log.level"] == "WARN"  # the knob's default
    assert op.conf["spark.executor.syncLogLevel.enabled"] == "true"
    assert op.conf["spark.driver.extraJavaOptions"] == (
        f"-Dlog4j2.configurationFile={config.as_uri()} -Dlakeprep.spark.log.level=WARN "
        "-XX:-DontCompileHugeMethods"
    )
    assert not op.files  # local and client mode: the driver reads the file on this worker
    cmd = op._get_hook()._build_spark_submit_command(op.application)
    assert f"spark.driver.extraJavaOptions=-Dlog4j2.configurationFile={config.as_uri()} " in " ".join(cmd)
    # Asked for: a run's override (the trigger form's *Spark log level*) raises it.
    loud = make_op(stage="validate", overrides={"spark.log_level": "INFO"})
    loud.prepare_submission("r")
    assert loud.conf["spark.log.level"] == "INFO"
    assert "-Dlakeprep.spark.log.level=INFO " in loud.conf["spark.driver.extraJavaOptions"]
    with pytest.raises(ValueError, match=r"spark\.log_level: 'LOUD' is not one of"):
        make_op(overrides={"spark.log_level": "LOUD"}).prepare_submission("r")


def test_explicit_java_options_and_log_level_win_over_the_stages_defaults():
    op = make_op(conf={"spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=mine.xml -Xss4m"})
    op.prepare_submission("r")
    options = op.conf["spark.driver.extraJavaOptions"]
    # The JVM keeps the last -D of a name: the operator's own option comes after lakeprep's.
    assert options.startswith("-Dlog4j2.configurationFile=file:") and options.endswith(
        " -Dlog4j2.configurationFile=mine.xml -Xss4m"
    )
    explicit = make_op(conf={"spark.log.level": "ERROR"})
    explicit.prepare_submission("r")
    assert explicit.conf["spark.log.level"] == "ERROR"


def test_driver_and_executors_jit_compile_the_huge_methods_of_generated_code():
    op = make_op(stage="validate")
    op.prepare_submission("r")
    first = dict(op.conf)
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        assert op.conf[key].split().count("-XX:-DontCompileHugeMethods") == 1, key
    op.prepare_submission("r")  # prepared again (a retry): each option once
    assert op.conf == first
    cmd = " ".join(op._get_hook()._build_spark_submit_command(op.application))
    assert "--conf spark.executor.extraJavaOptions=-XX:-DontCompileHugeMethods " in cmd
    # Explicit options come after lakeprep's, and the JVM keeps the last: a deployment can
    # turn it back off.
    mine = make_op(conf={"spark.executor.extraJavaOptions": "-XX:+DontCompileHugeMethods -Xss4m"})
    mine.prepare_submission("r")
    assert mine.conf["spark.executor.extraJavaOptions"] == (
        "-XX:-DontCompileHugeMethods -XX:+DontCompileHugeMethods -Xss4m"
    )


def test_cluster_deploy_mode_ships_the_log4j2_file_to_the_driver(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_LAKEPREP_TEST_YARN", "spark://yarn?deploy-mode=cluster&queue=etl")
    op = make_op(conn_id="lakeprep_test_yarn", files="/etc/lakeprep/extra.conf")
    op.prepare_submission("r")
    first = dict(op.conf)
    op.prepare_submission("r")  # a second preparation ships and passes it once
    assert op.conf == first
    config = jobs_package.log4j2_config()
    assert op.files == f"/etc/lakeprep/extra.conf,{config}"
    # YARN puts `--files` into the driver's working directory before its JVM starts.
    options = op.conf["spark.driver.extraJavaOptions"]
    assert options.startswith("-Dlog4j2.configurationFile=log4j2.properties ")


class RecordingLog:
    """Stands in for the hook's structlog logger: records (method, message)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, level: str):
        return lambda msg, *args, **kwargs: self.lines.append((level, msg % args if args else msg))


def test_spark_submit_output_lines_reach_the_task_log_at_their_own_level():
    from lakeprep_airflow.operators.spark_stage import SparkOutputLog

    output = [
        "WARNING: Using incubator modules: jdk.incubator.vector\n",
        "26/12/01 11:49:10 INFO SparkContext: Running Spark version 4.3.0\n",
        "26/12/01 11:49:36 WARN CSVHeaderChecker: CSV header does not conform to the schema.\n",
        " Header: year, month\n",
        "26/12/01 11:49:52 INFO lakeprep validate: rows in 842, out 831, quarantined 11\n",
        "26/12/01 11:49:53 ERROR Executor: Exception in task 0.0 in stage 3.0 (TID 3)\n",
        "java.lang.OutOfMemoryError: Java heap space\n",
        "26/12/01 11:49:54 WARNING lakeprep fit_transform: left out precip (variance 0)\n",
        "Traceback (most recent call last):\n",
        '  File "validate.py", line 1, in <module>\n',
        "26/12/01 11:49:55 DEBUG Utils: detail\n",
    ]
    recorder = RecordingLog()
    hook = make_op(stage="validate")._get_hook()
    assert isinstance(hook.log, SparkOutputLog)
    hook._log = SparkOutputLog(recorder)
    hook._process_spark_submit_log(iter(output))  # the provider's own loop over the output
    assert [level for level, _ in recorder.lines] == [
        "info",
        "info",
        "warning",
        "warning",
        "info",
        "error",
        "error",
        "warning",
        "error",
        "error",
        "info",
    ]
    assert [line for _, line in recorder.lines] == [line.strip() for line in output]
    # The hook's own messages (with arguments) keep the level the hook chose.
    hook.log.info("Spark-Submit cmd: %s", "26/12/01 11:49:55 ERROR not a line")
    assert recorder.lines[-1] == ("info", "Spark-Submit cmd: 26/12/01 11:49:55 ERROR not a line")


WINDOW = {
    "days": ["2013-01-01", "2013-01-02"],
    "complete": ["2013-01-01", "2013-01-02"],
    "failed": [],
    "missing": [],
    "before_start": [],
}


def make_fused(stages: tuple[str, ...], **kw) -> SparkStageOperator:
    kw.setdefault("lake_root", "hdfs://nn:8020/lake")
    kw.setdefault("run_ds", "2013-01-02")
    return SparkStageOperator(task_id="fused", stages=stages, spec_path=FLIGHTS, **kw)


@pytest.mark.parametrize(
    ("stages", "window"),
    [(("validate", "preprocess", "sample"), None), (("fit_transform", "export_shards"), WINDOW)],
)
def test_fused_plan_is_each_stages_own_argv_in_order(stages, window):
    from lakeprep_airflow.operators.spark_stage import fused_argv

    op = make_fused(stages, overrides={"stages.sample.seed": "11"})
    inputs, output = op.prepare_submission("r", window)
    assert op.application.endswith("spark_jobs/lakeprep_jobs/fused.py")
    args = op.application_args
    assert args[0] == "--plan" and len(args) == 2  # no error file outside execute
    plan = json.loads(args[1])
    assert [entry["stage"] for entry in plan] == list(stages)
    singles = []
    for stage in stages:
        single = make_op(stage=stage, overrides={"stages.sample.seed": "11"})
        single.prepare_submission("r", window)
        singles.append(single)
    assert [entry["argv"] for entry in plan] == [s.application_args for s in singles]
    assert args == fused_argv([(s.stage, s.application_args) for s in singles])
    assert [c.argv for c in op.stage_calls] == [s.application_args for s in singles]
    # The task reads what the first stage reads and commits (last) what the last one does.
    assert (inputs, output) == (op.stage_calls[0].inputs, op.stage_calls[-1].output)
    assert inputs == singles[0].stage_calls[0].inputs and output == singles[-1].stage_calls[0].output
    assert op.conf == singles[0].conf and op.py_files == singles[0].py_files


def test_fused_stages_must_be_consecutive_stages_of_one_kind():
    for bad in (("validate", "sample"), ("sample", "preprocess"), ("sample", "fit_transform")):
        with pytest.raises(ValueError, match="must be consecutive stages of one kind"):
            make_fused(bad)
    with pytest.raises(ValueError, match="stage 'train' must be one of"):
        make_fused(("validate", "train"))
    with pytest.raises(ValueError, match="not both or neither"):
        SparkStageOperator(task_id="x", stage="validate", stages=("validate",), spec_path=FLIGHTS)
    with pytest.raises(ValueError, match="not both or neither"):
        SparkStageOperator(task_id="x", spec_path=FLIGHTS)
    with pytest.raises(ValueError, match="needs the window decided by task 'wait_for_window'"):
        make_fused(("fit_transform", "export_shards")).prepare_submission("r")


def fused_execute(monkeypatch, tmp_path, fail_in: str | None, message: str = ""):
    """Run a fused daily operator whose submission commits stages up to `fail_in`."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk.exceptions import AirflowException

    raw = tmp_path / "raw" / "flights" / "dt=2013-01-02"
    raw.mkdir(parents=True)
    (raw / "_SUCCESS").write_text("")
    op = make_fused(("validate", "preprocess", "sample"), lake_root=f"file://{tmp_path}")
    monkeypatch.setattr(op, "_check_connection", lambda: None)
    seen = {}

    def submit(self, context):
        # What fused.py does: each stage commits its partition or writes its own error file.
        plan = json.loads(self.application_args[self.application_args.index("--plan") + 1])
        seen["plan_error_file"] = self.application_args[self.application_args.index("--error-file") + 1]
        for n, entry in enumerate(plan):
            argv = entry["argv"]
            if entry["stage"] == fail_in:
                Path(argv[argv.index("--error-file") + 1]).write_text(message)
                raise AirflowException("Cannot execute: spark-submit ... Error code is: 1.")
            out = Path(argv[argv.index("--output") + 1].removeprefix("file://"))
            out.mkdir(parents=True)
            (out / "_lakeprep_report.json").write_text(json.dumps({"rows_in": 10 - n, "rows_out": 9 - n}))

    monkeypatch.setattr(SparkSubmitOperator, "execute", submit)
    return op, seen


def test_fused_task_returns_each_stages_report(monkeypatch, tmp_path):
    op, seen = fused_execute(monkeypatch, tmp_path, fail_in=None)
    reports = op.execute({"run_id": "r"})
    assert reports == {
        "validate": {"rows_in": 10, "rows_out": 9},
        "preprocess": {"rows_in": 9, "rows_out": 8},
        "sample": {"rows_in": 8, "rows_out": 7},
    }
    assert not Path(seen["plan_error_file"]).exists()  # the temporary error files are removed


def test_a_failed_fused_stage_fails_the_task_naming_that_stage(monkeypatch, tmp_path):
    from lakeprep_airflow.operators.spark_stage import StageFailed

    op, _ = fused_execute(monkeypatch, tmp_path, fail_in="preprocess", message="ValueError: no column x")
    with pytest.raises(StageFailed) as err:
        op.execute({"run_id": "r"})
    assert str(err.value) == "stage preprocess failed: ValueError: no column x"
    assert "Cannot execute" in str(err.value.__cause__)


def test_a_refused_fused_stage_fails_the_task_without_retries(monkeypatch, tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    from lakeprep_airflow.operators.spark_stage import StageRefused

    refusal = json.dumps({"error": "ContractError: partition x: no rows (empty partition)", "refusal": True})
    op, _ = fused_execute(monkeypatch, tmp_path, fail_in="validate", message=refusal)
    with pytest.raises(StageRefused) as err:
        op.execute({"run_id": "r"})
    assert isinstance(err.value, AirflowFailException)
    assert str(err.value) == "stage validate failed: ContractError: partition x: no rows (empty partition)"


YARN_CONN = {
    "conn_type": "spark",
    "host": "yarn",
    "extra": {
        "deploy-mode": "cluster",
        "queue": "ml",
        "yarn_resourcemanager_webapp_address": "http://rm:8088",
    },
}


def test_yarn_cluster_mode_tracks_through_the_resourcemanager_and_runs_one_driver(monkeypatch):
    import re

    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from lakeprep_contracts import submission

    monkeypatch.setenv("AIRFLOW_CONN_LAKEPREP_TEST_YARN_RM", json.dumps(YARN_CONN))
    op = make_op(conn_id="lakeprep_test_yarn_rm")
    op.prepare_submission("r")
    assert op.conf["spark.yarn.maxAppAttempts"] == "1"  # retries are Airflow's
    # The argv as one shell-safe argument, the job's own argv inside.
    assert op.application_args[0] == "--argv-base64" and len(op.application_args) == 2
    assert re.fullmatch(r"[A-Za-z0-9_=-]+", op.application_args[1])
    argv = submission.decode_argv(op.application_args)
    assert argv[:2] == ["--input", "hdfs://nn:8020/lake/preprocess/flights/dt=2013-01-02"]
    assert argv[-2:] == ["--error-file", op._error_files.get("sample")] or "--error-file" not in argv
    hook = op._get_hook()
    assert hook._yarn_track_via_rm_api and hook._get_yarn_rm_base_url() == "http://rm:8088"
    cmd = hook._build_spark_submit_command(op.application)
    assert cmd[cmd.index("--master") + 1] == "yarn"
    assert cmd[cmd.index("--queue") + 1] == "ml" and cmd[cmd.index("--deploy-mode") + 1] == "cluster"
    # Kerberos from the connection too (a keytab extra is base64; the provider writes it out).
    kerberized = {**YARN_CONN, "extra": {**YARN_CONN["extra"], "principal": "etl@EXAMPLE.COM"}}
    monkeypatch.setenv("AIRFLOW_CONN_LAKEPREP_TEST_YARN_KRB", json.dumps(kerberized))
    krb = make_op(conn_id="lakeprep_test_yarn_krb")
    krb.prepare_submission("r")
    krb_cmd = krb._get_hook()._build_spark_submit_command(krb.application)
    assert krb_cmd[krb_cmd.index("--principal") + 1] == "etl@EXAMPLE.COM"

    # Explicit arguments win; other masters get neither.
    mine = make_op(conn_id="lakeprep_test_yarn_rm", yarn_track_via_rm_api=False, durable=False)
    mine.conf = {"spark.yarn.maxAppAttempts": "3"}
    mine.prepare_submission("r")
    assert mine.conf["spark.yarn.maxAppAttempts"] == "3"
    assert mine._get_hook()._yarn_track_via_rm_api is False
    local = make_op()
    local.prepare_submission("r")
    assert "spark.yarn.maxAppAttempts" not in local.conf
    assert local.application_args[0] == "--input"  # other modes: the argv as it is
    assert SparkSubmitHook is type(local._get_hook()) and not local._get_hook()._yarn_track_via_rm_api


class FakeYarn:
    """A ResourceManager and NodeManager web service on one loopback port: one application
    whose one attempt ran in `container`, its stdout and stderr what `logs` holds when asked."""

    def __init__(self, app_id: str, container: str, logs: dict[str, str]) -> None:
        import http.server
        import threading

        routes: dict[str, bytes | str] = {}
        self.requests: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(handler) -> None:  # noqa: N805
                self.requests.append(handler.path)
                body = routes.get(handler.path)
                if isinstance(body, str):
                    body = logs[body].encode()
                handler.send_response(200 if body is not None else 404)
                handler.end_headers()
                handler.wfile.write(body or b"not found")

            def log_message(handler, *args) -> None:  # noqa: N805
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        node = f"127.0.0.1:{self.server.server_port}"
        attempt = {"id": 1, "containerId": container, "nodeHttpAddress": node, "appAttemptState": "FAILED"}
        routes[f"/ws/v1/cluster/apps/{app_id}/appattempts"] = json.dumps(
            {"appAttempts": {"appAttempt": [attempt]}}
        ).encode()
        for name in ("stdout", "stderr"):
            routes[f"/ws/v1/node/containerlogs/{container}/{name}"] = name
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_yarn_cluster_mode_fails_with_the_stage_error_from_the_driver_log(monkeypatch, tmp_path, capsys):
    """The driver ran in a YARN container: its error file stayed there. The task reads the
    driver's log from the NodeManager when the application ended, logs it at its levels,
    and fails with the stage's own error (a refusal: at once), YARN's verdict as the cause."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk.exceptions import AirflowFailException

    from lakeprep_airflow.operators.spark_stage import StageRefused
    from lakeprep_contracts import submission
    from lakeprep_jobs import failure
    from lakeprep_jobs.validate import ContractError

    app_id, container = "application_1796560751232_0007", "container_1796560751232_0007_01_000001"
    part = tmp_path / "preprocess" / "flights" / "dt=2013-01-02"
    part.mkdir(parents=True)
    (part / "_SUCCESS").write_text("")
    error = ContractError("partition x: required column(s) ['carrier'] missing")
    driver: dict[str, str] = {}

    def submit_job(self, context):
        # What the job does in its container: the record on its stderr, under the file name given.
        argv = submission.decode_argv(self.application_args)
        error_file = argv[argv.index("--error-file") + 1]
        assert not os.path.isabs(error_file)  # the driver container's working directory
        monkeypatch.chdir(tmp_path)
        with pytest.raises(ContractError), failure.failure_recorded(error_file):
            raise error
        driver["stdout"] = "26/12/06 12:43:14 INFO lakeprep sample: inputs a -> output b\n"
        driver["stderr"] = (
            "26/12/06 12:43:15 ERROR ApplicationMaster: User application exited with status 1\n"
            + capsys.readouterr().err
        )
        self._hook._yarn_application_id = app_id
        return app_id

    def poll_until_complete(self, external_id, context):
        raise RuntimeError(f"YARN application {external_id} ended with final status: FAILED")

    monkeypatch.setattr(SparkSubmitOperator, "submit_job", submit_job)
    monkeypatch.setattr(SparkSubmitOperator, "poll_until_complete", poll_until_complete)
    conn = json.loads(json.dumps(YARN_CONN))
    fake = FakeYarn(app_id, container, driver)
    conn["extra"]["yarn_resourcemanager_webapp_address"] = fake.url
    monkeypatch.setenv("AIRFLOW_CONN_LAKEPREP_TEST_YARN_FAKE", json.dumps(conn))
    op = make_op(lake_root=f"file://{tmp_path}", conn_id="lakeprep_test_yarn_fake")
    log = RecordingLog()
    monkeypatch.setattr(SparkStageOperator, "log", property(lambda self: log))
    try:
        with pytest.raises(StageRefused) as err:
            op.execute({"run_id": "r"})
    finally:
        fake.close()
    assert isinstance(err.value, AirflowFailException)
    assert str(err.value) == f"stage sample failed: ContractError: {error}"
    assert str(err.value.__cause__) == f"YARN application {app_id} ended with final status: FAILED"
    assert ("info", "26/12/06 12:43:14 INFO lakeprep sample: inputs a -> output b") in log.lines
    assert (
        "error",
        "26/12/06 12:43:15 ERROR ApplicationMaster: User application exited with status 1",
    ) in log.lines
    assert f"/ws/v1/cluster/apps/{app_id}/appattempts" in fake.requests
