"""Tiny real exports for the trainer's tests: Parquet shards and a manifest, per docs/MANIFEST.md.

The label follows a rule the model can learn (a numeric threshold, two categorical ids
and one token), so a short run must beat the majority-class baseline.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

TRAINING = Path(__file__).resolve().parents[2] / "training"
if str(TRAINING) not in sys.path:
    sys.path.insert(0, str(TRAINING))

CARDINALITY = 8
VOCAB_SIZE = 16
TEXT_LENGTH = 4
SHARD_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("label", pa.int32()),
        ("num__x", pa.float32()),
        ("cat__c", pa.int32()),
        ("txt__t", pa.list_(pa.int32())),
    ]
)


def make_rows(split: str, n: int, rng: np.random.Generator) -> pa.Table:
    x = rng.normal(size=n).astype(np.float32)
    c = rng.integers(0, CARDINALITY, size=n).astype(np.int32)
    lengths = rng.integers(1, TEXT_LENGTH + 1, size=n)
    tokens = rng.integers(1, VOCAB_SIZE, size=(n, TEXT_LENGTH)).astype(np.int32)
    tokens[np.arange(TEXT_LENGTH)[None, :] >= lengths[:, None]] = 0  # right padding
    score = 1.5 * x + 1.2 * np.isin(c, (2, 5)) + 1.2 * (tokens == 3).any(axis=1) - 1.2
    label = (score > 0).astype(np.int32)
    return pa.table(
        {
            "id": [f"{split}-{i:05d}" for i in range(n)],
            "label": label,
            "num__x": x,
            "cat__c": c,
            "txt__t": pa.array(tokens.tolist(), type=pa.list_(pa.int32())),
        },
        schema=SHARD_SCHEMA,
    )


def write_export(
    root: Path,
    *,
    world_size: int,
    rows_per_rank: dict[str, int],
    batch_size: int,
    shards_per_rank: int = 2,
    row_group_size: int = 40,
    seed: int = 0,
    pad: int = 0,
    transform: dict | None = None,
) -> Path:
    """Write shards and a manifest under ``root``; return the manifest's path.

    A rank's shards get unequal row counts (40% / 60%) so batches cross shard and
    row-group boundaries. ``pad`` > 0 exports with ``remainder: "pad"``: each split's
    first ``pad`` rows are repeated at its end, as the exporter evens out the ranks;
    otherwise 3 more rows (of class 0) were available and dropped. The window is three
    days, the first missing; ``transform`` is the manifest's transform reference.
    """
    rng = np.random.default_rng(seed)
    splits = {}
    train_counts = None
    for split, per_rank in rows_per_rank.items():
        table = make_rows(split, world_size * per_rank - pad, rng)
        table = pa.concat_tables([table, table.slice(0, pad)])
        n_shards = world_size * shards_per_rank
        shard_rows = {}
        for rank in range(world_size):
            cuts = np.linspace(0, per_rank, shards_per_rank + 1).astype(int)
            cuts[1:-1] = (cuts[1:-1] * 0.8).astype(int)
            for k in range(shards_per_rank):
                shard_rows[k * world_size + rank] = (
                    rank * per_rank + int(cuts[k]),
                    rank * per_rank + int(cuts[k + 1]),
                )
        shards = []
        folder = root / "shards" / split
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(n_shards):
            start, stop = shard_rows[i]
            path = folder / f"shard-{i:05d}.parquet"
            pq.write_table(
                table.slice(start, stop - start), path, row_group_size=row_group_size, compression="zstd"
            )
            data = path.read_bytes()
            shards.append(
                {
                    "path": f"shards/{split}/{path.name}",
                    "rank": i % world_size,
                    "rows": stop - start,
                    "bytes": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                }
            )
        # class_counts count rows_available: before padding, or with the dropped rows.
        available = table.slice(0, table.num_rows - pad)
        counts = np.bincount(available.column("label").to_numpy(), minlength=2)
        if not pad:
            counts[0] += 3
        if split == "train":
            train_counts = counts
        splits[split] = {
            "rows": table.num_rows,
            "rows_available": int(counts.sum()),
            "class_counts": {"0": int(counts[0]), "1": int(counts[1])},
            "plan": {
                "world_size": world_size,
                "batch_size": batch_size,
                "rows_per_rank": per_rank,
                "steps_per_rank": math.ceil(per_rank / batch_size),
                "shards_per_rank": shards_per_rank,
                "remainder": "pad" if pad else "drop",
            },
            "shards": shards,
        }
    manifest = {
        "format_version": 1,
        "dataset": "toy",
        "logical_date": "2013-01-03",
        "run_id": "manual__2013-01-03T00:00:00+00:00",
        "config_hash": "0" * 64,
        "source_partitions": [
            {"uri": f"file:///lake/sample/toy/dt={day}", "rows": 1, "fingerprint": "f" * 64, "bytes": 100}
            for day in ("2013-01-02", "2013-01-03")
        ],
        "window": {
            "days": ["2013-01-01", "2013-01-02", "2013-01-03"],
            "complete": ["2013-01-02", "2013-01-03"],
            "failed": [],
            "missing": ["2013-01-01"],
            "before_start": [],
        },
        "transform": transform,
        "label": {"name": "label", "classes": [0, 1]},
        "features": [
            {"name": "num__x", "role": "numeric", "dtype": "float32", "shape": []},
            {
                "name": "cat__c",
                "role": "categorical",
                "dtype": "int32",
                "shape": [],
                "cardinality": CARDINALITY,
            },
            {
                "name": "txt__t",
                "role": "text",
                "dtype": "int32",
                "shape": [TEXT_LENGTH],
                "vocab_size": VOCAB_SIZE,
            },
        ],
        "splits": splits,
        "class_weights": {str(k): float(train_counts.sum() / (2 * train_counts[k])) for k in range(2)},
    }
    path = root / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2))
    return path


@pytest.fixture(scope="session")
def export_two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 ranks, 3 splits; 150 train rows per rank at batch 32 -> 5 steps, the last short."""
    root = tmp_path_factory.mktemp("export_two_ranks")
    return write_export(
        root,
        world_size=2,
        rows_per_rank={"train": 150, "validation": 60, "test": 60},
        batch_size=32,
    )


