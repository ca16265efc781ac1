"""Validate a raw partition against the dataset's column contract.

    spark-submit --py-files lakeprep_jobs.zip lakeprep_jobs/validate.py \
        --input <lake>/raw/flights/dt=2013-01-01 --output <lake>/validate/flights/dt=2013-01-01 \
        --params '{"format": "csv", "columns": [...], "derived": [...], ...}'

Raw data is read with every column as a string (Spark's PERMISSIVE mode with a corrupt
record column), so one bad line never fails a day. Each row then gets at most one reason
(the first that applies: malformed line, a value that does not parse as its contract
type, a null in a non-nullable column, a null id or label, an unknown class). Rows with a
reason go to `<output>/_quarantine/` with the reason, the source file and the raw values;
the others, typed and with the derived columns added, are the partition. Accounting is
exact: rows read = rows passed + rows quarantined, checked before commit.

Failures that cannot be repaired stop the stage with the partition and the column named:
a missing required column, an empty partition (unless allowed), a quarantine share above
`max_quarantine_share` (the partition and its quarantine are committed first so they can
be inspected).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lakeprep_jobs import common

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

CORRUPT = "_corrupt_record"
REASON = "_reason"
SOURCE_FILE = "_source_file"

SPARK_TYPES = {
    "string": "string",
    "int": "int",
    "long": "bigint",
    "double": "double",
    "boolean": "boolean",
    "date": "date",
    "timestamp": "timestamp",
}


@dataclasses.dataclass(frozen=True)
class ValidateParams:
    format: str
    columns: list[dict[str, Any]]
    derived: list[dict[str, Any]]
    id_column: str
    label_column: str
    label_classes: list[int]
    options: dict[str, str] = dataclasses.field(default_factory=dict)
    max_quarantine_share: float = 0.1
    allow_empty: bool = False

    def __post_init__(self) -> None:
        if self.format not in ("csv", "json", "parquet"):
            raise ValueError(f"format {self.format!r} must be csv, json or parquet")
        for col in self.columns:
            if col.get("type") not in SPARK_TYPES:
                raise ValueError(
                    f"column {col.get('name')!r} has type {col.get('type')!r}; "
                    f"expected one of {sorted(SPARK_TYPES)}"
                )


class ContractError(ValueError):
    """The partition cannot be repaired by quarantining rows."""


def read_raw(spark: SparkSession, paths: list[str], p: ValidateParams) -> DataFrame:
    """Read the partition with every contract column as a string, keeping bad lines."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    reader = spark.read.options(**p.options)
    if p.format == "parquet":
        df = reader.parquet(*paths)
        return df.select(
            *[F.col(c).cast("string").alias(c) for c in df.columns],
            F.lit(None).cast("string").alias(CORRUPT),
            F.col("_metadata.file_path").alias(SOURCE_FILE),
        )
    if p.format == "csv":
        # The header decides the column order; a schema in contract order would silently
        # shift values when a feed adds or reorders columns.
        header = reader.option("header", "true").csv(*paths).columns
        schema = StructType([StructField(c, StringType()) for c in [*header, CORRUPT]])
        df = (
            reader.option("header", "true")
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT)
            .schema(schema)
            .csv(*paths)
        )
    else:
        df = (
            reader.option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT)
            .option("primitivesAsString", "true")
            .json(*paths)
        )
        if CORRUPT not in df.columns:
            df = df.withColumn(CORRUPT, F.lit(None).cast("string"))
    return df.withColumn(SOURCE_FILE, F.col("_metadata.file_path"))


def check_columns(raw_columns: Sequence[str], p: ValidateParams, where: str) -> list[str]:
    """Fail on missing contract columns; return the extra ones (ignored, reported)."""
    present = set(raw_columns)
    missing = [c["name"] for c in p.columns if c["name"] not in present]
    if missing:
        raise ContractError(
            f"partition {where}: required column(s) {missing} missing; found {sorted(present)}"
        )
    contract = {c["name"] for c in p.columns}
    return sorted(c for c in raw_columns if c not in contract and c not in (CORRUPT, SOURCE_FILE))


def first_reason(checks: list[tuple[Column, Column]]) -> Column:
    """The message of the first condition that holds, else null."""
    from pyspark.sql import functions as F

    reason = F.lit(None).cast("string")
    for cond, msg in reversed(checks):
        reason = F.when(cond, msg).otherwise(reason)
    return reason


