"""A continuous label in the trainer: the target as a float tensor, MSE on its standardised
value, MAE/RMSE/R² against the train mean (lakeprep_contracts.labels, transform label.target)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pyarrow as pa
import pytest

from lakeprep_train.dataset import RankBatches
from lakeprep_train.manifest import load_manifest, with_transform_document
from lakeprep_train.metrics import regression_metrics
from tests.training import prepared_export
from tests.training.test_train import run_module


def regression_export(root, rows=200, files=2):
    """write_pair's prepared export with a continuous label: `target` a function of `x`,
    its quartile bin as `label`, and transform.json's label.target fitted on it."""
    _, prepared = prepared_export.write_pair(root, rows=rows, files=files)
    folder = prepared.parent
    table = prepared_export.prepared_rows(rows)
    x = np.nan_to_num(table.column("x").to_numpy(zero_copy_only=False).astype(float), nan=10.0)
    target = 50.0 + 8.0 * x + np.random.default_rng(1).normal(0, 2, rows)
    bins = np.argsort(np.argsort(target)) * 4 // rows
    table = table.set_column(1, "label", pa.array(bins, pa.int32())).append_column("target", pa.array(target))
    doc = prepared_export.transform_doc()
    doc["label"] |= {
        "classes": [0, 1, 2, 3],
        "type": "continuous",
        "target": {
            "column": "target",
            "rows": rows,
            "mean": float(target.mean()),
            "std": float(target.std(ddof=1)),
        },
    }
    raw = json.loads(prepared.read_text())
    cuts = np.linspace(0, rows, files + 1).astype(int)
    entries = []
    for i, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
        path = folder / "shards" / f"shard-{i:05d}.parquet"
        entries.append(
            {**prepared_export.write_file(table.slice(lo, hi - lo), path, 16), "rows": int(hi - lo)}
        )
    data = json.dumps(doc, sort_keys=True).encode()
    (folder / "transform.json").write_bytes(data)
    for split in raw["splits"].values():
        split["shards"] = [{"rank": 0, **e} for e in entries]
        split["class_counts"] = {str(c): int((bins == c).sum()) for c in range(4)}
    raw["label"]["classes"] = [0, 1, 2, 3]
    raw["class_weights"] = {str(c): 1.0 for c in range(4)}
    raw["transform"]["sha256"] = hashlib.sha256(data).hexdigest()
    prepared.write_text(json.dumps(raw))
    return prepared, target


def test_the_loader_gives_a_continuous_label_as_its_float_value(tmp_path):
    path, target = regression_export(tmp_path)
    manifest = load_manifest(str(path))
    manifest = with_transform_document(manifest, (path.parent / "transform.json").read_bytes())
    batches = list(RankBatches(manifest, "train", 0, world_size=1, shuffle=False, with_ids=True))
    labels = np.concatenate([b.label.numpy() for b in batches])
    ids = np.concatenate([b.ids for b in batches])
    assert batches[0].label.dtype.is_floating_point
    by_id = {f"row-{i:05d}": np.float32(v) for i, v in enumerate(target)}
    assert labels.tolist() == [by_id[i] for i in ids]


def test_regression_metrics_against_the_train_mean():
    values = np.array([1.0, 2.0, 3.0, 6.0])
    m = regression_metrics(np.array([1.0, 2.0, 4.0, 6.0]), values, train_mean=2.0)
    assert m["mae"] == 0.25 and m["rmse"] == 0.5 and m["r2"] == pytest.approx(1 - 1 / 14)
    assert m["baseline"]["mae"] == 1.5 and m["baseline"]["r2"] == pytest.approx(1 - 18 / 14)
    assert regression_metrics(np.ones(3), np.ones(3), 1.0)["r2"] is None


def test_a_regression_trains_and_beats_the_train_mean(tmp_path):
    path, _ = regression_export(tmp_path / "data")
    out = tmp_path / "run"
    args = ["--manifest", str(path), "--output", str(out), "--epochs", "30", "--device", "cpu", "--seed", "3"]
    result = run_module(["-m", "lakeprep_train", *args, "--lr", "0.01"])
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    validation = metrics["validation"]
    assert "accuracy" not in validation and validation["rows"] == 200
    assert validation["baseline"]["predict"] == "train mean"
    assert validation["r2"] > 0.5 and validation["rmse"] < validation["baseline"]["rmse"]
    assert "R²" in result.stderr
