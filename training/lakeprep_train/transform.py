"""Raw records to prepared columns (step 2 of docs/TRANSFORM.md), then the one encoder.

The rows training reads were cleaned by Spark (preprocess); records at serving time are
cleaned here, with numpy and pyarrow, into the same prepared columns, and then encoded by
``lakeprep_contracts.encode``, the only implementation of a fitted transform (the export
calls it too). So every Spark behaviour step 2 depends on is mirrored here and proven
against Spark in ``tests/training/test_transform.py``:

- ``RegexTokenizer(gaps=True)``: the ``regex`` package (it knows ``\\p{L}``), with the
  Java-only meanings of ``\\w``, ``\\d``, ``\\s``, ``.`` and the POSIX classes translated
  (:func:`java_regex`), Java's ``toLowerCase`` (``str.lower``), and ``minTokenLength``
  counted in UTF-16 code units as Java's ``String.length`` does;
- ``CAST(x AS STRING)`` of numbers, booleans, dates and timestamps
  (:func:`spark_string`) and ``try_cast`` of strings to the contract's types
  (:func:`spark_try_cast`).

Columns are processed whole: casts in pyarrow/numpy, tokens once per distinct value
(``dictionary_encode``), never per row.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import regex

from lakeprep_contracts import documents, layout
from lakeprep_contracts import labels as label_kinds
from lakeprep_contracts.encode import (
    ROLES,
    TransformError,
    as_array,
    distinct,
    encode,
    with_tokenizers,
)
from lakeprep_contracts.labels import ids_by_text as class_ids
from lakeprep_contracts.records import TYPES, WHITESPACE
from lakeprep_contracts.text import SUBWORD
from lakeprep_train import storage

FORMAT_VERSION = 1

__all__ = ["ROLES", "TransformError", "apply_transform"]


# --------------------------------------------------------------------------- loading


def load_transform(location: str) -> dict[str, Any]:
    """Read ``transform.json`` from a local path or URI and check it (:func:`check_document`).

    :raises TransformError: naming the file and the bad field.
    """
    try:
        with storage.open_input(location) as f:
            raw = f.read()
    except (OSError, ValueError) as err:
        raise TransformError(f"{location}: cannot read the transform: {err}") from err
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise TransformError(f"{location}: not a JSON document: {err}") from err
    return load_tokenizers(check_document(doc, location), location)


def load_tokenizers(doc: Mapping[str, Any], location: str) -> dict[str, Any]:
    """``doc`` with the tokenizer files beside ``location`` (its ``transform.json``) loaded
    and checked against their sha256 (``lakeprep_contracts.encode.with_tokenizers``)."""
    folder = storage.parent_of(location)

    def read(name: str) -> bytes:
        with storage.open_input(storage.join(folder, name)) as f:
            return f.read()

    return with_tokenizers(doc, read, location)


def check_document(doc: Any, where: str = layout.TRANSFORM) -> dict[str, Any]:
    """Check ``doc`` against the JSON Schema, then what a schema cannot say.

    Beyond the schema: vocabularies are duplicate-free with one count per entry,
    ``cardinality`` matches the encoding, output names are unique, every tokenizer
    pattern translates to the ``regex`` package (:func:`java_regex`) and the contract
    names its id and label columns. A document that passes encodes every record.
    """
    # The schema the writer (fit_transform) checks too: the two ends never disagree about
    # what a valid document is.
    problems = documents.problems("transform", doc)
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise TransformError(f"{where}: not a valid transform (format version {FORMAT_VERSION}):\n{listed}")
    seen: set[str] = set()
    for role in ROLES:
        for i, spec in enumerate(doc[role]):
            at = f"{where}: {role}[{i}] ({spec['name']})"
            if spec["output"] in seen or spec["output"] in ("id", "label"):
                problems.append(f"{at}.output: {spec['output']!r} is used twice or reserved")
            seen.add(spec["output"])
            if role == "numeric":
                if "pca_component" in spec:
                    problems += _component_problems(doc.get("pca"), spec, at)
                    continue
                clip = spec["clip"]
                if clip is not None and clip["lower"] > clip["upper"]:
                    problems.append(f"{at}.clip: lower {clip['lower']} is above upper {clip['upper']}")
                continue
            if spec["encoding"] == SUBWORD:  # a tokenizer file's ids: nothing fitted, no regex
                if spec["cardinality"] != spec["tokenizer_file"]["vocab_size"]:
                    problems.append(
                        f"{at}.cardinality: {spec['cardinality']} != tokenizer_file.vocab_size "
                        f"{spec['tokenizer_file']['vocab_size']}"
                    )
                continue
            if spec["encoding"] == "vocab":
                vocabulary, counts = spec["vocabulary"], spec["counts"]
                if len(set(vocabulary)) != len(vocabulary):
                    problems.append(f"{at}.vocabulary: holds duplicate values")
                if len(counts) != len(vocabulary):
                    problems.append(
                        f"{at}.counts: {len(counts)} counts for {len(vocabulary)} vocabulary entries"
                    )
                if spec["cardinality"] != len(vocabulary) + 2:
                    problems.append(
                        f"{at}.cardinality: {spec['cardinality']} != len(vocabulary) + 2 "
                        f"= {len(vocabulary) + 2}"
                    )
            elif spec["cardinality"] != spec["buckets"]:
                problems.append(f"{at}.cardinality: {spec['cardinality']} != buckets {spec['buckets']}")
            if role == "text":
                try:
                    java_regex(spec["tokenizer"]["pattern"])
                except TransformError as err:
                    problems.append(f"{at}.tokenizer.pattern: {err}")
    if doc.get("pca"):
        problems += _pca_problems(doc["pca"], f"{where}: pca")
    validate = doc["contract"]["validate"]
    for key in ("columns", "id_column", "label_column"):
        if key not in validate:
            problems.append(f"{where}: contract.validate.{key}: missing (the validate stage's params)")
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise TransformError(f"{where}: inconsistent transform:\n{listed}")
    return doc


def _component_problems(pca: Mapping[str, Any] | None, spec: Mapping[str, Any], at: str) -> list[str]:
    component = spec["pca_component"]
    if not pca:
        return [f"{at}.pca_component: {component}, but the document has no pca"]
    if component > len(pca["outputs"]):
        return [f"{at}.pca_component: {component}, but pca has {len(pca['outputs'])} components"]
    expected = pca["outputs"][component - 1]
    if expected != spec["output"]:
        return [f"{at}.output: {spec['output']!r} != pca.outputs[{component - 1}] {expected!r}"]
    return []


def _pca_problems(pca: Mapping[str, Any], at: str) -> list[str]:
    """The projection's shapes agree: k components of len(inputs) weights, one mean per input."""
    problems = []
    n, k = len(pca["inputs"]), pca["k"]
    if len(pca["mean"]) != n:
        problems.append(f"{at}.mean: {len(pca['mean'])} values for {n} inputs")
    for name in ("components", "explained_variance", "outputs"):
        if len(pca[name]) != k:
            problems.append(f"{at}.{name}: {len(pca[name])} entries for k = {k}")
    for j, row in enumerate(pca["components"]):
        if len(row) != n:
            problems.append(f"{at}.components[{j}]: {len(row)} weights for {n} inputs")
    for i, spec in enumerate(pca["inputs"]):
        clip = spec["clip"]
        if clip is not None and clip["lower"] > clip["upper"]:
            problems.append(f"{at}.inputs[{i}] ({spec['name']}).clip: lower {clip['lower']} is above upper")
    if sum(pca["explained_variance"]) > 1 + 1e-9:
        problems.append(f"{at}.explained_variance: sums to {sum(pca['explained_variance'])} > 1")
    return problems


