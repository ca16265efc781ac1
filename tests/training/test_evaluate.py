from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import torch

from lakeprep_train.dataset import RankBatches
from lakeprep_train.evaluate import evaluate_split
from lakeprep_train.manifest import load_manifest
from lakeprep_train.model import TabularMLP


def model_for(manifest):
    torch.manual_seed(0)
    return TabularMLP(manifest.features, len(manifest.label.classes))


def test_evaluates_every_row_of_every_rank(export_two_ranks):
    manifest = load_manifest(str(export_two_ranks))
    result = evaluate_split(model_for(manifest), manifest, "test", torch.device("cpu"))
    assert result["rows"] == 120
    assert 0.0 <= result["accuracy"] <= 1.0 and 0.0 <= result["auc"] <= 1.0
    assert result["loss"] > 0
    assert result["baseline"]["majority_class"] in (0, 1)


def test_padded_rows_count_once(export_padded):
    manifest = load_manifest(str(export_padded))
    split = manifest.split("validation")
    assert split.plan.remainder == "pad" and split.rows == 60 and split.rows_available == 53
    labels_by_id = {}
    for shard in split.shards:
        table = pq.read_table(shard.location, columns=["id", "label"])
        labels_by_id.update(
            zip(table.column("id").to_pylist(), table.column("label").to_pylist(), strict=True)
        )
    positives = sum(labels_by_id.values())

    result = evaluate_split(model_for(manifest), manifest, "validation", torch.device("cpu"))
    assert result["rows"] == len(labels_by_id) == 53
    assert result["baseline"]["accuracy"] == pytest.approx(max(positives, 53 - positives) / 53)


def test_padded_training_split_keeps_the_plan(export_padded):
    manifest = load_manifest(str(export_padded))
    steps = [len(list(RankBatches(manifest, "train", rank))) for rank in (0, 1)]
    assert steps == [4, 4]
