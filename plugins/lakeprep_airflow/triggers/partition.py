"""`PartitionCompleteTrigger`: wait for a lake partition in the triggerer, not a worker slot."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from lakeprep_airflow.partition_status import LakeUnreachableError, check_partition


class PartitionCompleteTrigger(BaseTrigger):
    """Poll `check_partition` until complete, the deadline passes, or the lake is unreachable.

    The listing call is blocking (WebHDFS over `requests`, or the local filesystem), so it
    runs in a thread to keep the triggerer's event loop free.
    """

    def __init__(
        self,
        *,
        uri: str,
        min_files: int,
        min_bytes: int,
        poke_interval: float,
        deadline: float,
        webhdfs_conn_id: str = "webhdfs_default",
    ) -> None:
        super().__init__()
        self.uri = uri
        self.min_files = min_files
        self.min_bytes = min_bytes
        self.poke_interval = poke_interval
        self.deadline = deadline  # epoch seconds
        self.webhdfs_conn_id = webhdfs_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "uri": self.uri,
                "min_files": self.min_files,
                "min_bytes": self.min_bytes,
                "poke_interval": self.poke_interval,
                "deadline": self.deadline,
                "webhdfs_conn_id": self.webhdfs_conn_id,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                status = await asyncio.to_thread(
                    check_partition, self.uri, webhdfs_conn_id=self.webhdfs_conn_id
                )
            except LakeUnreachableError as err:
                yield TriggerEvent({"status": "error", "uri": self.uri, "message": str(err)})
                return
            self.log.info("partition check: %s", status.describe())
            if status.complete(self.min_files, self.min_bytes):
                yield TriggerEvent({"status": "complete", "uri": self.uri, "seen": status.describe()})
                return
            if time.time() >= self.deadline:
                yield TriggerEvent({"status": "timeout", "uri": self.uri, "seen": status.describe()})
                return
            await asyncio.sleep(self.poke_interval)
