"""(b) The trainer's input pipeline: shards to batched tensors, against two references.

    python -m benchmarks.input_pipeline --manifest <uri> --reader rank_batches|pyarrow_floor|pandas_dataloader

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
  row group, into numpy (`to_numpy`, list columns flattened), no batching or checks: the
  least any reader must do.
- `pandas_dataloader`: what one would write without the reader: `pandas.read_parquet`,
  numpy stacks of the columns, `torch.utils.data.TensorDataset` and a `DataLoader` with
  the batch size.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable, Sequence

from benchmarks.environment import put_sources_on_path
from benchmarks.measure import emit_result

READERS = ("rank_batches", "pyarrow_floor", "pandas_dataloader")
SPLITS = ("train", "validation", "test")


def _rank_batches(manifest) -> int:
    from lakeprep_train.dataset import RankBatches

    rows = 0
    for split in SPLITS:
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
    for split in SPLITS:
        for shard in manifest.split(split).shards:
            parquet = pq.ParquetFile(shard.location.removeprefix("file://"))
            for group in range(parquet.num_row_groups):
                table = parquet.read_row_group(group, columns=columns)
                for name in columns:
                    column = table.column(name).combine_chunks()
                    if pa.types.is_list(column.type) or pa.types.is_fixed_size_list(column.type):
                        column = column.flatten()
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
    for split in SPLITS:
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
        text = torch.tensor(
            np.stack([np.stack(frame[f.name].to_numpy()) for f in layout.text], axis=1).astype(np.int64)
        )
        label = torch.tensor(frame[layout.label].to_numpy(np.int64))
        loader = DataLoader(
            TensorDataset(numeric, categorical, text, label), batch_size=chosen.plan.batch_size
        )
        for batch in loader:
            rows += len(batch[3])
    return rows


MIN_SECONDS = 2.0  # timed passes per process: until this much time has passed


def measure(manifest_uri: str, reader: str, min_seconds: float = MIN_SECONDS) -> dict[str, float | int]:
    put_sources_on_path()
    from lakeprep_train.manifest import load_manifest

    manifest = load_manifest(manifest_uri)
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
    while not passes or sum(passes) < min_seconds:
        start = time.perf_counter()
        rows = read(manifest)
        passes.append(time.perf_counter() - start)
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
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--reader", choices=READERS, required=True)
    parser.add_argument(
        "--min-seconds", type=float, default=MIN_SECONDS, help="time passes until this many seconds"
    )
    args = parser.parse_args(argv)
    emit_result(measure(args.manifest, args.reader, args.min_seconds))


if __name__ == "__main__":
    main()
