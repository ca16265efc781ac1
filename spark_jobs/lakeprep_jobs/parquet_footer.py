"""Canonical Parquet footers: the same rows give the same shard bytes in every JVM.

Spark writes Parquet with parquet-java, which collects each column chunk's encodings in
a `java.util.HashSet<Encoding>` (`ColumnChunkPageWriteStore`, `ParquetFileWriter`
`writeColumnChunk`) and writes them to the footer in the set's iteration order. An
enum's hash is its identity hash, which changes with every JVM, so two runs that write
the same pages list e.g. `[PLAIN_DICTIONARY, RLE, BIT_PACKED]` in one footer and
`[BIT_PACKED, PLAIN_DICTIONARY, RLE]` in the other: the same file to every reader, a
different sha256. The Parquet format defines the list as the *set* of encodings used
(`ColumnMetaData.encodings` in parquet.thrift), so its order carries no meaning.

`canonical_footer` sorts that list (and the file's key-value metadata by key) inside the
Thrift compact encoding of the footer. A permutation of equally long elements leaves the
footer's length unchanged, so every offset in the file stays valid. `commit_shard`
moves a written shard to its final name with that footer: a plain rename when the footer
is already canonical, otherwise a copy of the data pages (inside the JVM, no bytes through
Python) followed by the canonical footer.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from lakeprep_jobs import lake_io

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MAGIC = b"PAR1"

# Thrift compact protocol type ids (thrift's TCompactProtocol).
_STOP, _TRUE, _FALSE, _I8, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT, _UUID = range(14)

# Field ids in parquet.thrift.
_FILE_ROW_GROUPS, _FILE_KEY_VALUE_METADATA = 4, 5
_ROW_GROUP_COLUMNS = 1
_CHUNK_META_DATA = 3
_META_ENCODINGS = 2
_KEY_VALUE_KEY, _KEY_VALUE_VALUE = 1, 2


class FooterError(ValueError):
    """The bytes are not a Parquet footer this module can read."""


def _varint(b: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(b):
            raise FooterError("footer ends inside a varint")
        byte = b[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, i
        shift += 7


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


# A decoded value: (value, start, end). Structs decode to {field id: (type, value, start, end)},
# lists and sets to [(value, start, end), ...]; the spans let elements be moved as bytes.
Decoded = tuple[Any, int, int]


def _read(b: bytes, i: int, ttype: int) -> Decoded:
    start = i
    if ttype in (_TRUE, _FALSE):  # only as a list element: one byte
        return b[i] == _TRUE, start, i + 1
    if ttype == _I8:
        return b[i], start, i + 1
    if ttype in (_I16, _I32, _I64):
        n, i = _varint(b, i)
        return _zigzag(n), start, i
    if ttype == _DOUBLE:
        return struct.unpack_from("<d", b, i)[0], start, i + 8
    if ttype == _UUID:
        return b[i : i + 16], start, i + 16
    if ttype == _BINARY:
        n, i = _varint(b, i)
        return b[i : i + n], start, i + n
    if ttype in (_LIST, _SET):
        header = b[i]
        i += 1
        size, elem = header >> 4, header & 0x0F
        if size == 15:
            size, i = _varint(b, i)
        items = []
        for _ in range(size):
            item = _read(b, i, elem)
            items.append(item)
            i = item[2]
        return items, start, i
    if ttype == _MAP:
        size, i = _varint(b, i)
        pairs = []
        if size:
            kinds = b[i]
            i += 1
            for _ in range(size):
                key = _read(b, i, kinds >> 4)
                value = _read(b, key[2], kinds & 0x0F)
                pairs.append((key, value))
                i = value[2]
        return pairs, start, i
    if ttype == _STRUCT:
        fields: dict[int, tuple[int, Any, int, int]] = {}
        last = 0
        while True:
            if i >= len(b):
                raise FooterError("footer ends inside a struct")
            header = b[i]
            i += 1
            kind = header & 0x0F
            if kind == _STOP:
                return fields, start, i
            delta = header >> 4
            if delta:
                fid = last + delta
            else:
                raw, i = _varint(b, i)
                fid = _zigzag(raw)
            last = fid
            if kind in (_TRUE, _FALSE):  # a bool field's value is its type
                fields[fid] = (kind, kind == _TRUE, i, i)
                continue
            value, vstart, i = _read(b, i, kind)
            fields[fid] = (kind, value, vstart, i)
    raise FooterError(f"unknown Thrift compact type {ttype} at byte {i}")


def _sort_elements(out: bytearray, items: list[Decoded], key: Any) -> None:
    """Rewrite contiguous list elements in `key` order (same bytes, same total length)."""
    if len(items) < 2:
        return
    first, last = items[0][1], items[-1][2]
    chunks = [bytes(out[s:e]) for _, s, e in sorted(items, key=key)]
    out[first:last] = b"".join(chunks)


def canonical_footer(footer: bytes) -> bytes:
    """The footer (Thrift `FileMetaData`) with each column chunk's encodings in ascending
    order and the key-value metadata sorted by key; everything else byte for byte."""
    meta, _, end = _read(footer, 0, _STRUCT)
    if end != len(footer):
        raise FooterError(f"footer holds {len(footer)} bytes, FileMetaData ends at {end}")
    out = bytearray(footer)
    for row_group, _, _ in meta.get(_FILE_ROW_GROUPS, (None, []))[1]:
        for chunk, _, _ in row_group.get(_ROW_GROUP_COLUMNS, (None, []))[1]:
            column_meta = chunk.get(_CHUNK_META_DATA)
            if column_meta is None:
                continue
            encodings = column_meta[1].get(_META_ENCODINGS)
            if encodings is not None:
                _sort_elements(out, encodings[1], key=lambda item: item[0])
    key_values = meta.get(_FILE_KEY_VALUE_METADATA)
    if key_values is not None:

        def by_key(item: Decoded) -> tuple[bytes, bytes]:
            kv = item[0]
            value = kv.get(_KEY_VALUE_VALUE)
            return kv[_KEY_VALUE_KEY][1], value[1] if value else b""

        _sort_elements(out, key_values[1], key=by_key)
    return bytes(out)


def split_file(tail: bytes, size: int) -> tuple[int, bytes]:
    """(offset of the footer, the footer) from a file's last bytes (at least footer + 8)."""
    if size < 12 or tail[-4:] != MAGIC:
        raise FooterError(f"not a Parquet file: {size} bytes, ends with {tail[-4:]!r}")
    length = struct.unpack("<i", tail[-8:-4])[0]
    if length <= 0 or length + 8 > len(tail):
        raise FooterError(f"footer length {length} does not fit the file's {size} bytes")
    return size - 8 - length, tail[-8 - length : -8]


