"""Raw records to model features without Spark: contract, derived columns, references, transform.

The daily pipeline turns a raw partition into features in three Spark stages
(``validate``, ``preprocess``, then the fitted transform); a model folder carries the
same knowledge in ``transform.json`` (``contract.validate`` is validate's params,
``contract.preprocess`` preprocess's). This module replays it on a raw CSV, JSON-lines
or Parquet file, or a pyarrow Table, so that a record scores as it would have trained:

1. **Contract** (:func:`read_records`, :func:`check_contract`): the file is read as
   Spark's PERMISSIVE reader reads it (every column a string, a bad line kept and marked
   malformed), each contract column is parsed as ``try_cast`` would, and each row gets
   the reason validate would quarantine it with, or none, except that the label never
   rejects a row: it is optional at serving (a row without one is scored, and a present
   label that is not usable is reported and left out). Rejected rows are reported,
   never dropped silently.
2. **Derived columns** (:func:`add_derived`): validate's Spark SQL expressions,
   translated to DuckDB SQL with ``sqlglot`` (:func:`spark_sql_to_duckdb`, which also
   fixes what the translation gets wrong) and evaluated by ``duckdb``, with
   timestamps read in the contract's ``time_zone`` like Spark's session time zone.
3. **Reference joins** (:func:`join_references`): each reference table, de-duplicated on
   its join keys, left-joined in DuckDB, unless the input already carries its columns.
   A folder of dated snapshots (``dt=YYYY-MM-DD/``) gives its newest complete snapshot,
   or with ``reference_date`` the one preprocess would join for that day
   (:func:`reference_snapshot`). String keys are compared trimmed, as categoricals are.
4. :func:`lakeprep_train.transform.apply_transform`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakeprep_contracts import labels as label_classes
from lakeprep_contracts import layout
from lakeprep_contracts import records as record_vocabulary
from lakeprep_contracts import references as reference_layout
from lakeprep_train import storage
from lakeprep_train import transform as tf

_LINE_BREAK = re.compile(rb"\r\n|\r|\n")
_LINE_BREAK_TEXT = re.compile("\r\n|\r|\n")


class ServingError(ValueError):
    """Input that cannot be served at all (as opposed to a row, which is rejected)."""


# ----------------------------------------------------------------------- contract


@dataclass(frozen=True)
class Contract:
    """validate's params (``transform["contract"]["validate"]``), as serving needs them."""

    columns: tuple[dict[str, Any], ...]
    derived: tuple[dict[str, Any], ...]
    id_column: str
    label_column: str
    # Integers, or named classes (lakeprep_contracts.labels); none for a continuous label.
    label_classes: tuple[Any, ...]
    format: str = "csv"
    options: dict[str, str] = field(default_factory=dict)
    null_tokens: tuple[str, ...] = ()
    time_zone: str = "UTC"
    text_column: str | None = None
    text_per: str = "line"
    # `continuous`: the label is a number (validate's `label_type`), else classes.
    label_type: str = "classes"

    @property
    def continuous(self) -> bool:
        return self.label_type == label_classes.CONTINUOUS

    @classmethod
    def from_params(cls, params: Mapping[str, Any], where: str = "contract.validate") -> Contract:
        label_type = params.get("label_type", "classes")
        try:
            contract = cls(
                columns=tuple(params["columns"]),
                derived=tuple(params.get("derived", ())),
                id_column=params["id_column"],
                label_column=params["label_column"],
                # A continuous label has no classes (validate's params give `label_type`).
                label_classes=()
                if label_type == label_classes.CONTINUOUS
                else tuple(params["label_classes"]),
                label_type=label_type,
                format=params.get("format", "csv"),
                options={k: str(v) for k, v in params.get("options", {}).items()},
                null_tokens=tuple(params.get("null_tokens") or ()),
                time_zone=params.get("time_zone") or "UTC",
                text_column=params.get("text_column"),
                text_per=params.get("text_per", "line"),
            )
        except KeyError as err:
            raise ServingError(f"{where}: {err.args[0]} is missing (expected validate's params)") from None
        for i, col in enumerate(contract.columns):
            if col.get("type") not in record_vocabulary.TYPES:
                raise ServingError(
                    f"{where}.columns[{i}] ({col.get('name')}): type {col.get('type')!r} is not one of "
                    f"{list(record_vocabulary.TYPES)}"
                )
        if contract.format not in record_vocabulary.FORMATS:
            raise ServingError(
                f"{where}.format: {contract.format!r} must be one of {list(record_vocabulary.FORMATS)}"
            )
        tf.time_zone(contract.time_zone)
        return contract

    def raw_name(self, col: Mapping[str, Any]) -> str:
        return col.get("raw_name") or col["name"]

    def types(self) -> dict[str, str]:
        return {c["name"]: c["type"] for c in self.columns}

    def null_tokens_of(self, col: Mapping[str, Any]) -> tuple[str, ...]:
        """A column's own ``null_tokens`` replace the source's (``[]`` turns them off for it)."""
        own = col.get("null_tokens")
        return tuple(own) if own is not None else self.null_tokens


@dataclass
class RawRecords:
    """A raw file as Spark's PERMISSIVE reader sees it: strings, and what could not be read.

    ``columns`` are by the file's own names; ``line`` is where each record starts in a
    text file (1-based; for Parquet and tables, the row number + 1).
    """

    columns: dict[str, pa.Array]
    malformed: np.ndarray
    line: np.ndarray
    where: str

    def __len__(self) -> int:
        return len(self.line)


