"""Apply the run's fitted transform to every split of its window; write shards and `manifest.json`.

    spark-submit --py-files lakeprep_jobs.zip lakeprep_jobs/export_shards.py \
        --input <lake>/sample/flights/dt=2012-12-05 ... --input <lake>/sample/flights/dt=2013-01-03 \
        --output <lake>/export_shards/flights/dt=2013-01-03 --params '{"world_size": 2, ...}'

The inputs are the window's complete sampled days, oldest first, as `wait_for_window`
decided (its decision, naming failed and missing days, goes into the manifest's
`window`); the last one is the run's own day. The transform is the run's
`fit_transform/.../transform.json`, applied unchanged to train, validation and test
(`lakeprep_jobs.transform`); its sha256 is recorded in the manifest. No NaN or infinity
reaches a shard: every numeric output is checked and the export fails naming the
column. The train split alone is then balanced and augmented (`lakeprep_jobs.balance`,
the spec's `stages.balance`); validation and test are exported as sampled, and the
export fails if a synthetic row would reach them. `sampling.json` beside the manifest
records the class counts per split through sampling, balancing and augmentation. See
docs/MANIFEST.md for the format and the guarantees:

- Rows of a split are numbered in a fixed order (hash of id, then id), so the numbering
  does not depend on partitioning. Row `i` goes to rank `i % world_size`, which gives
  every rank exactly `rows_per_rank` rows after the remainder is dropped or padded; a
  rank's rows are spread over `shards_per_rank` shards, shard `s` belongs to rank
  `s % world_size`. That is the manifest's `plan` for the spec's world size; the
  trainer no longer depends on it: it plans rows at read time for the world size it
  runs with, from the shards' row counts (`lakeprep_train.dataset.plan_rank`).
- So that one export serves the common world sizes well, a split that needs more than
  one shard per rank gets a shard count that is a multiple of lcm(12, world_size)
  (12 = lcm(1, 2, 3, 4), which 6 and 12 divide too): its shards hold equal rows (within
  one), so a trainer on 1, 2, 3, 4, 6 or 12 ranks reads whole shards, one rank per file.
- One Parquet file per shard (zstd), row counts verified by reading the footers back,
  sha256 computed on the executors (`binaryFile` source), then the manifest last.
- A shard's row groups hold whole batches, about `row_group_mb` of decoded rows each
  (`row_group_rows`), so the trainer reads the next group while it converts this one.
- Reproducible bytes: the same rows give the same shard files in every run. Spark's
  Parquet writer lists a column's encodings in a per-JVM order; each shard gets a
  canonical footer (`lakeprep_jobs.parquet_footer`). A source partition's fingerprint
  is a digest of its content (schema, rows, an order-free sum of row hashes), not of
  Spark's random part-file names (`fingerprint_partitions`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lakeprep_contracts import layout, pipeline
from lakeprep_jobs import balance, lake_io, parquet_footer, parquet_io, stage_entry
from lakeprep_jobs.lake import Lake, SparkLake, read_text, write_report, write_success, write_text

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

SPLITS = layout.SPLITS
FORMAT_VERSION = 1


WINDOW_KEYS = pipeline.WINDOW_KEYS
SHARD_LAYOUTS = ("prepared", "encoded")


@dataclasses.dataclass(frozen=True)
class ExportParams:
    dataset: str
    logical_date: str
    run_id: str
    config_hash: str
    world_size: int
    id_column: str
    label_column: str
    label_classes: list[int]
    transform_uri: str
    batch_size: int
    target_shard_mb: float
    remainder: str
    window: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    row_group_mb: float = 8  # MiB of decoded rows per Parquet row group (`row_group_rows`)
    # `prepared`: a manifest over the sampled days' files (`lakeprep_jobs.export_manifest`);
    # `encoded`: the features materialised here, in shards of their own.
    shards: str = "prepared"
    balance: balance.BalanceParams = dataclasses.field(default_factory=balance.BalanceParams)

    def __post_init__(self) -> None:
        if isinstance(self.balance, dict):  # from --params JSON: `stages.balance`
            try:
                object.__setattr__(self, "balance", balance.BalanceParams(**self.balance))
            except TypeError as err:
                raise TypeError(f"balance: {err}") from err
        if self.world_size < 1:
            raise ValueError(f"world_size {self.world_size!r} must be >= 1")
        if self.batch_size < 1:
            raise ValueError(f"batch_size {self.batch_size!r} must be >= 1")
        if self.remainder not in ("drop", "pad"):
            raise ValueError(f"remainder {self.remainder!r} must be 'drop' or 'pad'")
        if self.shards not in SHARD_LAYOUTS:
            raise ValueError(f"shards {self.shards!r} must be one of {SHARD_LAYOUTS}")


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    rows_available: int
    rows: int
    rows_per_rank: int
    steps_per_rank: int
    shards_per_rank: int


# lcm(1, 2, 3, 4): a shard count divisible by it splits evenly over 1, 2, 3, 4, 6 or 12 ranks.
COMMON_WORLD_SIZES_LCM = 12


def plan_split(rows_available: int, bytes_estimate: float, p: ExportParams) -> SplitPlan:
    """Pure arithmetic: equal rows per rank, shard count a multiple of the world size.

    Shards are sized by ``target_shard_mb``. A split small enough for one shard per rank
    keeps ``world_size`` shards: more, smaller files would only add overhead. A larger
    one is rounded up to a multiple of ``lcm(12, world_size)`` shards, when that still
    leaves every shard at least one batch, so that the trainer's read-time plan on
    1, 2, 3, 4, 6 or 12 ranks reads whole shards (docs/MANIFEST.md); otherwise to a
    multiple of ``world_size``. Never more shards than rows on a rank.
    """
    w = p.world_size
    if p.remainder == "drop":
        per_rank = rows_available // w
    else:
        per_rank = math.ceil(rows_available / w) if rows_available else 0
    rows = per_rank * w
    target = p.target_shard_mb * (1 << 20)
    kept_bytes = bytes_estimate * (rows / rows_available) if rows_available else 0.0
    by_bytes = math.ceil(kept_bytes / target) if rows else 0
    common = math.lcm(COMMON_WORLD_SIZES_LCM, w)
    unit = common if by_bytes > w and rows >= common * p.batch_size else w
    shards_per_rank = max(1, math.ceil(by_bytes / unit) * unit // w) if rows else 0
    shards_per_rank = min(shards_per_rank, per_rank) if per_rank else 0
    return SplitPlan(
        rows_available=rows_available,
        rows=rows,
        rows_per_rank=per_rank,
        steps_per_rank=math.ceil(per_rank / p.batch_size),
        shards_per_rank=shards_per_rank,
    )


def row_group_rows(width: int, p: ExportParams) -> int:
    """Rows per Parquet row group: whole batches, about ``row_group_mb`` of decoded rows, at least one batch.

    The trainer converts a row group while its reader thread decodes the next one
    (`lakeprep_train.dataset`), so a shard needs several; whole batches let a rank that
    starts at a group boundary cut its batches without copying rows across groups. Sized
    like shards, by the rows' decoded width (`row_bytes`), and bounded by a row count
    (parquet-java's `parquet.block.row.count.limit`): `parquet.block.size` bounds the
    encoded, compressed bytes the writer buffers, several times fewer than the decoded
    ones, so an 8 MB block made a 367,532-row train shard a single row group.
    """
    batches = int(p.row_group_mb * (1 << 20)) // (width * p.batch_size)
    return max(1, batches) * p.batch_size


# The split a row is written to, while the splits are numbered and written together.
SPLIT_COLUMN = "_split"


def number_rows(df: DataFrame, splits: Mapping[str, int] | None = None) -> DataFrame:
    """Pure but for a small planning job: a dense 0-based `_idx` in (hash(id), id) order,
    without a single-partition window (`exact.number_in_order`).

    With `splits` (split name -> rows, for the values of `_split`), every split is numbered
    on its own, from 0, in the same pass; the sizes choose how finely the order is cut into
    parts.
    """
    from pyspark.sql import functions as F

    from lakeprep_jobs import exact

    group = F.col(SPLIT_COLUMN) if splits is not None else None
    bits = exact.part_bits_for(max(splits.values(), default=0)) if splits is not None else None
    return exact.number_in_order(df, F.xxhash64("id"), [F.col("id")], "_idx", group, part_bits=bits)


def _per_split(plans: Mapping[str, SplitPlan], value: Callable[[SplitPlan], int]) -> Column:
    """`value(plans[_split])` as a column (three splits: a CASE expression)."""
    from pyspark.sql import functions as F

    out = F.lit(None).cast("long")
    for name, plan in plans.items():
        out = F.when(F.col(SPLIT_COLUMN) == name, F.lit(value(plan)).cast("long")).otherwise(out)
    return out


def assign_shards(
    numbered: DataFrame, plan: SplitPlan | Mapping[str, SplitPlan], p: ExportParams
) -> DataFrame:
    """Pure: drop or pad to `plan.rows`, then `_rank` and `_shard` from the row index.

    `plan` is one split's, or a plan per value of `_split` for the splits numbered together.
    """
    from pyspark.sql import functions as F

    plans = plan if isinstance(plan, Mapping) else None
    if plans is None:
        numbered = numbered.withColumn(SPLIT_COLUMN, F.lit(""))
        plans = {"": plan}
    rows = _per_split(plans, lambda q: q.rows)
    kept = numbered.filter(F.col("_idx") < rows)
    padded = {name: q for name, q in plans.items() if q.rows > q.rows_available}
    if padded:
        # Fewer than world_size rows per split repeated from its start; more than one copy
        # when the split has fewer rows than the padding (1 row, world_size 3).
        copies = _per_split(padded, lambda q: math.ceil((q.rows - q.rows_available) / q.rows_available))
        extra = (
            numbered.filter(F.col(SPLIT_COLUMN).isin(list(padded)))
            .withColumn("_copy", F.explode(F.sequence(F.lit(1).cast("long"), copies)))
            .withColumn(
                "_idx", F.col("_idx") + F.col("_copy") * _per_split(padded, lambda q: q.rows_available)
            )
            .filter(F.col("_idx") < rows)
            .drop("_copy")
        )
        kept = kept.unionByName(extra)
    w = p.world_size
    local = (F.col("_idx") / w).cast("long")
    per_rank = _per_split(plans, lambda q: max(1, q.shards_per_rank))
    out = kept.withColumn("_rank", (F.col("_idx") % w).cast("int")).withColumn(
        "_shard", ((local % per_rank) * w + F.col("_idx") % w).cast("int")
    )
    return out if isinstance(plan, Mapping) else out.drop(SPLIT_COLUMN)


def shard_columns(df: DataFrame) -> list[Any]:
    """The shard schema of docs/MANIFEST.md: float32 numerics, int32 ids, `is_synthetic`."""
    from pyspark.sql import functions as F

    casts = {"numeric": "float", "categorical": "int", "text": "array<int>"}
    cols = [F.col(layout.ID).cast("string"), F.col(layout.LABEL).cast("int")]
    for c in df.columns:
        role = layout.role_of(c)
        if role:
            cols.append(F.col(c).cast(casts[role]).alias(c))
    synthetic = F.col(layout.SYNTHETIC).cast("boolean") if layout.SYNTHETIC in df.columns else F.lit(False)
    cols.append(F.coalesce(synthetic, F.lit(False)).alias(layout.SYNTHETIC))
    return cols


# Besides its features a shard row holds its id, label, split and synthetic flag.
ROW_OVERHEAD_BYTES = 32
DTYPE_BYTES = {"float32": 4, "int32": 4, "int64": 8, "float64": 8}


def row_bytes(features: list[dict[str, Any]]) -> int:
    """Decoded bytes of one shard row, from the manifest's `features`: what shards are sized by.

    Known from the fitted transform alone (dtypes and shapes), so the same rows always get
    the same shard plan; the input files' stored size would not do (it changes with their
    row order). Shards are compressed Parquet: on disk a shard is usually smaller than
    `target_shard_mb`, in the trainer's memory about that size.
    """
    return ROW_OVERHEAD_BYTES + sum(DTYPE_BYTES[f["dtype"]] * math.prod(f["shape"]) for f in features)


def feature_schema(transform: dict[str, Any]) -> list[dict[str, Any]]:
    """The manifest's `features`, from the fitted transform (ids, cardinalities, lengths)."""
    out: list[dict[str, Any]] = [
        {"name": e["output"], "role": "numeric", "dtype": "float32", "shape": []}
        for e in transform["numeric"]
    ]
    out += [
        {
            "name": e["output"],
            "role": "categorical",
            "dtype": "int32",
            "shape": [],
            "cardinality": e["cardinality"],
        }
        for e in transform["categorical"]
    ]
    out += [
        {
            "name": e["output"],
            "role": "text",
            "dtype": "int32",
            "shape": [e["max_tokens"]],
            "vocab_size": e["cardinality"],
        }
        for e in transform["text"]
    ]
    return out


