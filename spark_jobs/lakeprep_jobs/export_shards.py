"""Write balanced Parquet shards and `manifest.json` over a trailing window of days.

    spark-submit --py-files lakeprep_jobs.zip lakeprep_jobs/export_shards.py \
        --input <lake>/sample/flights/dt=2012-12-05 ... --input <lake>/sample/flights/dt=2013-01-03 \
        --output <lake>/export/flights/dt=2013-01-03 --params '{"world_size": 2, ...}'

The inputs are the window's sampled partitions, oldest first; missing earlier days are
skipped and recorded (the window fills up as days arrive), the last one (the run's own
day) must exist. See docs/MANIFEST.md for the format and the guarantees:

- Rows of a split are numbered in a fixed order (hash of id, then id), so the numbering
  does not depend on partitioning. Row `i` goes to rank `i % world_size`, which gives
  every rank exactly `rows_per_rank` rows after the remainder is dropped or padded; a
  rank's rows are spread over `shards_per_rank` shards, shard `s` belongs to rank
  `s % world_size`.
- One Parquet file per shard (zstd), row counts verified by reading the footers back,
  sha256 computed on the executors (`binaryFile` source), then the manifest last.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lakeprep_jobs import common

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SPLITS = ("train", "validation", "test")
FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class ExportParams:
    dataset: str
    logical_date: str
    run_id: str
    config_hash: str
    world_size: int
    label_classes: list[int]
    categorical_buckets: int
    text_vocab_size: int
    text_max_tokens: int = 16
    transform_uri: str | None = None
    window_days: int = 30
    batch_size: int = 256
    target_shard_mb: float = 128
    remainder: str = "drop"
    row_group_mb: float = 8

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(f"world_size {self.world_size!r} must be >= 1")
        if self.batch_size < 1:
            raise ValueError(f"batch_size {self.batch_size!r} must be >= 1")
        if self.remainder not in ("drop", "pad"):
            raise ValueError(f"remainder {self.remainder!r} must be 'drop' or 'pad'")


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    rows_available: int
    rows: int
    rows_per_rank: int
    steps_per_rank: int
    shards_per_rank: int


def plan_split(rows_available: int, bytes_estimate: float, p: ExportParams) -> SplitPlan:
    """Pure arithmetic: equal rows per rank, shard count a multiple of the world size."""
    w = p.world_size
    if p.remainder == "drop":
        per_rank = rows_available // w
    else:
        per_rank = math.ceil(rows_available / w) if rows_available else 0
    rows = per_rank * w
    target = p.target_shard_mb * (1 << 20)
    kept_bytes = bytes_estimate * (rows / rows_available) if rows_available else 0.0
    shards_per_rank = max(1, math.ceil(kept_bytes / target / w)) if rows else 0
    shards_per_rank = min(shards_per_rank, per_rank) if per_rank else 0
    return SplitPlan(
        rows_available=rows_available,
        rows=rows,
        rows_per_rank=per_rank,
        steps_per_rank=math.ceil(per_rank / p.batch_size),
        shards_per_rank=shards_per_rank,
    )


def number_rows(df: DataFrame) -> DataFrame:
    """Pure: a dense 0-based `_idx` in (hash(id), id) order, without a single-partition window.

    After a global sort, `monotonically_increasing_id` is (partition << 33) + position; the
    index is the partition's offset (rows in earlier partitions) plus the position.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ordered = df.orderBy(F.xxhash64("id"), F.col("id")).withColumn("_mid", F.monotonically_increasing_id())
    # Materialised once: the sort's range boundaries come from sampling, so recomputing it
    # for the offsets below could place rows differently. A checkpoint pins one layout.
    ordered = ordered.localCheckpoint(eager=True)
    ordered = ordered.withColumn("_part", F.shiftright("_mid", 33)).withColumn(
        "_pos", F.col("_mid") - F.shiftleft(F.col("_part"), 33)
    )
    sizes = ordered.groupBy("_part").count()
    offsets = sizes.withColumn(
        "_offset",
        F.coalesce(
            F.sum("count").over(Window.orderBy("_part").rowsBetween(Window.unboundedPreceding, -1)),
            F.lit(0),
        ),
    ).select("_part", "_offset")
    return (
        ordered.join(F.broadcast(offsets), "_part")
        .withColumn("_idx", F.col("_offset") + F.col("_pos"))
        .drop("_mid", "_part", "_pos", "_offset")
    )


