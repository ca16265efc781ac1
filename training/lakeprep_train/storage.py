"""Where manifests and shards are opened: the one place that turns a location into bytes.

The manifest may live on the local disk or behind a URI; every read of the trainer
(the manifest itself, shard footers, shard rows, checksums) goes through
:func:`open_input`, so adding a scheme (``webhdfs://`` through fsspec's
``pyarrow.fs.PyFileSystem(FSSpecHandler(...))``) is a change to one function.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import urlsplit, urlunsplit

import pyarrow.fs as pafs

if TYPE_CHECKING:
    import pyarrow as pa

# Schemes pyarrow opens natively (pyarrow.fs.FileSystem.from_uri); anything else is
# refused with a message instead of failing deep inside pyarrow.
NATIVE_SCHEMES = ("file", "hdfs", "viewfs", "s3", "gs", "gcs", "abfs", "abfss")


def open_input(location: str) -> pa.NativeFile:
    """Open ``location`` (a local path or a URI) for random-access binary reading.

    Parquet needs random access (the footer is at the end), so this returns a
    seekable ``pyarrow.NativeFile``; ``.size()`` gives the stored byte count.
    """
    scheme = urlsplit(location).scheme if "://" in location else ""
    if not scheme:
        return pafs.LocalFileSystem().open_input_file(os.path.abspath(location))
    if scheme not in NATIVE_SCHEMES:
        raise ValueError(
            f"cannot open {location!r}: scheme {scheme!r} is not supported; "
            f"expected a local path or one of {', '.join(s + '://' for s in NATIVE_SCHEMES)}"
        )
    filesystem, path = pafs.FileSystem.from_uri(location)
    return filesystem.open_input_file(path)


def parent_of(location: str) -> str:
    """The folder that holds ``location`` (a local path or a URI), as the same kind."""
    if "://" not in location:
        return os.path.dirname(os.path.abspath(location))
    parts = urlsplit(location)
    return urlunsplit(parts._replace(path=posixpath.dirname(parts.path)))


def join(folder: str, relative: str) -> str:
    """``relative`` (a POSIX path from a manifest) under ``folder``, as the same kind."""
    if "://" not in folder:
        return os.path.join(folder, *relative.split("/"))
    parts = urlsplit(folder)
    return urlunsplit(parts._replace(path=posixpath.join(parts.path, relative)))


def write_atomically(path: str, write: Callable[[BinaryIO], object]) -> None:
    """Write a local file so that readers see the old one or the whole new one.

    ``write`` gets a binary file: a hidden partial sibling, flushed and fsynced, then
    renamed onto ``path`` (and removed if ``write`` raises).
    """
    folder, name = os.path.split(path)
    partial = os.path.join(folder, f".{name}.partial-{os.getpid()}")
    try:
        with open(partial, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
