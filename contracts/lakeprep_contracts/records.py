"""The raw record's vocabulary: what a contract column may be, how raw files are read, why
a row is quarantined. validate (Spark), preprocess (Spark) and serving (pyarrow) read it
here, so the two ends of a model never disagree about a record.

A spec's column has a type (`TYPES`, read with Spark's `try_cast` to `SQL_TYPES`) and a
role (`ROLES`; the features are `FEATURE_ROLES`, in the transform document's order). Raw
partitions come in one of `FORMATS` (reference tables in one of `TABLE_FORMATS`); CSV is
read with `csv_options`. A value is null when it is blank or a null token once stripped of
`WHITESPACE` at both ends.

Each quarantined row carries one reason, the first that applies, in this order:

    MALFORMED_RECORD                          the reader could not split the record
    per contract column, in contract order:
        invalid_utf8(column)                  the decoded value holds U+FFFD
        bad_value(type, column, shown)        present, but not a value of its type
        non_finite(column, shown)             a double that is NaN or infinite
    per non-nullable column: null_in(column)
    null_id(column), null_label(column)
    label_not_in(column, classes, value)      (classes)
    label_not_finite(column, value)           (a continuous label)

then, in preprocess, `EXACT_DUPLICATE` or `CONFLICTING_DUPLICATE` (lakeprep_jobs.preprocess).
A reason that shows a value ends with it: called with the value `""`, its function gives
the reason's constant part, which Spark and Arrow concatenate with a column of values
(`shown`: the raw value's first `SHOWN_CHARACTERS` characters). A reason's kind, which
reports count rows by, is its text before the first `KIND_END` (`reason_kind`); contract
names cannot hold one.

Serving never rejects a row for its label (a label is optional there): it reports
`label_not_in` beside the row instead, and a missing label is no label.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

TYPES = ("string", "int", "long", "double", "boolean", "date", "timestamp")
# The Spark SQL type each contract type is cast to, and the partition stores.
SQL_TYPES = {
    "string": "string",
    "int": "int",
    "long": "bigint",
    "double": "double",
    "boolean": "boolean",
    "date": "date",
    "timestamp": "timestamp",
}
ROLES = ("id", "label", "numeric", "categorical", "text", "timestamp", "ignored")
FEATURE_ROLES = ("numeric", "categorical", "text")

TABLE_FORMATS = ("csv", "json", "parquet")
# `text`: unstructured text into one string column, a record per line or per file.
FORMATS = (*TABLE_FORMATS, "text")
TEXT_PER = ("line", "file")
# RFC 4180 as exporters write it. multiLine keeps a quoted newline inside its record (the
# line-by-line reader would split it into two malformed rows) at the price of one Spark
# task per file; escape='"' reads a doubled quote as one quote. A spec's `options`
# override these (e.g. multiLine "false" for huge feeds known to hold no quoted newlines).
CSV_DEFAULTS = {"header": "true", "multiLine": "true", "escape": '"'}
# ASCII whitespace: space, tab, line feed, carriage return, form feed, vertical tab, each
# one byte at most 0x20. A no-break space or another Unicode space is kept: it is part of
# the value (Spark's own casts keep it too).
WHITESPACE = " \t\n\r\f\v"
# What a UTF-8 decoder (Spark's included) puts for an invalid byte.
REPLACEMENT_CHARACTER = "\ufffd"
SHOWN_CHARACTERS = 64
KIND_END = ":"

MALFORMED_RECORD = "malformed record"
EXACT_DUPLICATE = "exact duplicate"
CONFLICTING_DUPLICATE = "conflicting duplicate id"


def csv_options(options: Mapping[str, str]) -> dict[str, str]:
    """The CSV reader's options: `CSV_DEFAULTS` under `options`, names lower-cased (Spark
    compares option names without case, so `multiline` overrides `multiLine`)."""
    return {**{k.lower(): v for k, v in CSV_DEFAULTS.items()}, **{k.lower(): v for k, v in options.items()}}


def invalid_utf8(column: str) -> str:
    return f"invalid UTF-8 in {column}"


def bad_value(kind: str, column: str, shown: str) -> str:
    """`kind`: the column's contract type."""
    return f"bad {kind} in {column}: {shown}"


def non_finite(column: str, shown: str) -> str:
    return f"non-finite double in {column}: {shown}"


def null_in(column: str) -> str:
    return f"null in {column}"


def null_id(column: str) -> str:
    return f"null id ({column})"


def null_label(column: str) -> str:
    return f"null label ({column})"


def label_not_in(column: str, classes: Sequence[Any], value: str) -> str:
    """`value`: the label as Spark casts it to a string."""
    return f"label {column} not in {list(classes)}: {value}"


def label_not_finite(column: str, value: str) -> str:
    return f"label {column} is not a finite number: {value}"


def reason_kind(reason: str) -> str:
    """The reason without the value it shows (`bad int in dep_time`), for counting."""
    return reason.split(KIND_END, 1)[0]
