"""What every stage shares: the argv contract, the session, atomic partition commits.

Every stage is submitted the same way (the Airflow operator builds this argv):

    spark-submit --py-files lakeprep_jobs.zip lakeprep_jobs/<stage>.py \
        --input URI [--input URI ...] --output URI --params JSON [--error-file PATH]

`--error-file` (a path on the driver's machine) receives the stage's own error when it
fails, as JSON `{"error": "Type: message", "refusal": bool}`, and the driver's stderr the
same record on one line (`lakeprep_contracts.stage_errors`: YARN cluster mode reads it
there), so the Airflow task can fail with it instead of spark-submit's command line, and
without retries when it is a refusal of the input or the parameters (`is_refusal`):
running again would refuse again.
Several stages can share one submission (`lakeprep_jobs.fused`): each gets this same
argv, error file included, and runs through the same `prepare` and `run_stage`.

A stage writes into a hidden staging folder beside its output partition and commits by
renaming it over the partition, so a killed job never leaves a half-written partition
where the next stage would read it (Hadoop's FileSystem.rename is atomic on HDFS and on
a local filesystem). Each partition carries `_lakeprep_report.json`: the stage's row
accounting and what it decided, read by the next stages, the run summary and tests.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from lakeprep_contracts import layout, stage_errors, submission
from lakeprep_jobs import lake
from lakeprep_jobs.lake import SparkLake

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

REPORT_NAME = layout.REPORT
QUARANTINE_DIR = layout.QUARANTINE_DIR

log = logging.getLogger("lakeprep_jobs")

P = TypeVar("P")


@dataclasses.dataclass(frozen=True)
class StageArgs:
    inputs: list[str]
    output: str
    params: dict[str, Any]
    error_file: str | None = None


def parse_args(argv: Sequence[str] | None, description: str) -> StageArgs:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--input", action="append", required=True, dest="inputs")
    parser.add_argument("--output", required=True)
    parser.add_argument("--params", required=True, help="stage parameters as a JSON object")
    parser.add_argument("--error-file", help="local file that receives the error message on failure")
    ns = parser.parse_args(submission.decode_argv(argv))  # YARN cluster mode: encoded
    try:
        params = json.loads(ns.params)
    except json.JSONDecodeError as err:
        raise ValueError(f"--params is not valid JSON: {err}") from err
    if not isinstance(params, dict):
        raise ValueError(f"--params must be a JSON object, got {type(params).__name__}")
    return StageArgs(inputs=ns.inputs, output=ns.output, params=params, error_file=ns.error_file)


def params_from(cls: type[P], params: dict[str, Any]) -> P:
    """Build a frozen params dataclass; an unknown or missing key fails before Spark starts."""
    try:
        return cls(**params)
    except TypeError as err:
        fields = sorted(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
        raise ValueError(f"bad --params for {cls.__name__}: {err}; expected keys {fields}") from err


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


# Spark's refusals of a value it cannot cast or parse (ANSI mode, Spark 4's default): the
# error condition in brackets (Spark's error-conditions.json), or the Java exception in
# the text of a JVM error pyspark did not convert (Py4JJavaError), `Caused by:` included.
_DATA_ERROR = re.compile(
    r"\[(CAST_INVALID_INPUT|CAST_OVERFLOW|CAST_OVERFLOW_IN_TABLE_INSERT|CANNOT_PARSE_TIMESTAMP"
    r"|CANNOT_PARSE_DECIMAL|MALFORMED_RECORD_IN_PARSING)(\.\w+)?\]"
    r"|java\.lang\.NumberFormatException|java\.time\.format\.DateTimeParseException"
)


def is_refusal(err: BaseException) -> bool:
    """Whether `err` refuses the stage's input or parameters, so that a retry would refuse again.

    ValueError and TypeError: ContractError, FitError, FooterError, bad `--params`, a bad
    plan. Spark's errors for data it cannot cast or parse (`_DATA_ERROR`). Anything else
    (a NameNode or a master that does not answer, a lost executor) is worth a retry.
    """
    return isinstance(err, (ValueError, TypeError)) or bool(_DATA_ERROR.search(str(err)))


@contextlib.contextmanager
def failure_recorded(error_file: str | None) -> Iterator[None]:
    """Write an error's `Type: message` and whether it is a refusal to `error_file` (the
    operator fails the task with it, without retries for a refusal), re-raise.

    The same record goes to stderr on one line (`lakeprep_contracts.stage_errors`): in YARN
    cluster mode the file stays in the driver's container and the operator reads the line
    from the driver's log instead.
    """
    try:
        yield
    except Exception as err:
        if error_file:
            record = stage_errors.error_record(f"{type(err).__name__}: {err}", is_refusal(err))
            with open(error_file, "w", encoding="utf-8") as f:
                json.dump(record, f)
            print(stage_errors.record_line(error_file, record), file=sys.stderr, flush=True)
        raise


def prepare(stage: Stage, argv: Sequence[str] | None) -> StageCall:
    """Parse a stage's argv and build its params: an unknown or missing key fails here."""
    args = parse_args(argv, stage.description)
    with failure_recorded(args.error_file):
        params = params_from(stage.params_cls, args.params)
    return StageCall(stage=stage, args=args, params=params)