# Helper columns of the window's rows while they are counted: the input each came from and
# its row hash (`fingerprint_partitions`).
SOURCE_COLUMN, ROW_HASH_COLUMN = "_source", "_row_hash"
# True on a row whose id a later day of the window holds too: counted, never exported.
SUPERSEDED_COLUMN = "_superseded"


# Superseded rows the driver collects and broadcasts; more are joined as a DataFrame.
SUPERSEDED_COLLECT_LIMIT = 200_000


def superseded_rows(spark: SparkSession, tagged: DataFrame) -> DataFrame | None:
    """The (id, `_source`) of the window's rows whose id a later day holds too, with
    `_superseded` true; None when no id repeats. `tagged`: the window's prepared rows with
    `_source` (before the transform, so the search reads ids and sources only).

    An id that landed on several days of the window (a record delivered again, a
    correction) is read once, from the **latest** day: the newest delivery of a record is
    the one the lake holds as current, and the run's own day is the latest of all. The
    repeated ids are found through their 64-bit hashes first (one aggregate of 8-byte
    keys; most windows repeat none, and adaptive execution then runs nothing more), then
    exactly, by id, among the rows of the repeated hashes only. Up to
    `SUPERSEDED_COLLECT_LIMIT` superseded rows are collected once and broadcast, so the
    window's later reads do not repeat the search.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType, StructType

    key = F.xxhash64(F.col(layout.ID)).alias("_id_hash")
    repeated = (
        tagged.groupBy(key)
        .agg(F.countDistinct(SOURCE_COLUMN).alias("_days"))
        .filter(F.col("_days") > 1)
        .select("_id_hash")
    )
    candidates = tagged.select(layout.ID, SOURCE_COLUMN, key).join(repeated, "_id_hash", "left_semi")
    latest = candidates.groupBy(layout.ID).agg(F.max(SOURCE_COLUMN).alias("_latest"))
    superseded = (
        candidates.join(latest, layout.ID)
        .filter(F.col(SOURCE_COLUMN) < F.col("_latest"))
        .select(layout.ID, SOURCE_COLUMN)
        .distinct()
    )
    found = superseded.limit(SUPERSEDED_COLLECT_LIMIT + 1).collect()
    if not found:
        return None
    if len(found) <= SUPERSEDED_COLLECT_LIMIT:
        schema = StructType([tagged.schema[layout.ID], tagged.schema[SOURCE_COLUMN]])
        superseded = F.broadcast(spark.createDataFrame([tuple(r) for r in found], schema))
    return superseded.withColumn(SUPERSEDED_COLUMN, F.lit(True).cast(BooleanType()))


def mark_superseded(encoded: DataFrame, superseded: DataFrame) -> DataFrame:
    """Pure: `_superseded` on every row, true for the rows `superseded_rows` found."""
    from pyspark.sql import functions as F

    return encoded.join(superseded, [layout.ID, SOURCE_COLUMN], "left").withColumn(
        SUPERSEDED_COLUMN, F.coalesce(F.col(SUPERSEDED_COLUMN), F.lit(False))
    )


@dataclasses.dataclass(frozen=True)
class WindowCounts:
    """What one aggregate over the encoded window says: rows per (split, label, synthetic),
    per numeric output the rows where it is NaN, infinite or null, and per input the sums
    its fingerprint needs."""

    rows: dict[tuple[str, str, bool], int]
    non_finite: dict[str, int]
    # Per input position, (rows, sum of row hashes), when the rows carry `_source`.
    sources: dict[int, tuple[int, int]] = dataclasses.field(default_factory=dict)
    # Rows per (split, label) whose id a later day of the window holds too (`mark_superseded`).
    superseded: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)

    def natural(self, classes: list[str]) -> dict[str, dict[str, int]]:
        """Rows per split and class (label values as strings), every split and class present,
        without the superseded rows (read once, from the latest day)."""
        out = {s: dict.fromkeys(classes, 0) for s in SPLITS}
        for (split, label, _), n in self.rows.items():
            if split in out and label in out[split]:
                out[split][label] += n
        for (split, label), n in self.superseded.items():
            if split in out and label in out[split]:
                out[split][label] -= n
        return out


def count_window(encoded: DataFrame, transform: dict[str, Any]) -> WindowCounts:
    """One aggregate over the encoded rows: their counts and the non-finite numeric outputs."""
    from pyspark.sql import functions as F

    names = [e["output"] for e in transform["numeric"]]
    synthetic = (
        F.coalesce(F.col(layout.SYNTHETIC).cast("boolean"), F.lit(False))
        if layout.SYNTHETIC in encoded.columns
        else F.lit(False)
    )
    bad = [
        F.sum(
            (F.isnan(c) | F.col(c).isin(float("inf"), float("-inf")) | F.col(c).isNull()).cast("long")
        ).alias(f"_bad{i}")
        for i, c in enumerate(names)
    ]
    keys = [F.col(layout.SPLIT).alias("_s"), F.col(layout.LABEL).alias("_l"), synthetic.alias("_y")]
    tagged = SOURCE_COLUMN in encoded.columns
    if tagged:
        keys.append(F.col(SOURCE_COLUMN))
        bad += source_sums(F.col(ROW_HASH_COLUMN))
    marked = SUPERSEDED_COLUMN in encoded.columns
    if marked:
        keys.append(F.col(SUPERSEDED_COLUMN))
    grouped = encoded.groupBy(*keys).agg(F.count(F.lit(1)).alias("_n"), *bad)
    rows: dict[tuple[str, str, bool], int] = {}
    non_finite = dict.fromkeys(names, 0)
    sources: dict[int, tuple[int, int]] = {}
    superseded: dict[tuple[str, str], int] = {}
    for r in grouped.collect():
        key = (r["_s"], str(r["_l"]), bool(r["_y"]))
        rows[key] = rows.get(key, 0) + int(r["_n"])
        if marked and r[SUPERSEDED_COLUMN]:
            superseded[key[:2]] = superseded.get(key[:2], 0) + int(r["_n"])
        for i, c in enumerate(names):
            non_finite[c] += int(r[f"_bad{i}"] or 0)
        if tagged:
            n, total = sources.get(int(r[SOURCE_COLUMN]), (0, 0))
            sources[int(r[SOURCE_COLUMN])] = (n + int(r["_n"]), total + int(r["_hash_sum"] or 0))
    return WindowCounts(rows=rows, non_finite=non_finite, sources=sources, superseded=superseded)


def check_finite(counts: WindowCounts, where: str) -> None:
    """Fail naming the column if any numeric output would be NaN or infinite."""
    offending = {c: n for c, n in counts.non_finite.items() if n}
    if offending:
        raise ValueError(
            f"export {where}: numeric feature(s) would hold NaN, infinity or null in a shard "
            f"(rows per column {offending}); the raw values behind them need a contract fix "
            "(validate quarantines non-finite doubles) or clip_quantiles"
        )


def tagged_partitions(spark: SparkSession, inputs: list[str]) -> tuple[DataFrame, list[str]]:
    """Pure: the partitions' rows, each with its input's position (`_source`) and the
    64-bit hash of its own columns (`_row_hash`); and each partition's schema (JSON)."""
    from functools import reduce

    from pyspark.sql import functions as F

    frames = [parquet_io.read_parquet(spark, [uri]) for uri in inputs]
    tagged = [
        df.withColumn(SOURCE_COLUMN, F.lit(i)).withColumn(ROW_HASH_COLUMN, F.xxhash64(*df.columns))
        for i, df in enumerate(frames)
    ]
    union = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), tagged)
    return union, [df.schema.json() for df in frames]


