"""Validate a raw partition against the dataset's column contract, and profile it.

    spark-submit --py-files lakeprep_jobs.zip lakeprep_jobs/validate.py \
        --input <lake>/raw/flights/dt=2013-01-01 --output <lake>/validate/flights/dt=2013-01-01 \
        --params '{"format": "csv", "columns": [...], "derived": [...], ...}'

Raw data is read as it really arrives: every value as a string (Spark's PERMISSIVE mode
with a corrupt-record column, so one bad line never fails a day), CSV as RFC 4180 with
quoted newlines, commas and doubled quotes (`records.CSV_DEFAULTS`), a BOM, CRLF,
`.gz`/`.bz2` parts (Hadoop picks the codec by extension), headers matched by name per
file (`raw_name` when the file's header differs from the contract name; two headers a
contract column would read but for case or surrounding whitespace refuse the file),
null tokens (`NA`, `-`) and blanks as nulls. `format: text` reads unstructured text into
one contract column (a record per line, or per file).

Each row then gets at most one reason, the first that applies, in the order and words of
`lakeprep_contracts.records` (serving gives the same reasons to the same rows): a
malformed record; per contract column invalid UTF-8, a bad value of its type, a
non-finite double (NaN, Infinity, -Infinity, inf, ...); a null in a non-nullable column;
a null id or label; a label that is not one of the classes (or, continuous, not a finite
number).

Named classes (`["Adelie", "Chinstrap"]`, lakeprep_contracts.labels) compare with the
label's text (Spark's cast to string), exactly; the partition keeps the label as typed.

Rows with a reason go to `<output>/_quarantine/` with the reason, the source file and the
raw values; the others, typed and with the derived columns added, are the partition,
profiled into `_stats.json` (lakeprep_jobs.stats). Accounting is exact
per input file: rows read = rows passed + rows quarantined, from one aggregation of the
checked rows, and the totals are checked against the Parquet footers of what was written
(no read-back job) before commit.

A CSV record over the parser's limits (`maxCharsPerColumn`, `maxColumns`) stops Spark's
parser in any mode: the stage fails naming the file and the limit, with a report.

A partition that breaks its contract (a required column missing, no rows unless
allowed, a quarantine share above `max_quarantine_share`) is committed WITHOUT
`_SUCCESS` (its report says why, its rows and quarantine stay inspectable), so no later
stage or sensor takes it for complete, and the stage fails naming the partition.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import zoneinfo
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from lakeprep_contracts import labels, layout, records
from lakeprep_jobs import lake_io, parquet_io, stage_entry, stats

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

CORRUPT = "_corrupt_record"
REASON = "_reason"
# The checked rows' scratch Parquet: `<staging folder><suffix>`, beside the staging folder
# (so a retry's PartitionCommit removes what a killed attempt left of it).
CHECKED_SUFFIX = "-checked"
SOURCE_FILE = layout.SOURCE_FILE
RAW = "_raw"

# validate decides how bad records are kept; DROPMALFORMED would lose rows silently.
RESERVED_OPTIONS = ("mode", "columnNameOfCorruptRecord")
SESSION_TIME_ZONE = "spark.sql.session.timeZone"
CASE_SENSITIVE = "spark.sql.caseSensitive"


@dataclasses.dataclass(frozen=True)
class ValidateParams:
    format: str
    columns: list[dict[str, Any]]
    derived: list[dict[str, Any]]
    id_column: str
    label_column: str
    # Integers, or named classes (lakeprep_contracts.labels); None for a continuous label.
    label_classes: list[Any] | None = None
    options: dict[str, str] = dataclasses.field(default_factory=dict)
    null_tokens: list[str] = dataclasses.field(default_factory=list)
    text_column: str | None = None
    text_per: str = "line"
    time_zone: str = "UTC"
    stats_kinds: dict[str, str] = dataclasses.field(default_factory=dict)
    max_quarantine_share: float = 0.1
    allow_empty: bool = False
    label_type: str = "classes"  # or "continuous": a number (lakeprep_contracts.labels)

    def __post_init__(self) -> None:
        if (self.label_type == labels.CONTINUOUS) != (self.label_classes is None):
            raise ValueError(
                f"label_type {self.label_type!r} with label_classes {self.label_classes!r}: "
                f"give label_classes for classes, or label_type {labels.CONTINUOUS!r} without them"
            )
        if self.format not in records.FORMATS:
            raise ValueError(f"format {self.format!r} must be one of {list(records.FORMATS)}")
        for col in self.columns:
            if col.get("type") not in records.SQL_TYPES:
                raise ValueError(
                    f"column {col.get('name')!r} has type {col.get('type')!r}; "
                    f"expected one of {sorted(records.SQL_TYPES)}"
                )
        reserved = [k for k in self.options if k.lower() in {r.lower() for r in RESERVED_OPTIONS}]
        if reserved:
            raise ValueError(f"options {reserved} are set by validate itself (PERMISSIVE, {CORRUPT})")
        if self.format == "text":
            names = [c["name"] for c in self.columns]
            if self.text_column is None or names != [self.text_column]:
                raise ValueError(
                    f"format 'text' reads one column: text_column {self.text_column!r} must be the "
                    f"only contract column, found {names}"
                )
        if self.text_per not in records.TEXT_PER:
            raise ValueError(f"text_per {self.text_per!r} must be one of {list(records.TEXT_PER)}")
        try:
            zoneinfo.ZoneInfo(self.time_zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as err:
            raise ValueError(f"time_zone {self.time_zone!r} is not an IANA time zone (e.g. 'UTC')") from err
        known = {c["name"] for c in [*self.columns, *self.derived]}
        for name, kind in self.stats_kinds.items():
            if name not in known or kind not in records.FEATURE_ROLES:
                raise ValueError(
                    f"stats_kinds {name!r}: {kind!r} must name a contract or derived column "
                    f"and one of {list(records.FEATURE_ROLES)}"
                )


class ContractError(ValueError):
    """The partition cannot be repaired by quarantining rows."""


def raw_name(col: dict[str, Any]) -> str:
    """The column's name in the file's header (or JSON key): `raw_name`, else its name."""
    return col.get("raw_name") or col["name"]


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# ----------------------------------------------------------------------------- reading


def _option(options: dict[str, str], name: str, default: str) -> str:
    return next((v for k, v in options.items() if k.lower() == name.lower()), default)


def _name_key(header: str) -> str:
    """What makes two header names one column: surrounding whitespace and case ignored.

    validate compares headers without surrounding whitespace; Spark resolves names without
    case (it renames such CSV headers `Value0`/`value1` and refuses such JSON keys).
    """
    return header.strip().casefold()


def _refuse_colliding(headers: Sequence[str], p: ValidateParams, where: str, files: Sequence[str]) -> None:
    """Raise ContractError for headers that are one contract column's name but for case or
    surrounding whitespace: which one holds the column's values cannot be told."""
    groups: dict[str, list[str]] = {}
    for header in headers:
        groups.setdefault(_name_key(header), []).append(header)
    for col in p.columns:
        same = groups.get(_name_key(raw_name(col)), [])
        if len(same) > 1:
            raise ContractError(
                f"partition {where}: {', '.join(files)} has headers {same} for column "
                f"{col['name']!r} ({raw_name(col)!r}): they are one name once surrounding whitespace "
                "and case are ignored, so which holds the column cannot be told; rename or drop "
                "one in the feed"
            )


