"""Is a lake partition complete? One check shared by the sensor and its trigger."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

from lakeprep_airflow import lake_fs
from lakeprep_contracts import layout

SUCCESS_MARKER = layout.SUCCESS


@dataclass(frozen=True)
class PartitionStatus:
    """What one look at a partition found."""

    uri: str
    exists: bool
    has_marker: bool
    data_files: int
    data_bytes: int

    def complete(self, min_files: int, min_bytes: int) -> bool:
        return self.has_marker and self.data_files >= min_files and self.data_bytes >= min_bytes

    def describe(self) -> str:
        if not self.exists:
            return f"{self.uri}: partition directory does not exist"
        marker = "present" if self.has_marker else "missing"
        return (
            f"{self.uri}: {SUCCESS_MARKER} {marker}, {self.data_files} data file(s), {self.data_bytes} bytes"
        )


class LakeUnreachableError(ConnectionError):
    """The lake's endpoint did not answer; the message names it."""


def check_partition(uri: str, *, webhdfs_conn_id: str = "webhdfs_default") -> PartitionStatus:
    """List the partition once. Data files are those not starting with `_` or `.`."""
    fs, path = lake_fs.resolve(uri, webhdfs_conn_id=webhdfs_conn_id)
    try:
        if not fs.exists(path):
            return PartitionStatus(uri, False, False, 0, 0)
        entries = fs.list_dir(path)
    except _unreachable_errors(fs) as err:
        # The WebHDFS hook raises AirflowWebHDFSHookException ("Failed to locate the valid
        # server") when no NameNode answers; name the endpoint instead of a bare traceback.
        raise LakeUnreachableError(_unreachable(uri, webhdfs_conn_id, err)) from err
    data = [e for e in entries if not e.is_dir and not e.name.startswith(("_", "."))]
    return PartitionStatus(
        uri=uri,
        exists=True,
        has_marker=any(e.name == SUCCESS_MARKER for e in entries),
        data_files=len(data),
        data_bytes=sum(e.size for e in data),
    )


def _unreachable_errors(fs: lake_fs.LakeFS) -> tuple[type[BaseException], ...]:
    if isinstance(fs, lake_fs.WebHdfsFS):
        from airflow.providers.apache.hdfs.hooks.webhdfs import AirflowWebHDFSHookException

        return (OSError, AirflowWebHDFSHookException)
    return (OSError,)


def _unreachable(uri: str, conn_id: str, err: BaseException) -> str:
    scheme = urlparse(uri).scheme
    if scheme in ("hdfs", "webhdfs"):
        endpoint = _webhdfs_endpoint(conn_id)
        return f"cannot reach HDFS for {uri}: WebHDFS endpoint {endpoint} (connection {conn_id!r}): {err}"
    return f"cannot read {uri}: {err}"


def _webhdfs_endpoint(conn_id: str) -> str:
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return "<undefined connection>"
    return f"http://{conn.host}:{conn.port}"
