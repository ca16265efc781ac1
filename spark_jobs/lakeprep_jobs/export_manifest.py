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
  latest day (docs/MANIFEST.md). The window's id column is read (the only column of the
  days' files the export reads) and the repeated ids found by one Arrow hash aggregate.
  A file holding superseded rows is written again without them, in its order, under the
  export's `superseded/dt=<day>/`; most windows have none.

No Spark job runs: the stage runs in the Airflow worker (`run_on` a
`lakeprep_jobs.lake.Lake`, `lakeprep_airflow.operators.window_stage`) or in a driver.

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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakeprep_contracts import encode, layout
from lakeprep_jobs import balance
from lakeprep_jobs import export_shards as ex
from lakeprep_jobs.lake import (
    Lake,
    PartitionCommit,
    SparkLake,
    read_json,
)
from lakeprep_jobs.window_manifest import DayFile, split_entries

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SHARD_COLUMNS = "prepared"
SUPERSEDED_DIR = "superseded"
_FILE, _ROW = "_file", "_row"


def relative_path(folder: str, target: str) -> str:
    """`target` relative to `folder` (both URIs or paths on one file system)."""
    a, b = urlsplit(folder), urlsplit(target)
    if (a.scheme or "file", a.netloc) != (b.scheme or "file", b.netloc):
        raise ValueError(
            f"export {folder} and its input {target} are on different file systems; the manifest "
            "names the inputs' files relative to itself (put lake.root on one file system)"
        )
    return posixpath.relpath(b.path.rstrip("/"), a.path.rstrip("/"))


def read_day_shards(lake: Lake, inputs: Sequence[str]) -> list[dict[str, Any]]:
    """Each complete input's `_shards.json`, oldest first."""
    docs, absent = [], []
    for uri in inputs:
        if not lake.exists(layout.join(uri, layout.SUCCESS)):
            raise FileNotFoundError(f"export needs complete sampled partitions (with _SUCCESS): {uri}")
        where = layout.join(uri, layout.DAY_SHARDS)
        if not lake.exists(where):
            absent.append(uri)
            continue
        docs.append(read_json(lake, where))
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
    lake: Lake, inputs: Sequence[str], docs: Sequence[dict[str, Any]]
) -> tuple[pa.Table, list[tuple[int, str]]]:
    """The window's ids, each with its file (`_file`, an index into the (day, file name)
    list returned beside) and its row position in that file. Only the id column is read."""
    parts, files = [], []
    for i, (uri, doc) in enumerate(zip(inputs, docs, strict=True)):
        for f in _files(doc):
            where = layout.join(uri, f["path"])
            ids = lake.read_parquet(where, [layout.ID]).column(layout.ID).cast(pa.string())
            n = len(ids)
            parts.append(
                pa.table(
                    {
                        layout.ID: ids,
                        _FILE: pa.array(np.full(n, len(files), dtype=np.int32)),
                        _ROW: pa.array(np.arange(n, dtype=np.int64)),
                    }
                )
            )
            files.append((i, f["path"]))
    schema = pa.schema([(layout.ID, pa.string()), (_FILE, pa.int32()), (_ROW, pa.int64())])
    return (pa.concat_tables(parts) if parts else schema.empty_table()), files


def superseded_rows(ids: pa.Table, files: Sequence[tuple[int, str]]) -> dict[tuple[int, str], np.ndarray]:
    """(day, file) -> the sorted positions of its rows whose id a later day holds too.

    An id on several days is read once, from the latest: its other days' rows are
    superseded. Exact, by value: one hash aggregate over the ids (Arrow's) counts each id
    and finds its latest file, whose day is the latest (files are listed day by day).
    Preprocess leaves an id once per day, so a count above 1 means several days; a rare
    repeat within one day would supersede nothing, as no row precedes its own day.
    """
    day_of_file = np.asarray([day for day, _ in files], dtype=np.int32)
    latest = ids.group_by(layout.ID).aggregate([(_FILE, "count"), (_FILE, "max")])
    repeated = latest.filter(pc.greater(latest[f"{_FILE}_count"], 1))
    if not repeated.num_rows:
        return {}
    rows = ids.join(repeated.select([layout.ID, f"{_FILE}_max"]), layout.ID, join_type="inner")
    file_of_row = rows[_FILE].to_numpy()
    earlier = day_of_file[file_of_row] < day_of_file[rows[f"{_FILE}_max"].to_numpy()]
    out: dict[tuple[int, str], list[int]] = {}
    for file, row in zip(file_of_row[earlier].tolist(), rows[_ROW].to_numpy()[earlier].tolist(), strict=True):
        out.setdefault(files[file], []).append(row)
    return {key: np.unique(np.asarray(v, dtype=np.int64)) for key, v in sorted(out.items())}


def write_without(
    lake: Lake, source: str, rows: np.ndarray, target: str, group_rows: int
) -> tuple[int, int, str] | None:
    """The Parquet file `source` without the rows at positions `rows`, in its order, written
    to `target` (zstd, row groups of `group_rows`); (rows, bytes, sha256), None if none is left."""
    table = lake.read_parquet(source, None)
    keep = np.ones(table.num_rows, dtype=bool)
    keep[rows] = False
    kept = table.filter(pa.array(keep))
    if not kept.num_rows:
        return None
    out = pa.BufferOutputStream()
    pq.write_table(kept, out, compression="zstd", row_group_size=group_rows)
    data = out.getvalue().to_pybytes()
    lake.write_bytes(target, data)
    return kept.num_rows, len(data), hashlib.sha256(data).hexdigest()


