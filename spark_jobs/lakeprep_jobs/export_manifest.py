"""`export_shards` as a manifest over the sampled days' own files: nothing the days wrote is rewritten.

The default export (`stages.export_shards.shards: prepared`). Each sampled day wrote its
prepared rows once, as files of one split and one class in the balance hash's order,
listed in its `_shards.json` (`lakeprep_jobs.day_shards`). The window's export reads
those small documents, chooses rows of the files by arithmetic
(`lakeprep_jobs.window_manifest`: exact per-class counts for balancing, entries cut for
equal rows per rank) and writes `manifest.json` (`shard_columns: "prepared"`) beside a
copy of the run's `transform.json`, which the trainer's loader applies as it reads
(`lakeprep_contracts.encode`, docs/MANIFEST.md). Its cost grows with the window's files,
not their rows, but for one read of the id column:

- **Ids on several days** (a record delivered again or corrected): read once, from the
  latest day (docs/MANIFEST.md). The window's ids are read (the id column only, with
  each row's file and position: `_metadata.row_index`) and the repeated ones found
  through their 64-bit hashes first, as in the materialised export. A file holding
  superseded rows is written again without them, in its order, under the export's
  `superseded/dt=<day>/` (one small Spark job per such file); most windows have none.

Entry paths are relative to the manifest's folder (`../../../sample/<dataset>/dt=<day>/...`),
so a lake moved or copied whole (the training handoff's copy of a remote lake) still
resolves them. The sampled days' partitions are then part of the export: a retention
policy that deletes a sampled day breaks the exports whose windows hold it.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from lakeprep_contracts import layout
from lakeprep_jobs import balance, common, day_shards, parquet_footer
from lakeprep_jobs import export_shards as ex
from lakeprep_jobs.window_manifest import DayFile, split_entries

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SHARD_COLUMNS = "prepared"
SUPERSEDED_DIR = "superseded"
_SOURCE, _FILE, _ROW = "_source", "_file", "_row"


def relative_path(folder: str, target: str) -> str:
    """`target` relative to `folder` (both URIs or paths on one file system)."""
    a, b = urlsplit(folder), urlsplit(target)
    if (a.scheme or "file", a.netloc) != (b.scheme or "file", b.netloc):
        raise ValueError(
            f"export {folder} and its input {target} are on different file systems; the manifest "
            "names the inputs' files relative to itself (put lake.root on one file system)"
        )
    return posixpath.relpath(b.path.rstrip("/"), a.path.rstrip("/"))


def read_day_shards(spark: SparkSession, inputs: Sequence[str]) -> list[dict[str, Any]]:
    """Each complete input's `_shards.json`, oldest first."""
    docs, absent = [], []
    for uri in inputs:
        if not common.exists(spark, layout.join(uri, layout.SUCCESS)):
            raise FileNotFoundError(f"export needs complete sampled partitions (with _SUCCESS): {uri}")
        where = layout.join(uri, layout.DAY_SHARDS)
        if not common.exists(spark, where):
            absent.append(uri)
            continue
        docs.append(json.loads(common.read_text(spark, where)))
    if absent:
        raise FileNotFoundError(
            f"sampled days without {layout.DAY_SHARDS} (sampled before lakeprep wrote per-day shards): "
            f"{absent}. Rerun `sample` for those days (clear and rerun their tasks, or a backfill with "
            "--reprocess-behavior completed), or set stages.export_shards.shards: encoded"
        )
    return docs


def _files(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for per_class in doc["splits"].values() for listed in per_class.values() for f in listed]


def window_ids(
    spark: SparkSession, inputs: Sequence[str], docs: Sequence[dict[str, Any]]
) -> DataFrame | None:
    """The window's ids with their day (`_source`), file name and row position; None if no rows."""
    from functools import reduce

    from pyspark.sql import functions as F

    frames = []
    for i, (uri, doc) in enumerate(zip(inputs, docs, strict=True)):
        paths = [layout.join(uri, f["path"]) for f in _files(doc)]
        if paths:
            frames.append(
                spark.read.parquet(*paths).select(
                    F.col(layout.ID).cast("string").alias(layout.ID),
                    F.lit(i).alias(_SOURCE),
                    F.col("_metadata.file_name").alias(_FILE),
                    F.col("_metadata.row_index").alias(_ROW),
                )
            )
    return reduce(lambda a, b: a.unionByName(b), frames) if frames else None


def superseded_rows(ids: DataFrame) -> DataFrame:
    """Pure: (`_source`, `_file`, `_row`) of the rows whose id a later day holds too.

    Repeated ids are found through their 64-bit hashes first (one aggregate of 8-byte
    keys; adaptive execution runs nothing more when none repeats), then exactly, by id,
    among the rows of the repeated hashes only.
    """
    from pyspark.sql import functions as F

    key = F.xxhash64(F.col(layout.ID)).alias("_id_hash")
    repeated = (
        ids.groupBy(key)
        .agg(F.countDistinct(_SOURCE).alias("_days"))
        .filter(F.col("_days") > 1)
        .select("_id_hash")
    )
    candidates = ids.select("*", key).join(repeated, "_id_hash", "left_semi")
    latest = candidates.groupBy(layout.ID).agg(F.max(_SOURCE).alias("_latest"))
    return (
        candidates.join(latest, layout.ID)
        .filter(F.col(_SOURCE) < F.col("_latest"))
        .select(_SOURCE, _FILE, _ROW)
        .distinct()
    )


