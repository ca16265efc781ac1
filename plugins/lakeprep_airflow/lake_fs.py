"""Small filesystem access to the lake from Airflow workers: `file://` and `hdfs://`.

Spark reads and writes the lake through Hadoop's FileSystem; Airflow-side code (the
partition sensor, the demo data landing, reading stage reports and manifests) only needs
status, listing and small reads/writes. `hdfs://` and `webhdfs://` URIs go through the
apache-hdfs provider's `WebHDFSHook`, so the connection (hosts, HA namenodes, Kerberos,
SSL) is configured once, the Airflow way.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlparse

if TYPE_CHECKING:
    from hdfs import Client


@dataclass(frozen=True)
class Entry:
    """One child of a directory."""

    name: str
    is_dir: bool
    size: int


class LakeFS(Protocol):
    def exists(self, path: str) -> bool: ...
    def list_dir(self, path: str) -> list[Entry]: ...
    def read_bytes(self, path: str) -> bytes: ...
    def write_bytes(self, path: str, data: bytes) -> None: ...
    def makedirs(self, path: str) -> None: ...
    def delete(self, path: str) -> None: ...
    def replace(self, src: str, dst: str) -> None: ...


class LocalFS:
    """The local filesystem (the embedded default lake, `file://`)."""

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def list_dir(self, path: str) -> list[Entry]:
        with os.scandir(path) as it:
            return sorted(
                (Entry(e.name, e.is_dir(), 0 if e.is_dir() else e.stat().st_size) for e in it),
                key=lambda e: e.name,
            )

    def read_bytes(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def write_bytes(self, path: str, data: bytes) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)

    def makedirs(self, path: str) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)

    def delete(self, path: str) -> None:
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)  # atomic on POSIX, overwriting dst


class WebHdfsFS:
    """HDFS through WebHDFS, using the provider's hook and its connection."""

    def __init__(self, webhdfs_conn_id: str = "webhdfs_default") -> None:
        self.webhdfs_conn_id = webhdfs_conn_id
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            from airflow.providers.apache.hdfs.hooks.webhdfs import WebHDFSHook

            self._client = WebHDFSHook(webhdfs_conn_id=self.webhdfs_conn_id).get_conn()
        return self._client

    def exists(self, path: str) -> bool:
        return self.client.status(path, strict=False) is not None

    def list_dir(self, path: str) -> list[Entry]:
        return [
            Entry(name, st["type"] == "DIRECTORY", int(st.get("length", 0)))
            for name, st in sorted(self.client.list(path, status=True))
        ]

    def read_bytes(self, path: str) -> bytes:
        with self.client.read(path) as reader:
            return reader.read()

    def write_bytes(self, path: str, data: bytes) -> None:
        self.client.write(path, data=data, overwrite=True)

    def makedirs(self, path: str) -> None:
        self.client.makedirs(path)

    def delete(self, path: str) -> None:
        self.client.delete(path, recursive=True)

    def replace(self, src: str, dst: str) -> None:
        # WebHDFS RENAME refuses an existing file as destination (hdfs.Client.rename):
        # the old file goes first, so readers see the old file, nothing, then the new one.
        self.client.delete(dst)
        self.client.rename(src, dst)


def resolve(uri: str, *, webhdfs_conn_id: str = "webhdfs_default") -> tuple[LakeFS, str]:
    """Map a lake URI to (filesystem, path within it).

    `file:///x` and bare paths are local; `hdfs://nn:8020/x` and `webhdfs://nn:9870/x` go
    through WebHDFS with the given connection (its host is the NameNode's HTTP address; the
    URI's authority only says which cluster the Spark side talks to).
    """
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return LocalFS(), parsed.path if parsed.scheme else uri
    if parsed.scheme in ("hdfs", "webhdfs"):
        return WebHdfsFS(webhdfs_conn_id), parsed.path or "/"
    raise ValueError(
        f"lake URI {uri!r} has scheme {parsed.scheme!r}; expected file://, hdfs:// or webhdfs://"
    )


def join(uri: str, *parts: str) -> str:
    return "/".join([uri.rstrip("/"), *(p.strip("/") for p in parts)])


def write_atomic(fs: LakeFS, path: str, data: bytes) -> None:
    """Write `path` so that readers see the old file or the whole new one, never a part.

    The bytes go to a hidden sibling (`.<name>.tmp-<random>`, skipped by readers of the
    folder, as Spark skips `.` and `_` names) and are renamed into place.
    """
    folder, _, name = path.rpartition("/")
    tmp = f"{folder}/.{name}.tmp-{uuid.uuid4().hex[:12]}"
    fs.makedirs(folder)
    fs.write_bytes(tmp, data)
    try:
        fs.replace(tmp, path)
    except BaseException:
        fs.delete(tmp)
        raise
