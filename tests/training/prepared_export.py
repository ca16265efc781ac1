"""The same rows exported both ways: encoded shards, and prepared shards the loader encodes.

``write_pair`` draws prepared rows (missing values, values past the clipping bounds,
unseen categories, token lists longer and shorter than ``max_tokens``), encodes them with
``lakeprep_contracts.encode.encode`` as the export does, and writes the two kinds of
shard with pyarrow, sliced into files the same way, with a manifest for each.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lakeprep_contracts.encode import encode
from lakeprep_train import transform as tf
from tests.training.transform_doc import hashed, make_doc, numeric, vocab

WORDS = ["late", "storm", "rain", "wind", "Boeing", "737", "a320"]


def transform_doc() -> dict[str, Any]:
    """Clipped and plain numerics, PCA of two more, vocab and hashed categoricals and texts."""
    doc = make_doc(
        numerics=[
            numeric(
                "distance",
                impute="median",
                fill=1000.0,
                clip={"lower": 100.0, "upper": 2000.0, "quantiles": [0.01, 0.99]},
                scaling="standard",
                center=900.0,
                scale=400.0,
            ),
            {"name": "pc1", "output": "num__pc1", "pca_component": 1},
            {"name": "pc2", "output": "num__pc2", "pca_component": 2},
        ],
        categoricals=[vocab("carrier", ["UA", "B6", "EV"]), hashed("day_of_week", 16)],
        texts=[
            hashed("plane_model", 64, role="text"),
            vocab("note", ["late", "storm"], role="text", max_tokens=3),
        ],
    )
    doc["pca"] = {
        "method": "PCA",
        "k": 2,
        "variance_target": None,
        "inputs": [
            numeric("x", fill=10.0, scaling="standard", center=10.0, scale=2.0),
            numeric("y", fill=0.0, scaling="minmax", center=0.0, scale=4.0),
        ],
        "mean": [0.5, 0.25],
        "components": [[0.6, 0.8], [-0.8, 0.6]],
        "explained_variance": [0.7, 0.3],
        "outputs": ["num__pc1", "num__pc2"],
    }
    return tf.check_document(doc)


FEATURES = [
    {"name": "num__distance", "role": "numeric", "dtype": "float32", "shape": []},
    {"name": "num__pc1", "role": "numeric", "dtype": "float32", "shape": []},
    {"name": "num__pc2", "role": "numeric", "dtype": "float32", "shape": []},
    {"name": "cat__carrier", "role": "categorical", "dtype": "int32", "shape": [], "cardinality": 5},
    {"name": "cat__day_of_week", "role": "categorical", "dtype": "int32", "shape": [], "cardinality": 16},
    {"name": "txt__plane_model", "role": "text", "dtype": "int32", "shape": [4], "vocab_size": 64},
    {"name": "txt__note", "role": "text", "dtype": "int32", "shape": [3], "vocab_size": 4},
]


def prepared_rows(n: int, seed: int = 0) -> pa.Table:
    """The day's prepared rows as the sample stage writes them."""
    rng = np.random.default_rng(seed)

    def numbers(low: float, high: float) -> pa.Array:
        values = rng.uniform(low, high, n)
        values[rng.random(n) < 0.1] = np.nan  # NaN is missing
        return pa.array(values, mask=rng.random(n) < 0.1)  # and so is null

    def strings(choices: list[str | None]) -> list[str | None]:
        return [choices[i] for i in rng.integers(0, len(choices), n)]

    def token_lists(longest: int) -> list[list[str] | None]:
        lists: list[list[str] | None] = [
            [WORDS[i] for i in rng.integers(0, len(WORDS), k)] for k in rng.integers(0, longest + 1, n)
        ]
        for i in np.flatnonzero(rng.random(n) < 0.1):
            lists[i] = None
        return lists

    return pa.table(
        {
            "id": [f"row-{i:05d}" for i in range(n)],
            "label": pa.array(rng.integers(0, 2, n), pa.int32()),
            "split": ["train"] * n,
            "distance": numbers(0.0, 3000.0),  # past both clipping bounds
            "x": numbers(0.0, 20.0),
            "y": numbers(-4.0, 4.0),
            "carrier": strings(["UA", "B6", "EV", "AA", "", None]),  # AA and "" unseen
            "day_of_week": strings([str(d) for d in range(1, 8)] + [None]),
            "plane_model": pa.array(token_lists(7), pa.list_(pa.string())),  # max_tokens 4
            "note": pa.array(token_lists(5), pa.list_(pa.string())),  # max_tokens 3
        }
    )