def write_without(
    spark: SparkSession, source: str, rows: DataFrame, folder: str, group_rows: int
) -> tuple[int, int, str] | None:
    """The Parquet file `source` without the rows at positions `rows` (`_row`), in its order,
    as one file in `folder` with a canonical footer; (rows, bytes, sha256), None if none is left."""
    from pyspark.sql import functions as F

    name = source.rsplit("/", 1)[-1]
    tmp = f"{folder}/_tmp_{name}"
    kept = (
        spark.read.parquet(source)
        .select("*", F.col("_metadata.row_index").alias(_ROW))
        .join(F.broadcast(rows), _ROW, "left_anti")
    )
    (
        kept.coalesce(1)
        .sortWithinPartitions(_ROW)
        .drop(_ROW)
        .write.mode("overwrite")
        .option("compression", "zstd")
        .option("parquet.block.row.count.limit", group_rows)
        .parquet(tmp)
    )
    written = [f for f, _ in common.list_files(spark, tmp) if f.endswith(".parquet")]
    if len(written) != 1:
        raise RuntimeError(f"{source} without its superseded rows: expected one file, found {len(written)}")
    n = common.parquet_rows(spark, tmp)
    if n:
        parquet_footer.commit_shard(spark, written[0], f"{folder}/{name}")
    common.delete(spark, tmp)
    if not n:
        return None
    size, sha = day_shards.file_digests(spark, folder)[name]
    return n, size, sha


def remove_superseded(
    spark: SparkSession,
    inputs: Sequence[str],
    docs: Sequence[dict[str, Any]],
    staging: str,
) -> tuple[dict[tuple[int, str], DayFile | None], int]:
    """Write the window's files that hold superseded rows again without them (under
    `superseded/dt=<day>/` of the export); (input position, file name) -> the new file
    (None when nothing is left), and the rows superseded."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    ids = window_ids(spark, inputs, docs) if len(inputs) > 1 else None
    if ids is None:
        return {}, 0
    found = superseded_rows(ids).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        affected = found.groupBy(_SOURCE, _FILE).count().orderBy(_SOURCE, _FILE).collect()
        out: dict[tuple[int, str], DayFile | None] = {}
        for r in affected:
            i, name = int(r[_SOURCE]), str(r[_FILE])
            day = inputs[i].rstrip("/").rsplit("/", 1)[-1]
            rel = f"{SUPERSEDED_DIR}/{day}"
            group = int(docs[i].get("row_group_rows") or docs[i]["rows_per_file"])
            rows = found.filter((F.col(_SOURCE) == i) & (F.col(_FILE) == name)).select(_ROW)
            written = write_without(spark, layout.join(inputs[i], name), rows, f"{staging}/{rel}", group)
            out[(i, name)] = None if written is None else DayFile(f"{rel}/{name}", *written, group)
        return out, sum(int(r["count"]) for r in affected)
    finally:
        found.unpersist()


def class_files(
    output: str,
    inputs: Sequence[str],
    docs: Sequence[dict[str, Any]],
    replaced: dict[tuple[int, str], DayFile | None],
    classes: Sequence[str],
) -> dict[str, dict[str, list[list[DayFile]]]]:
    """split -> class -> the class's files on each day, paths relative to the manifest."""
    out = {s: {c: [[] for _ in inputs] for c in classes} for s in ex.SPLITS}
    for i, (uri, doc) in enumerate(zip(inputs, docs, strict=True)):
        folder = relative_path(output, uri)
        group = int(doc.get("row_group_rows") or doc["rows_per_file"])
        for split, per_class in doc["splits"].items():
            for label, listed in per_class.items():
                if split not in out or label not in out[split]:
                    raise ValueError(
                        f"{layout.join(uri, layout.DAY_SHARDS)}: files of split {split!r} class {label!r}, "
                        f"which are not among the splits {list(ex.SPLITS)} and label.classes {list(classes)}"
                    )
                for f in listed:
                    key = (i, f["path"])
                    day_file = (
                        replaced[key]
                        if key in replaced
                        else DayFile(
                            f"{folder}/{f['path']}", int(f["rows"]), int(f["bytes"]), f["sha256"], group
                        )
                    )
                    if day_file is not None:
                        out[split][label][i].append(day_file)
    return out