STAGE_PROPERTY = "lakeprep.stage"  # the Spark local property naming the stage that runs


def run_stage(spark: SparkSession, call: StageCall) -> dict[str, Any]:
    """Run one prepared stage in `spark`, its log lines under its own name; return its report."""
    _STAGE_LINES.stage = call.stage.name
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


def start_session(app_name: str) -> SparkSession:
    """The stages' session: the app name only (master and resources come from spark-submit)."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(app_name).getOrCreate()
    _sync_executor_log_level(spark)
    return spark


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


def configure_logging(stage: str) -> None:
    """lakeprep's lines at INFO as `yy/MM/dd HH:mm:ss LEVEL lakeprep <stage>: ...`, the rest at WARNING.

    The layout is Spark's log4j2 one, so the Airflow task log can level both alike and
    `lakeprep <stage>:` finds the stage's own lines (`run_stage` names the stage that
    runs); py4j's INFO chatter ("Closing down clientserver connection") stays out.
    """
    _STAGE_LINES.stage = stage
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


# ----------------------------------------------------------------- Hadoop FileSystem access


def _jvm_path(spark: SparkSession, uri: str) -> tuple[Any, Any]:
    """(Hadoop FileSystem, Path) of `uri`: any scheme the driver's Hadoop configuration reads."""
    return SparkLake(spark)._path(uri)


def exists(spark: SparkSession, uri: str) -> bool:
    return SparkLake(spark).exists(uri)


def read_text(spark: SparkSession, uri: str) -> str:
    return lake.read_text(SparkLake(spark), uri)


def write_text(spark: SparkSession, uri: str, text: str) -> None:
    lake.write_text(SparkLake(spark), uri, text)


def list_files(spark: SparkSession, uri: str) -> list[tuple[str, int]]:
    """(uri, bytes) of the plain files directly under `uri`."""
    fs, path = _jvm_path(spark, uri)
    return sorted(
        (str(st.getPath().toString()), int(st.getLen())) for st in fs.listStatus(path) if st.isFile()
    )


def list_folders(spark: SparkSession, uri: str) -> list[str]:
    """Names of the folders directly under `uri`; none when it is a file or does not exist."""
    fs, path = _jvm_path(spark, uri)
    if not fs.exists(path) or not fs.getFileStatus(path).isDirectory():
        return []
    return sorted(str(st.getPath().getName()) for st in fs.listStatus(path) if st.isDirectory())


def parquet_file_rows(spark: SparkSession, uri: str) -> dict[str, int]:
    """File name -> rows, for the Parquet files directly under `uri`, from their footers:
    no Spark job.

    parquet-java's `ParquetFileReader.getRecordCount` sums the row groups a footer lists
    (what a reader of the file will get); hidden files (`_SUCCESS`, `.crc`) are skipped
    as Spark's readers skip them.
    """
    rows = {}
    for status in _parquet_files(spark, uri):
        reader = _open_footer(spark, status)
        try:
            rows[str(status.getPath().getName())] = int(reader.getRecordCount())
        finally:
            reader.close()
    return rows


def parquet_rows(spark: SparkSession, uri: str) -> int:
    """Rows in the Parquet files directly under `uri`, from their footers: no Spark job."""
    return sum(parquet_file_rows(spark, uri).values())


def check_written(
    spark: SparkSession, staging: str, kept: int, quarantined: int, where: str, detail: str = ""
) -> None:
    """Nothing lost or added on the way: the rows in the Parquet footers of the staged
    partition and of its `_quarantine/` are the counted ones (`parquet_rows`, no job)."""
    written = parquet_rows(spark, staging)
    written_q = parquet_rows(spark, layout.join(staging, layout.QUARANTINE_DIR)) if quarantined else 0
    if written != kept or written_q != quarantined:
        raise RuntimeError(
            f"partition {where}: accounting mismatch: expected {kept} kept + {quarantined} "
            f"quarantined{detail}, wrote {written} + {written_q}"
        )