def assign_shards(numbered: DataFrame, plan: SplitPlan, p: ExportParams) -> DataFrame:
    """Pure: drop or pad to `plan.rows`, then `_rank` and `_shard` from the row index."""
    from pyspark.sql import functions as F

    if plan.rows <= plan.rows_available:
        kept = numbered.filter(F.col("_idx") < plan.rows)
    else:
        pad = plan.rows - plan.rows_available  # < world_size rows repeated from the start
        # More than one copy when the split has fewer rows than the padding (1 row, world_size 3).
        copies = math.ceil(pad / plan.rows_available)
        extra = (
            numbered.withColumn("_copy", F.explode(F.sequence(F.lit(1), F.lit(copies))))
            .withColumn("_idx", F.col("_idx") + F.col("_copy") * plan.rows_available)
            .filter(F.col("_idx") < plan.rows)
            .drop("_copy")
        )
        kept = numbered.unionByName(extra)
    w = p.world_size
    local = (F.col("_idx") / w).cast("long")
    return kept.withColumn("_rank", (F.col("_idx") % w).cast("int")).withColumn(
        "_shard", ((local % plan.shards_per_rank) * w + F.col("_idx") % w).cast("int")
    )


def shard_columns(df: DataFrame) -> list[Any]:
    """The shard schema of docs/MANIFEST.md: float32 numerics, int32 ids."""
    from pyspark.sql import functions as F

    cols = [F.col("id").cast("string"), F.col("label").cast("int")]
    for c in df.columns:
        if c.startswith("num__"):
            cols.append(F.col(c).cast("float").alias(c))
        elif c.startswith("cat__"):
            cols.append(F.col(c).cast("int").alias(c))
        elif c.startswith("txt__"):
            cols.append(F.col(c).cast("array<int>").alias(c))
    return cols