def source_sums(row_hash: Column) -> list[Column]:
    """The aggregate a fingerprint needs besides the rows, per group: the sum of the row
    hashes, as a decimal (no overflow; duplicate rows still count)."""
    from pyspark.sql import functions as F

    return [F.sum(row_hash.cast("decimal(38,0)")).alias("_hash_sum")]


def fingerprints(schemas: list[str], sums: dict[int, tuple[int, int]]) -> list[str]:
    """Each partition's digest from its schema and its (rows, row hash sum); none: (0, 0)."""
    out = []
    for i, schema in enumerate(schemas):
        rows, hash_sum = sums.get(i, (0, 0))
        content = {"schema": json.loads(schema), "rows": rows, "row_hash_sum": str(hash_sum)}
        out.append(hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest())
    return out


def fingerprint_partitions(spark: SparkSession, inputs: list[str]) -> list[str]:
    """A content digest per partition: the same rows give the same fingerprint, whatever files hold them.

    sha256 of the partition's schema (JSON), its row count and the sum of a 64-bit hash of
    every row (`xxhash64` over all columns, summed as a decimal so nothing overflows and
    duplicate rows still count). A sum does not depend on the order of rows or on how
    they are split into files, so Spark's random part-file names and its per-JVM Parquet
    footers (see `lakeprep_jobs.parquet_footer`) do not change it. `run` takes the same
    sums in the aggregate that counts the window (`count_window`); this is that alone.
    """
    from pyspark.sql import functions as F

    tagged, schemas = tagged_partitions(spark, inputs)
    rows = tagged.groupBy(SOURCE_COLUMN).agg(
        F.count(F.lit(1)).alias("_n"), *source_sums(F.col(ROW_HASH_COLUMN))
    )
    sums = {int(r[SOURCE_COLUMN]): (int(r["_n"]), int(r["_hash_sum"] or 0)) for r in rows.collect()}
    return fingerprints(schemas, sums)