def _contract_frame(
    df: DataFrame, names: Sequence[tuple[str, str]], p: ValidateParams, where: str, files: Sequence[str]
) -> tuple[DataFrame, list[str]]:
    """Map one read to the contract: a string column per contract column, `_raw`, corrupt, file.

    `names` pairs each of the file's header names (JSON keys, Parquet columns), as the
    file spells them, with its column in `df`. Header names are compared with surrounding
    whitespace removed; headers that a contract column would read but for case or
    surrounding whitespace are refused (`_refuse_colliding`).
    `_raw` is a struct of the record's values (strings) under the file's own names;
    `flag_rows` writes it as JSON on the rows it quarantines, and only on those (the JSON
    of every other row was thrown away).
    Returns the frame and the header names the contract does not use.
    """
    from pyspark.sql import functions as F

    _refuse_colliding([h for h, _ in names], p, where, files)
    by_name: dict[str, str] = {}
    for header, column in names:
        by_name.setdefault(header.strip(), column)
    missing = [c for c in p.columns if raw_name(c) not in by_name]
    if missing:
        wanted = []
        for c in missing:
            name = c["name"] if raw_name(c) == c["name"] else f"{c['name']} ({raw_name(c)!r})"
            other = [h for h in by_name if _name_key(h) == _name_key(raw_name(c))]
            wanted.append(name + (f", not {other[0]!r}: names are matched with their case" if other else ""))
        raise ContractError(
            f"partition {where}: required column(s) {wanted} missing from {', '.join(files)}; "
            f"found {sorted(by_name)}"
        )
    used = {raw_name(c) for c in p.columns}
    extra = sorted(h for h in by_name if h not in used)
    frame = df.select(
        *[F.col(_quoted(by_name[raw_name(c)])).cast("string").alias(c["name"]) for c in p.columns],
        F.struct(*[F.col(_quoted(col)).cast("string").alias(h) for h, col in names]).alias(RAW),
        F.col(CORRUPT).cast("string").alias(CORRUPT),
        # The scan's own name for the file (URI-encoded; Spark's `_metadata.file_path` is the
        # same file, but carrying a metadata column copies every row the scan reads: a
        # tenth of the first job at 4 M rows).
        F.input_file_name().alias(SOURCE_FILE),
    )
    return frame, extra