def _csv_records(
    text: str, sep: str, quote: str, escape: str, multiline: bool, comment: str
) -> list[tuple[list[str], bool, int]]:
    """(fields, complete, first line) per record, as Spark's CSV reader (univocity) splits them.

    Quoted fields may hold the separator, ``<escape><quote>`` (``""`` when the escape is
    the quote, RFC 4180) and, with ``multiline``, line breaks. A quote inside a quoted
    field that neither closes it nor is escaped makes the field its raw text up to the
    next separator (univocity's ``STOP_AT_DELIMITER``); a backslash outside quotes is a
    plain character, unlike in Python's ``csv`` module. A quote left open is an
    incomplete record (Spark's malformed). Empty lines are skipped, as in Spark.
    """
    records: list[tuple[list[str], bool, int]] = []
    pos, n, line = 0, len(text), 1
    # multiLine: univocity detects the line separator from the first one in the file and
    # only that one ends a record (a `\r` in a `\n` file stays in the value, as in Spark).
    breaks = ("\r\n", "\n", "\r")
    if multiline:
        found = [(i, -len(b), b) for b in breaks if (i := text.find(b)) >= 0]
        breaks = (min(found)[2],) if found else ("\n",)

    def line_break(at: int) -> int:
        """Length of the line break at ``at`` (0 if none)."""
        return next((len(b) for b in breaks if text.startswith(b, at)), 0)

    def field_end(at: int) -> int:
        ends = [i for i in (text.find(sep, at), *(text.find(b, at) for b in breaks)) if i >= 0]
        return min(ends) if ends else n

    while pos < n:
        width = line_break(pos)
        if width:
            pos, line = pos + width, line + 1
            continue
        if comment and text.startswith(comment, pos):
            ends = [i for i in (text.find(b, pos) for b in breaks) if i >= 0]
            pos = min(ends) if ends else n
            continue
        first_line, fields, complete = line, [], True
        while True:
            if quote and text.startswith(quote, pos):
                start, pos, buf, state = pos, pos + 1, [], "open"
                while pos < n:
                    c = text[pos]
                    if c == escape and escape != quote and text.startswith(quote, pos + 1):
                        buf.append(quote)
                        pos += 2
                        continue
                    if c == quote:
                        if escape == quote and text.startswith(quote, pos + 1):
                            buf.append(quote)
                            pos += 2
                            continue
                        after = pos + 1
                        if after >= n or text.startswith(sep, after) or line_break(after):
                            pos, state = after, "closed"
                            break
                        end = field_end(after)
                        buf, pos, state = [text[start:end]], end, "raw"
                        break
                    if line_break(pos):
                        if not multiline:
                            break
                        line += 1  # a quoted line break: the record goes on
                    buf.append(c)
                    pos += 1
                fields.append("".join(buf))
                if state == "open":
                    complete = False
                    if not multiline:  # the rest of the line belongs to no field
                        pos = field_end(pos) if line_break(pos) else pos
                    break
            else:
                end = field_end(pos)
                fields.append(text[pos:end])
                pos = end
            if pos < n and text.startswith(sep, pos):
                pos += len(sep)
                if pos >= n or line_break(pos):
                    fields.append("")
                    break
                continue
            break
        width = line_break(pos)
        if width:
            pos, line = pos + width, line + 1
        elif pos < n and complete:  # junk after a closed quote that is not a separator
            complete = False
            pos = field_end(pos)
        records.append((fields, complete, first_line))
    return records


def _read_csv(data: bytes, options: Mapping[str, str], where: str) -> RawRecords:
    opts = record_vocabulary.csv_options(options)
    sep = opts.get("sep", opts.get("delimiter", ","))
    sep = "\t" if sep == "\\t" else sep
    quote = opts.get("quote", '"')
    escape = opts.get("escape", "\\")
    comment = opts.get("comment", "")
    null_value = opts.get("nullvalue", "")
    header = opts.get("header", "false").lower() == "true"
    multiline = opts.get("multiline", "false").lower() == "true"
    trim_leading = opts.get("ignoreleadingwhitespace", "false").lower() == "true"
    trim_trailing = opts.get("ignoretrailingwhitespace", "false").lower() == "true"

    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")  # a BOM is not data
    records = _csv_records(text, sep, quote, escape, multiline, comment)
    names: list[str] | None = None
    rows: list[list[str | None]] = []
    malformed: list[bool] = []
    lines: list[int] = []
    for values, complete, number in records:
        if trim_leading:
            values = [v.lstrip() for v in values]
        if trim_trailing:
            values = [v.rstrip() for v in values]
        if names is None:
            # validate compares header names with surrounding whitespace removed.
            names = [v.strip() for v in values] if header else [f"_c{i}" for i in range(len(values))]
            if header:
                continue
        bad = not complete or len(values) != len(names)
        padded: list[str | None] = [*values, *([None] * len(names))][: len(names)]
        rows.append([None if v == null_value else v for v in padded])
        malformed.append(bad)
        lines.append(number)
    columns: dict[str, pa.Array] = {}
    for j, name in enumerate(names or []):
        columns.setdefault(name, pa.array([r[j] for r in rows], pa.string()))
    return RawRecords(columns, np.asarray(malformed, dtype=bool), np.asarray(lines, dtype=np.int64), where)


