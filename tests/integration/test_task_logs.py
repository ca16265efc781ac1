"""A stage's task log: short, Spark at WARN unless asked, lakeprep's own lines at INFO.

Runs `validate` for one real day through `SparkStageOperator.execute` (real spark-submit,
local mode) and reads what Airflow's task log receives: the structlog events of the
operator and its hook, one per line, each with the level the UI filters on.
"""

from __future__ import annotations

import re

import pytest
import structlog

from tests.conftest import REPO

pytestmark = pytest.mark.integration
DAY = "2013-01-01"
# Measured on this stage and day: about 630 lines at Spark's INFO (the level before the
# log4j2 file), 13 at WARN. The bound leaves room for machine-specific warnings.
MAX_LINES = 80
SPARK_INFO = re.compile(r"^\d{2}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} INFO (?!lakeprep )")


def run_validate(lake: str, **overrides: str) -> list[dict]:
    from lakeprep_airflow.operators.spark_stage import SparkStageOperator

    op = SparkStageOperator(
        task_id="validate",
        stage="validate",
        spec_path=str(REPO / "pipelines" / "flights.yaml"),
        lake_root=lake,
        run_ds=DAY,
        overrides=overrides,
    )
    # Local mode, whatever connection an earlier fixture exported (the loopback cluster's
    # master adds org.apache.spark.deploy's INFO lines, which the provider reads for the
    # application id and the log4j2 file keeps on purpose).
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
        with structlog.testing.capture_logs() as events:
            op.execute({"run_id": "task-logs"})
    return events


@pytest.fixture(scope="module")
def quiet_log(demo_lake) -> list[dict]:
    return run_validate(demo_lake)


def test_a_stage_log_is_short_and_holds_no_spark_info(quiet_log):
    lines = [e["event"] for e in quiet_log]
    assert len(lines) < MAX_LINES, "\n".join(lines)
    assert not [line for line in lines if SPARK_INFO.match(line)], "\n".join(lines)


def test_lakeprep_lines_are_info_and_carry_the_stage_prefix(quiet_log):
    ours = [(e["log_level"], e["event"]) for e in quiet_log if "INFO lakeprep validate: " in e["event"]]
    accounting = [line for level, line in ours if re.search(r"rows in \d+, out \d+, quarantined \d+$", line)]
    assert len(accounting) == 1, ours
    assert {level for level, _ in ours} == {"info"}
    assert any(" inputs file://" in line for _, line in ours)
    # py4j's shutdown chatter is gone with the root logger at WARNING.
    assert not [e for e in quiet_log if "Closing down clientserver connection" in e["event"]]


def test_spark_warnings_are_warnings_in_the_task_log(quiet_log):
    spark_warn = [e for e in quiet_log if re.match(r"^\d{2}/\d{2}/\d{2} \S+ WARN ", e["event"])]
    assert spark_warn, "expected at least one Spark WARN line (e.g. the loopback hostname)"
    assert {e["log_level"] for e in spark_warn} == {"warning"}


def test_asking_for_info_brings_sparks_info_back(demo_lake, quiet_log):
    loud = run_validate(demo_lake, **{"spark.log_level": "INFO"})
    spark_info = [e for e in loud if SPARK_INFO.match(e["event"])]
    assert len(spark_info) > MAX_LINES, len(spark_info)
    assert any("SparkContext: Running Spark version" in e["event"] for e in spark_info)