def _csv_header(spark: SparkSession, file: str, options: dict[str, str]) -> tuple[str, ...]:
    """The file's header names as the file spells them.

    Spark's header names are one small job (the first record). Spark makes them unique
    before anyone sees them (CSVUtils.makeSafeHeader): an empty name becomes `_c<i>`, and
    names equal but for case become `<name><i>` (`Value`, `value` -> `Value0`, `value1`),
    i being the column's position. Only when a name ends with its own position is the
    first record read again as data (a second small job), so the file's own names are
    compared.
    """
    header = spark.read.options(**options).csv(file).columns
    if not any(name.endswith(str(i)) for i, name in enumerate(header)):
        return tuple(header)
    first = spark.read.options(**options).option("header", "false").csv(file).head()
    return tuple(v or "" for v in first)


def _read_csv(
    spark: SparkSession, files: list[str], p: ValidateParams, where: str
) -> list[tuple[DataFrame, list[str]]]:
    from pyspark.sql.types import StringType, StructField, StructType

    options = records.csv_options(p.options)
    groups: dict[tuple[str, ...], list[str]] = {}
    if _option(options, "header", "false").lower() == "true":
        # Each file's own header decides its column order. One schema for all files would be
        # applied by position (Spark's enforceSchema), silently shifting values in a file
        # whose feed added or reordered columns. Reading a header is one small job per file
        # (the first record only); files with the same header are then read together.
        for f in files:
            try:
                header = _csv_header(spark, f, options)
            except Exception as err:
                over = _over_parser_limit(err, where, f)
                if over is None:
                    raise
                raise ContractError(over) from err
            groups.setdefault(header, []).append(f)
    else:
        groups[tuple(raw_name(c) for c in p.columns)] = list(files)
    reads = []
    for header, group in groups.items():
        # Positional names: a header may hold anything (spaces, parentheses, dots, backticks,
        # names equal but for case, which Spark's resolution would confuse).
        schema = StructType(
            [StructField(f"_c{i}", StringType()) for i in range(len(header))]
            + [StructField(CORRUPT, StringType())]
        )
        df = (
            spark.read.options(**options)
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT)
            .schema(schema)
            .csv(group)
        )
        reads.append(_contract_frame(df, [(h, f"_c{i}") for i, h in enumerate(header)], p, where, group))
    return reads


def _keys_read(
    spark: SparkSession, read: Callable[[], DataFrame], where: str, files: Sequence[str]
) -> DataFrame:
    """`read()`, or a ContractError naming the keys (columns) that differ only in case.

    Spark resolves names without case, so it refuses a JSON or Parquet schema holding
    `Value` and `value` (COLUMN_ALREADY_EXISTS, naming one of them and no file); they are
    named by reading the schema again case-sensitively.
    """
    from pyspark.errors import AnalysisException

    try:
        return read()
    except AnalysisException as err:
        if err.getCondition() != "COLUMN_ALREADY_EXISTS":
            raise
        previous = spark.conf.get(CASE_SENSITIVE)
        spark.conf.set(CASE_SENSITIVE, "true")
        try:
            keys = read().columns
        finally:
            spark.conf.set(CASE_SENSITIVE, previous)
        groups: dict[str, list[str]] = {}
        for key in keys:
            groups.setdefault(key.casefold(), []).append(key)
        same = [names for names in groups.values() if len(names) > 1]
        raise ContractError(
            f"partition {where}: {', '.join(files)} has keys {same} that differ only in case; "
            "Spark reads names without case, so it cannot tell them apart; rename or drop one "
            "in the feed"
        ) from err


