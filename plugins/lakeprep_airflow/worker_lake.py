"""The lake from the Airflow worker as a `lakeprep_jobs.lake.Lake`: the window's stages without Spark.

`file://` lakes are read in place (a Parquet file's columns read alone); `hdfs://` ones
through WebHDFS with the worker's connection (`lake_fs`), where a Parquet file is read
whole before its columns are taken.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeprep_airflow import lake_fs
from lakeprep_jobs.lake import parquet_from_bytes

if TYPE_CHECKING:
    import pyarrow as pa


class WorkerLake:
    """`lakeprep_jobs.lake.Lake` over `lake_fs`."""

    def __init__(self, webhdfs_conn_id: str = "webhdfs_default") -> None:
        self.webhdfs_conn_id = webhdfs_conn_id
        self._remote: lake_fs.LakeFS | None = None  # one WebHDFS client for the task

    def _resolve(self, uri: str) -> tuple[lake_fs.LakeFS, str]:
        fs, path = lake_fs.resolve(uri, webhdfs_conn_id=self.webhdfs_conn_id)
        if isinstance(fs, lake_fs.LocalFS):
            return fs, path
        if self._remote is None:
            self._remote = fs
        return self._remote, path

    def exists(self, uri: str) -> bool:
        fs, path = self._resolve(uri)
        return fs.exists(path)

    def read_bytes(self, uri: str) -> bytes:
        fs, path = self._resolve(uri)
        return fs.read_bytes(path)

    def write_bytes(self, uri: str, data: bytes) -> None:
        fs, path = self._resolve(uri)
        fs.makedirs(path.rpartition("/")[0])
        fs.write_bytes(path, data)

    def list_names(self, uri: str) -> list[str]:
        fs, path = self._resolve(uri)
        return [e.name for e in fs.list_dir(path)] if fs.exists(path) else []

    def delete(self, uri: str) -> None:
        fs, path = self._resolve(uri)
        if fs.exists(path):
            fs.delete(path)

    def rename(self, src: str, dst: str) -> None:
        fs, src_path = self._resolve(src)
        _, dst_path = self._resolve(dst)
        fs.makedirs(dst_path.rpartition("/")[0])
        fs.replace(src_path, dst_path)

    def read_parquet(self, uri: str, columns: list[str] | None) -> pa.Table:
        fs, path = self._resolve(uri)
        if isinstance(fs, lake_fs.LocalFS):
            import pyarrow.parquet as pq

            return pq.read_table(path, columns=columns)
        return parquet_from_bytes(fs.read_bytes(path), columns)