# ------------------------------------------------------------ Spark's casts, mirrored

# What Spark strips before parsing a number, boolean, date or timestamp (UTF8String.trimAll:
# whitespace up to U+0020 and ISO controls on ASCII bytes); a no-break space is kept and
# makes the value bad, as in Spark.
_SPARK_BLANKS = "".join(chr(c) for c in range(0x21)) + "\x7f"
_INT = re.compile(r"[+-]?[0-9]+")
# java.lang.Double.valueOf's grammar (a trailing f/F/d/D is allowed, hex needs its p exponent).
_JAVA_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
    r"|0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?)"
)
_SPARK_SPECIAL_DOUBLES = {
    "inf": math.inf,
    "+inf": math.inf,
    "infinity": math.inf,
    "+infinity": math.inf,
    "-inf": -math.inf,
    "-infinity": -math.inf,
    "nan": math.nan,
}
_TRUE = frozenset(("t", "true", "y", "yes", "1"))
_FALSE = frozenset(("f", "false", "n", "no", "0"))
_DATE = re.compile(r"([+-]?)([0-9]{4,7})(?:-([0-9]{1,2})(?:-([0-9]{1,2})(?:[ T].*)?)?)?", re.DOTALL)
_OFFSET = r"[+-][0-9]{1,2}(?::?[0-9]{2}){0,2}"
_ZONE = rf"(?: *(Z|{_OFFSET}|(?:UTC|GMT|UT)(?:{_OFFSET})?|[A-Za-z][A-Za-z0-9_/+-]*))?"
_TIME = r"([0-9]{1,2})(?::([0-9]{1,2})(?::([0-9]{1,2})(?:\.([0-9]*))?)?)?" + _ZONE
# Spark's stringToTimestamp: a date, optionally ` ` or `T` and a time (hour at least),
# optionally a zone; or a time alone (`[T]hh:mm[:ss]`), which means today.
_TIMESTAMP = re.compile(r"([+-]?)([0-9]{4,7})(?:-([0-9]{1,2})(?:-([0-9]{1,2})(?:[ T]" + _TIME + ")?)?)?")
_TIME_ONLY = re.compile(r"T?([0-9]{1,2}):([0-9]{1,2})(?::([0-9]{1,2})(?:\.([0-9]*))?)?" + _ZONE)