def _read_other(
    spark: SparkSession, files: list[str], p: ValidateParams, where: str
) -> tuple[DataFrame, list[str]]:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    reader = spark.read.options(**p.options)
    if p.format == "json":
        reader = (
            reader.option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT)
            .option("primitivesAsString", "true")
        )
        df = _keys_read(spark, lambda: reader.json(files), where, files)
        if not [c for c in df.columns if c != CORRUPT]:
            # Every line is malformed, so inference found no keys: that is malformed records,
            # not missing columns. Read again with the contract's keys to quarantine them.
            keys = [raw_name(c) for c in p.columns] + [CORRUPT]
            schema = StructType([StructField(k, StringType()) for k in keys])
            df = reader.schema(schema).json(files)
    elif p.format == "parquet":
        df = _keys_read(spark, lambda: reader.parquet(*files), where, files)
    else:
        # Spark's text reader: `value` per line, or per file with wholetext. A text file has
        # no record structure to break, so nothing is ever malformed here.
        df = reader.text(files, wholetext=p.text_per == "file").withColumnRenamed("value", p.text_column)
    if CORRUPT not in df.columns:
        df = df.withColumn(CORRUPT, F.lit(None).cast("string"))
    return _contract_frame(df, [(c, c) for c in df.columns if c != CORRUPT], p, where, files)


def empty_raw(spark: SparkSession, p: ValidateParams) -> DataFrame:
    """What `read_raw` gives for a partition without data: no rows, the same columns."""
    from pyspark.sql.types import StringType, StructField, StructType

    strings = [StructField(n, StringType()) for n in [c["name"] for c in p.columns]]
    raw = StructField(RAW, StructType([StructField(raw_name(c), StringType()) for c in p.columns]))
    extra = [StructField(CORRUPT, StringType()), StructField(SOURCE_FILE, StringType())]
    return spark.createDataFrame([], StructType([*strings, raw, *extra]))


def read_raw(
    spark: SparkSession, files: list[str], p: ValidateParams, where: str
) -> tuple[list[DataFrame], list[str]]:
    """Read the data files with every contract column as a string, keeping bad records.

    Returns one frame per header (CSV files whose headers differ are read apart; other
    formats are one read) and the file columns the contract does not use. Each frame has
    the contract columns (contract names, raw strings), `_raw` (the record's values under
    the file's own names, a struct whose fields differ with the header), `_corrupt_record`
    and `_source_file`. Raises ContractError naming the partition, the file(s) and the
    column when a required column is missing.
    """
    reads = _read_csv(spark, files, p, where) if p.format == "csv" else [_read_other(spark, files, p, where)]
    return [df for df, _ in reads], sorted({c for _, extra in reads for c in extra})


# ----------------------------------------------------------------------------- checking


def first_reason(checks: list[tuple[Column, Column]]) -> Column:
    """The message of the first condition that holds, else null."""
    from pyspark.sql import functions as F

    reason = F.lit(None).cast("string")
    for cond, msg in reversed(checks):
        reason = F.when(cond, msg).otherwise(reason)
    return reason


def null_tokens(col: dict[str, Any], p: ValidateParams) -> list[str]:
    """A column's own `null_tokens` replace the source's (`[]` turns them off for it)."""
    return list(col["null_tokens"]) if col.get("null_tokens") is not None else list(p.null_tokens)


def as_null(value: Column, tokens: Sequence[str]) -> Column:
    """Null where the value, stripped of surrounding whitespace, is blank or a null token.

    Only a value whose first or last byte is at most a space (every `records.WHITESPACE` character
    is one such byte) is stripped: Spark's `btrim` with a character set copies every
    value it is given, twice, which was a seventh of the first job's time at 4 M rows.
    Both ends are compared without walking the value: the first as a string (`value <
    "!"`: empty, or a first byte at most 0x20), the last as the last byte of its UTF-8
    (a character's substring from the end counts the characters first; a list of
    `endswith` per character, inlined in every column's checks, made the generated code
    too large to compile well: 3x the job's time).
    """
    from pyspark.sql import functions as F

    last_byte = F.substring(value.cast("binary"), -1, 1)
    padded = (value < F.lit("!")) | (last_byte < F.lit(bytearray(b"!")))
    stripped = F.when(padded, F.btrim(value, F.lit(records.WHITESPACE))).otherwise(value)
    is_null = stripped == ""
    if tokens:
        is_null = is_null | stripped.isin(list(tokens))
    return F.when(~is_null, value)