def remove_superseded(
    lake: Lake, inputs: Sequence[str], docs: Sequence[dict[str, Any]], staging: str
) -> tuple[dict[tuple[int, str], DayFile | None], int]:
    """Write the window's files that hold superseded rows again without them (under
    `superseded/dt=<day>/` of the export); (input position, file name) -> the new file
    (None when nothing is left), and the rows superseded."""
    if len(inputs) < 2:
        return {}, 0
    found = superseded_rows(*window_ids(lake, inputs, docs))
    out: dict[tuple[int, str], DayFile | None] = {}
    for (i, name), rows in found.items():
        day = inputs[i].rstrip("/").rsplit("/", 1)[-1]
        rel = f"{SUPERSEDED_DIR}/{day}/{name}"
        group = int(docs[i].get("row_group_rows") or docs[i]["rows_per_file"])
        written = write_without(lake, layout.join(inputs[i], name), rows, layout.join(staging, rel), group)
        out[(i, name)] = None if written is None else DayFile(rel, *written, group)
    return out, sum(len(rows) for rows in found.values())


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


def read_time_synthetic(p: ex.ExportParams, transform: dict[str, Any]) -> int:
    """Synthetic copies per balanced train row the loader makes (`jitter`, `text`), else 0;
    refuses an augmentation without the features it changes, as the encoded export does."""
    if p.balance.augment == "none":
        return 0
    role = {"jitter": "numeric", "smote": "numeric", "text": "text"}[p.balance.augment]
    if not transform[role]:
        raise ValueError(
            f"balance augment {p.balance.augment!r} needs {role} features; the transform has none"
        )
    return p.balance.synthetic_per_row


def augmentation(p: ex.ExportParams) -> dict[str, float]:
    """What the loader needs to augment a synthetic row (the manifest's `balance`)."""
    if p.balance.augment == "jitter":
        return {"jitter_sigma": p.balance.jitter_sigma}
    if p.balance.augment == "text":
        return {"token_dropout": p.balance.token_dropout}
    if p.balance.augment == "smote":
        return {"smote_candidates": p.balance.smote_candidates}
    return {}


def fingerprint(doc: dict[str, Any]) -> str:
    """A sampled day's content digest: its files' rows and sha256 (`_shards.json`); the
    files are named and written by content, so the same rows give the same digest."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode("utf-8")).hexdigest()


def run(spark: SparkSession, inputs: list[str], output: str, p: ex.ExportParams) -> dict[str, Any]:
    return run_on(SparkLake(spark), inputs, output, p)


def run_on(lake: Lake, inputs: list[str], output: str, p: ex.ExportParams) -> dict[str, Any]:
    """The export over any `Lake`: in the Airflow worker, or in a Spark driver (`run`)."""

    transform, transform_text = ex.load_transform(lake, p.transform_uri)
    docs = read_day_shards(lake, inputs)
    reports = [read_json(lake, layout.join(uri, layout.REPORT)) for uri in inputs]
    classes = [str(c) for c in p.label_classes]
    with PartitionCommit(lake, output) as staging:
        replaced, superseded = remove_superseded(lake, inputs, docs, staging)
        files = class_files(output, inputs, docs, replaced, classes)
        natural = {
            s: {c: sum(f.rows for day in files[s][c] for f in day) for c in classes} for s in ex.SPLITS
        }
        rows_in = sum(sum(f["rows"] for f in _files(doc)) for doc in docs)
        targets = {**natural, "train": balance.class_targets(natural["train"], p.balance)}
        per_row = read_time_synthetic(p, transform)
        final = {**targets, "train": {c: n * (1 + per_row) for c, n in targets["train"].items()}}
        synthetic = sum(final["train"].values()) - sum(targets["train"].values())
        weights = balance.class_weights(final["train"], p.balance)
        features = ex.feature_schema(transform)
        width = ex.row_bytes(features)
        splits: dict[str, Any] = {}
        for split in ex.SPLITS:
            available = sum(final[split].values())
            plan = ex.plan_split(available, float(width * available), p)
            if split in ("train", "validation") and plan.rows_per_rank == 0:
                raise ValueError(
                    f"export {output}: the {split} split has {available} rows, fewer than "
                    f"world_size {p.world_size}; every rank needs at least one row "
                    f"(widen window.days or the sample fractions)"
                )
            shards = split_entries(
                files[split],
                targets[split],
                world_size=p.world_size,
                rows_per_rank=plan.rows_per_rank,
                synthetic_per_row=per_row if split == "train" else 0,
            )
            held = max(sum(1 for e in shards if e["rank"] == r) for r in range(p.world_size))
            splits[split] = {
                **ex.split_document(p, plan, final[split], held),
                "shards": shards,
            }
        splits["train"]["class_counts_natural"] = natural["train"]
        sampling = ex.sampling_report(
            p,
            before=ex.counts_before_sampling(reports, p.label_classes),
            days=len(inputs),
            natural=natural,
            real=targets,
            final=final,
            weights=weights,
        )
        sources = [
            {"uri": uri, "rows": report["rows_out"], "fingerprint": fingerprint(doc)}
            for uri, doc, report in zip(inputs, docs, reports, strict=True)
        ]
        manifest = ex.manifest_document(
            p,
            inputs,
            sources=sources,
            features=features,
            transform_text=transform_text,
            splits=splits,
            weights=weights,
            synthetic_rows=synthetic,
            shard_columns=SHARD_COLUMNS,
            balance_extra=augmentation(p),
        )
        report = ex.export_report(
            p,
            manifest,
            rows_in=rows_in,
            superseded=superseded,
            natural=natural["train"],
            balanced=targets["train"],
            inputs=list(inputs),
            files_rewritten=sum(1 for f in replaced.values() if f is not None),
        )
        ex.commit_export(
            lake,
            staging,
            output,
            manifest=manifest,
            sampling=sampling,
            report=report,
            transform_text=transform_text,
            tokenizer_files=encode.tokenizer_files(transform),
        )
    return report