def read_window(spark: SparkSession, inputs: list[str]) -> tuple[DataFrame, list[str]]:
    """The window's sampled partitions, tagged (`tagged_partitions`), and their schemas.

    Each source is recorded by rows and a fingerprint of its content, not by the files'
    stored bytes: the same rows in another order compress to another size, and the sample
    stage's shuffle does not keep an order (docs/MANIFEST.md).
    """
    missing = [u for u in inputs if not lake_io.exists(spark, layout.join(u, layout.SUCCESS))]
    if missing:
        raise FileNotFoundError(f"export needs complete sampled partitions (with _SUCCESS): {missing}")
    return tagged_partitions(spark, inputs)


def load_transform(lake: Lake, uri: str) -> tuple[dict[str, Any], str]:
    """The fitted transform and its text, checked against the JSON Schema, with the
    tokenizer files beside it loaded into the document (``encode.with_tokenizers``)."""
    from lakeprep_contracts import documents, encode

    text = read_text(lake, uri)
    doc = json.loads(text)
    documents.require("transform", doc, uri)
    folder = uri.rsplit("/", 1)[0]
    return encode.with_tokenizers(doc, lambda name: lake.read_bytes(layout.join(folder, name)), uri), text


def write_splits(
    spark: SparkSession,
    frames: Mapping[str, DataFrame],
    plans: Mapping[str, SplitPlan],
    sizes: Mapping[str, int],
    staging: str,
    p: ExportParams,
    group_rows: int,
) -> dict[str, list[dict[str, Any]]]:
    """Write every split's shards as `shards/<split>/shard-NNNNN.parquet`, in row groups of
    ``group_rows`` rows (the last of a shard fewer); return their entries per split.
    `sizes` are the rows of each frame (which the numbering starts each split's from).

    The splits are numbered in one pass and written in one job (each split numbered from 0
    in its own (hash(id), id) order, as if numbered alone: `number_rows`), so an export
    makes the same passes whatever its number of splits.
    """
    from functools import reduce

    from pyspark.sql import functions as F

    entries: dict[str, list[dict[str, Any]]] = {s: [] for s in frames}
    written = {s: q for s, q in plans.items() if q.rows}
    if not written:
        return entries
    tagged = [frames[s].withColumn(SPLIT_COLUMN, F.lit(s)) for s in written]
    window = reduce(lambda a, b: a.unionByName(b), tagged)
    assigned = assign_shards(number_rows(window, {s: sizes[s] for s in written}), written, p)
    tmp = f"{staging}/_tmp_shards"
    n_shards = sum(q.shards_per_rank * p.world_size for q in written.values())
    (
        assigned.repartition(n_shards, SPLIT_COLUMN, "_shard")
        .sortWithinPartitions(SPLIT_COLUMN, "_shard", "_idx")
        .select(*shard_columns(assigned), SPLIT_COLUMN, "_shard")
        .write.mode("overwrite")
        .option("compression", "zstd")
        # parquet-java (1.13+) ends a row group at this many rows (ParquetOutputFormat's
        # BLOCK_ROW_COUNT_LIMIT; Spark passes writer options to its Hadoop conf). Its byte
        # bound, `parquet.block.size`, stays at its 128 MB default, far above such a group.
        .option("parquet.block.row.count.limit", group_rows)
        .partitionBy(SPLIT_COLUMN, "_shard")
        .parquet(tmp)
    )
    for split, plan in written.items():
        for shard in range(plan.shards_per_rank * p.world_size):
            folder = f"{tmp}/{SPLIT_COLUMN}={split}/_shard={shard}"
            files = [f for f, _ in lake_io.list_files(spark, folder) if f.endswith(".parquet")]
            if len(files) != 1:
                raise RuntimeError(f"shard {shard} of split {split}: expected one file, found {len(files)}")
            rel = f"shards/{split}/shard-{shard:05d}.parquet"
            # Renamed with a canonical footer: the same rows give the same bytes in every JVM.
            parquet_footer.commit_shard(spark, files[0], f"{staging}/{rel}")
            entries[split].append({"path": rel, "rank": shard % p.world_size})
    lake_io.delete(spark, tmp)

    # Verify from what was written: rows from the footers (no job), sha256 on the executors
    # (one job for every split).
    folders = [f"{staging}/shards/{s}" for s in written]
    sums = {
        "/".join(r[0].rsplit("/", 2)[-2:]): (int(r[1]), r[2])
        for r in spark.read.format("binaryFile")
        .load(folders)
        .select("path", "length", F.sha2("content", 256))
        .collect()
    }
    for split, plan in written.items():
        rows = parquet_io.parquet_file_rows(spark, f"{staging}/shards/{split}")
        for e in entries[split]:
            name = e["path"].rsplit("/", 1)[-1]
            e["rows"] = rows.get(name, 0)
            e["bytes"], e["sha256"] = sums[f"{split}/{name}"]
        per_rank = [sum(e["rows"] for e in entries[split] if e["rank"] == r) for r in range(p.world_size)]
        if set(per_rank) != {plan.rows_per_rank}:
            raise RuntimeError(f"split {split}: rows per rank {per_rank} != planned {plan.rows_per_rank}")
    return entries