def flag_rows(raw: DataFrame, p: ValidateParams) -> DataFrame:
    """Pure: type the contract columns, add derived columns and a `_reason` per row.

    `_reason` is null for a valid row, else the first problem found (module docstring),
    naming the column. Type checks look at the raw strings (a value that is present but
    does not parse); id and label checks look at the derived columns. Derived expressions
    see the typed contract columns and `_source_file`. `_raw`, the record's values as
    JSON (from the struct `read_raw` gives, else one of the contract columns), is kept
    only on rows with a reason (the quarantine is its only reader) and computed only for
    them: the JSON is built inside the CASE WHEN that keeps it.
    """
    from pyspark.sql import functions as F

    if RAW not in raw.columns:
        raw = raw.withColumn(RAW, F.struct(*[F.col(_quoted(c["name"])) for c in p.columns]))
    raw_json = F.to_json(F.col(RAW))
    # Each value is trimmed and cast once, in projections of their own: the checks below
    # refer to a typed value up to four times, and inline they would repeat the trim and
    # the cast for each (Spark's subexpression elimination does not reach into the later
    # branches of a CASE WHEN); as aliases referenced more than once, Catalyst's
    # CollapseProject keeps these projections apart. This halved the CPU of typing and
    # checking 1 M flights rows (benchmarks/RESULTS.md, section (a)).
    present = {c["name"]: f"_present_{i}" for i, c in enumerate(p.columns)}
    cast = {c["name"]: f"_typed_{i}" for i, c in enumerate(p.columns)}
    staged = raw.select(
        "*",
        *[
            as_null(F.col(_quoted(c["name"])), null_tokens(c, p)).isNotNull().alias(present[c["name"]])
            for c in p.columns
        ],
    )
    staged = staged.select(
        "*",
        *[
            F.when(F.col(present[c["name"]]), F.col(_quoted(c["name"])))
            .try_cast(records.SQL_TYPES[c["type"]])
            .alias(cast[c["name"]])
            for c in p.columns
        ],
    )
    typed: dict[str, Column] = {name: F.col(alias) for name, alias in cast.items()}
    # Reasons that show a value are their constant part (the contract's reason with the
    # value "") concatenated with the value, so each is one literal per column.
    checks: list[tuple[Column, Column]] = [(F.col(CORRUPT).isNotNull(), F.lit(records.MALFORMED_RECORD))]
    for col in p.columns:
        name, kind = col["name"], col["type"]
        raw_value = F.col(_quoted(name))
        shown = F.substring(raw_value, 1, records.SHOWN_CHARACTERS)
        checks += [
            (raw_value.contains(records.REPLACEMENT_CHARACTER), F.lit(records.invalid_utf8(name))),
            (
                F.col(present[name]) & typed[name].isNull(),
                F.concat(F.lit(records.bad_value(kind, name, "")), shown),
            ),
        ]
        if kind == "double":
            # Spark's cast takes NaN and infinities (any case, `inf` too); they pass a contract
            # that only says "double" and break every mean and scaler downstream.
            non_finite = F.isnan(typed[name]) | (F.abs(typed[name]) == F.lit(float("inf")))
            checks.append((non_finite, F.concat(F.lit(records.non_finite(name, "")), shown)))
    for col in p.columns:
        if not col.get("nullable", True):
            checks.append((typed[col["name"]].isNull(), F.lit(records.null_in(col["name"]))))

    df = staged.select(
        *[typed[c["name"]].alias(c["name"]) for c in p.columns],
        F.col(RAW),
        F.col(CORRUPT),
        F.col(SOURCE_FILE),
        first_reason(checks).alias("_type_reason"),
    )
    # Derived columns only for rows whose values all typed: Spark 4 evaluates SQL under ANSI
    # rules, so `CAST(amount AS INT)` on a quarantined -Infinity would raise and fail the
    # whole day instead of quarantining one row. CASE WHEN evaluates its branch lazily.
    for col in p.derived:
        df = df.withColumn(col["name"], F.when(F.col("_type_reason").isNull(), F.expr(col["expr"])))
    _check_label_type(df, p)
    label = F.col(p.label_column)
    if p.label_type == labels.CONTINUOUS:
        # A string label (or one a derived expression yields) is a number or quarantined,
        # never a cast error that fails the day (try_cast is null where cast would raise).
        value = label.try_cast("double")
        unknown = value.isNull() | F.isnan(value) | (F.abs(value) == F.lit(float("inf")))
        wrong = records.label_not_finite(p.label_column, "")
    elif labels.is_integer(p.label_classes):
        unknown = ~label.isin(p.label_classes)
        wrong = records.label_not_in(p.label_column, p.label_classes, "")
    else:
        unknown = ~label.cast("string").isin(list(labels.ids_by_text(p.label_classes)))
        wrong = records.label_not_in(p.label_column, p.label_classes, "")
    reason = first_reason(
        [
            (F.col("_type_reason").isNotNull(), F.col("_type_reason")),
            (F.col(p.id_column).isNull(), F.lit(records.null_id(p.id_column))),
            (label.isNull(), F.lit(records.null_label(p.label_column))),
            (unknown, F.concat(F.lit(wrong), label.cast("string"))),
        ]
    )
    df = df.withColumn(REASON, reason).drop("_type_reason")
    return df.withColumn(RAW, F.when(F.col(REASON).isNotNull(), raw_json))


