"""The day's prepared rows written once, as the shards training reads: `sample`'s files.

`sample` writes its partition as files of one split and one class each, every file's rows
in the order of the **balance hash**, `xxhash64(id, 'lakeprep-balance-<seed>')` as a unit
value in [0, 1) then the id (the order `stages.balance` chooses rows in), and the files of
a (split, class) cover consecutive ranges of that order:

    sample/<dataset>/dt=D/part-<split>-<class>-<k>.parquet      k = 0, 1, ... (5 digits)
    sample/<dataset>/dt=D/_shards.json                          the files, their rows and sha256

So a window's export need not read or write rows again: a class's first `n` rows in the
hash order are a prefix of its files (undersampling), its rows repeated are the same files
again (oversampling), and every split is a list of whole files or slices of them, which the
trainer's loader reads and encodes with the run's transform (docs/MANIFEST.md). Files are
named by content, not by Spark's task ids, and get a canonical footer
(`lakeprep_jobs.parquet_footer`), so a rerun of a day writes the same bytes.

A (split, class) with more than `rows_per_file` rows is cut into `ceil(rows / rows_per_file)`
files by equal ranges of the hash (about equal rows each, no numbering pass). Row groups
hold `row_group_rows` rows (the last of a file fewer): a window's manifest cuts the files
into entries at those boundaries, so the loader reads whole row groups and a shuffled
epoch deals them over the ranks (`lakeprep_jobs.window_manifest`).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from lakeprep_contracts import layout
from lakeprep_jobs import lake_io, parquet_footer, parquet_io

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

FORMAT_VERSION = 1
SHARDS = layout.DAY_SHARDS
ORDER = "_order"  # the balance hash of a row, a unit value (dropped before writing)
_FILE = "_file"
# Rows per Parquet row group of a day's file: the unit a window's manifest deals to ranks.
# 16,384 prepared rows decode to a few MiB, so the loader overlaps reading and converting,
# and a 30-day window of 1 M rows a day is about 1,900 entries per manifest.
ROW_GROUP_ROWS = 16_384


def balance_seed(seed: int) -> str:
    """The string the balance hash mixes in (`lakeprep_jobs.balance.rebalance` uses the same)."""
    return f"lakeprep-balance-{seed}"


def order_key(seed: int) -> Column:
    """A row's position key in its class: `xxhash64(id, seed string)` as a unit value in [0, 1)."""
    from pyspark.sql import functions as F

    from lakeprep_jobs.sample import unit_hash

    return unit_hash(F.col(layout.ID), F.lit(balance_seed(seed)))


def file_name(split: str, label: int, k: int) -> str:
    return f"part-{split}-{label}-{k:05d}.parquet"


def files_per_group(rows: int, rows_per_file: int) -> int:
    return max(1, math.ceil(rows / rows_per_file)) if rows else 0


def write(
    spark: SparkSession,
    rows: DataFrame,
    staging: str,
    counts: dict[tuple[str, int], int],
    *,
    seed: int,
    rows_per_file: int,
    row_group_rows: int = ROW_GROUP_ROWS,
) -> dict[str, Any]:
    """Write `rows` (with `split` and `label`) under `staging` as the day's shards; return
    `_shards.json`'s document (also written). `counts`: rows per (split, label), as planned.
    """
    from pyspark.sql import functions as F

    groups = {key: files_per_group(n, rows_per_file) for key, n in counts.items() if n}
    if not groups:  # Spark writes one file with the schema alone: readers still see the columns
        parquet_io.write_parquet(rows.limit(0), staging)
        return _document(spark, staging, {}, seed, rows_per_file, row_group_rows)
    per_group = F.lit(1)
    for (split, label), n in groups.items():
        match = (F.col(layout.SPLIT) == split) & (F.col(layout.LABEL) == label)
        per_group = F.when(match, F.lit(n)).otherwise(per_group)
    keyed = rows.withColumn(ORDER, order_key(seed))
    keyed = keyed.withColumn(_FILE, F.floor(F.col(ORDER) * per_group).cast("int"))
    tmp = f"{staging}/_tmp_shards"
    (
        keyed.withColumn("_s", F.col(layout.SPLIT))
        .withColumn("_c", F.col(layout.LABEL))
        .repartition(sum(groups.values()), "_s", "_c", _FILE)
        .sortWithinPartitions("_s", "_c", _FILE, ORDER, layout.ID)
        .drop(ORDER)
        .write.mode("overwrite")
        .option("compression", "zstd")
        # parquet-java ends a row group at this many rows (`export_shards.row_group_rows`).
        .option("parquet.block.row.count.limit", row_group_rows)
        .partitionBy("_s", "_c", _FILE)
        .parquet(tmp)
    )
    names: dict[tuple[str, int], list[str]] = {}
    for (split, label), n in sorted(groups.items()):
        for k in range(n):
            folder = f"{tmp}/_s={split}/_c={label}/{_FILE}={k}"
            listed = lake_io.list_files(spark, folder) if lake_io.exists(spark, folder) else []
            found = [f for f, _ in listed if f.endswith(".parquet")]
            if len(found) > 1:
                raise RuntimeError(f"day shard {split}/{label}/{k}: expected one file, found {len(found)}")
            if not found:  # a hash range that drew no row (tiny groups cut in several files)
                continue
            name = file_name(split, label, k)
            parquet_footer.commit_shard(spark, found[0], f"{staging}/{name}")
            names.setdefault((split, label), []).append(name)
    lake_io.delete(spark, tmp)
    return _document(spark, staging, names, seed, rows_per_file, row_group_rows)


def file_digests(spark: SparkSession, folder: str) -> dict[str, tuple[int, str]]:
    """File name -> (bytes, sha256) of the `part-*.parquet` files in `folder` (one job, the
    hashing on the executors)."""
    from pyspark.sql import functions as F

    return {
        r[0].rsplit("/", 1)[-1]: (int(r[1]), r[2])
        for r in spark.read.format("binaryFile")
        .option("pathGlobFilter", "part-*.parquet")
        .load(folder)
        .select("path", "length", F.sha2("content", 256))
        .collect()
    }


def _document(
    spark: SparkSession,
    staging: str,
    names: dict[tuple[str, int], list[str]],
    seed: int,
    rows_per_file: int,
    row_group_rows: int,
) -> dict[str, Any]:
    """`_shards.json`: per split and class, the files in order with rows (from the footers),
    bytes and sha256 (one job over the day's files, on the executors)."""
    sums = file_digests(spark, staging) if names else {}
    rows = parquet_io.parquet_file_rows(spark, staging)
    splits: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for (split, label), files in sorted(names.items()):
        splits.setdefault(split, {})[str(label)] = [
            {"path": f, "rows": rows[f], "bytes": sums[f][0], "sha256": sums[f][1]} for f in files
        ]
    doc = {
        "format_version": FORMAT_VERSION,
        "order": {"hash": "xxhash64(id, 'lakeprep-balance-<seed>') as a unit value, then id", "seed": seed},
        "rows_per_file": rows_per_file,
        "row_group_rows": row_group_rows,
        "splits": splits,
    }
    lake_io.write_text(spark, layout.join(staging, SHARDS), json.dumps(doc, indent=1, sort_keys=True))
    # The marker Spark's own writer leaves in a folder it wrote: the partition is complete
    # once the commit renames it (`lake_io.PartitionCommit`).
    lake_io.write_success(spark, staging)
    return doc