def _read_text(data: bytes, column: str, per: str, where: str) -> RawRecords:
    """validate's ``format: text``: one contract column, a record per line (or per file)."""
    text = data.decode("utf-8", errors="replace")
    values = [text] if per == "file" else _LINE_BREAK_TEXT.split(text)
    if per != "file" and values and values[-1] == "":
        values.pop()  # the break after the last line ends it; it starts no record
    return RawRecords(
        {column: pa.array(values, pa.string())},
        np.zeros(len(values), dtype=bool),
        np.arange(1, len(values) + 1, dtype=np.int64),
        where,
    )


class _JsonNumber(str):
    """A JSON number kept as written: Spark's ``primitivesAsString`` keeps ``1.50`` as "1.50"."""


def _json_text(value: Any) -> str | None:
    """A JSON value as the string Spark's ``primitivesAsString`` reader gives it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return _json_dump(value)


def _json_dump(value: Any) -> str:
    if isinstance(value, _JsonNumber):
        return str(value)
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {_json_dump(v)}" for k, v in value.items())
            + "}"
        )
    if isinstance(value, list):
        return "[" + ", ".join(_json_dump(v) for v in value) + "]"
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return json.dumps(value, ensure_ascii=False)


def _read_json_lines(data: bytes, where: str) -> RawRecords:
    """JSON lines as Spark reads them: an object is a record, an array of objects is several.

    Anything else on a line (not JSON, a scalar, an array of non-objects) is one
    malformed record; empty lines are skipped. Spark also accepts single-quoted strings
    (``allowSingleQuotes``); this reader does not, and marks such a line malformed.
    """
    records: list[dict[str, Any]] = []
    malformed: list[bool] = []
    lines: list[int] = []
    for number, raw_line in enumerate(_LINE_BREAK.split(data), start=1):
        if not raw_line.strip():
            continue
        text = raw_line.decode("utf-8", errors="replace")
        try:
            value = json.loads(
                text, parse_int=_JsonNumber, parse_float=_JsonNumber, parse_constant=_JsonNumber
            )
        except ValueError:
            value = None
        if isinstance(value, dict):
            found = [value]
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            found = value
        else:
            found = [{}]
            malformed.append(True)
            records.append({})
            lines.append(number)
            continue
        for record in found:
            records.append(record)
            malformed.append(False)
            lines.append(number)
    names: list[str] = []
    for record in records:
        names += [k for k in record if k not in names]
    columns = {name: pa.array([_json_text(r.get(name)) for r in records], pa.string()) for name in names}
    return RawRecords(columns, np.asarray(malformed, dtype=bool), np.asarray(lines, dtype=np.int64), where)


def _from_table(table: pa.Table, zone: str, where: str) -> RawRecords:
    """A typed table as validate reads Parquet: every column cast to Spark's string."""
    columns = {name: tf.spark_string(table.column(name), zone=zone) for name in table.column_names}
    n = table.num_rows
    return RawRecords(columns, np.zeros(n, dtype=bool), np.arange(1, n + 1, dtype=np.int64), where)


def read_records(source: str | pa.Table, contract: Contract, *, file_format: str | None = None) -> RawRecords:
    """Read raw records from a path/URI (``.csv``, ``.jsonl``/``.json``, ``.parquet``) or a Table.

    The format is ``file_format``, else the file's extension, else the contract's.
    """
    if isinstance(source, pa.Table):
        return _from_table(source, contract.time_zone, "<table>")
    kind = file_format or (None if contract.format == "text" else _format_of(source)) or contract.format
    if kind == "parquet":
        try:
            with storage.open_input(source) as f:
                table = pq.read_table(f)
        except (OSError, pa.ArrowException) as err:
            raise ServingError(f"{source}: cannot read Parquet: {err}") from err
        return _from_table(table, contract.time_zone, source)
    try:
        with storage.open_input(source) as f:
            data = f.read()
    except OSError as err:
        raise ServingError(f"{source}: cannot read: {err}") from err
    if kind == "csv":
        return _read_csv(data, contract.options, source)
    if kind == "json":
        return _read_json_lines(data, source)
    if kind == "text":
        return _read_text(
            data, contract.text_column or contract.columns[0]["name"], contract.text_per, source
        )
    raise ServingError(f"{source}: format {kind!r} is not one of {list(record_vocabulary.FORMATS)}")


def _format_of(path: str) -> str | None:
    lowered = path.lower()
    for suffix, kind in ((".csv", "csv"), (".jsonl", "json"), (".json", "json"), (".parquet", "parquet")):
        if lowered.endswith(suffix):
            return kind
    return None


@dataclass
class Checked:
    """The contract applied: typed columns (+ derived), and each row's reason or None."""

    table: pa.Table
    reasons: np.ndarray  # object: str | None per row
    labelled: bool
    missing_columns: list[str]
    label_reasons: np.ndarray  # object: why a present label is not used, or None, per row


def _first(reasons: np.ndarray, condition: np.ndarray, message: Any) -> None:
    """Set ``message`` (a string or per-row strings) where ``condition`` and no reason yet."""
    take = condition & np.equal(reasons, None)
    if not take.any():
        return
    if isinstance(message, str):
        reasons[take] = message
    else:
        reasons[take] = np.asarray(message, dtype=object)[take]


def _mask(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.fill_null(array, False).to_numpy(zero_copy_only=False), dtype=bool)