def _check_label_type(df: DataFrame, p: ValidateParams) -> None:
    """Refuse a label Spark cannot compare with the integer classes, naming it, before any job.

    Under ANSI rules `label IN (0, 1)` casts a string label to a number, so one value such
    as `Adelie` would fail the day with a cast error that names no column; a boolean, date
    or timestamp label does not compare at all. The spec check refuses a declared type;
    this is the label whose type only Spark knows (a derived label without one).
    """
    from pyspark.sql.types import AtomicType, BinaryType, NumericType, StringType

    kind = df.schema[p.label_column].dataType
    if p.label_type == labels.CONTINUOUS:
        if not isinstance(kind, NumericType | StringType):
            raise ValueError(
                f"label column {p.label_column!r} is {kind.simpleString()} but label_type is "
                f"{labels.CONTINUOUS!r}; make it a number (or a string of numbers) in the spec"
            )
        return
    if not labels.is_integer(p.label_classes):
        # Named classes compare with the label's text: any value Spark writes as text.
        if not isinstance(kind, AtomicType) or isinstance(kind, BinaryType):
            raise ValueError(
                f"label column {p.label_column!r} is {kind.simpleString()}, which has no text to "
                f"compare with label_classes {p.label_classes}; make it a string, number or boolean"
            )
        return
    if not isinstance(kind, NumericType):
        raise ValueError(
            f"label column {p.label_column!r} is {kind.simpleString()} but label_classes "
            f"{p.label_classes} are integers; make it an integer in the spec (a raw column typed "
            "'int', or a derived expression that yields one, e.g. CASE WHEN ... THEN 0 ... END)"
        )


def reason_kind(reason: Column) -> Column:
    """`records.reason_kind` of a column: the reason without the value it shows, for counting
    (`bad int in dep_time`).

    Everything before the first `records.KIND_END` (a value may hold newlines, which a regex
    `.` would not cross).
    """
    from pyspark.sql import functions as F

    return F.substring_index(reason, records.KIND_END, 1)


# ----------------------------------------------------------------------------- running


def _hidden(uri: str) -> bool:
    return uri.rsplit("/", 1)[-1].startswith(("_", "."))


def _file_key(spark_uri: str) -> str:
    """A file URI with a local file's `file:/`, `file://` or `file:///` spelt one way."""
    return re.sub(r"^file:/+", "file:///", spark_uri)


def _spark_file_uri(spark: SparkSession, uri: str) -> str:
    """A listed file as `input_file_name()` spells it (URI-encoded: `a%20b.csv`), up to
    `_file_key` (a local file is `file:///...` there, `file:/...` in Hadoop's Path)."""
    return _file_key(str(spark.sparkContext._jvm.org.apache.hadoop.fs.Path(uri).toUri().toString()))


def _commit_failed(spark: SparkSession, output: str, report: dict[str, Any]) -> None:
    """Replace the partition by its report alone: no `_SUCCESS`, so nothing takes it as done."""
    with lake_io.PartitionCommit(spark, output) as staging:
        lake_io.write_report(spark, staging, report)


