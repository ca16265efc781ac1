"""Part `input`: the trainer's input pipeline: shards to batched tensors, against two references.

    python -m benchmarks.input_pipeline --manifest <uri> --reader rank_batches|pyarrow_floor|pandas_dataloader
    python -m benchmarks.input_pipeline --write-pair <export manifest uri> --out <folder>

Each reader goes over the same rows, every split of the export (train, validation,
test) with the manifest's batch size, once as a warm-up (the shards in the page cache,
imports done; then what start-up left is frozen for the garbage collector, as the trainer
does for its epochs), then in timed passes until `--min-seconds` have passed (one pass at least;
a pass over 1 M rows takes the floor tens of milliseconds, too short to time once); it
prints the median pass's rows per second and the number of passes. The parent runs each
reader in a fresh process per repetition (peak memory is that process's), alternating
readers within a repetition.

- `rank_batches`: the trainer's reader, `lakeprep_train.dataset.RankBatches` (rank 0 of
  world size 1, no shuffle): the contract checks, the plan, the background prefetch.
- `pyarrow_floor`: the same columns of the same shards read with pyarrow, row group by
  row group, numbers into numpy (`to_numpy`, list columns flattened), no batching or
  checks: the least any reader must do. Strings (prepared shards) stay Arrow arrays: a
  plain read decodes them, turning them into Python objects is no part of reading.
- `pandas_dataloader`: what one would write without the reader: `pandas.read_parquet`,
  numpy stacks of the columns, `torch.utils.data.TensorDataset` and a `DataLoader` with
  the batch size.

Encoded shards against prepared shards (`shard_columns: "prepared"`, encoded by the reader
with the manifest's transform): :func:`write_pair` writes the same rows both ways, in the
same files and row groups as the export's, with the export's transform and features. The
prepared rows are drawn (numerics around each feature's center with missing values and
values past its clipping bounds, categoricals from the vocabulary plus unseen values or from
a pool twice the hash buckets, token lists shorter and longer than ``max_tokens``); the
encoded shards are what ``lakeprep_contracts.encode.encode`` makes of them, as the export
writes. The readers then go over both pairs' manifests.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.environment import put_sources_on_path
from benchmarks.measure import emit_result
from lakeprep_contracts import layout

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

READERS = ("rank_batches", "pyarrow_floor", "pandas_dataloader")
SPLITS = ("train", "validation", "test")


def _splits(manifest) -> list[str]:
    """The export's splits that the manifest holds, in SPLITS order."""
    return [name for name in SPLITS if name in manifest.splits]


def _rank_batches(manifest) -> int:
    from lakeprep_train.dataset import RankBatches

    rows = 0
    for split in _splits(manifest):
        for batch in RankBatches(manifest, split, 0, world_size=1):
            rows += len(batch)
    return rows


def _columns(manifest) -> list[str]:
    from lakeprep_train.dataset import FeatureLayout

    return FeatureLayout(manifest).columns(with_ids=False)


def _pyarrow_floor(manifest) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = _columns(manifest)
    rows = 0
    for split in _splits(manifest):
        for shard in manifest.split(split).shards:
            parquet = pq.ParquetFile(shard.location.removeprefix("file://"))
            for group in range(parquet.num_row_groups):
                table = parquet.read_row_group(group, columns=columns)
                for name in columns:
                    column = table.column(name).combine_chunks()
                    if pa.types.is_list(column.type) or pa.types.is_fixed_size_list(column.type):
                        column = column.flatten()
                    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
                        column.to_numpy(zero_copy_only=False)
                rows += table.num_rows
    return rows


def _pandas_dataloader(manifest) -> int:
    import numpy as np
    import pandas as pd
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from lakeprep_train.dataset import FeatureLayout

    layout = FeatureLayout(manifest)
    rows = 0
    for split in _splits(manifest):
        chosen = manifest.split(split)
        frame = pd.concat(
            [
                pd.read_parquet(s.location.removeprefix("file://"), columns=layout.columns(False))
                for s in chosen.shards
            ],
            ignore_index=True,
        )
        numeric = torch.tensor(frame[[f.name for f in layout.numeric]].to_numpy(np.float32))
        categorical = torch.tensor(frame[[f.name for f in layout.categorical]].to_numpy(np.int64))
        # Texts of different lengths padded to the longest, as the trainer's tensor has them.
        texts = [np.stack(frame[f.name].to_numpy()) for f in layout.text]
        texts = [np.pad(t, ((0, 0), (0, layout.text_length - t.shape[1]))) for t in texts]
        text = torch.tensor(np.stack(texts, axis=1).astype(np.int64))
        label = torch.tensor(frame[layout.label].to_numpy(np.int64))
        loader = DataLoader(
            TensorDataset(numeric, categorical, text, label), batch_size=chosen.plan.batch_size
        )
        for batch in loader:
            rows += len(batch[3])
    return rows


