from __future__ import annotations

import json
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
    return SparkStageOperator(task_id=stage, stage=stage, spec_path=FLIGHTS, **kw)


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
    stages = ("common", "validate", "preprocess", "sample", "fit_transform", "export_shards", "transform")
    assert {f"lakeprep_jobs/{m}.py" for m in stages} <= names
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