def run(spark: SparkSession, inputs: list[str], output: str, p: ValidateParams) -> dict[str, Any]:
    """Read, check, profile and commit one partition; raise ContractError after committing
    a partition that breaks its contract (without `_SUCCESS`)."""
    # Timestamps without an offset are read in the dataset's zone and calendar functions
    # in derived columns (dayofweek) use it. The operator passes it as --conf too; set here
    # for the job's duration so the result never depends on how the job was submitted.
    previous = spark.conf.get(SESSION_TIME_ZONE)
    spark.conf.set(SESSION_TIME_ZONE, p.time_zone)
    try:
        return _run(spark, inputs, output, p)
    finally:
        spark.conf.set(SESSION_TIME_ZONE, previous)


def _run(spark: SparkSession, inputs: list[str], output: str, p: ValidateParams) -> dict[str, Any]:
    where = ", ".join(inputs)
    listed = [(f, size) for src in inputs for f, size in lake_io.list_files(spark, src) if not _hidden(f)]
    data_files = [f for f, size in listed if size > 0]
    # Zero-byte files hold no record; Spark's readers disagree about them (Parquet fails,
    # wholetext may yield an empty row), so they are not read, only reported.
    report: dict[str, Any] = {
        "stage": "validate",
        "status": "complete",
        "inputs": inputs,
        "files": len(listed),
        "empty_files": [f for f, size in listed if size == 0],
        "extra_columns": [],
        "time_zone": p.time_zone,
        "rows_in": 0,
        "rows_out": 0,
        "rows_quarantined": 0,
        "quarantine_reasons": {},
        "file_accounting": {f: {"rows_in": 0, "rows_out": 0, "rows_quarantined": 0} for f, _ in listed},
    }
    try:
        raws, extra = read_raw(spark, data_files, p, where) if data_files else ([empty_raw(spark, p)], [])
    except ContractError as err:
        _commit_failed(spark, output, {**report, "status": "failed", "error": str(err)})
        raise
    report["extra_columns"] = extra

    # Checked once: the raw files are parsed, typed and checked in one pass that writes
    # every row with its reason to a scratch Parquet beside the staging folder; the
    # accounting, the partition, its quarantine and its profile then read that (columnar,
    # pruned to what each needs) instead of parsing the files again or holding them in
    # Spark's cache. Only quarantined rows keep `_raw` (flag_rows).
    # Flagged per header, then united: each read's `_raw` struct has its file's own names.
    flagged = functools.reduce(lambda a, b: a.unionByName(b), [flag_rows(raw, p) for raw in raws])
    keep = [c["name"] for c in p.columns] + [c["name"] for c in p.derived]
    try:
        failure = _check_and_commit(spark, flagged, keep, listed, output, report, p, where)
    except Exception as err:
        over = _over_parser_limit(err, where)
        if over is None:
            raise
        _commit_failed(spark, output, {**report, "status": "failed", "error": over})
        raise ContractError(over) from err
    if failure:
        raise ContractError(failure)
    return report


def _check_and_commit(
    spark: SparkSession,
    flagged: DataFrame,
    keep: list[str],
    listed: list[tuple[str, int]],
    output: str,
    report: dict[str, Any],
    p: ValidateParams,
    where: str,
) -> str | None:
    """Write the checked rows once, account, commit the partition; the contract failure or None."""
    from pyspark.sql import functions as F

    with lake_io.PartitionCommit(spark, output) as staging:
        checked_uri = f"{staging}{CHECKED_SUFFIX}"
        try:
            flagged.write.mode("overwrite").option("compression", "snappy").parquet(checked_uri)
            checked = spark.read.schema(flagged.schema).parquet(checked_uri)
            counted = checked.groupBy(SOURCE_FILE, reason_kind(F.col(REASON)).alias("kind")).count().collect()
            by_spark_uri = {_spark_file_uri(spark, f): f for f, _ in listed}
            by_reason: dict[str, int] = {}
            for source, kind, n in counted:
                source = _file_key(source)
                if source not in by_spark_uri:
                    raise RuntimeError(
                        f"partition {where}: rows from {source}, which is not a listed data file"
                    )
                acc = report["file_accounting"][by_spark_uri[source]]
                acc["rows_in"] += n
                if kind is None:
                    acc["rows_out"] += n
                else:
                    acc["rows_quarantined"] += n
                    by_reason[kind] = by_reason.get(kind, 0) + n
            passed = sum(a["rows_out"] for a in report["file_accounting"].values())
            quarantined = sum(by_reason.values())
            rows_in = passed + quarantined
            report.update(
                rows_in=rows_in,
                rows_out=passed,
                rows_quarantined=quarantined,
                quarantine_reasons=dict(sorted(by_reason.items())),
            )
            failure = _contract_failure(report, p, where, output)
            if failure:
                report.update(status="failed", error=failure)

            valid = checked.filter(F.col(REASON).isNull()).select(*keep)
            parquet_io.write_parquet(valid, staging)
            quarantine_uri = f"{staging}/{layout.QUARANTINE_DIR}"
            if quarantined:
                parquet_io.write_parquet(
                    checked.filter(F.col(REASON).isNotNull()).select(REASON, SOURCE_FILE, CORRUPT, RAW),
                    quarantine_uri,
                )
            doc = stats.stats_document(output, stats.partition_stats(valid, p.stats_kinds))
        finally:
            lake_io.delete(spark, checked_uri)
        lake_io.write_text(spark, f"{staging}/{layout.STATS}", stats.to_json(doc))
        expected_q = {
            f: a["rows_quarantined"] for f, a in report["file_accounting"].items() if a["rows_quarantined"]
        }
        parquet_io.check_written(
            spark,
            staging,
            passed,
            quarantined,
            where,
            f" of {rows_in} read ({expected_q} quarantined by file)",
        )
        lake_io.write_report(spark, staging, report)
        # The Parquet committer marked the folder complete; whether it is, is decided here,
        # last: a partition that breaks its contract stays without the marker.
        lake_io.delete(spark, f"{staging}/{layout.SUCCESS}")
        if not failure:
            lake_io.write_success(spark, staging)
    return failure


