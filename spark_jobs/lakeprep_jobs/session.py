"""The stages' SparkSession and their log lines.

Code sets only the app name: master and resources come from spark-submit. lakeprep's own
lines use Spark's log4j2 layout and name the stage that runs (a fused submission runs
several), so the Airflow task log can level both alike.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("lakeprep_jobs")


def start_session(app_name: str) -> SparkSession:
    """The stages' session: the app name only (master and resources come from spark-submit)."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(app_name).getOrCreate()
    _sync_executor_log_level(spark)
    return spark


class _StageLineFormat(logging.Formatter):
    """Spark's log4j2 layout naming the stage that runs now (a fused submission runs several)."""

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s %(levelname)s lakeprep %(lakeprep_stage)s: %(message)s", datefmt="%y/%m/%d %H:%M:%S"
        )
        self.stage = "?"

    def format(self, record: logging.LogRecord) -> str:
        record.lakeprep_stage = self.stage
        return super().format(record)


_STAGE_LINES = _StageLineFormat()


def log_as(stage: str) -> None:
    """Name `stage` in the lines lakeprep logs from now on."""
    _STAGE_LINES.stage = stage


def configure_logging(stage: str) -> None:
    """lakeprep's lines at INFO as `yy/MM/dd HH:mm:ss LEVEL lakeprep <stage>: ...`, the rest at WARNING.

    The layout is Spark's log4j2 one, so the Airflow task log can level both alike and
    `lakeprep <stage>:` finds the stage's own lines (`stage_entry.run_stage` names the
    stage that runs); py4j's INFO chatter ("Closing down clientserver connection") stays out.
    """
    log_as(stage)
    handler = logging.StreamHandler()
    handler.setFormatter(_STAGE_LINES)
    logging.basicConfig(level=logging.WARNING, handlers=[handler])  # no-op once configured
    log.setLevel(logging.INFO)


def _sync_executor_log_level(spark: SparkSession) -> None:
    """Give the executors the driver's Spark log level (`spark.log.level`).

    Executors on a cluster start before the `--files` reach them, so they cannot read
    the stages' log4j2 file; Spark 4 passes a `setLogLevel` on to every executor when
    `spark.executor.syncLogLevel.enabled` is set (the operator sets both).
    """
    level = spark.sparkContext.getConf().get("spark.log.level", None)
    if level:
        spark.sparkContext.setLogLevel(level)