def _read_range(spark: SparkSession, uri: str, position: int, length: int) -> bytes:
    fs, path = lake_io.jvm_path(spark, uri)
    stream = fs.open(path)
    try:
        stream.seek(position)
        return bytes(spark.sparkContext._jvm.org.apache.commons.io.IOUtils.toByteArray(stream, length))
    finally:
        stream.close()


def commit_shard(spark: SparkSession, src: str, dst: str) -> bool:
    """Move the Parquet file `src` to `dst` with a canonical footer; True if it was rewritten.

    The footer sits at the end of the file (`<pages><footer><length>PAR1`): the pages are
    copied unchanged by Hadoop streams inside the JVM, then the canonical footer is written.
    """
    fs, src_path = lake_io.jvm_path(spark, src)
    size = int(fs.getFileStatus(src_path).getLen())
    tail = _read_range(spark, src, max(0, size - 8), min(size, 8))
    length = struct.unpack("<i", tail[-8:-4])[0] if len(tail) == 8 and tail[-4:] == MAGIC else 0
    if length <= 0 or length + 12 > size:
        raise FooterError(f"{src} is not a Parquet file ({size} bytes, ends with {tail[-4:]!r})")
    offset, footer = split_file(_read_range(spark, src, size - 8 - length, length + 8), size)
    canonical = canonical_footer(footer)
    if canonical == footer:
        lake_io.rename(spark, src, dst)
        return False
    _, dst_path = lake_io.jvm_path(spark, dst)
    fs.mkdirs(dst_path.getParent())
    commons_io = spark.sparkContext._jvm.org.apache.commons.io.IOUtils
    source, sink = fs.open(src_path), fs.create(dst_path, True)
    try:
        copied = int(commons_io.copyLarge(source, sink, 0, offset))
        if copied != offset:
            raise OSError(f"copied {copied} of {offset} data bytes from {src} to {dst}")
        sink.write(bytearray(canonical + tail))
    finally:
        source.close()
        sink.close()
    lake_io.delete(spark, src)
    return True