@pytest.fixture(scope="session")
def export_one_rank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1 rank, enough rows that a short run learns the rule."""
    root = tmp_path_factory.mktemp("export_one_rank")
    return write_export(
        root,
        world_size=1,
        rows_per_rank={"train": 2000, "validation": 500, "test": 500},
        batch_size=32,
        row_group_size=256,
        seed=1,
    )


@pytest.fixture
def copied_export(tmp_path: Path, export_two_ranks: Path) -> Path:
    """A private copy of the two-rank export, for tests that damage it."""
    shutil.copytree(export_two_ranks.parent, tmp_path / "export")
    return tmp_path / "export" / "manifest.json"


@pytest.fixture
def edit_manifest():
    """``edit(path, change)``: apply ``change(dict)`` to the manifest at ``path`` in place."""

    def edit(path: Path, change) -> Path:
        raw = json.loads(path.read_text())
        change(raw)
        path.write_text(json.dumps(raw))
        return path

    return edit


@pytest.fixture(scope="session")
def export_padded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 ranks exported with remainder "pad": 7 rows of each split appear twice."""
    root = tmp_path_factory.mktemp("export_padded")
    return write_export(
        root,
        world_size=2,
        rows_per_rank={"train": 50, "validation": 30},
        batch_size=16,
        pad=7,
    )


@pytest.fixture(scope="session")
def export_odd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One export for any world size: 301 train rows (divisible by neither 2 nor 3), 5 shards.

    Planned for 1 rank, as a team would export once; read by 1, 2 and 3 ranks in the tests.
    """
    root = tmp_path_factory.mktemp("export_odd")
    return write_export(
        root,
        world_size=1,
        rows_per_rank={"train": 301, "validation": 61},
        batch_size=32,
        shards_per_rank=5,
        row_group_size=16,
        seed=2,
    )


@pytest.fixture(scope="session")
def export_odd_padded(tmp_path_factory: pytest.TempPathFactory, export_odd: Path) -> Path:
    """``export_odd`` with ``remainder: "pad"`` (nothing dropped at export: rows = rows_available)."""
    root = tmp_path_factory.mktemp("export_odd_padded")
    shutil.copytree(export_odd.parent, root, dirs_exist_ok=True)
    path = root / "manifest.json"
    raw = json.loads(path.read_text())
    for split in raw["splits"].values():
        split["plan"]["remainder"] = "pad"
        split["rows_available"] = split["rows"]
        split["class_counts"]["0"] -= 3  # write_export counts 3 dropped rows; none here
    path.write_text(json.dumps(raw, indent=2))
    return path
