"""Clean one validated partition: de-duplicate, join reference tables, clean features, tokenize.

    spark-submit --py-files lakeprep_jobs.zip lakeprep_jobs/preprocess.py \
        --input <lake>/validate/flights/dt=2013-01-01 \
        --output <lake>/preprocess/flights/dt=2013-01-01 --params '{...}'

A daily stage: nothing here is learned from data, so any number of days can run in
parallel and a day's output never depends on another day (everything fitted happens
once per run in `fit_transform`). Output columns, which `sample` and the window stages
rely on: `id` (string), `label` (int: the class, or a named class's id in `label_classes`
order, or a continuous label's quantile bin of the day with its value as `target` (double),
lakeprep_contracts.labels), then every feature under its spec name:
numerics as double (NaN becomes null), categoricals as strings with surrounding ASCII
whitespace trimmed (space, tab, LF, CR, FF, VT: `lakeprep_contracts.records.WHITESPACE`;
empty becomes null, so `" B6 "`, `"\tB6\n"` and `"B6"` are one category), text as
`array<string>` tokens (Spark ML `RegexTokenizer`, lakeprep_contracts.text).

- De-duplication on the id: one row per id is kept, the one with the smallest hash of
  the whole row, so the choice does not depend on file order (`flag_duplicates`; only
  the rows of repeated ids are hashed, and a day without any costs one aggregation of
  the ids' 64-bit hashes). The others go to
  `_quarantine/` with `exact duplicate` or `conflicting duplicate id` as the reason:
  rows in = rows out + rows quarantined.
- Reference tables are read as they stood on the partition's day (`day`): a folder of
  dated snapshots (`dt=YYYY-MM-DD/`) gives its newest snapshot on or before the day, which
  must be complete (`_SUCCESS`); a plain folder is one table with no history
  (`lakeprep_contracts.references`). The report records which (`reference_snapshots`).
- Reference tables are de-duplicated on their join keys and broadcast-joined (left), so
  a join can never add or lose rows; unmatched rows are counted per table. String keys
  are compared trimmed as categoricals are (empty as null), on both sides, without
  changing the partition's values. Each table is
  read and de-duplicated once (`reference_rows`): the join and the profile's weights use
  the same rows. Their feature
  columns are profiled into `_stats.json` (validate profiles the raw ones), for drift:
  a joined value is its reference row's, so the profile is taken from each table's rows
  weighted by how many of the day's rows joined them (`reference_weights`; one row per
  distinct key, not one per row: the same document, a fraction of the work).
- Everything is Spark SQL functions and `pyspark.ml` built-ins: no Python UDFs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lakeprep_contracts import labels, layout, records, references
from lakeprep_jobs import lake_io, parquet_io, stage_entry, stats

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

REASON = "_reason"
WEIGHT = "_rows"  # reference_weights: the day's rows that a reference row stands for


@dataclasses.dataclass(frozen=True)
class PreprocessParams:
    id_column: str
    label_column: str
    numeric: list[str]
    categorical: list[str]
    text: list[str]
    tokenizer: dict[str, Any]
    deduplicate: bool
    text_max_length: int
    references: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    stats_kinds: dict[str, str] = dataclasses.field(default_factory=dict)
    # The partition's logical date (YYYY-MM-DD): which reference snapshots it joins.
    day: str | None = None
    # Named classes (lakeprep_contracts.labels): the label becomes its class's id. None: an
    # integer label, kept as it is.
    label_classes: list[Any] | None = None
    # A continuous label (lakeprep_contracts.labels): the label becomes its quantile bin of
    # the day, 0..label_bins-1, and the value the `target` column.
    label_bins: int | None = None
    # Text features of `encoding: tokenizer`: kept as the cut text (a string), which the
    # transform's tokenizer file splits into subword ids (lakeprep_contracts.encode).
    subword_text: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.label_bins is not None and (self.label_bins < 2 or self.label_classes is not None):
            raise ValueError(
                f"label_bins {self.label_bins!r} must be >= 2, for a continuous label (no label_classes)"
            )
        if self.text_max_length < 1:
            raise ValueError(f"text_max_length {self.text_max_length!r} must be >= 1")
        if self.day is not None and not _is_iso_date(self.day):
            raise ValueError(f"day {self.day!r} must be the partition's date as YYYY-MM-DD")
        joined = {c["name"] for r in self.references for c in r["columns"]}
        others = [c for c in self.stats_kinds if c not in joined]
        if others:
            raise ValueError(
                f"stats_kinds {others}: preprocess profiles reference columns only "
                f"({sorted(joined)}); validate profiles the partition's own"
            )


def _is_iso_date(value: object) -> bool:
    import datetime as dt

    try:
        return isinstance(value, str) and dt.date.fromisoformat(value).isoformat() == value
    except ValueError:
        return False


def reference_snapshot(spark: SparkSession, ref: dict[str, Any], day: str | None) -> tuple[str, str | None]:
    """(the URI to read, its snapshot's date) of a reference table for the partition of `day`.

    A folder holding `dt=YYYY-MM-DD/` folders is a table of dated snapshots: the newest on
    or before `day`, which must be complete. Anything else is read as it is (no history:
    the date is None).

    :raises SnapshotError: (a refusal) no snapshot on or before `day`, a badly named one,
        data files beside the snapshots, or no `day` to choose by.
    :raises FileNotFoundError: (retried) the chosen snapshot has no `_SUCCESS` yet.
    """
    uri, name = ref["uri"], ref["name"]
    days = references.snapshot_days(lake_io.list_folders(spark, uri), uri)
    if not days:
        return uri, None
    loose = [f for f, _ in lake_io.list_files(spark, uri) if not f.rsplit("/", 1)[-1].startswith(("_", "."))]
    if loose:
        raise references.SnapshotError(
            f"reference {name!r} ({uri}) holds dated snapshots and data files {loose[:3]} beside "
            "them: move the files into a dt=YYYY-MM-DD snapshot, or the snapshots out"
        )
    if day is None:
        raise references.SnapshotError(
            f"reference {name!r} ({uri}) holds dated snapshots: the preprocess parameter `day` "
            "(the partition's date, YYYY-MM-DD) chooses one; pass it"
        )
    snapshot = references.snapshot_for(days, day, name, uri)
    chosen = layout.join(uri, f"{references.SNAPSHOT_PREFIX}{snapshot}")
    if not lake_io.exists(spark, layout.join(chosen, layout.SUCCESS)):
        # Not a refusal: the snapshot may be landing. An older one is not used instead, so
        # the day joins the same rows whenever it runs.
        raise FileNotFoundError(
            f"reference {name!r}: snapshot {chosen}, the newest on or before {day}, is not complete "
            f"(no {layout.SUCCESS}): wait for it to land, or remove it if it was abandoned"
        )
    return chosen, snapshot


def read_reference(spark: SparkSession, ref: dict[str, Any]) -> DataFrame:
    reader = spark.read.options(**ref.get("options", {}))
    return getattr(reader, ref["format"])(ref["uri"])


def _key_names(ref: dict[str, Any]) -> list[str]:
    """The columns a reference's join keys are compared in (`join_key`), on both sides."""
    return [f"_key__{ref['name']}__{k}" for k in ref["join_keys"]]


def join_key(column: Column, kind: str) -> Column:
    """A join key as it is compared: a string trimmed of `records.WHITESPACE` at both ends
    and empty as null, as a categorical is cleaned; any other type as it is."""
    from pyspark.sql import functions as F

    if kind != "string":
        return column
    return F.nullif(F.btrim(column, F.lit(records.WHITESPACE)), F.lit(""))


def reference_rows(
    df: DataFrame, refs: list[tuple[dict[str, Any], DataFrame]]
) -> list[tuple[dict[str, Any], DataFrame]]:
    """Pure: each reference table as `join_reference_rows` joins it to `df`: its keys cast
    to the types they have in `df` (or in an earlier reference's columns) and compared as
    `join_key` (in the `_key_names` columns), its declared columns, one row per key, and
    `_matched__<name>`, true on every row.

    A key listed more than once keeps one row, the same whatever the table's order or
    partitioning: the smallest by its declared columns in order (nulls first), as
    serving's `join_references` picks it.
    """
    from pyspark.sql import functions as F

    dtypes = dict(df.dtypes)
    out = []
    for ref, table in refs:
        keys = _key_names(ref)
        right = table.select(
            # try_cast: an unparseable key in a reference table means "no match" (counted in
            # the report), not a failed day (Spark 4's ANSI cast would raise).
            *[
                join_key(F.col(k).try_cast(dtypes[k]), dtypes[k]).alias(name)
                for k, name in zip(ref["join_keys"], keys, strict=True)
            ],
            *[F.expr(c["expr"]).alias(c["name"]) for c in ref["columns"]],
        )
        values = [F.col(f"`{c['name']}`") for c in ref["columns"]]
        if values:
            first = F.min(F.struct(*values)).alias("_ref")
            right = right.groupBy(*keys).agg(first).select(*keys, "_ref.*")
        else:
            right = right.dropDuplicates(keys)
        right = right.withColumn(f"_matched__{ref['name']}", F.lit(True))
        out.append((ref, right))
        dtypes.update((name, kind) for name, kind in right.dtypes if name not in keys)
    return out


def join_reference_rows(df: DataFrame, rows: list[tuple[dict[str, Any], DataFrame]]) -> DataFrame:
    """Pure: left-join each of `reference_rows` on its keys (broadcast), in order.

    The keys are matched as `join_key` makes them; `df`'s own key columns keep their values.
    """
    from pyspark.sql import functions as F

    for ref, right in rows:
        dtypes, keys = dict(df.dtypes), _key_names(ref)
        compared = [
            join_key(F.col(k), dtypes[k]).alias(name) for k, name in zip(ref["join_keys"], keys, strict=True)
        ]
        df = df.select("*", *compared).join(F.broadcast(right), on=keys, how="left").drop(*keys)
    return df


def join_references(df: DataFrame, refs: list[tuple[dict[str, Any], DataFrame]]) -> DataFrame:
    """Pure: left-join each reference table on its keys (`reference_rows`): each contributes
    its declared columns plus `_matched__<name>`, true where a reference row was found."""
    return join_reference_rows(df, reference_rows(df, refs))


def reference_weights(
    df: DataFrame, rows: list[tuple[dict[str, Any], DataFrame]], columns: Sequence[str]
) -> DataFrame:
    """Pure: `columns` of the references as `join_reference_rows` gives them to `df`'s rows,
    one row per distinct join key with `_rows`, the number of `df`'s rows with that key.

    `rows` are `reference_rows(df, ...)`: the same de-duplicated tables the partition was
    joined with. Each reference's rows stacked (its own columns, the others null); each
    table's `_rows` sum to `df`'s row count, keys that match nothing (or are null) carry
    nulls: `stats.partition_stats(..., weight=WEIGHT, rows=<df's rows>)` profiles them as
    the joined rows. A reference whose keys come from an earlier reference counts the rows
    joined with those first.
    """
    import functools

    from pyspark.sql import functions as F

    tables = []
    for i, (ref, right) in enumerate(rows):
        own = [c["name"] for c in ref["columns"] if c["name"] in columns]
        if not own:
            continue
        keys = ref["join_keys"]
        keyed = df if all(k in df.columns for k in keys) else join_reference_rows(df, rows[:i])
        counted = keyed.groupBy(*keys).agg(F.count(F.lit(1)).alias(WEIGHT))
        tables.append(join_reference_rows(counted, [(ref, right)]).select(*own, WEIGHT))
    return functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), tables)