# Spark's CSV parser (univocity) stops a file at a record over its limits, whatever the
# mode: PERMISSIVE only keeps records it could tokenize. The task fails with
# MALFORMED_CSV_RECORD (the record's first characters, no limit), the file only in the
# FAILED_READ_FILE around it, the limit only in the TextParsingException under it.
_READ_FILE = re.compile(r"Encountered error while reading file (.+?)\.?\s+SQLSTATE")
_OVER_CHARACTERS = re.compile(
    r"exceeds the maximum number of characters defined in your parser settings \((\d+)\)"
)
_OVER_COLUMNS = re.compile(r"ArrayIndexOutOfBoundsException - Index (\d+) out of bounds for length \1")


def _over_parser_limit(err: BaseException, where: str, file: str | None = None) -> str | None:
    """The refusal for a CSV file Spark's parser stopped at a record over its limits, or None.

    `file`: the file read, when the read was of one (a header); else the one Spark names.
    """
    text = str(err)
    if "TextParsingException" not in text:
        return None
    read = _READ_FILE.search(text)
    source = file or (read.group(1) if read else "one of its files")
    if chars := _OVER_CHARACTERS.search(text):
        limit = f"a value longer than maxCharsPerColumn ({chars.group(1)} characters)"
        option = "maxCharsPerColumn (-1: no limit)"
    elif columns := _OVER_COLUMNS.search(text):
        limit = f"a record with more fields than maxColumns ({columns.group(1)})"
        option = "maxColumns"
    else:
        return None
    return (
        f"partition {where}: {source} holds {limit}, the CSV parser's limit (a line without "
        "newlines, or a wrong delimiter, makes one such record); the parser cannot read the "
        f"file past it, so no row of the file is counted. Fix or remove the file, or raise "
        f"{option} in the spec's source.options"
    )


def _contract_failure(report: dict[str, Any], p: ValidateParams, where: str, output: str) -> str | None:
    """Why the partition breaks its contract as a whole, or None."""
    rows_in, quarantined = report["rows_in"], report["rows_quarantined"]
    if rows_in == 0:
        if p.allow_empty:
            return None
        return (
            f"partition {where}: no rows (empty partition): {report['files']} file(s), "
            f"{len(report['empty_files'])} of them zero-byte; set allow_empty to accept it"
        )
    share = quarantined / rows_in
    if share > p.max_quarantine_share:
        return (
            f"partition {where}: {quarantined} of {rows_in} rows ({share:.1%}) quarantined, "
            f"above max_quarantine_share {p.max_quarantine_share:.1%}; reasons "
            f"{report['quarantine_reasons']}; see {output}/{layout.QUARANTINE_DIR}"
        )
    return None


STAGE = stage_entry.Stage("validate", __doc__.splitlines()[0], ValidateParams, run)


def main(argv: Sequence[str] | None = None) -> None:
    stage_entry.stage_main(argv, STAGE)


if __name__ == "__main__":
    main()