def split_frames(
    window: DataFrame, natural: dict[str, dict[str, int]], transform: dict[str, Any], p: ExportParams
) -> dict[str, DataFrame]:
    """Pure: the rows to shard per split, each with `is_synthetic`.

    Train is balanced and augmented (`balance.balance_train`, persisted: it is counted,
    then numbered and written); validation and test are the window's rows unchanged.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    in_split = {s: window.filter(F.col(layout.SPLIT) == s) for s in SPLITS}
    train = balance.balance_train(in_split["train"], natural["train"], transform, p.balance)
    frames = {"train": train.persist(StorageLevel.MEMORY_AND_DISK)}
    for s in SPLITS[1:]:
        rows = in_split[s]
        if layout.SYNTHETIC not in rows.columns:
            rows = rows.withColumn(layout.SYNTHETIC, F.lit(False))
        frames[s] = rows
    return frames


def check_honest_evaluation(counts: WindowCounts, where: str) -> None:
    """Fail if a synthetic row would reach a split other than train.

    Validation and test are the window's rows of those splits unchanged (`split_frames`),
    so the window's counts answer it.
    """
    leaked: dict[str, int] = {}
    for (split, _, synthetic), n in counts.rows.items():
        if synthetic and split != "train" and n:
            leaked[split] = leaked.get(split, 0) + n
    if leaked:
        raise RuntimeError(
            f"export {where}: synthetic rows in {leaked}; augmentation is for the train split only, "
            "validation and test must keep the sampled rows"
        )


def counts_before_sampling(
    reports: Sequence[Mapping[str, Any]], classes: list[int]
) -> tuple[dict[str, int] | None, int]:
    """The sample reports' `class_counts_before` (one report per day of the window), summed.

    Returns the sums and how many days' reports held them (None when none did).
    """
    totals = {str(c): 0 for c in classes}
    reported = 0
    for report in reports:
        before = report.get("class_counts_before")
        if before is None:
            continue
        reported += 1
        for c, n in before.items():
            totals[str(c)] = totals.get(str(c), 0) + int(n)
    return (totals if reported else None), reported


def sampling_report(
    p: ExportParams,
    *,
    before: tuple[dict[str, int] | None, int],
    days: int,
    natural: dict[str, dict[str, int]],
    real: dict[str, dict[str, int]],
    final: dict[str, dict[str, int]],
    weights: dict[str, float],
) -> dict[str, Any]:
    """`sampling.json` (schemas/sampling.schema.json): class counts per split, step by step."""

    classes = [str(c) for c in p.label_classes]

    def step(name: str, splits: dict[str, dict[str, int]], **extra: Any) -> dict[str, Any]:
        totals = {c: sum(v[c] for v in splits.values()) for c in classes}
        return {"step": name, "class_counts": totals, "splits": splits, **extra}

    synthetic = {s: {c: final[s][c] - real[s][c] for c in final[s]} for s in SPLITS}
    n = p.balance.synthetic_per_row
    without = 0
    if p.balance.augment == "smote":  # each balanced row with a neighbour makes exactly n
        without = sum(real["train"].values()) - sum(synthetic["train"].values()) // n
    counts_before, reported = before
    # The sample stage counts classes before it samples, not splits (it splits after).
    first = {
        "step": "before_sampling",
        "class_counts": counts_before,
        "splits": None,
        "days_reported": reported,
    }
    return {
        "format_version": 1,
        "dataset": p.dataset,
        "logical_date": p.logical_date,
        "run_id": p.run_id,
        "label": {"name": layout.LABEL, "classes": p.label_classes},
        "days": days,
        "balance": dataclasses.asdict(p.balance),
        "steps": [
            first,
            step("sample", natural),
            step("balance", real, strategy=p.balance.strategy),
            step("augment", final, method=p.balance.augment),
        ],
        "synthetic": synthetic,
        "rows_without_neighbour": without,
        "class_weights": weights,
    }


def run(spark: SparkSession, inputs: list[str], output: str, p: ExportParams) -> dict[str, Any]:
    if p.shards == "prepared":
        from lakeprep_jobs import export_manifest

        return export_manifest.run(spark, inputs, output, p)
    return run_encoded(spark, inputs, output, p)


def run_encoded(spark: SparkSession, inputs: list[str], output: str, p: ExportParams) -> dict[str, Any]:
    """The materialised export: every split encoded here and written as shards of its own."""
    from lakeprep_contracts import encode
    from lakeprep_jobs.transform import apply_transform

    transform, transform_text = load_transform(SparkLake(spark), p.transform_uri)
    rows, schemas = read_window(spark, inputs)
    # Counted per split and class, checked for non-finite values and summed for the
    # sources' fingerprints (one aggregate), then balanced, numbered and written. Not
    # cached: recomputing the transform from the Parquet for those few readers costs less
    # than building an in-memory cache of every output column (benchmarks/RESULTS.md).
    superseded_ids = superseded_rows(spark, rows) if len(inputs) > 1 else None
    encoded = apply_transform(rows, transform, keep=(SOURCE_COLUMN, ROW_HASH_COLUMN))
    tagged = encoded if superseded_ids is None else mark_superseded(encoded, superseded_ids)
    counts = count_window(tagged, transform)
    window = tagged
    if SUPERSEDED_COLUMN in tagged.columns:
        from pyspark.sql import functions as F

        window = tagged.filter(~F.col(SUPERSEDED_COLUMN)).drop(SUPERSEDED_COLUMN)
    window = window.drop(SOURCE_COLUMN, ROW_HASH_COLUMN)
    sources = [
        {"uri": uri, "rows": lake_io.read_report(spark, uri)["rows_out"], "fingerprint": fingerprint}
        for uri, fingerprint in zip(inputs, fingerprints(schemas, counts.sources), strict=True)
    ]
    check_finite(counts, output)
    check_honest_evaluation(counts, output)
    rows_in = sum(counts.rows.values())
    superseded = sum(counts.superseded.values())
    features = feature_schema(transform)
    width = row_bytes(features)
    group_rows = row_group_rows(width, p)
    classes = [str(c) for c in p.label_classes]
    natural = counts.natural(classes)
    frames = split_frames(window, natural, transform, p)
    if p.balance.augment != "none":
        balance.check_synthetic_ids(frames["train"], window)
    train_counts = {
        (str(r[layout.LABEL]), bool(r[layout.SYNTHETIC])): int(r["count"])
        for r in frames["train"].groupBy(layout.LABEL, layout.SYNTHETIC).count().collect()
    }
    real = {**natural, "train": {c: train_counts.get((c, False), 0) for c in classes}}
    final = {**natural, "train": {c: real["train"][c] + train_counts.get((c, True), 0) for c in classes}}
    weights = balance.class_weights(final["train"], p.balance)
    sizes = {
        s: sum(n for (split, _, _), n in counts.rows.items() if split == s)
        - sum(n for (split, _), n in counts.superseded.items() if split == s)
        for s in SPLITS
    }
    sizes["train"] = sum(train_counts.values())

    plans: dict[str, SplitPlan] = {}
    for split in SPLITS:
        available = sum(final[split].values())
        plans[split] = plan = plan_split(available, float(width * available), p)
        if split in ("train", "validation") and plan.rows_per_rank == 0:
            raise ValueError(
                f"export {output}: the {split} split has {available} rows, fewer than "
                f"world_size {p.world_size}; every rank needs at least one row "
                f"(widen window.days or the sample fractions)"
            )
    splits: dict[str, Any] = {}
    with lake_io.PartitionCommit(spark, output) as staging:
        shards = write_splits(spark, frames, plans, sizes, staging, p, group_rows)
        for split, plan in plans.items():
            splits[split] = {
                **split_document(p, plan, final[split], plan.shards_per_rank),
                "shards": shards[split],
            }
        # The train split as sampled, before balancing and augmentation: the trainer's
        # majority-class baseline comes from it (docs/MANIFEST.md).
        splits["train"]["class_counts_natural"] = natural["train"]
        sampling = sampling_report(
            p,
            before=counts_before_sampling([lake_io.read_report(spark, u) for u in inputs], p.label_classes),
            days=len(inputs),
            natural=natural,
            real=real,
            final=final,
            weights=weights,
        )
        manifest = manifest_document(
            p,
            inputs,
            sources=sources,
            features=features,
            transform_text=transform_text,
            splits=splits,
            weights=weights,
            synthetic_rows=sum(sampling["synthetic"]["train"].values()),
        )
        report = export_report(
            p,
            manifest,
            rows_in=rows_in,
            superseded=superseded,
            natural=natural["train"],
            balanced=real["train"],
            inputs=[s["uri"] for s in sources],
        )
        commit_export(
            SparkLake(spark),
            staging,
            output,
            manifest=manifest,
            sampling=sampling,
            report=report,
            transform_text=transform_text,
            tokenizer_files=encode.tokenizer_files(transform),
        )
    frames["train"].unpersist()
    return report


def split_document(
    p: ExportParams, plan: SplitPlan, class_counts: dict[str, int], shards_per_rank: int
) -> dict[str, Any]:
    """A split's `rows`, `rows_available`, `class_counts` and `plan` in the manifest."""
    return {
        "rows": plan.rows,
        "rows_available": plan.rows_available,
        "class_counts": class_counts,
        "plan": {
            "world_size": p.world_size,
            "batch_size": p.batch_size,
            "rows_per_rank": plan.rows_per_rank,
            "steps_per_rank": plan.steps_per_rank,
            "shards_per_rank": shards_per_rank,
            "remainder": p.remainder,
        },
    }