def repeated_id_hashes(df: DataFrame, id_column: str) -> DataFrame:
    """Pure: the 64-bit hashes (`_id_hash`) shared by more than one row's id.

    Every repeated id's hash is among them, and so, rarely, is a hash that two different
    ids share. Grouping the hashes instead of the ids shuffles and looks up 8 bytes a row
    instead of the id string: about half the time at 4 M flights rows.
    """
    from pyspark.sql import functions as F

    return (
        df.groupBy(F.xxhash64(F.col(f"`{id_column}`")).alias("_id_hash"))
        .count()
        .filter(F.col("count") > 1)
        .select("_id_hash")
    )


def repeated_ids(df: DataFrame, id_column: str, hashes: DataFrame | None = None) -> DataFrame:
    """Pure: the ids that occur on more than one row (`_repeated_id`), from the id column alone.

    With `hashes` (`repeated_id_hashes` of `df`), only the rows whose id hash is among
    them are grouped: the same ids, exactly.
    """
    from pyspark.sql import functions as F

    ids = df.select(id_column)
    if hashes is not None:
        ids = ids.join(hashes, F.xxhash64(F.col(f"`{id_column}`")) == hashes["_id_hash"], "left_semi")
    return (
        ids.groupBy(id_column)
        .count()
        .filter(F.col("count") > 1)
        .select(F.col(id_column).alias("_repeated_id"))
    )