def _prefixed(prefix: str, values: pa.Array) -> list[str | None]:
    return pc.binary_join_element_wise(pa.scalar(prefix), values, "").to_pylist()


def _file_uri(where: str) -> str:
    """A file as a URI, as validate's ``_source_file`` names a local one (``file:///...``)."""
    if "://" in where or where.startswith("<"):
        return where
    return f"file://{os.path.abspath(where)}"


def _referenced_columns(expr: str) -> set[str]:
    import sqlglot
    from sqlglot import exp

    return {c.name for c in sqlglot.parse_one(expr, read="spark").find_all(exp.Column)}


def check_contract(raw: RawRecords, contract: Contract) -> Checked:
    """Type every contract column and give each row validate's quarantine reason, or None.

    The reasons and their order are validate's (``lakeprep_contracts.records``): a malformed
    record; per contract column invalid UTF-8, a bad value of its type, a non-finite
    double; a null in a non-nullable column; a null id. A value that is blank after
    trimming ``lakeprep_contracts.records.WHITESPACE``, or equal to a null token, is null.

    The label is optional at serving, so it never rejects a row: a null label (blank,
    a null token, or derived from a null) is no label, and a present label that cannot
    be used (``label <label> not in <classes>: <value>``, for a continuous label
    ``label <label> is not a finite number: <value>``, or, for a label that is a
    contract column, its own ``bad``/``non-finite``/``invalid UTF-8`` reason) goes to
    ``label_reasons`` and the label is nulled; the row is scored either way. Columns a
    derived label reads keep their own checks. The label is looked at only if the
    input carries it (its column, or every column its derivation reads). A missing
    nullable contract column is null; a missing non-nullable one fails the whole input,
    as in validate.
    """
    n = len(raw)
    reasons = np.full(n, None, dtype=object)
    label_reasons = np.full(n, None, dtype=object)
    label = contract.label_column
    derivations = {d["name"]: d["expr"] for d in contract.derived}
    _first(reasons, raw.malformed, record_vocabulary.MALFORMED_RECORD)
    typed: dict[str, pa.Array] = {}
    missing = [contract.raw_name(c) for c in contract.columns if contract.raw_name(c) not in raw.columns]
    required = [
        contract.raw_name(c)
        for c in contract.columns
        if not c.get("nullable", True) and contract.raw_name(c) in missing and c["name"] != label
    ]
    if required:
        raise ServingError(f"{raw.where}: required column(s) {required} missing; found {sorted(raw.columns)}")
    null_checks: list[tuple[np.ndarray, str]] = []
    for col in contract.columns:
        name, kind = col["name"], col["type"]
        # The label's own value decides nothing about the row (see the docstring).
        own = label_reasons if name == label and label not in derivations else reasons
        strings = raw.columns.get(contract.raw_name(col))
        if strings is None:
            typed[name] = pa.nulls(n, tf.arrow_type(kind))
            continue
        tokens = contract.null_tokens_of(col)
        stripped = pc.utf8_trim(strings, characters=record_vocabulary.WHITESPACE)
        is_null = _mask(pc.is_null(strings)) | _mask(pc.equal(stripped, ""))
        if tokens:
            is_null |= _mask(pc.is_in(stripped, value_set=pa.array(tokens, pa.string())))
        present = pc.if_else(pa.array(is_null), pa.scalar(None, pa.string()), strings)
        values = tf.spark_try_cast(present, kind, zone=contract.time_zone)
        shown = pc.utf8_slice_codeunits(strings, 0, record_vocabulary.SHOWN_CHARACTERS)
        invalid = _mask(pc.match_substring(strings, record_vocabulary.REPLACEMENT_CHARACTER))
        _first(own, invalid, record_vocabulary.invalid_utf8(name))
        bad = ~is_null & _mask(pc.is_null(values))
        if bad.any():
            _first(own, bad, _prefixed(record_vocabulary.bad_value(kind, name, ""), shown))
        if kind == "double":
            non_finite = ~_mask(pc.is_finite(values)) & _mask(pc.is_valid(values))
            if non_finite.any():
                _first(own, non_finite, _prefixed(record_vocabulary.non_finite(name, ""), shown))
        typed[name] = values
        if not col.get("nullable", True) and own is reasons:
            null_checks.append((_mask(pc.is_null(values)), record_vocabulary.null_in(name)))
    for condition, message in null_checks:
        _first(reasons, condition, message)

    # Derived columns see the typed columns and `_source_file`, and (as in validate, where
    # Spark's ANSI SQL would raise on a bad value) exist only for rows that typed cleanly.
    typed_ok = pa.array(np.equal(reasons, None))
    table = pa.table({**typed, layout.SOURCE_FILE: pa.array([_file_uri(raw.where)] * n, pa.string())})
    table = add_derived(table, contract.derived, contract.time_zone)
    for item in contract.derived:
        index = table.column_names.index(item["name"])
        column = table.column(index)
        table = table.set_column(index, item["name"], pc.if_else(typed_ok, column, pa.nulls(n, column.type)))
    table = table.drop([layout.SOURCE_FILE])
    id_values = table.column(contract.id_column)
    _first(reasons, _mask(pc.is_null(id_values)), record_vocabulary.null_id(contract.id_column))

    present_names = {c["name"] for c in contract.columns if contract.raw_name(c) in raw.columns}
    if label in derivations:
        labelled = _referenced_columns(derivations[label]) <= present_names | set(derivations)
    else:
        labelled = label in present_names
    if labelled:
        index = table.column_names.index(label)
        labels = table.column(index)
        classes = list(contract.label_classes)
        wrong = record_vocabulary.label_not_in(label, classes, "")
        if contract.continuous:
            # As validate reads it: try_cast to double, and a value that is not finite is no number.
            wrong = record_vocabulary.label_not_finite(label, "")
            unknown = _mask(pc.is_valid(labels)) & ~np.isfinite(tf.clean_numeric(labels))
        elif label_classes.is_integer(classes):
            numeric = tf.clean_numeric(labels)
            unknown = ~np.isin(numeric, np.asarray(classes, dtype=np.float64)) & ~np.isnan(numeric)
        else:
            unknown = _mask(pc.is_valid(labels)) & np.isnan(label_ids(labels, contract))
        if unknown.any():
            rendered = tf.spark_string(labels, zone=contract.time_zone)
            _first(label_reasons, unknown, _prefixed(wrong, rendered))
        usable = pa.array(np.equal(label_reasons, None))
        table = table.set_column(index, label, pc.if_else(usable, labels, pa.nulls(n, labels.type)))
    return Checked(table, reasons, labelled, missing, label_reasons)