def _days_from_civil(year: int, month: int, day: int) -> int | None:
    """Days since 1970-01-01 of a proleptic Gregorian date (any year, as Spark allows)."""
    if not 1 <= month <= 12:
        return None
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days_in_month = (31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)[month - 1]
    if not 1 <= day <= days_in_month:
        return None
    # Howard Hinnant's days_from_civil: exact for every year.
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _parse_int(text: str, bits: int) -> int | None:
    text = text.strip(_SPARK_BLANKS)
    if not _INT.fullmatch(text):
        return None
    value = int(text)
    limit = 1 << (bits - 1)
    return value if -limit <= value < limit else None


def _parse_double(text: str) -> float | None:
    stripped = text.strip(_SPARK_BLANKS[:-1])  # String.trim: <= U+0020 only
    if _JAVA_DOUBLE.fullmatch(stripped):
        body = stripped.rstrip("fFdD")  # Java parses "1.5f" as the double 1.5
        return float.fromhex(body) if "x" in body.lower() else float(body)
    return _SPARK_SPECIAL_DOUBLES.get(stripped.lower())


def _parse_boolean(text: str) -> bool | None:
    lowered = text.strip(_SPARK_BLANKS).lower()
    return True if lowered in _TRUE else False if lowered in _FALSE else None


def _parse_date(text: str) -> int | None:
    match = _DATE.fullmatch(text.strip(_SPARK_BLANKS))
    if not match:
        return None
    sign, year, month, day = match.group(1, 2, 3, 4)
    return _days_from_civil(int(sign + year), int(month or 1), int(day or 1))


def _zone(name: str) -> dt.tzinfo | None:
    if name == "Z":
        return dt.UTC
    offset = re.fullmatch(r"(?:UTC|GMT|UT)?([+-])([0-9]{1,2})(?::?([0-9]{2}))?(?::?([0-9]{2}))?", name)
    if offset:
        sign = -1 if offset.group(1) == "-" else 1
        hours, minutes, seconds = (int(g or 0) for g in offset.group(2, 3, 4))
        if hours > 18 or minutes > 59 or seconds > 59:
            return None
        return dt.timezone(sign * dt.timedelta(hours=hours, minutes=minutes, seconds=seconds))
    if name in ("UTC", "GMT", "UT"):
        return dt.UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def time_zone(name: str) -> dt.tzinfo:
    """The contract's ``time_zone`` (an IANA name or an offset): Spark's session time zone."""
    zone = _zone(name)
    if zone is None:
        raise TransformError(f"time zone {name!r} is not an IANA zone name or an offset like +02:00")
    return zone