def flag_rows(raw: DataFrame, p: ValidateParams) -> DataFrame:
    """Pure: type the contract columns, add derived columns and a `_reason` per row.

    `_reason` is null for a valid row, else the first problem found, naming the column.
    Type checks look at the raw strings (a value that is present but does not parse);
    id and label checks look at the derived columns.
    """
    from pyspark.sql import functions as F

    typed = {}
    raw_checks: list[tuple[Column, Column]] = [(F.col(CORRUPT).isNotNull(), F.lit("malformed record"))]
    for col in p.columns:
        name, spark_type = col["name"], SPARK_TYPES[col["type"]]
        raw_value = F.col(f"`{name}`")
        value = raw_value.try_cast(spark_type)
        typed[name] = value
        raw_checks.append(
            (
                raw_value.isNotNull() & (F.trim(raw_value) != "") & value.isNull(),
                F.concat(F.lit(f"bad {col['type']} in {name}: "), F.substring(raw_value, 1, 64)),
            )
        )
    for col in p.columns:
        if not col.get("nullable", True):
            raw_checks.append((typed[col["name"]].isNull(), F.lit(f"null in {col['name']}")))

    raw_fields = [F.col(f"`{c}`") for c in raw.columns if c not in (CORRUPT, SOURCE_FILE)]
    df = raw.select(
        *[typed[c["name"]].alias(c["name"]) for c in p.columns],
        F.to_json(F.struct(*raw_fields)).alias("_raw"),
        F.col(CORRUPT),
        F.col(SOURCE_FILE),
        first_reason(raw_checks).alias("_type_reason"),
    )
    for col in p.derived:
        df = df.withColumn(col["name"], F.expr(col["expr"]))
    label = F.col(p.label_column)
    reason = first_reason(
        [
            (F.col("_type_reason").isNotNull(), F.col("_type_reason")),
            (F.col(p.id_column).isNull(), F.lit(f"null id ({p.id_column})")),
            (label.isNull(), F.lit(f"null label ({p.label_column})")),
            (
                ~label.isin(p.label_classes),
                F.concat(F.lit(f"label {p.label_column} not in {p.label_classes}: "), label.cast("string")),
            ),
        ]
    )
    return df.withColumn(REASON, reason).drop("_type_reason")


def reason_kind(reason: Column) -> Column:
    """The reason without the offending value, for counting (`bad int in dep_time`)."""
    from pyspark.sql import functions as F

    return F.regexp_replace(reason, ":.*$", "")


def run(spark: SparkSession, inputs: list[str], output: str, p: ValidateParams) -> dict[str, Any]:
    from pyspark.sql import functions as F

    where = ", ".join(inputs)
    files = [
        f
        for src in inputs
        for f, _ in common.list_files(spark, src)
        if not f.rsplit("/", 1)[-1].startswith(("_", "."))
    ]
    if not files:
        if not p.allow_empty:
            raise ContractError(f"partition {where}: no data files (empty partition)")
    raw = read_raw(spark, inputs, p) if files else None
    extra = check_columns(raw.columns, p, where) if raw is not None else []

    report: dict[str, Any] = {
        "stage": "validate",
        "inputs": inputs,
        "files": len(files),
        "extra_columns": extra,
        "rows_in": 0,
        "rows_out": 0,
        "rows_quarantined": 0,
        "quarantine_reasons": {},
    }
    with common.PartitionCommit(spark, output) as staging:
        if raw is None:
            common.write_success(spark, staging)
        else:
            # Cached: counted by reason once, then written as two outputs.
            flagged = flag_rows(raw, p).cache()
            by_reason = {
                (r[0] or ""): int(r[1]) for r in flagged.groupBy(reason_kind(F.col(REASON))).count().collect()
            }
            valid_rows = by_reason.pop("", 0)
            quarantined = sum(by_reason.values())
            keep = [c["name"] for c in p.columns] + [c["name"] for c in p.derived]
            common.write_parquet(flagged.filter(F.col(REASON).isNull()).select(*keep), staging)
            if quarantined:
                common.write_parquet(
                    flagged.filter(F.col(REASON).isNotNull()).select(REASON, SOURCE_FILE, CORRUPT, "_raw"),
                    f"{staging}/{common.QUARANTINE_DIR}",
                )
            flagged.unpersist()
            rows_in = valid_rows + quarantined
            # Read back what was written (Parquet footers only): nothing lost on the way.
            written = spark.read.parquet(staging).count()
            written_q = spark.read.parquet(f"{staging}/{common.QUARANTINE_DIR}").count() if quarantined else 0
            if (written, written_q) != (valid_rows, quarantined):
                raise RuntimeError(
                    f"partition {where}: accounting mismatch: read {rows_in} rows, expected "
                    f"{valid_rows} passed + {quarantined} quarantined, wrote {written} + {written_q}"
                )
            report.update(
                rows_in=rows_in,
                rows_out=valid_rows,
                rows_quarantined=quarantined,
                quarantine_reasons=dict(sorted(by_reason.items())),
            )
        common.write_report(spark, staging, report)

    if report["rows_in"] == 0 and not p.allow_empty:
        raise ContractError(f"partition {where}: no rows (empty partition)")
    share = report["rows_quarantined"] / report["rows_in"] if report["rows_in"] else 0.0
    if share > p.max_quarantine_share:
        raise ContractError(
            f"partition {where}: {report['rows_quarantined']} of {report['rows_in']} rows "
            f"({share:.1%}) quarantined, above max_quarantine_share {p.max_quarantine_share:.1%}; "
            f"reasons {report['quarantine_reasons']}; see {output}/{common.QUARANTINE_DIR}"
        )
    return report


def main(argv: Sequence[str] | None = None) -> None:
    common.stage_main(argv, __doc__.splitlines()[0], ValidateParams, run)


if __name__ == "__main__":
    main()