def label_ids(values: pa.Array | pa.ChunkedArray, contract: Contract) -> np.ndarray:
    """Labels as the prepared rows hold them (float64, NaN: no label or not a class): an
    integer label as it is, a named class as its id, by its text as Spark casts it
    (lakeprep_contracts.labels, as preprocess maps it), a continuous label's value (the
    prepared rows' `target`)."""
    if contract.continuous or label_classes.is_integer(contract.label_classes):
        return tf.clean_numeric(values)
    ids = label_classes.ids_by_text(contract.label_classes)
    texts = tf.spark_string(values, zone=contract.time_zone).to_pylist()
    return np.array([ids.get(t, np.nan) if t is not None else np.nan for t in texts], dtype=np.float64)


# ------------------------------------------------------------------ derived columns

_INTEGRAL = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_SPARK_CAST_TYPES = {
    "INT": "int",
    "BIGINT": "long",
    "DOUBLE": "double",
    "BOOLEAN": "boolean",
    "DATE": "date",
    "TIMESTAMP": "timestamp",
    "TIMESTAMPTZ": "timestamp",
}
_STRING_FUNCTIONS = (
    "Pad",
    "Substring",
    "Upper",
    "Lower",
    "Trim",
    "Length",
    "Initcap",
    "Reverse",
    "Left",
    "Right",
)


def _sql_type_of(array_type: pa.DataType) -> str:
    if pa.types.is_string(array_type) or pa.types.is_large_string(array_type):
        return "STRING"
    if pa.types.is_boolean(array_type):
        return "BOOLEAN"
    if pa.types.is_int32(array_type) or pa.types.is_int16(array_type) or pa.types.is_int8(array_type):
        return "INT"
    if pa.types.is_integer(array_type):
        return "BIGINT"
    if pa.types.is_floating(array_type):
        return "DOUBLE"
    if pa.types.is_date(array_type):
        return "DATE"
    if pa.types.is_timestamp(array_type):
        return "TIMESTAMP"
    if pa.types.is_decimal(array_type):
        return f"DECIMAL({array_type.precision}, {array_type.scale})"
    return "STRING"


def spark_sql_to_duckdb(expr: str, schema: Mapping[str, str]) -> str:
    """A Spark SQL expression as DuckDB SQL that computes what Spark computes.

    ``sqlglot`` translates the syntax; these are the meanings it does not carry over,
    fixed on the typed syntax tree (``schema``: column -> Spark SQL type):

    - ``dayofweek``: Spark counts 1 = Sunday .. 7, DuckDB 0 .. 6; ``weekday``: Spark
      0 = Monday, DuckDB's ``weekday`` is 0 = Sunday (becomes ``isodow - 1``);
    - ``CAST(<fractional> AS INT)``: Spark truncates toward zero, DuckDB rounds;
    - string functions (``lpad``, ``substring``, ...) on a number: Spark casts it to a
      string implicitly, DuckDB refuses;
    - ``CAST(<string> AS <type>)``: Spark's parsing rules, through the ``spark_cast_*``
      functions that :func:`add_derived` registers (DuckDB's own accepts and refuses
      other strings).
    """
    import sqlglot
    from sqlglot import exp
    from sqlglot.optimizer.annotate_types import annotate_types
    from sqlglot.optimizer.qualify import qualify

    try:
        select = sqlglot.parse_one(f"SELECT {expr} AS __out FROM __t", read="spark")
        # Qualified, so that every column gets its type from the schema.
        select = qualify(select, schema={"__t": dict(schema)}, dialect="spark", validate_qualify_columns=True)
    except sqlglot.errors.SqlglotError as err:
        raise ServingError(f"Spark SQL expression {expr!r}: {err} (columns: {sorted(schema)})") from err
    annotate_types(select, schema={"__t": dict(schema)}, dialect="spark")

    def is_text(node: exp.Expression) -> bool:
        return node.type is not None and node.type.this in exp.DataType.TEXT_TYPES

    def fix(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.DayOfWeek):
            return exp.paren(exp.Add(this=node.copy(), expression=exp.Literal.number(1)), copy=False)
        if isinstance(node, exp.Anonymous) and node.name.upper() == "WEEKDAY":
            date = exp.cast(node.expressions[0].copy(), "DATE")
            isodow = exp.Anonymous(this="ISODOW", expressions=[date])
            return exp.paren(exp.Sub(this=isodow, expression=exp.Literal.number(1)), copy=False)
        if isinstance(node, (exp.Cast, exp.TryCast)):
            target = node.to.sql("spark").upper()
            operand = node.this
            if is_text(operand) and target in _SPARK_CAST_TYPES:
                return exp.Anonymous(
                    this=f"spark_cast_{_SPARK_CAST_TYPES[target]}", expressions=[operand.copy()]
                )
            if (
                target in _INTEGRAL
                and operand.type is not None
                and (operand.type.this in exp.DataType.REAL_TYPES)
            ):
                node = node.copy()
                node.set("this", exp.Anonymous(this="TRUNC", expressions=[operand.copy()]))
                return node
        if type(node).__name__ in _STRING_FUNCTIONS:
            operand = node.this
            if isinstance(operand, exp.Expression) and operand.type is not None and not is_text(operand):
                if not operand.type.is_type(exp.DataType.Type.UNKNOWN, exp.DataType.Type.NULL):
                    node = node.copy()
                    node.set("this", exp.cast(operand.copy(), "STRING"))
                    return node
        return node

    fixed = select.transform(fix)
    projection = fixed.expressions[0]
    return projection.this.sql("duckdb") if isinstance(projection, exp.Alias) else projection.sql("duckdb")