def _parse_timestamp(text: str, zone: dt.tzinfo) -> int | None:
    """Microseconds since the epoch, as Spark's ``try_cast(string AS TIMESTAMP)``.

    A value without a zone is wall-clock time in ``zone`` (Spark's session time zone);
    a wall-clock time that a DST change skips is moved forward and an ambiguous one
    takes the earlier offset, which is what Java's ``ZonedDateTime.of`` does and what
    ``zoneinfo`` does with ``fold=0``.
    """
    stripped = text.strip(_SPARK_BLANKS)
    match = _TIMESTAMP.fullmatch(stripped)
    if match:
        sign, year, month, day, hour, minute, second, fraction, zone_name = match.groups()
        year_value, month_value, day_value = int(sign + year), int(month or 1), int(day or 1)
    else:
        match = _TIME_ONLY.fullmatch(stripped)
        if not match:
            return None
        hour, minute, second, fraction, zone_name = match.groups()
        today = dt.datetime.now(zone).date()  # Spark: a time alone is today's, in the session zone
        year_value, month_value, day_value = today.year, today.month, today.day
    days = _days_from_civil(year_value, month_value, day_value)
    h, m, s = int(hour or 0), int(minute or 0), int(second or 0)
    if days is None or h > 23 or m > 59 or s > 59:
        return None
    micros = int((fraction or "")[:6].ljust(6, "0"))
    if zone_name is not None:
        named = _zone(zone_name)
        if named is None:
            return None
        zone = named
    # Wall-clock time -> instant. zoneinfo covers years 1..9999; beyond them the offset
    # at the nearest end of that range is used (zones have no rules out there anyway).
    if 1 <= year_value <= 9999:
        local = dt.datetime(year_value, month_value, day_value, h, m, s, tzinfo=zone)
    else:
        local = dt.datetime(9999 if year_value > 9999 else 1, 1, 1, tzinfo=zone)
    offset = local.utcoffset() or dt.timedelta(0)
    return (days * 86400 + h * 3600 + m * 60 + s - int(offset.total_seconds())) * 1_000_000 + micros


def _parser(kind: str, zone: dt.tzinfo) -> Callable[[str], Any]:
    return {
        "int": lambda t: _parse_int(t, 32),
        "long": lambda t: _parse_int(t, 64),
        "double": _parse_double,
        "boolean": _parse_boolean,
        "date": _parse_date,
        "timestamp": lambda t: _parse_timestamp(t, zone),
    }[kind]