def feature_schema(columns: list[str], p: ExportParams, text_len: dict[str, int]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for c in columns:
        if c.startswith("num__"):
            out.append({"name": c, "role": "numeric", "dtype": "float32", "shape": []})
        elif c.startswith("cat__"):
            out.append(
                {
                    "name": c,
                    "role": "categorical",
                    "dtype": "int32",
                    "shape": [],
                    "cardinality": p.categorical_buckets,
                }
            )
        elif c.startswith("txt__"):
            out.append(
                {
                    "name": c,
                    "role": "text",
                    "dtype": "int32",
                    "shape": [text_len[c]],
                    "vocab_size": p.text_vocab_size,
                }
            )
    return out


def neutral_value(column: str, text_max_tokens: int) -> Any:
    """The value a dropped feature had on the day select_features dropped it, or None.

    select_features drops a numeric when its variance is ~0: after standardization every
    value of that day is 0.0. It drops a text column when all its ids are padding (0).
    A dropped categorical had a single id that is no longer known: no neutral value.
    """
    from pyspark.sql import functions as F

    if column.startswith("num__"):
        return F.lit(0.0).cast("double")
    if column.startswith("txt__"):
        return F.array_repeat(F.lit(0), text_max_tokens).cast("array<int>")
    return None


def read_window(
    spark: SparkSession, inputs: list[str], text_max_tokens: int
) -> tuple[DataFrame, list[dict[str, Any]], list[str], list[str]]:
    """Union the window's partitions on every feature any day kept; record each source.

    Returns (rows, sources, missing partitions, features left out). A feature that some
    day dropped is filled there with the value it had (listed per source as
    `filled_columns`); one without such a value (a categorical) is left out of the window.
    """
    from pyspark.sql import functions as F

    present = [u for u in inputs if common.exists(spark, f"{u.rstrip('/')}/_SUCCESS")]
    if not present or present[-1] != inputs[-1]:
        raise FileNotFoundError(f"export needs the run's own sampled partition {inputs[-1]} (with _SUCCESS)")
    frames = [spark.read.parquet(u) for u in present]
    # Every feature any day kept: the run's day's columns first, then the others.
    target = list(dict.fromkeys([*frames[-1].columns, *[c for f in frames for c in f.columns]]))
    left_out = [
        c
        for c in target
        if any(c not in f.columns for f in frames) and neutral_value(c, text_max_tokens) is None
    ]
    columns = [c for c in target if c not in left_out]
    sources, parts = [], []
    for uri, frame in zip(present, frames, strict=True):
        files = common.list_files(spark, uri)
        fingerprint = hashlib.sha256(
            json.dumps([(f.rsplit("/", 1)[-1], n) for f, n in files]).encode()
        ).hexdigest()
        report = common.read_report(spark, uri)
        filled = [c for c in columns if c not in frame.columns]
        sources.append(
            {
                "uri": uri,
                "rows": report["rows_out"],
                "fingerprint": fingerprint,
                "bytes": sum(n for f, n in files if f.endswith(".parquet")),
                "filled_columns": filled,
            }
        )
        parts.append(
            frame.select(
                *[
                    F.col(c) if c in frame.columns else neutral_value(c, text_max_tokens).alias(c)
                    for c in columns
                ]
            )
        )
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    return union, sources, [u for u in inputs if u not in present], left_out


def write_split(
    spark: SparkSession, df: DataFrame, split: str, plan: SplitPlan, staging: str, p: ExportParams
) -> list[dict[str, Any]]:
    """Write one split's shards as `shards/<split>/shard-NNNNN.parquet`; return their entries."""
    from pyspark.sql import functions as F

    if plan.rows == 0:
        return []
    n_shards = plan.shards_per_rank * p.world_size
    assigned = assign_shards(number_rows(df), plan, p)
    tmp = f"{staging}/_tmp_{split}"
    (
        assigned.repartition(n_shards, "_shard")
        .sortWithinPartitions("_shard", "_idx")
        .select(*shard_columns(assigned), "_shard")
        .write.mode("overwrite")
        .option("compression", "zstd")
        .option("parquet.block.size", int(p.row_group_mb * (1 << 20)))
        .partitionBy("_shard")
        .parquet(tmp)
    )
    out_dir = f"{staging}/shards/{split}"
    entries = []
    for shard in range(n_shards):
        files = [f for f, _ in common.list_files(spark, f"{tmp}/_shard={shard}") if f.endswith(".parquet")]
        if len(files) != 1:
            raise RuntimeError(f"shard {shard} of split {split}: expected one file, found {len(files)}")
        rel = f"shards/{split}/shard-{shard:05d}.parquet"
        common.rename(spark, files[0], f"{staging}/{rel}")
        entries.append({"path": rel, "rank": shard % p.world_size})
    common.delete(spark, tmp)

    # Verify from what was written: rows from the footers, sha256 on the executors.
    rows = {
        r[0].rsplit("/", 1)[-1]: int(r[1])
        for r in spark.read.parquet(out_dir).groupBy(F.col("_metadata.file_path")).count().collect()
    }
    sums = {
        r[0].rsplit("/", 1)[-1]: (int(r[1]), r[2])
        for r in spark.read.format("binaryFile")
        .load(out_dir)
        .select("path", "length", F.sha2("content", 256))
        .collect()
    }
    for e in entries:
        name = e["path"].rsplit("/", 1)[-1]
        e["rows"] = rows.get(name, 0)
        e["bytes"], e["sha256"] = sums[name]
    per_rank = [sum(e["rows"] for e in entries if e["rank"] == r) for r in range(p.world_size)]
    if set(per_rank) != {plan.rows_per_rank}:
        raise RuntimeError(f"split {split}: rows per rank {per_rank} != planned {plan.rows_per_rank}")
    return entries


def class_weights(counts: dict[str, int]) -> dict[str, float]:
    """Balanced weights n / (classes present * n_c), as scikit-learn's `class_weight='balanced'`.

    A class with no training rows contributes nothing to the loss; it gets weight 1.0 so
    every class of `label.classes` has a positive weight (docs/MANIFEST.md).
    """
    total = sum(counts.values())
    present = {c: n for c, n in counts.items() if n}
    return {c: round(total / (len(present) * n), 6) if n else 1.0 for c, n in counts.items()}


def run(spark: SparkSession, inputs: list[str], output: str, p: ExportParams) -> dict[str, Any]:
    from pyspark.sql import functions as F

    window, sources, missing, left_out = read_window(spark, inputs, p.text_max_tokens)
    window = window.cache()  # counted per split and class, then numbered and written per split
    counts = {
        (r["split"], str(r["label"])): int(r["count"])
        for r in window.groupBy("split", "label").count().collect()
    }
    text_cols = [c for c in window.columns if c.startswith("txt__")]
    text_len = {}
    if text_cols:
        row = window.agg(*[F.max(F.size(c)).alias(c) for c in text_cols]).collect()[0].asDict()
        text_len = {c: int(row[c] or 0) for c in text_cols}
    rows_in = sum(counts.values())
    total_bytes = sum(s["bytes"] for s in sources)
    feature_cols = [c for c in window.columns if c.split("__")[0] in ("num", "cat", "txt")]

    splits: dict[str, Any] = {}
    with common.PartitionCommit(spark, output) as staging:
        for split in SPLITS:
            available = sum(n for (s, _), n in counts.items() if s == split)
            plan = plan_split(available, total_bytes * available / rows_in if rows_in else 0, p)
            if split in ("train", "validation") and plan.rows_per_rank == 0:
                raise ValueError(
                    f"export {output}: the {split} split has {available} rows, fewer than "
                    f"world_size {p.world_size}; every rank needs at least one row "
                    f"(widen export_shards.window_days or the sample fractions)"
                )
            shards = write_split(spark, window.filter(F.col("split") == split), split, plan, staging, p)
            splits[split] = {
                "rows": plan.rows,
                "rows_available": available,
                "class_counts": {str(c): counts.get((split, str(c)), 0) for c in p.label_classes},
                "plan": {
                    "world_size": p.world_size,
                    "batch_size": p.batch_size,
                    "rows_per_rank": plan.rows_per_rank,
                    "steps_per_rank": plan.steps_per_rank,
                    "shards_per_rank": plan.shards_per_rank,
                    "remainder": p.remainder,
                },
                "shards": shards,
            }
        manifest = {
            "format_version": FORMAT_VERSION,
            "dataset": p.dataset,
            "logical_date": p.logical_date,
            "run_id": p.run_id,
            "config_hash": p.config_hash,
            "window_days": p.window_days,
            "source_partitions": sources,
            "missing_partitions": missing,
            "features_left_out": left_out,
            "label": {"name": "label", "classes": p.label_classes},
            "features": feature_schema(feature_cols, p, text_len),
            "transform": p.transform_uri,
            "splits": splits,
            "class_weights": class_weights(splits["train"]["class_counts"]),
        }
        rows_out = sum(s["rows"] for s in splits.values())
        report = {
            "stage": "export_shards",
            "inputs": [s["uri"] for s in sources],
            "rows_in": rows_in,
            "rows_out": rows_out,
            "rows_quarantined": 0,
            "rows_dropped_for_balance": max(0, rows_in - rows_out),
            "rows_padded_for_balance": max(0, rows_out - rows_in),
            "shards": {s: len(v["shards"]) for s, v in splits.items()},
        }
        common.write_report(spark, staging, report)
        common.write_success(spark, staging)
        # Last: the manifest is the signal that the export is complete.
        common.write_text(spark, f"{staging}/manifest.json", json.dumps(manifest, indent=2, sort_keys=True))
    window.unpersist()
    return report


def main(argv: Sequence[str] | None = None) -> None:
    common.stage_main(argv, __doc__.splitlines()[0], ExportParams, run)


if __name__ == "__main__":
    main()