def _indexed(df: DataFrame) -> DataFrame:
    """A file read plus each row's file and position (`_file`, `_row`) from its `_metadata`."""
    from pyspark.sql import functions as F

    return df.select(
        "*", F.col("_metadata.file_path").alias("_file"), F.col("_metadata.row_index").alias("_row")
    )


def _row_key(columns: Sequence[str]) -> Column:
    """The hash of the row's values, then its file and position (`_indexed`): unique per row.

    The hash decides which row of an id is kept, so the choice does not depend on file
    order; rows with the same hash hold the same values, and the smallest (file, row) among
    them picks exactly one.
    """
    from pyspark.sql import functions as F

    return F.struct(
        F.xxhash64(F.to_json(F.struct(*[F.col(f"`{c}`") for c in columns]))).alias("hash"),
        F.col("_file").alias("file"),
        F.col("_row").alias("row"),
    )


def kept_rows(df: DataFrame, id_column: str, repeated: DataFrame) -> DataFrame:
    """Pure: per repeated id of the file read `df`, the key of the row kept (`_keep`, the
    smallest `_row_key`). Only the rows of `repeated` ids are hashed."""
    from pyspark.sql import functions as F

    rows = _indexed(df)
    rows = rows.join(repeated, rows[id_column].eqNullSafe(repeated["_repeated_id"]), "left_semi")
    return rows.groupBy(id_column).agg(F.min(_row_key(df.columns)).alias("_keep"))