def arrow_type(kind: str) -> pa.DataType:
    """The Arrow type of a contract type: what Spark's type becomes in Parquet."""
    return {
        "string": pa.string(),
        "int": pa.int32(),
        "long": pa.int64(),
        "double": pa.float64(),
        "boolean": pa.bool_(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }[kind]


def spark_try_cast(strings: pa.Array | pa.ChunkedArray, kind: str, *, zone: str = "UTC") -> pa.Array:
    """``try_cast(s AS <kind>)`` of a string column, as Spark 4 does it: null where it fails.

    Spark's rules, which Python's ``int()``/``float()`` do not share: ASCII digits only
    (no ``1_000``, no ``١٢``), no fraction for integers (``1.0`` is not an int), Java's
    double grammar (``1d``, ``0x1p3``, ``Infinity``, plus Spark's ``inf``/``nan`` in any
    case), booleans ``t/true/y/yes/1`` and ``f/false/n/no/0``, dates ``yyyy[-m[-d]]`` with
    anything after a space or ``T``, timestamps with an optional zone, and only
    whitespace up to U+0020 stripped.
    """
    if kind not in TYPES:
        raise TransformError(f"type {kind!r} is not a contract type; expected one of {list(TYPES)}")
    if kind == "string":
        return as_array(strings).cast(pa.string())
    unique, index = distinct(as_array(strings).cast(pa.string()))
    parse = _parser(kind, time_zone(zone))
    parsed = [None if text is None else parse(text) for text in unique.to_pylist()]
    if kind == "date":
        values = pa.array(parsed, pa.int32()).cast(pa.date32())
    elif kind == "timestamp":
        values = pa.array(parsed, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    else:
        values = pa.array(parsed, arrow_type(kind))
    return values.take(pa.array(index))


def java_double_string(value: float, *, single: bool = False) -> str:
    """``CAST(double AS STRING)``: Java's ``Double.toString`` (``Float.toString`` if single).

    The shortest digits that round-trip, in plain notation for 1e-3 <= |x| < 1e7 and as
    ``d.dddE<n>`` otherwise (``1.0E20``, ``1.0E-4``). This is JDK 19+'s algorithm;
    JDK 17's (Spark's usual runtime) is not always shortest: it prints 2e23 as
    ``1.9999999999999998E23``. A categorical double is rare enough that the
    difference is documented rather than emulated.
    """
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    scalar = np.float32(value) if single else np.float64(value)
    mantissa, exponent = np.format_float_scientific(scalar, unique=True, trim="-").split("e")
    negative = mantissa.startswith("-")
    digits = mantissa.lstrip("-").replace(".", "").rstrip("0") or "0"
    power = int(exponent)
    sign = "-" if negative else ""
    if 1e-3 <= abs(float(scalar)) < 1e7:
        if power >= 0:
            whole = digits[: power + 1].ljust(power + 1, "0")
            fraction = digits[power + 1 :] or "0"
        else:
            whole, fraction = "0", "0" * (-power - 1) + digits
        return f"{sign}{whole}.{fraction}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{power}"


def _timestamp_string(micros: int, zone: dt.tzinfo) -> str:
    instant = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=micros)
    local = instant.astimezone(zone)
    text = local.strftime("%Y-%m-%d %H:%M:%S")
    if local.microsecond:
        text += "." + f"{local.microsecond:06d}".rstrip("0")
    return text


def spark_string(array: pa.Array | pa.ChunkedArray, *, zone: str = "UTC") -> pa.Array:
    """``CAST(x AS STRING)`` as Spark renders it, so categorical values hash alike.

    Integers and strings are what Arrow prints; booleans are ``true``/``false``; doubles
    follow :func:`java_double_string` (Arrow would print ``1`` for 1.0, Spark ``1.0``);
    dates are ISO; timestamps are wall-clock time in ``zone`` with the fraction's
    trailing zeros dropped (``2013-01-05 01:02:03.1``).
    """
    array = as_array(array)
    kind = array.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return array.cast(pa.string())
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_decimal(kind):
        return array.cast(pa.string())
    if pa.types.is_null(kind):
        return pa.nulls(len(array), pa.string())
    unique, index = distinct(array)
    values = unique.to_pylist()
    if pa.types.is_floating(kind):
        single = kind == pa.float32()
        rendered = [None if v is None else java_double_string(v, single=single) for v in values]
    elif pa.types.is_date(kind):
        rendered = [None if v is None else v.isoformat() for v in values]
    elif pa.types.is_timestamp(kind):
        tz = time_zone(zone)
        micros = unique.cast(pa.timestamp("us", tz=kind.tz)).cast(pa.int64()).to_pylist()
        rendered = [None if v is None else _timestamp_string(v, tz) for v in micros]
    else:
        raise TransformError(f"cannot render a {kind} column as a Spark string")
    return pa.array(rendered, pa.string()).take(pa.array(index))


# ------------------------------------------------------------------------ cleaning


def clean_numeric(values: Any, *, where: str = "") -> np.ndarray:
    """Step 2 for a numeric feature: float64 with NaN wherever the value is missing.

    ``CAST(x AS DOUBLE)`` (booleans are 1/0, strings parse as :func:`spark_try_cast`
    does, so an unparseable string is missing), and NaN is missing too.
    """
    array = as_array(values)
    kind = array.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        array = spark_try_cast(array, "double")
    elif pa.types.is_boolean(kind):
        array = array.cast(pa.int8())
    elif not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)):
        if not pa.types.is_null(kind):
            raise TransformError(f"{where}: a {kind} column cannot be a numeric feature (cast to double)")
    doubles = array.cast(pa.float64())
    return doubles.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