def _duckdb(zone: str):
    import duckdb

    try:
        from duckdb.sqltypes import BIGINT, BOOLEAN, DATE, DOUBLE, INTEGER, TIMESTAMP_TZ, VARCHAR
    except ImportError:  # duckdb < 1.4
        from duckdb.typing import BIGINT, BOOLEAN, DATE, DOUBLE, INTEGER, TIMESTAMP_TZ, VARCHAR

    con = duckdb.connect()
    # Spark reads and renders timestamps in spark.sql.session.timeZone; DuckDB in TimeZone.
    con.execute(f"SET TimeZone = '{zone}'")
    returns = {
        "int": INTEGER,
        "long": BIGINT,
        "double": DOUBLE,
        "boolean": BOOLEAN,
        "date": DATE,
        "timestamp": TIMESTAMP_TZ,
    }
    for kind, duck_type in returns.items():
        con.create_function(
            f"spark_cast_{kind}",
            _spark_cast(kind, zone),
            [VARCHAR],
            duck_type,
            type="arrow",
            null_handling="special",
        )
    return con


def _spark_cast(kind: str, zone: str) -> Any:
    """A one-argument Arrow function for DuckDB (it counts parameters, defaults included)."""

    def cast(strings: pa.Array) -> pa.Array:
        return tf.spark_try_cast(strings, kind, zone=zone)

    return cast


def _fetch(relation: Any) -> pa.Table:
    result = relation.arrow()
    return result.read_all() if isinstance(result, pa.RecordBatchReader) else result


def _normalize(table: pa.Table) -> pa.Table:
    """DuckDB's string views as plain strings, so pyarrow compute takes every column."""
    fields = []
    for f in table.schema:
        if pa.types.is_string_view(f.type) or pa.types.is_large_string(f.type):
            fields.append(pa.field(f.name, pa.string()))
        else:
            fields.append(f)
    return table.cast(pa.schema(fields))


def add_derived(table: pa.Table, derived: Sequence[Mapping[str, Any]], zone: str = "UTC") -> pa.Table:
    """The derived columns, in order, each able to read the ones before (Spark's withColumn)."""
    import duckdb

    if not derived:
        return table
    con = _duckdb(zone)
    current = table.append_column("__row", pa.array(np.arange(table.num_rows, dtype=np.int64)))
    for item in derived:
        name, expr = item["name"], item["expr"]
        schema = {f.name: _sql_type_of(f.type) for f in current.schema}
        sql = spark_sql_to_duckdb(expr, schema)
        con.register("__t", current)
        keep = ", ".join(f'"{c}"' for c in current.column_names if c != name)
        try:
            current = _normalize(_fetch(con.sql(f'SELECT {keep}, {sql} AS "{name}" FROM __t ORDER BY __row')))
        except duckdb.Error as err:
            raise ServingError(f"derived column {name!r}: {expr!r} (DuckDB: {sql}) failed: {err}") from err
        con.unregister("__t")
    return current.drop(["__row"])


# ---------------------------------------------------------------- reference joins


def read_reference(source: str | pa.Table, ref: Mapping[str, Any], zone: str = "UTC") -> pa.Table:
    """A reference table as preprocess reads it: CSV/JSON columns as strings, Parquet typed."""
    if isinstance(source, pa.Table):
        return source
    parts = _data_files(source)
    if parts is not None:
        # A lake folder (`<lake>/reference/weather/`): its data files, as Spark reads it.
        if not parts:
            raise ServingError(f"{source}: reference folder holds no data files")
        tables = [read_reference(part, ref, zone) for part in parts]
        return pa.concat_tables(tables, promote_options="permissive")
    kind = _format_of(source) or ref.get("format", "csv")
    if kind == "parquet":
        with storage.open_input(source) as f:
            return pq.read_table(f)
    with storage.open_input(source) as f:
        data = f.read()
    records = (
        _read_csv(data, ref.get("options", {}), source) if kind == "csv" else _read_json_lines(data, source)
    )
    return pa.table(records.columns)