def fingerprint(doc: dict[str, Any]) -> str:
    """A sampled day's content digest: its files' rows and sha256 (`_shards.json`); the
    files are named and written by content, so the same rows give the same digest."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode("utf-8")).hexdigest()


def run(spark: SparkSession, inputs: list[str], output: str, p: ex.ExportParams) -> dict[str, Any]:
    from lakeprep_contracts import documents

    transform, transform_text = ex.load_transform(spark, p.transform_uri)
    docs = read_day_shards(spark, inputs)
    classes = [str(c) for c in p.label_classes]
    with common.PartitionCommit(spark, output) as staging:
        replaced, superseded = remove_superseded(spark, inputs, docs, staging)
        files = class_files(output, inputs, docs, replaced, classes)
        natural = {
            s: {c: sum(f.rows for day in files[s][c] for f in day) for c in classes} for s in ex.SPLITS
        }
        rows_in = sum(sum(f["rows"] for f in _files(doc)) for doc in docs)
        targets = {**natural, "train": balance.class_targets(natural["train"], p.balance)}
        weights = balance.class_weights(targets["train"], p.balance)
        features = ex.feature_schema(transform)
        width = ex.row_bytes(features)
        splits: dict[str, Any] = {}
        for split in ex.SPLITS:
            available = sum(targets[split].values())
            plan = ex.plan_split(available, float(width * available), p)
            if split in ("train", "validation") and plan.rows_per_rank == 0:
                raise ValueError(
                    f"export {output}: the {split} split has {available} rows, fewer than "
                    f"world_size {p.world_size}; every rank needs at least one row "
                    f"(widen window.days or the sample fractions)"
                )
            shards = split_entries(
                files[split], targets[split], world_size=p.world_size, rows_per_rank=plan.rows_per_rank
            )
            splits[split] = {
                "rows": plan.rows,
                "rows_available": available,
                "class_counts": targets[split],
                "plan": {
                    "world_size": p.world_size,
                    "batch_size": p.batch_size,
                    "rows_per_rank": plan.rows_per_rank,
                    "steps_per_rank": plan.steps_per_rank,
                    "shards_per_rank": max(
                        sum(1 for e in shards if e["rank"] == r) for r in range(p.world_size)
                    ),
                    "remainder": p.remainder,
                },
                "shards": shards,
            }
        splits["train"]["class_counts_natural"] = natural["train"]
        sampling = ex.sampling_report(
            p,
            before=ex.read_counts_before_sampling(spark, inputs, p.label_classes),
            days=len(inputs),
            natural=natural,
            real=targets,
            final=targets,
            weights=weights,
        )
        sources = [
            {"uri": uri, "rows": common.read_report(spark, uri)["rows_out"], "fingerprint": fingerprint(doc)}
            for uri, doc in zip(inputs, docs, strict=True)
        ]
        manifest = {
            "format_version": ex.FORMAT_VERSION,
            "dataset": p.dataset,
            "logical_date": p.logical_date,
            "run_id": p.run_id,
            "config_hash": p.config_hash,
            "window_days": len(p.window.get("days", [])) or len(inputs),
            "window": {k: list(p.window.get(k, [])) for k in ex.WINDOW_KEYS},
            "source_partitions": sources,
            "label": {"name": layout.LABEL, "classes": p.label_classes},
            "features": features,
            "shard_columns": SHARD_COLUMNS,
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
                "synthetic_rows": 0,
                "report": layout.SAMPLING,
            },
        }
        rows_out = sum(s["rows"] for s in splits.values())
        rows_available = sum(s["rows_available"] for s in splits.values())
        removed = {c: natural["train"][c] - targets["train"][c] for c in classes}
        report = {
            "stage": "export_shards",
            "inputs": list(inputs),
            "shard_columns": SHARD_COLUMNS,
            "rows_in": rows_in,
            "rows_out": rows_out,
            "rows_quarantined": 0,
            "rows_superseded": superseded,
            # rows_in - superseded - undersampled + oversampled = rows available.
            "rows_undersampled": sum(max(0, n) for n in removed.values()),
            "rows_oversampled": sum(max(0, -n) for n in removed.values()),
            "rows_synthetic": 0,
            "rows_dropped_for_balance": max(0, rows_available - rows_out),
            "rows_padded_for_balance": max(0, rows_out - rows_available),
            "shards": {s: len(v["shards"]) for s, v in splits.items()},
            "files_rewritten": sum(1 for f in replaced.values() if f is not None),
            "window": manifest["window"],
            "transform": p.transform_uri,
        }
        if rows_in - superseded - report["rows_undersampled"] + report["rows_oversampled"] != rows_available:
            raise RuntimeError(f"export {output}: rows do not add up: {report}")
        ex.check_manifest(manifest, layout.join(output, layout.MANIFEST))
        documents.require("sampling", sampling, layout.join(output, layout.SAMPLING))
        common.write_text(spark, layout.join(staging, layout.TRANSFORM), transform_text)
        common.write_text(
            spark, layout.join(staging, layout.SAMPLING), json.dumps(sampling, indent=2, sort_keys=True)
        )
        common.write_report(spark, staging, report)
        common.write_success(spark, staging)
        # Last: the manifest is the signal that the export is complete.
        common.write_text(
            spark, layout.join(staging, layout.MANIFEST), json.dumps(manifest, indent=2, sort_keys=True)
        )
    return report