def clean_categorical(values: Any, *, zone: str = "UTC") -> pa.Array:
    """Step 2 for a categorical: Spark's string of the value, whitespace trimmed, empty = null.

    Trimmed of ``lakeprep_contracts.records.WHITESPACE`` (space, tab, LF, CR, FF, VT) at
    both ends, as preprocess trims it with Spark's ``btrim``; a no-break space is kept.
    """
    strings = pc.utf8_trim(spark_string(values, zone=zone), characters=WHITESPACE)
    return pc.if_else(pc.equal(strings, ""), pa.scalar(None, pa.string()), strings)


def clean_text(values: Any, *, zone: str = "UTC", max_length: int | None = None) -> pa.Array:
    """Step 2 for a text feature: Spark's string of the value, null as the empty text.

    ``max_length`` is preprocess's ``text_max_length``: the text is cut to that many
    characters (code points, as Spark's ``substring``) before it is tokenized, so a
    1 MB description costs what its first characters cost.
    """
    strings = pc.fill_null(spark_string(values, zone=zone), "")
    if max_length is not None:
        strings = pc.utf8_slice_codeunits(strings, 0, max_length)
    return strings


# --------------------------------------------------------------------- tokenization

# Java's predefined classes are ASCII unless UNICODE_CHARACTER_CLASS is set; the regex
# package's are Unicode. Translated so that `\w+` splits "École" the way Spark does.
_JAVA_SHORTHANDS = {
    "d": "0-9",
    "s": " \\t\\n\\x0B\\f\\r",
    "w": "a-zA-Z_0-9",
    # Java 8's horizontal and vertical whitespace; Python's \v is \x0B alone.
    "h": " \\t\\xA0\\u1680\\u180E\\u2000-\\u200A\\u202F\\u205F\\u3000",
    "v": "\\n\\x0B\\f\\r\\x85\\u2028\\u2029",
}
_JAVA_POSIX = {
    "Lower": "a-z",
    "Upper": "A-Z",
    "ASCII": "\\x00-\\x7F",
    "Alpha": "a-zA-Z",
    "Digit": "0-9",
    "Alnum": "a-zA-Z0-9",
    "Punct": "!-/:-@\\[-`{-~",
    "Graph": "!-~",
    "Print": " -~",
    "Blank": " \\t",
    "Cntrl": "\\x00-\\x1F\\x7F",
    "XDigit": "0-9a-fA-F",
    "Space": " \\t\\n\\x0B\\f\\r",
}
# Java's `.` stops at every line terminator, not only at \n.
_JAVA_DOT = "[^\\n\\r\\u0085\\u2028\\u2029]"


