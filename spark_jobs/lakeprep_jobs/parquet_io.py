"""Parquet partitions: read (committed ones only, schema from the footers), written, and
their rows counted from the footers without a Spark job."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from lakeprep_contracts import layout
from lakeprep_jobs.lake_io import exists, jvm_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


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


def write_parquet(df: DataFrame, uri: str) -> None:
    df.write.mode("overwrite").option("compression", "zstd").parquet(uri)


# Where Spark's Parquet writer keeps the DataFrame's schema (ParquetWriteSupport.SPARK_ROW_SCHEMA);
# Spark's schema inference reads it from one file's footer, the same as `footer_schema`.
SPARK_ROW_SCHEMA = "org.apache.spark.sql.parquet.row.metadata"


def _parquet_files(spark: SparkSession, uri: str) -> list[Any]:
    """The FileStatus of each Parquet data file directly under `uri`, by name."""
    fs, path = jvm_path(spark, uri)
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