def reference_snapshot(source: str, name: str, day: str | None = None) -> tuple[str, str | None]:
    """(the path to read, its snapshot's date) of a reference table given to serving.

    A folder of ``dt=YYYY-MM-DD/`` snapshots (lakeprep_contracts.references) gives, without
    ``day``, its newest snapshot with ``_SUCCESS``: live records join what is known now,
    and a snapshot still landing is passed over. With ``day``, the snapshot preprocess joins
    for that day (the newest on or before it, which must be complete), to score a past day
    as it was trained. Anything else is read as it is (no history: the date is None).

    :raises ServingError: no snapshot to join, naming the reference, the folder and the day.
    """
    path = _local_path(source)
    if not path.is_dir():
        return source, None
    try:
        days = reference_layout.snapshot_days((f.name for f in path.iterdir() if f.is_dir()), source)
    except reference_layout.SnapshotError as err:
        raise ServingError(str(err)) from err
    if not days:
        return source, None
    if day is None:
        complete = [
            d for d in days if (path / f"{reference_layout.SNAPSHOT_PREFIX}{d}" / layout.SUCCESS).is_file()
        ]
        if not complete:
            raise ServingError(
                f"reference {name!r} ({source}): none of its snapshots {days} is complete (no _SUCCESS)"
            )
        chosen = complete[-1]
    else:
        try:
            chosen = reference_layout.snapshot_for(days, day, name, source)
        except reference_layout.SnapshotError as err:
            raise ServingError(str(err)) from err
        if not (path / f"{reference_layout.SNAPSHOT_PREFIX}{chosen}" / layout.SUCCESS).is_file():
            raise ServingError(
                f"reference {name!r}: snapshot {reference_layout.SNAPSHOT_PREFIX}{chosen} of {source}, "
                f"the newest on or before {day}, is not complete (no _SUCCESS)"
            )
    return str(path / f"{reference_layout.SNAPSHOT_PREFIX}{chosen}"), chosen


def _local_path(source: str) -> Path:
    from urllib.parse import urlsplit

    return Path(urlsplit(source).path if source.startswith("file://") else source)


def _data_files(source: str) -> list[str] | None:
    """The data files of a local folder (names not starting with `_` or `.`), or None for a file."""
    path = _local_path(source)
    if not path.is_dir():
        return None
    return sorted(str(f) for f in path.iterdir() if f.is_file() and not f.name.startswith(("_", ".")))


def join_references(
    table: pa.Table,
    references: Sequence[Mapping[str, Any]],
    sources: Mapping[str, str | pa.Table],
    zone: str = "UTC",
) -> pa.Table:
    """Left-join each reference on its keys, as preprocess does; rows are neither added nor lost.

    The reference's keys are cast (``try_cast``) to the main table's types, so an
    unparseable key never matches; string keys are compared as categoricals are cleaned
    (trimmed of ``records.WHITESPACE``, empty as null) on both sides, the input's values kept as
    they are. The table is de-duplicated on its keys, keeping the
    row that is smallest by its output columns in order (nulls first), the row preprocess
    keeps whatever the file order. A reference whose output columns the input already
    carries is used as it is and needs no source.

    :raises ServingError: naming the reference, when neither its columns nor its source
        is given.
    """
    for ref in references:
        name = ref["name"]
        outputs = [c["name"] for c in ref["columns"]]
        carried = [c for c in outputs if c in table.column_names]
        if len(carried) == len(outputs):
            continue
        if name not in sources:
            raise ServingError(
                f"reference {name!r}: the input has {carried or 'none'} of its columns {outputs}; "
                f"give the table with --reference {name}=PATH"
            )
        right_raw = read_reference(sources[name], ref, zone)
        keys = list(ref["join_keys"])
        missing = [k for k in keys if k not in right_raw.column_names]
        if missing:
            raise ServingError(
                f"reference {name!r}: join key(s) {missing} not in its columns {right_raw.column_names}"
            )
        main_types = {f.name: f.type for f in table.schema}
        right_columns: dict[str, pa.Array] = {}
        left = table.drop([c for c in carried])
        compared = [f"__key{i}" for i in range(len(keys))]
        for k, key in zip(keys, compared, strict=True):
            kind = _contract_kind(main_types[k])
            right_key = tf.spark_try_cast(tf.spark_string(right_raw.column(k), zone=zone), kind, zone=zone)
            left_key = table.column(k)
            if kind == "string":
                right_key = tf.clean_categorical(right_key, zone=zone)
                left_key = tf.clean_categorical(left_key, zone=zone)
            right_columns[key] = right_key
            left = left.append_column(key, left_key)
        con = _duckdb(zone)
        con.register("__t", right_raw)
        schema = {f.name: _sql_type_of(f.type) for f in right_raw.schema}
        exprs = ", ".join(
            f'{spark_sql_to_duckdb(c["expr"], schema)} AS "{c["name"]}"' for c in ref["columns"]
        )
        evaluated = _normalize(_fetch(con.sql(f"SELECT {exprs} FROM __t")))
        con.unregister("__t")
        for c in outputs:
            right_columns[c] = evaluated.column(c).combine_chunks()
        right = pa.table(right_columns)
        right = right.append_column("__order", pa.array(np.arange(right.num_rows, dtype=np.int64)))
        left = left.append_column("__row", pa.array(np.arange(table.num_rows, dtype=np.int64)))
        con.register("__left", left)
        con.register("__right", right)
        key_list = ", ".join(f'"{k}"' for k in compared)
        on = " AND ".join(f'l."{k}" = r."{k}"' for k in compared)
        picked = ", ".join(f'r."{c}"' for c in outputs)
        smallest = ", ".join([*(f'"{c}" ASC NULLS FIRST' for c in outputs), "__order"])
        joined = _fetch(
            con.sql(
                f"WITH r AS (SELECT * FROM __right QUALIFY row_number() OVER (PARTITION BY {key_list} "
                f"ORDER BY {smallest}) = 1) "
                f"SELECT l.*, {picked} FROM __left l LEFT JOIN r ON {on} ORDER BY l.__row"
            )
        )
        table = _normalize(joined).drop(["__row", *compared])
    return table