def _translate_java_regex(pattern: str) -> str:
    out: list[str] = []
    i, depth = 0, 0  # depth: inside how many [...] (Java allows nesting; we refuse it)
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            if i + 1 >= len(pattern):
                raise TransformError(f"pattern {pattern!r} ends with a lone backslash")
            nxt = pattern[i + 1]
            if nxt == "Q":  # \Q...\E quotes literally in Java; the regex package lacks it
                end = pattern.find("\\E", i + 2)
                literal = pattern[i + 2 :] if end < 0 else pattern[i + 2 : end]
                out.append("".join("\\" + c if not c.isalnum() else c for c in literal))
                i = len(pattern) if end < 0 else end + 2
                continue
            if nxt.lower() in _JAVA_SHORTHANDS:
                chars = _JAVA_SHORTHANDS[nxt.lower()]
                if depth:
                    if nxt.isupper():
                        raise TransformError(
                            f"pattern {pattern!r}: \\{nxt} inside [...] has no portable translation; "
                            f"write the negated class out"
                        )
                    out.append(chars)
                else:
                    out.append(f"[{'^' if nxt.isupper() else ''}{chars}]")
                i += 2
                continue
            if nxt in "pP" and i + 2 < len(pattern) and pattern[i + 2] == "{":
                end = pattern.find("}", i + 3)
                if end < 0:
                    raise TransformError(f"pattern {pattern!r}: unterminated \\{nxt}{{...}}")
                name = pattern[i + 3 : end]
                posix = _JAVA_POSIX.get(name.removeprefix("Is") if name.startswith("Is") else name)
                if posix is not None and not name.startswith("Is"):
                    if depth and nxt == "P":
                        raise TransformError(
                            f"pattern {pattern!r}: \\P{{{name}}} inside [...] has no portable translation"
                        )
                    out.append(posix if depth else f"[{'^' if nxt == 'P' else ''}{posix}]")
                else:
                    out.append(pattern[i : end + 1])
                i = end + 1
                continue
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if ch == "[":
            if depth:
                raise TransformError(f"pattern {pattern!r}: nested character classes are not portable")
            depth += 1
            out.append(ch)
            i += 1
            # A `]` right after `[` or `[^` is a literal in both dialects.
            if pattern.startswith("^", i):
                out.append("^")
                i += 1
            if pattern.startswith("]", i):
                out.append("\\]")
                i += 1
            continue
        if ch == "]" and depth:
            depth -= 1
        elif ch == "." and not depth:
            out.append(_JAVA_DOT)
            i += 1
            continue
        elif ch == "(" and pattern.startswith("(?", i) and not depth:
            flags = re.match(r"\(\?([a-zA-Z-]*)[:)]", pattern[i:])
            if flags and "i" in flags.group(1) and "u" not in flags.group(1):
                raise TransformError(
                    f"pattern {pattern!r}: (?i) is ASCII-only in Java and Unicode in Python; "
                    "lower-case with tokenizer.lowercase instead"
                )
        out.append(ch)
        i += 1
    if depth:
        raise TransformError(f"pattern {pattern!r}: unterminated character class")
    return "".join(out)


@lru_cache(maxsize=64)
def java_regex(pattern: str) -> regex.Pattern:
    """Compile a Java regular expression (Spark's ``RegexTokenizer.pattern``) for ``regex``.

    ``\\p{L}``, ``\\p{N}`` and the other Unicode properties mean the same in both; what
    differs is translated: ``\\d \\s \\w`` (and their negations) and the POSIX classes
    ``\\p{Alpha}``, ``\\p{Punct}``, ... are ASCII in Java, ``.`` excludes every line
    terminator, ``\\Q...\\E`` quotes. Constructs with no faithful translation (a negated
    shorthand inside ``[...]``, nested classes, ``(?i)``) are refused by name, so a
    transform that serves differently from Spark is rejected when it is loaded.
    """
    translated = _translate_java_regex(pattern)
    try:
        return regex.compile(translated, regex.V0)
    except regex.error as err:
        raise TransformError(f"pattern {pattern!r} does not compile ({translated!r}): {err}") from err


def _utf16_length(token: str) -> int:
    # Java's String.length() counts UTF-16 code units: a character beyond U+FFFF is 2.
    return len(token) + sum(1 for c in token if ord(c) > 0xFFFF) if not token.isascii() else len(token)


class Tokenizer:
    """Spark ML's ``RegexTokenizer(gaps=True)``: lower-case, split on the pattern, drop short tokens."""

    def __init__(self, pattern: str, lowercase: bool, min_token_length: int) -> None:
        self.pattern = java_regex(pattern)
        self.lowercase = lowercase
        self.min_token_length = min_token_length

    @classmethod
    def from_spec(cls, tokenizer: Mapping[str, Any]) -> Tokenizer:
        return cls(tokenizer["pattern"], tokenizer["lowercase"], tokenizer["min_token_length"])

    def __call__(self, text: str) -> list[str]:
        # Java's String.toLowerCase() and str.lower() agree, final sigma and the dotted
        # capital I included; both apply full (length-changing) mappings.
        if self.lowercase:
            text = text.lower()
        minimum = self.min_token_length
        return [t for t in self.pattern.split(text) if t and _utf16_length(t) >= minimum]


def tokenize(cleaned: pa.Array, tokenizer: Mapping[str, Any]) -> pa.Array:
    """Step 2 for a text feature: each cleaned text's tokens (``list<string>``), once per distinct text."""
    tokens_of = Tokenizer.from_spec(tokenizer)
    unique, index = distinct(cleaned)
    lists = pa.array([tokens_of(text or "") for text in unique.to_pylist()], pa.list_(pa.string()))
    return lists.take(pa.array(index))