def rename(spark: SparkSession, src: str, dst: str) -> None:
    SparkLake(spark).rename(src, dst)


def delete(spark: SparkSession, uri: str) -> None:
    SparkLake(spark).delete(uri)


def read_complete(spark: SparkSession, inputs: list[str]) -> DataFrame:
    """Read committed partitions only: each input needs its `_SUCCESS`.

    A partition that failed its contract is committed without the marker (so it can be
    inspected); a stage run by hand must not build on it any more than a task would.
    """
    incomplete = [u for u in inputs if not exists(spark, layout.join(u, layout.SUCCESS))]
    if incomplete:
        raise FileNotFoundError(
            f"input partition(s) {incomplete} are not complete (no {layout.SUCCESS}): "
            "the stage that writes them failed or has not finished"
        )
    return read_parquet(spark, inputs)


def read_parquet(spark: SparkSession, inputs: list[str]) -> DataFrame:
    """Read Parquet partitions written by Spark, with the schema from their footers when they
    agree: Spark's own inference is one job per read (a window of 30 days, 30 jobs)."""
    schemas = {footer_schema(spark, u) for u in inputs}
    reader = spark.read
    if len(schemas) == 1 and None not in schemas:
        from pyspark.sql.types import StructType

        reader = reader.schema(StructType.fromJson(json.loads(schemas.pop())))
    return reader.parquet(*inputs)


# Where Spark's Parquet writer keeps the DataFrame's schema (ParquetWriteSupport.SPARK_ROW_SCHEMA);
# Spark's schema inference reads it from one file's footer, the same as `footer_schema`.
SPARK_ROW_SCHEMA = "org.apache.spark.sql.parquet.row.metadata"


def _parquet_files(spark: SparkSession, uri: str) -> list[Any]:
    """The FileStatus of each Parquet data file directly under `uri`, by name."""
    fs, path = _jvm_path(spark, uri)
    files = [
        s for s in fs.listStatus(path) if s.isFile() and not s.getPath().getName().startswith(("_", "."))
    ]
    return sorted(files, key=lambda s: str(s.getPath().getName()))


def _open_footer(spark: SparkSession, status: Any) -> Any:
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    data = jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromStatus(status, conf)
    return jvm.org.apache.parquet.hadoop.ParquetFileReader.open(data)


def footer_schema(spark: SparkSession, uri: str) -> str | None:
    """The Spark schema (JSON) that Spark wrote into the footer of the first file under `uri`;
    None when there is no file or it was not written by Spark."""
    for status in _parquet_files(spark, uri)[:1]:
        reader = _open_footer(spark, status)
        try:
            schema = reader.getFooter().getFileMetaData().getKeyValueMetaData().get(SPARK_ROW_SCHEMA)
        finally:
            reader.close()
        return None if schema is None else str(schema)
    return None


def read_report(spark: SparkSession, partition: str) -> dict[str, Any]:
    return json.loads(read_text(spark, f"{partition.rstrip('/')}/{REPORT_NAME}"))


class PartitionCommit(lake.PartitionCommit):
    """`lakeprep_jobs.lake.PartitionCommit` through the driver's Hadoop FileSystem.

    with PartitionCommit(spark, output) as staging:
        df.write.parquet(staging)          # plus anything else under staging
        write_report(...)
    # now `output` is the new partition; on error the staging folder is removed
    """

    def __init__(self, spark: SparkSession, output: str) -> None:
        super().__init__(SparkLake(spark), output)
        self.spark = spark


def write_report(spark: SparkSession, staging: str, report: dict[str, Any]) -> None:
    write_text(spark, f"{staging}/{REPORT_NAME}", json.dumps(report, indent=2, sort_keys=True))


def write_success(spark: SparkSession, staging: str) -> None:
    write_text(spark, f"{staging}/_SUCCESS", "")


def write_parquet(df: DataFrame, uri: str) -> None:
    df.write.mode("overwrite").option("compression", "zstd").parquet(uri)


def class_counts(df: DataFrame, label: str) -> dict[str, int]:
    """Rows per label value, as a JSON-friendly dict (one small aggregation)."""
    return {str(r[0]): int(r[1]) for r in df.groupBy(label).count().collect()}