def manifest_document(
    p: ExportParams,
    inputs: Sequence[str],
    *,
    sources: list[dict[str, Any]],
    features: list[dict[str, Any]],
    transform_text: str,
    splits: dict[str, Any],
    weights: dict[str, float],
    synthetic_rows: int,
    shard_columns: str | None = None,
    balance_extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """`manifest.json` (docs/MANIFEST.md), either layout: `shard_columns` for a prepared one,
    `balance_extra` the loader's augmentation parameters."""
    return {
        "format_version": FORMAT_VERSION,
        "dataset": p.dataset,
        "logical_date": p.logical_date,
        "run_id": p.run_id,
        "config_hash": p.config_hash,
        "window_days": len(p.window.get("days", [])) or len(inputs),
        "window": {k: list(p.window.get(k, [])) for k in WINDOW_KEYS},
        "source_partitions": sources,
        "label": {"name": layout.LABEL, "classes": p.label_classes},
        "features": features,
        **({"shard_columns": shard_columns} if shard_columns else {}),
        # A copy beside the manifest: the export folder alone is enough to train and serve.
        "transform": {
            "uri": layout.TRANSFORM,
            "sha256": hashlib.sha256(transform_text.encode("utf-8")).hexdigest(),
        },
        "splits": splits,
        "class_weights": weights,
        "balance": {
            "strategy": p.balance.strategy,
            "target_ratio": p.balance.target_ratio,
            "augment": p.balance.augment,
            "synthetic_rows": synthetic_rows,
            "report": layout.SAMPLING,
            **(balance_extra or {}),
        },
    }


def export_report(
    p: ExportParams,
    manifest: dict[str, Any],
    *,
    rows_in: int,
    superseded: int,
    natural: Mapping[str, int],
    balanced: Mapping[str, int],
    inputs: list[str],
    **extra: Any,
) -> dict[str, Any]:
    """The stage's `_lakeprep_report.json`; fails if the rows do not add up:
    rows_in - superseded - undersampled + oversampled + synthetic = rows available.
    `natural` and `balanced`: the train rows per class before and after balancing."""
    splits = manifest["splits"]
    rows_out = sum(s["rows"] for s in splits.values())
    rows_available = sum(s["rows_available"] for s in splits.values())
    removed = {c: natural[c] - balanced[c] for c in natural}
    synthetic = manifest["balance"]["synthetic_rows"]
    report = {
        "stage": "export_shards",
        "inputs": inputs,
        "shard_columns": manifest.get("shard_columns", "encoded"),
        "rows_in": rows_in,
        "rows_out": rows_out,
        "rows_quarantined": 0,
        # An id on several days of the window is read once, from the latest day.
        "rows_superseded": superseded,
        "rows_undersampled": sum(max(0, n) for n in removed.values()),
        "rows_oversampled": sum(max(0, -n) for n in removed.values()),
        "rows_synthetic": synthetic,
        # Ranks get equal rows: the remainder dropped or padded.
        "rows_dropped_for_balance": max(0, rows_available - rows_out),
        "rows_padded_for_balance": max(0, rows_out - rows_available),
        "shards": {s: len(v["shards"]) for s, v in splits.items()},
        **extra,
        "window": manifest["window"],
        "transform": p.transform_uri,
    }
    kept = rows_in - superseded - report["rows_undersampled"] + report["rows_oversampled"]
    if kept + synthetic != rows_available:
        raise RuntimeError(f"export: rows do not add up ({rows_available} available): {report}")
    return report


def commit_export(
    lake: Lake,
    staging: str,
    output: str,
    *,
    manifest: dict[str, Any],
    sampling: dict[str, Any],
    report: dict[str, Any],
    transform_text: str,
    tokenizer_files: Mapping[str, bytes] | None = None,
) -> None:
    """Check the documents and write them into the staged export, the manifest last.

    ``tokenizer_files`` (``encode.tokenizer_files``) go beside ``transform.json``, which
    names them: the export alone is what the trainer needs.
    """
    from lakeprep_contracts import documents

    check_manifest(manifest, layout.join(output, layout.MANIFEST))
    documents.require("sampling", sampling, layout.join(output, layout.SAMPLING))
    write_text(lake, layout.join(staging, layout.TRANSFORM), transform_text)
    for name, data in (tokenizer_files or {}).items():
        lake.write_bytes(layout.join(staging, name), data)
    write_text(lake, layout.join(staging, layout.SAMPLING), json.dumps(sampling, indent=2, sort_keys=True))
    write_report(lake, staging, report)
    write_success(lake, staging)
    # Last: the manifest is the signal that the export is complete.
    write_text(lake, layout.join(staging, layout.MANIFEST), json.dumps(manifest, indent=2, sort_keys=True))


def check_manifest(manifest: dict[str, Any], where: str) -> None:
    """The writer checks the JSON Schema that the trainer checks."""
    from lakeprep_contracts import documents

    documents.require("manifest", manifest, where)


STAGE = stage_entry.Stage("export_shards", __doc__.splitlines()[0], ExportParams, run)


def main(argv: Sequence[str] | None = None) -> None:
    stage_entry.stage_main(argv, STAGE)


if __name__ == "__main__":
    main()