def prepare(columns: Mapping[str, Any], doc: Mapping[str, Any], *, zone: str = "UTC") -> dict[str, pa.Array]:
    """Step 2 for every column the transform reads: the prepared columns preprocess would write.

    A column the document needs but ``columns`` lacks is left out; :func:`encode` names it.
    """
    max_length = doc["contract"]["preprocess"].get("text_max_length")
    prepared: dict[str, pa.Array] = {}
    for role in ROLES:
        for spec in doc[role]:
            for s in doc["pca"]["inputs"] if "pca_component" in spec else [spec]:
                name = s["name"]
                if name in prepared or name not in columns:
                    continue
                values = columns[name]
                if role == "numeric":
                    prepared[name] = pa.array(clean_numeric(values, where=f"numeric {name!r}"))
                elif role == "categorical":
                    prepared[name] = clean_categorical(values, zone=zone)
                elif spec["encoding"] == SUBWORD:  # the tokenizer file splits the cleaned text
                    prepared[name] = clean_text(values, zone=zone, max_length=max_length)
                else:
                    cleaned = clean_text(values, zone=zone, max_length=max_length)
                    prepared[name] = tokenize(cleaned, spec["tokenizer"])
    return prepared


def apply_transform(
    table: pa.Table | Mapping[str, Any], doc: Mapping[str, Any], *, zone: str | None = None
) -> dict[str, np.ndarray]:
    """Steps 2 and 3 of docs/TRANSFORM.md (and 4's renames) for whole columns.

    ``table`` holds the contract's typed columns after derived columns and reference
    joins (a pyarrow Table, or a mapping of name -> array). Returns the shard columns
    (``lakeprep_contracts.encode.encode``): ``num__*`` float32 ``[n]``, ``cat__*`` int32
    ``[n]``, ``txt__*`` int32 ``[n, max_tokens]``, plus ``id`` (object array of str) and
    ``label`` (int32; a continuous label's value, float32) when their columns are present.
    ``zone`` renders timestamps as strings (defaults to the contract's ``time_zone``, else UTC).

    :raises TransformError: naming the feature column that is missing or has a type
        its role cannot take.
    """
    if isinstance(table, pa.Table):
        columns = {name: as_array(table.column(name)) for name in table.column_names}
    else:
        columns = {name: as_array(values) for name, values in table.items()}
    zone = zone or doc["contract"]["validate"].get("time_zone") or "UTC"
    lengths = {len(v) for v in columns.values()}
    if len(lengths) > 1:
        raise TransformError(f"columns have different lengths {sorted(lengths)}")
    out: dict[str, np.ndarray] = {}
    id_column = doc["id"]["column"]
    if id_column in columns:
        out["id"] = np.asarray(spark_string(columns[id_column], zone=zone).to_pylist(), dtype=object)
    label_column = doc["label"]["column"]
    if label_column in columns and label_kinds.fitted_target(doc["label"]) is not None:
        # A continuous label: its value, as the loader gives the trainer `target` (float32).
        values = clean_numeric(columns[label_column], where=f"label {label_column!r}")
        if not np.isfinite(values).all():
            raise TransformError(
                f"label column {label_column!r} has missing values or values that are not finite "
                "numbers; serving rejects them first"
            )
        out["label"] = values.astype(np.float32)
    elif label_column in columns:
        names = doc["label"].get("names")
        if names is None:
            labels = clean_numeric(columns[label_column], where=f"label {label_column!r}")
        else:  # named classes: the id of the label's text, as preprocess writes it
            ids = class_ids(names)
            texts = spark_string(columns[label_column], zone=zone).to_pylist()
            labels = np.array([ids.get(t, np.nan) if t is not None else np.nan for t in texts])
        if np.isnan(labels).any():
            raise TransformError(
                f"label column {label_column!r} has missing values or values that are not classes; "
                "serving rejects them first"
            )
        out["label"] = labels.astype(np.int32)
    out.update(encode(prepare(columns, doc, zone=zone), doc))
    return out