def flag_duplicates(df: DataFrame, id_column: str, kept: DataFrame | None) -> DataFrame:
    """Pure: `_reason` is null on the one row kept per id, else why the row is a duplicate.

    `kept` is `kept_rows` of the same file read, None when no id repeats. A row whose id is
    not in `kept` is its id's only row and is not hashed; any other is compared with its
    id's kept row: the same key is that row, the same hash an exact duplicate, else a
    conflicting one.
    """
    from pyspark.sql import functions as F

    if kept is None:
        return df.withColumn(REASON, F.lit(None).cast("string"))
    keep = kept.select(F.col(id_column).alias("_kept_id"), "_keep")
    rows = _indexed(df)
    joined = rows.join(keep, rows[id_column].eqNullSafe(keep["_kept_id"]), "left")
    key, kept_key = _row_key(df.columns), F.col("_keep")
    reason = (
        F.when(kept_key.isNull() | (key == kept_key), F.lit(None).cast("string"))
        .when(key["hash"] == kept_key["hash"], F.lit(records.EXACT_DUPLICATE))
        .otherwise(F.lit(records.CONFLICTING_DUPLICATE))
    )
    return joined.select(*[F.col(f"`{c}`") for c in df.columns], reason.alias(REASON))


def clean_features(df: DataFrame, p: PreprocessParams) -> DataFrame:
    """Pure: `id`, `label` and each feature cleaned as the module docstring says."""
    from pyspark.ml.feature import RegexTokenizer
    from pyspark.sql import functions as F

    text_in = {c: f"_text__{c}" for c in p.text}
    for c, tmp in text_in.items():
        df = df.withColumn(
            tmp, F.substring(F.coalesce(F.col(c).cast("string"), F.lit("")), 1, p.text_max_length)
        )
        if c in p.subword_text:
            continue
        df = RegexTokenizer(
            inputCol=tmp,
            outputCol=f"_tokens__{c}",
            pattern=p.tokenizer["pattern"],
            gaps=True,
            toLowercase=p.tokenizer["lowercase"],
            minTokenLength=p.tokenizer["min_token_length"],
        ).transform(df)
    if p.label_bins is not None:
        return _with_target(df, p).select(
            F.col(p.id_column).cast("string").alias(layout.ID),
            F.col(layout.LABEL),
            F.col(labels.TARGET),
            *_feature_columns(p),
        )
    return df.select(
        F.col(p.id_column).cast("string").alias(layout.ID),
        label_id(F.col(p.label_column), p.label_classes).alias(layout.LABEL),
        *_feature_columns(p),
    )


