"""Small reads and writes of the lake, from a Spark driver or from an Airflow worker: one interface.

The window's stages (`fit_transform`, and `export_shards` writing a manifest) read small
documents and write small files; they need no Spark job. They run in the Airflow worker
(`lakeprep_airflow.operators.window_stage`, through the worker's `lake_fs`) or inside a
Spark submission (`SparkLake`, Hadoop's FileSystem through the driver's JVM), given a
`Lake`. `PartitionCommit` is the one staging-and-rename commit of a partition, whichever
lake it writes to.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from lakeprep_contracts import layout

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

log = logging.getLogger("lakeprep_jobs")


class Lake(Protocol):
    """A lake's file operations, by URI."""

    def exists(self, uri: str) -> bool: ...
    def read_bytes(self, uri: str) -> bytes: ...
    def write_bytes(self, uri: str, data: bytes) -> None: ...  # creates the parent folders
    def list_names(self, uri: str) -> list[str]: ...  # the children's names; [] if absent
    def delete(self, uri: str) -> None: ...  # a file or a folder, recursively; absent: nothing
    def rename(self, src: str, dst: str) -> None: ...  # `dst` does not exist
    def read_parquet(self, uri: str, columns: list[str] | None) -> pa.Table: ...  # one file


def parquet_from_bytes(data: bytes, columns: list[str] | None) -> pa.Table:
    """One Parquet file's `columns` (None: all) from its bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pq.read_table(pa.BufferReader(data), columns=columns)


def read_text(lake: Lake, uri: str) -> str:
    return lake.read_bytes(uri).decode("utf-8")


def write_text(lake: Lake, uri: str, text: str) -> None:
    lake.write_bytes(uri, text.encode("utf-8"))


def read_json(lake: Lake, uri: str) -> Any:
    return json.loads(read_text(lake, uri))


class SparkLake:
    """The lake through the Spark driver's Hadoop FileSystem (any scheme Spark reads)."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def _path(self, uri: str) -> tuple[Any, Any]:
        jvm = self.spark.sparkContext._jvm  # py4j gateway: Hadoop's FileSystem API
        path = jvm.org.apache.hadoop.fs.Path(uri)
        return path.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration()), path

    def exists(self, uri: str) -> bool:
        fs, path = self._path(uri)
        return bool(fs.exists(path))

    def read_bytes(self, uri: str) -> bytes:
        fs, path = self._path(uri)
        stream = fs.open(path)
        try:
            return bytes(self.spark.sparkContext._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def write_bytes(self, uri: str, data: bytes) -> None:
        fs, path = self._path(uri)
        out = fs.create(path, True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()

    def list_names(self, uri: str) -> list[str]:
        fs, path = self._path(uri)
        if not fs.exists(path):
            return []
        return sorted(str(st.getPath().getName()) for st in fs.listStatus(path))

    def delete(self, uri: str) -> None:
        fs, path = self._path(uri)
        fs.delete(path, True)

    def rename(self, src: str, dst: str) -> None:
        fs, src_path = self._path(src)
        _, dst_path = self._path(dst)
        # HDFS refuses (returns false) to rename into a missing folder; the local FS creates it.
        fs.mkdirs(dst_path.getParent())
        if not fs.rename(src_path, dst_path):
            raise OSError(f"could not rename {src} to {dst}")

    def read_parquet(self, uri: str, columns: list[str] | None) -> pa.Table:
        return parquet_from_bytes(self.read_bytes(uri), columns)


class PartitionCommit:
    """Stage a partition in a hidden sibling folder, then swap it in.

    with PartitionCommit(lake, output) as staging:
        ...write files under staging...
    # now `output` is the new partition; on error the staging folder is removed
    """

    def __init__(self, lake: Lake, output: str) -> None:
        self.lake = lake
        self.output = output.rstrip("/")
        parent, _, leaf = self.output.rpartition("/")
        # Under `_staging/` of the parent: readers of the parent skip `_` folders (Spark's
        # partition discovery does), while the staged folder's own name stays readable
        # (Spark ignores an explicit path whose last name starts with `_` or `.`).
        self.staging = f"{parent}/{layout.STAGING_DIR}/{leaf}-{uuid.uuid4().hex[:12]}"

    def __enter__(self) -> str:
        self.remove_leftovers()
        return self.staging

    def remove_leftovers(self) -> list[str]:
        """Delete what earlier, killed attempts staged for this partition.

        A task killed mid-write (SIGKILL, a lost node) never reaches `__exit__`, so its
        `_staging/<leaf>-<random>` folder stays; the retry removes it before it writes.
        One writer per partition is assumed, as for the overwrite itself: a second stage
        writing the same partition at the same time would lose its staging folder.
        """
        parent, _, leaf = self.output.rpartition("/")
        folder = f"{parent}/{layout.STAGING_DIR}"
        removed = [f"{folder}/{name}" for name in self.lake.list_names(folder) if name.startswith(f"{leaf}-")]
        for uri in removed:
            log.warning("removing %s, staged by an earlier attempt that did not finish", uri)
            self.lake.delete(uri)
        return removed

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.lake.delete(self.staging)
            return
        if self.lake.exists(self.output):
            # Not a single atomic step (HDFS rename does not overwrite a directory), but a
            # reader sees either the old partition, no partition, or the new one, never a
            # mix; `_SUCCESS` inside the staged folder marks it complete.
            self.lake.delete(self.output)
        self.lake.rename(self.staging, self.output)


def write_report(lake: Lake, staging: str, report: dict[str, Any]) -> None:
    write_text(lake, layout.join(staging, layout.REPORT), json.dumps(report, indent=2, sort_keys=True))


def write_success(lake: Lake, staging: str) -> None:
    lake.write_bytes(layout.join(staging, layout.SUCCESS), b"")
