"""The lake through the driver's Hadoop FileSystem, and the atomic commit of a partition.

A stage writes into a hidden staging folder beside its output partition and commits by
renaming it over the partition, so a killed job never leaves a half-written partition
where the next stage would read it (Hadoop's FileSystem.rename is atomic on HDFS and on
a local filesystem). Each partition carries `_lakeprep_report.json`: the stage's row
accounting and what it decided, read by the next stages, the run summary and tests.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from lakeprep_contracts import layout
from lakeprep_jobs import lake
from lakeprep_jobs.lake import SparkLake

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPORT_NAME = layout.REPORT
QUARANTINE_DIR = layout.QUARANTINE_DIR


def jvm_path(spark: SparkSession, uri: str) -> tuple[Any, Any]:
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
    fs, path = jvm_path(spark, uri)
    return sorted(
        (str(st.getPath().toString()), int(st.getLen())) for st in fs.listStatus(path) if st.isFile()
    )


def list_folders(spark: SparkSession, uri: str) -> list[str]:
    """Names of the folders directly under `uri`; none when it is a file or does not exist."""
    fs, path = jvm_path(spark, uri)
    if not fs.exists(path) or not fs.getFileStatus(path).isDirectory():
        return []
    return sorted(str(st.getPath().getName()) for st in fs.listStatus(path) if st.isDirectory())


def rename(spark: SparkSession, src: str, dst: str) -> None:
    SparkLake(spark).rename(src, dst)


def delete(spark: SparkSession, uri: str) -> None:
    SparkLake(spark).delete(uri)


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