def _feature_columns(p: PreprocessParams) -> list[Column]:
    from pyspark.sql import functions as F

    return [
        *[F.nanvl(F.col(c).cast("double"), F.lit(None).cast("double")).alias(c) for c in p.numeric],
        *[join_key(F.col(c).cast("string"), "string").alias(c) for c in p.categorical],
        *[F.col(f"_text__{c}" if c in p.subword_text else f"_tokens__{c}").alias(c) for c in p.text],
    ]


def _with_target(df: DataFrame, p: PreprocessParams) -> DataFrame:
    """A continuous label's value as `target` (double) and its quantile bin of the day as
    `label`: `ntile(bins)` over the day's rows ordered by value, then id, so the bins hold
    exactly n/bins rows (the first n mod bins one more) whatever the partitioning, and ties
    at a cut are split by id, the same way on every rerun. Validate has quarantined every
    value that is not a finite number.

    The window has no partition: Spark sorts the day's rows in one task, as an exact rank
    needs a total order (the sample's per-stratum selection runs on its own, spread).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    target = F.col(p.label_column).cast("double")
    order = Window.orderBy(target, F.col(p.id_column).cast("string"))
    return df.withColumn(labels.TARGET, target).withColumn(
        layout.LABEL, (F.ntile(p.label_bins).over(order) - 1).cast("int")
    )


def label_id(label: Column, classes: list[Any] | None) -> Column:
    """The prepared rows' label: an integer label as it is, a named class's id (validate has
    quarantined every label outside the classes)."""
    from pyspark.sql import functions as F

    if classes is None or labels.is_integer(classes):
        return label.cast("int")
    ids = labels.ids_by_text(classes)
    pairs = [x for text, i in ids.items() for x in (F.lit(text), F.lit(i))]
    return F.create_map(*pairs)[label.cast("string")].cast("int")


def report_counts(p: PreprocessParams) -> list[Column]:
    """The report's counts as aggregates over all rows (kept ones: `_reason` null)."""
    from pyspark.sql import functions as F

    kept = F.col(REASON).isNull()
    aggs = [F.count(F.when(kept, 1)).alias("rows")]
    aggs += [
        F.count(F.when(kept, F.col(f"_matched__{r['name']}"))).alias(f"matched__{r['name']}")
        for r in p.references
    ]
    aggs += [
        F.count(F.when(kept & (F.length(F.col(c).cast("string")) > p.text_max_length), 1)).alias(f"cut__{c}")
        for c in p.text
    ]
    aggs += [
        F.count(F.when(F.col(REASON) == r, 1)).alias(f"reason__{r}")
        for r in (records.EXACT_DUPLICATE, records.CONFLICTING_DUPLICATE)
    ]
    return aggs