# ------------------------------------------------------------- the same rows both ways

MISSING_SHARE = 0.05  # of each prepared feature's rows null (and of each numeric's, NaN)
UNSEEN = 3  # values drawn beside a vocabulary, which encode as unseen


def _prepared_column(rng: np.random.Generator, role: str, spec: Mapping[str, Any], n: int) -> pa.Array:
    """``n`` prepared values for one input column of the transform, missing ones among them."""
    import numpy as np
    import pyarrow as pa

    missing = rng.random(n) < MISSING_SHARE
    if role == "numeric":
        center, scale = float(spec["center"]), float(spec["scale"]) or 1.0
        values = center + 3 * scale * rng.standard_normal(n)  # past the usual clipping bounds too
        values[rng.random(n) < MISSING_SHARE] = np.nan
        return pa.array(values, pa.float64(), mask=missing)
    if spec["encoding"] == "vocab":
        pool = [*spec["vocabulary"], *(f"{spec['name']}-unseen-{k}" for k in range(UNSEEN))]
    else:
        pool = [f"{spec['name']}-{k}" for k in range(2 * int(spec["buckets"]))]
    values = pa.array(pool, pa.string())
    if role == "categorical":
        return values.take(pa.array(rng.integers(0, len(pool), n), mask=missing))
    lengths = np.where(missing, 0, rng.integers(0, int(spec["max_tokens"]) + 3, n))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    tokens = values.take(pa.array(rng.integers(0, len(pool), int(offsets[-1]))))
    return pa.ListArray.from_arrays(pa.array(offsets), tokens, mask=pa.array(missing))


def _input_specs(doc: Mapping[str, Any]) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """Each input column of the transform: (its role, its spec), PCA inputs as numerics."""
    from lakeprep_contracts.records import FEATURE_ROLES

    specs: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for role in FEATURE_ROLES:
        for spec in doc[role]:
            inputs = doc["pca"]["inputs"] if "pca_component" in spec else [spec]
            for s in inputs:
                specs.setdefault(s["name"], (role, s))
    return specs


def _encoded_column(values: np.ndarray, like: pa.DataType) -> pa.Array:
    """An encoded output as the export's shard stores it (texts as lists of their ids)."""
    import numpy as np
    import pyarrow as pa

    if values.ndim == 2:
        width = values.shape[1]
        offsets = np.arange(0, (len(values) + 1) * width, width, dtype=np.int32)
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values.reshape(-1))).cast(like)
    return pa.array(values).cast(like)