def encoded_rows(prepared: pa.Table, doc: dict[str, Any]) -> pa.Table:
    """What the export writes for ``prepared``: id, label and the encoded outputs."""
    encoded = encode({name: prepared.column(name) for name in prepared.column_names}, doc)
    columns: dict[str, Any] = {"id": prepared.column("id"), "label": prepared.column("label")}
    for f in FEATURES:
        values = encoded[f["name"]]
        if f["role"] == "text":
            values = pa.array(values.tolist(), pa.list_(pa.int32()))
        columns[f["name"]] = values
    columns["is_synthetic"] = pa.array([False] * prepared.num_rows)
    return pa.table(columns)


def write_manifest(
    root: Path,
    entries: list[dict[str, Any]],
    *,
    batch_size: int,
    remainder: str = "drop",
    shard_columns: str | None = None,
    transform: dict[str, Any] | None = None,
) -> Path:
    """A manifest whose train and validation splits are both ``entries``, planned for one rank."""
    rows = sum(e["rows"] for e in entries)
    split = {
        "rows": rows,
        "rows_available": rows,
        "class_counts": {"0": rows, "1": 0},
        "plan": {
            "world_size": 1,
            "batch_size": batch_size,
            "rows_per_rank": rows,
            "steps_per_rank": math.ceil(rows / batch_size),
            "shards_per_rank": len(entries),
            "remainder": remainder,
        },
        "shards": [{"rank": 0, **e} for e in entries],
    }
    raw: dict[str, Any] = {
        "format_version": 1,
        "dataset": "toy",
        "logical_date": "2013-01-03",
        "run_id": "manual__2013-01-03T00:00:00+00:00",
        "config_hash": "0" * 64,
        "source_partitions": [
            {"uri": "file:///lake/sample/toy/dt=2013-01-03", "rows": 1, "fingerprint": "f" * 64}
        ],
        "window": {
            "days": ["2013-01-03"],
            "complete": ["2013-01-03"],
            "failed": [],
            "missing": [],
            "before_start": [],
        },
        "transform": transform,
        "label": {"name": "label", "classes": [0, 1]},
        "features": FEATURES,
        "splits": {"train": split, "validation": json.loads(json.dumps(split))},
        "class_weights": {"0": 1.0, "1": 1.0},
    }
    if shard_columns is not None:
        raw["shard_columns"] = shard_columns
    path = root / "manifest.json"
    path.write_text(json.dumps(raw, indent=2))
    return path


def write_file(table: pa.Table, path: Path, row_group_size: int) -> dict[str, Any]:
    """Write one shard file; its manifest fields (path relative to the export's root)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=row_group_size, compression="zstd")
    data = path.read_bytes()
    return {
        "path": f"shards/{path.name}",
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "file_rows": table.num_rows,
    }


def write_pair(
    root: Path,
    *,
    rows: int = 150,
    files: int = 3,
    row_group_size: int = 16,
    batch_size: int = 16,
    seed: int = 0,
) -> tuple[Path, Path]:
    """(encoded manifest, prepared manifest) over the same rows, in the same files and row groups."""
    doc = transform_doc()
    prepared = prepared_rows(rows, seed)
    encoded = encoded_rows(prepared, doc)
    cuts = np.linspace(0, rows, files + 1).astype(int)
    manifests = []
    for kind, table in (("encoded", encoded), ("prepared", prepared)):
        folder = root / kind
        entries = [
            {
                **write_file(
                    table.slice(lo, hi - lo), folder / "shards" / f"shard-{i:05d}.parquet", row_group_size
                ),
                "rows": int(hi - lo),
            }
            for i, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:], strict=True))
        ]
        transform = None
        if kind == "prepared":
            data = json.dumps(doc, sort_keys=True).encode()
            (folder / "transform.json").write_bytes(data)
            transform = {"uri": "transform.json", "sha256": hashlib.sha256(data).hexdigest()}
        manifests.append(
            write_manifest(
                folder,
                entries,
                batch_size=batch_size,
                shard_columns="prepared" if kind == "prepared" else None,
                transform=transform,
            )
        )
    return manifests[0], manifests[1]
