"""`PartitionSensor`: wait until a dataset partition is complete.

Complete means: the partition directory exists, its `_SUCCESS` marker is there, and it
holds at least `min_files` data files and `min_bytes` bytes. `file://` lakes are listed
directly; `hdfs://` and `webhdfs://` go through the apache-hdfs provider's WebHDFS hook
(its connection carries the NameNode addresses, SSL and, with `[core] security =
kerberos`, Kerberos). Use `mode="reschedule"` to free the worker slot between pokes, or
`deferrable=True` to wait in the triggerer.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout

from lakeprep_airflow.lineage import PartitionLineageMixin
from lakeprep_airflow.partition_status import LakeUnreachableError, check_partition
from lakeprep_airflow.triggers.partition import PartitionCompleteTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context


class PartitionSensor(PartitionLineageMixin, BaseSensorOperator):
    """Wait for `uri` to hold a complete partition.

    :param uri: the partition URI (`file://`, `hdfs://`, `webhdfs://`). (templated)
    :param min_files: minimum number of data files (names not starting with `_` or `.`).
    :param min_bytes: minimum total bytes of those files.
    :param webhdfs_conn_id: the WebHDFS connection for `hdfs://` URIs. (templated)
    :param deferrable: wait in the triggerer instead of a worker slot.
    :param ds: the partition's date, YYYY-MM-DD; with `valid_from`/`valid_to` (the dataset's
        `start_date`/`end_date`), a date outside them, or after today, fails at once rather
        than waiting out the timeout for data that cannot come. (templated)
    """

    template_fields: Sequence[str] = ("uri", "webhdfs_conn_id", "ds")
    ui_color = "#e8f1fa"

    def __init__(
        self,
        *,
        uri: str,
        min_files: int = 1,
        min_bytes: int = 0,
        webhdfs_conn_id: str = "webhdfs_default",
        deferrable: bool = False,
        ds: str | None = None,
        valid_from: str | None = None,
        valid_to: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if min_files < 0 or min_bytes < 0:
            raise ValueError(f"min_files {min_files!r} and min_bytes {min_bytes!r} must be >= 0")
        self.uri = uri
        self.min_files = min_files
        self.min_bytes = min_bytes
        self.webhdfs_conn_id = webhdfs_conn_id
        self.deferrable = deferrable
        self.ds = ds
        self.valid_from = valid_from
        self.valid_to = valid_to
        self._last_seen = "not checked yet"

    def check_date(self) -> None:
        """Refuse a partition date the data cannot have (no retries: a retry would not help)."""
        if not self.ds:
            return
        try:
            day = date.fromisoformat(str(self.ds))
        except ValueError:
            raise AirflowFailException(f"partition date {self.ds!r} must be YYYY-MM-DD") from None
        where = f"partition {self.uri}"
        if self.valid_from and day < date.fromisoformat(self.valid_from[:10]):
            raise AirflowFailException(
                f"{where}: date {day} is before the dataset's start_date {self.valid_from[:10]}; "
                "trigger the run with a logical date inside the dataset's dates"
            )
        if self.valid_to and day > date.fromisoformat(self.valid_to[:10]):
            raise AirflowFailException(
                f"{where}: date {day} is after the dataset's end_date {self.valid_to[:10]}; the trigger "
                "form's logical date defaults to now: set it to a day inside the dataset's dates"
            )
        tomorrow = datetime.now(UTC).date() + timedelta(days=1)
        if day > tomorrow:
            raise AirflowFailException(
                f"{where}: date {day} is in the future (today is {tomorrow - timedelta(days=1)})"
            )

    def poke(self, context: Context) -> bool:
        # An unreachable lake raises LakeUnreachableError naming the endpoint: the task
        # fails (and retries) instead of waiting out its timeout on a dead NameNode.
        status = check_partition(self.uri, webhdfs_conn_id=self.webhdfs_conn_id)
        self._last_seen = status.describe()
        self.log.info("partition check: %s", self._last_seen)
        return status.complete(self.min_files, self.min_bytes)

    def _timeout_message(self, seen: str) -> str:
        return (
            f"partition {self.uri} was not complete (needs _SUCCESS, >= {self.min_files} data "
            f"file(s), >= {self.min_bytes} bytes) after {self.timeout:.0f}s; last seen: {seen}"
        )

    def execute(self, context: Context) -> Any:
        self.check_date()
        if not self.deferrable:
            try:
                return super().execute(context)
            except AirflowSensorTimeout as err:
                raise AirflowSensorTimeout(self._timeout_message(self._last_seen)) from err
        if self.poke(context):
            return None
        self.defer(
            trigger=PartitionCompleteTrigger(
                uri=self.uri,
                min_files=self.min_files,
                min_bytes=self.min_bytes,
                poke_interval=float(self.poke_interval),
                deadline=time.time() + float(self.timeout),
                webhdfs_conn_id=self.webhdfs_conn_id,
            ),
            method_name="execute_complete",
            # A backstop a little after the trigger's own deadline.
            timeout=timedelta(seconds=float(self.timeout) + 2 * float(self.poke_interval) + 60),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> None:
        status = event.get("status")
        if status == "complete":
            self.log.info("partition complete: %s", event.get("seen"))
            return
        if status == "timeout":
            raise AirflowSensorTimeout(self._timeout_message(event.get("seen", "?")))
        raise LakeUnreachableError(event.get("message", f"partition check failed for {self.uri}: {event}"))