def _write(table: pa.Table, path: Path, like) -> dict[str, Any]:
    """Write ``table`` as ``like`` (the export's file) was written: its row groups and codec."""
    import pyarrow.parquet as pq

    meta = like.metadata
    codec = meta.row_group(0).column(0).compression if meta.num_row_groups else "zstd"
    path.parent.mkdir(parents=True, exist_ok=True)
    group_rows = max(meta.row_group(0).num_rows if meta.num_row_groups else 1, 1)
    pq.write_table(table, path, row_group_size=group_rows, compression=codec)
    data = path.read_bytes()
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def write_pair(export_manifest: str, out: Path, seed: int = 0) -> tuple[str, str]:
    """(encoded manifest uri, prepared manifest uri): drawn rows in the export's files, both ways.

    Each file of the export gets a file of the same rows (its ids, labels and other
    columns kept) and row groups in each folder: in ``out/prepared`` the drawn prepared
    values of the transform's input columns, in ``out/encoded`` the export's columns with
    every feature replaced by what :func:`encode` makes of those values. Each manifest is
    the export's, its shards' bytes and sha256 those of the new files.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    put_sources_on_path()
    from lakeprep_contracts.encode import encode, input_columns
    from lakeprep_train.manifest import load_manifest, transform_for_features, with_transform_document

    manifest = with_transform_document(load_manifest(export_manifest))
    doc = transform_for_features(manifest, manifest.transform_document)
    specs = _input_specs(doc)
    transform_bytes = Path(manifest.transform.location.removeprefix("file://")).read_bytes()
    raw = json.loads(Path(manifest.location.removeprefix("file://")).read_text())
    rng = np.random.default_rng(seed)
    written: dict[str, dict[str, dict[str, Any]]] = {"encoded": {}, "prepared": {}}
    for split in manifest.splits.values():
        for shard in split.shards:
            if shard.path in written["encoded"]:  # a file several entries slice: written once
                continue
            like = pq.ParquetFile(shard.location.removeprefix("file://"))
            table = like.read()
            prepared = {
                name: _prepared_column(rng, *specs[name], table.num_rows) for name in input_columns(doc)
            }
            encoded = encode(prepared, doc)
            for name, values in encoded.items():
                index = table.schema.get_field_index(name)
                table = table.set_column(index, name, _encoded_column(values, table.schema.field(index).type))
            label = manifest.label.name
            rows = pa.table({"id": table.column("id"), label: table.column(label), **prepared})
            written["encoded"][shard.path] = _write(table, out / "encoded" / shard.path, like)
            written["prepared"][shard.path] = _write(rows, out / "prepared" / shard.path, like)
    uris = []
    for kind, files in written.items():
        copy = json.loads(json.dumps(raw))
        for split in copy["splits"].values():
            for entry in split["shards"]:
                entry.update(files[entry["path"]])
        if kind == "prepared":
            copy["shard_columns"] = "prepared"
        (out / kind / raw["transform"]["uri"]).write_bytes(transform_bytes)
        (out / kind / layout.MANIFEST).write_text(json.dumps(copy, indent=2))
        uris.append(f"file://{(out / kind / layout.MANIFEST).resolve()}")
    return uris[0], uris[1]


MIN_SECONDS = 2.0  # timed passes per process: until this much time has passed


def measure(manifest_uri: str, reader: str, min_seconds: float = MIN_SECONDS) -> dict[str, float | int]:
    put_sources_on_path()
    from lakeprep_train.manifest import load_manifest, with_transform_document

    manifest = load_manifest(manifest_uri)
    if manifest.shard_columns == "prepared":  # read and checked once, as train.py does
        manifest = with_transform_document(manifest)
    read: Callable = {
        "rank_batches": _rank_batches,
        "pyarrow_floor": _pyarrow_floor,
        "pandas_dataloader": _pandas_dataloader,
    }[reader]
    read(manifest)  # warm-up: page cache, imports, allocator
    # As the trainer runs its epochs (train.frozen_startup_objects): what start-up left is
    # frozen, so the collector's full collections do not walk it again. Every reader alike.
    gc.collect()
    gc.freeze()
    passes: list[float] = []
    try:
        while not passes or sum(passes) < min_seconds:
            start = time.perf_counter()
            rows = read(manifest)
            passes.append(time.perf_counter() - start)
    finally:
        gc.unfreeze()  # thawed as the trainer thaws after its epochs (a caller's process goes on)
    seconds = statistics.median(passes)
    return {
        "reader": reader,
        "rows": rows,
        "passes": len(passes),
        "seconds": round(seconds, 4),
        "rows_per_s": round(rows / seconds, 1),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", help="the manifest the reader reads")
    parser.add_argument("--reader", choices=READERS)
    parser.add_argument(
        "--write-pair",
        metavar="EXPORT_MANIFEST",
        help="write the export's files again, as prepared and as encoded shards of the same drawn rows",
    )
    parser.add_argument("--out", type=Path, help="with --write-pair: the folder of the two exports")
    parser.add_argument("--seed", type=int, default=0, help="with --write-pair: the draw's seed")
    parser.add_argument(
        "--min-seconds", type=float, default=MIN_SECONDS, help="time passes until this many seconds"
    )
    args = parser.parse_args(argv)
    if args.write_pair:
        if args.out is None:
            parser.error("--write-pair needs --out, the folder to write the two exports in")
        encoded, prepared = write_pair(args.write_pair, args.out, args.seed)
        emit_result({"encoded": encoded, "prepared": prepared})
    elif args.manifest and args.reader:
        emit_result(measure(args.manifest, args.reader, args.min_seconds))
    else:
        parser.error("give --manifest and --reader, or --write-pair and --out")


if __name__ == "__main__":
    main()