def run(spark: SparkSession, inputs: list[str], output: str, p: PreprocessParams) -> dict[str, Any]:
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    validated = parquet_io.read_complete(spark, inputs)
    kept = None
    if p.deduplicate:
        # Most days repeat no id: then one aggregation of the ids' hashes says so (adaptive
        # execution sees it empty and runs nothing after it), and no row is hashed whole,
        # sorted or joined. Otherwise the ids of the repeated hashes are grouped exactly,
        # and the rows of the repeated ids pick the one kept per id, a table of one row per
        # repeated id, cached so that the join below is planned from its real size
        # (broadcast when small).
        hashes = repeated_id_hashes(validated, p.id_column)
        repeated = repeated_ids(validated, p.id_column, hashes).cache()
        if repeated.count():
            kept = kept_rows(validated, p.id_column, repeated).cache()
            kept.count()
        repeated.unpersist()
    flagged = flag_duplicates(validated, p.id_column, kept)
    if kept is not None:
        # Counted, then written as the partition and its quarantine: joined with `kept` once.
        flagged = flagged.cache()
    # Each reference table read and de-duplicated once: with statistics, the partition's join
    # and the weights below use the same rows (small, cached); without, there is one use.
    snapshots = {ref["name"]: reference_snapshot(spark, ref, p.day) for ref in p.references}
    tables = [(ref, read_reference(spark, {**ref, "uri": snapshots[ref["name"]][0]})) for ref in p.references]
    refs = [(ref, rows.cache() if p.stats_kinds else rows) for ref, rows in reference_rows(flagged, tables)]
    # Joined before the duplicates are set aside: a left join of de-duplicated keys keeps
    # every row, so the counts of the kept rows, their matches and the reasons are one
    # aggregation, observed while the partition is written (no pass of its own; the
    # written rows are checked against the Parquet footers).
    observed = Observation()
    flagged_joined = join_reference_rows(flagged, refs).observe(observed, *report_counts(p))
    joined = flagged_joined.filter(F.col(REASON).isNull()).drop(REASON)
    with lake_io.PartitionCommit(spark, output) as staging:
        parquet_io.write_parquet(clean_features(joined, p), staging)
        counts = observed.get
        reasons = {
            r: int(counts[f"reason__{r}"]) for r in (records.EXACT_DUPLICATE, records.CONFLICTING_DUPLICATE)
        }
        reasons = {r: n for r, n in reasons.items() if n}
        rows_out = int(counts["rows"])
        quarantined = sum(reasons.values())
        report = {
            "stage": "preprocess",
            "inputs": inputs,
            "rows_in": rows_out + quarantined,
            "rows_out": rows_out,
            "rows_quarantined": quarantined,
            "quarantine_reasons": dict(sorted(reasons.items())),
            "reference_unmatched": {
                r["name"]: rows_out - int(counts[f"matched__{r['name']}"]) for r in p.references
            },
            "text_cut": {c: int(counts[f"cut__{c}"] or 0) for c in p.text},
            # What each table was read from: a snapshot's folder and date, or the plain
            # folder (snapshot null, no history).
            "reference_snapshots": {
                name: {"uri": uri, "snapshot": snapshot} for name, (uri, snapshot) in snapshots.items()
            },
        }
        if quarantined:
            parquet_io.write_parquet(
                flagged.filter(F.col(REASON).isNotNull()).select(
                    REASON, F.to_json(F.struct(*[F.col(f"`{c}`") for c in validated.columns])).alias("_row")
                ),
                layout.join(staging, layout.QUARANTINE_DIR),
            )
        parquet_io.check_written(spark, staging, rows_out, quarantined, ", ".join(inputs))
        if p.stats_kinds:
            passed = flagged.filter(F.col(REASON).isNull())
            weights = reference_weights(passed, refs, list(p.stats_kinds)).cache()
            profile = stats.partition_stats(weights, p.stats_kinds, weight=WEIGHT, rows=rows_out)
            weights.unpersist()
            lake_io.write_text(
                spark,
                layout.join(staging, layout.STATS),
                stats.to_json(stats.stats_document(output, profile)),
            )
        lake_io.write_report(spark, staging, report)
        lake_io.write_success(spark, staging)
    for _, rows in refs:
        rows.unpersist()
    if kept is not None:
        flagged.unpersist()
        kept.unpersist()
    return report


STAGE = stage_entry.Stage("preprocess", __doc__.splitlines()[0], PreprocessParams, run)


def main(argv: Sequence[str] | None = None) -> None:
    stage_entry.stage_main(argv, STAGE)


if __name__ == "__main__":
    main()