def _contract_kind(arrow: pa.DataType) -> str:
    if pa.types.is_int32(arrow) or pa.types.is_int16(arrow) or pa.types.is_int8(arrow):
        return "int"
    if pa.types.is_integer(arrow):
        return "long"
    if pa.types.is_floating(arrow):
        return "double"
    if pa.types.is_boolean(arrow):
        return "boolean"
    if pa.types.is_date(arrow):
        return "date"
    if pa.types.is_timestamp(arrow):
        return "timestamp"
    return "string"


# -------------------------------------------------------------------------- serve


@dataclass
class Served:
    """What serving made of an input: features of the accepted rows, and every rejection."""

    rows_read: int
    accepted: np.ndarray  # int64 positions (0-based, input order) of the accepted rows
    features: dict[str, np.ndarray]  # encoded columns of the accepted rows (+ id)
    rejected: list[dict[str, Any]]  # {"row", "line", "id", "reason"} per rejected row
    lines: np.ndarray  # source line of every row read
    labelled: bool
    missing_columns: list[str]
    # The accepted rows' labels (float64, NaN where a row has no usable label), or None
    # when the input carries no label.
    labels: np.ndarray | None = None
    # {"row", "line", "id", "reason"} per accepted row whose present label is not used.
    unused_labels: list[dict[str, Any]] = field(default_factory=list)
    # Per reference read from a path: {"uri": what was read, "snapshot": its date or None}.
    reference_snapshots: dict[str, dict[str, str | None]] = field(default_factory=dict)

    @property
    def reason_counts(self) -> dict[str, int]:
        """Rejected rows by reason kind (the text before the first ``:``, as validate counts)."""
        return _counts_by_kind(self.rejected)

    @property
    def unused_label_counts(self) -> dict[str, int]:
        """Accepted rows scored without their present label, by reason kind."""
        return _counts_by_kind(self.unused_labels)


def _counts_by_kind(items: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in items:
        kind = record_vocabulary.reason_kind(r["reason"])
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items()))


def serve(
    source: str | pa.Table,
    doc: Mapping[str, Any],
    *,
    references: Mapping[str, str | pa.Table] | None = None,
    file_format: str | None = None,
    reference_date: str | None = None,
) -> Served:
    """Raw records -> the transform's encoded columns, with validate's rejections.

    Rows in = accepted + rejected, always: a row is rejected with its reason, never
    dropped. The label is optional: a row without one is scored all the same, and one
    whose label is present but unusable is scored with that label left out and listed in
    ``unused_labels`` (:func:`check_contract`). See the module docstring for the steps.
    ``reference_date`` (YYYY-MM-DD) joins the reference snapshots of that day instead of
    the newest (:func:`reference_snapshot`).
    """
    contract = Contract.from_params(doc["contract"]["validate"])
    raw = read_records(source, contract, file_format=file_format)
    checked = check_contract(raw, contract)
    accepted = np.flatnonzero(np.equal(checked.reasons, None))
    ids = tf.spark_string(checked.table.column(contract.id_column), zone=contract.time_zone).to_pylist()
    rejected = [
        {"row": int(i), "line": int(raw.line[i]), "id": ids[i], "reason": checked.reasons[i]}
        for i in np.flatnonzero(~np.equal(checked.reasons, None))
    ]
    unused_labels = [
        {"row": int(i), "line": int(raw.line[i]), "id": ids[i], "reason": checked.label_reasons[i]}
        for i in accepted
        if checked.label_reasons[i] is not None
    ]
    table = checked.table.take(pa.array(accepted))
    labels = label_ids(table.column(contract.label_column), contract) if checked.labelled else None
    if contract.label_column in table.column_names:
        # The transform encodes features; the label, null for some rows, stays out of it.
        table = table.drop([contract.label_column])
    preprocess = doc["contract"].get("preprocess", {})
    sources: dict[str, str | pa.Table] = dict(references or {})
    snapshots: dict[str, dict[str, str | None]] = {}
    for name, given in sources.items():
        if isinstance(given, str):
            uri, snapshot = reference_snapshot(given, name, reference_date)
            sources[name] = uri
            snapshots[name] = {"uri": uri, "snapshot": snapshot}
    table = join_references(table, preprocess.get("references", []), sources, contract.time_zone)
    features = tf.apply_transform(table, doc, zone=contract.time_zone)
    return Served(
        rows_read=len(raw),
        accepted=accepted.astype(np.int64),
        features=features,
        rejected=rejected,
        lines=raw.line,
        labelled=checked.labelled,
        missing_columns=checked.missing_columns,
        labels=labels,
        unused_labels=unused_labels,
        reference_snapshots=snapshots,
    )
