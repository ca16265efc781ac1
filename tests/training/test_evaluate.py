from __future__ import annotations

import shutil

import numpy as np
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
    train = manifest.split("train").class_counts
    majority = 1 if train["1"] > train["0"] else 0
    assert result["baseline"]["majority_class"] == majority
    expected = positives if majority == 1 else 53 - positives
    assert result["baseline"]["accuracy"] == pytest.approx(expected / 53)


def test_the_baseline_is_the_training_majority_as_sampled(tmp_path, export_two_ranks, edit_manifest):
    """Not the evaluated split's own majority, nor the train split after balancing."""
    shutil.copytree(export_two_ranks.parent, tmp_path / "export")
    path = tmp_path / "export" / "manifest.json"
    manifest = load_manifest(str(path))
    model = model_for(manifest)
    labels = np.concatenate(
        [
            pq.read_table(s.location, columns=["label"]).column("label").to_numpy()
            for s in manifest.split("test").shards
        ]
    )
    test_majority = int(np.bincount(labels, minlength=2).argmax())
    other = 1 - test_majority

    def natural_majority_is_the_other_class(raw):
        train = raw["splits"]["train"]
        # Balanced for training, but as sampled the other class dominated.
        train["class_counts_natural"] = {str(other): 250, str(test_majority): 50}

    edit_manifest(path, natural_majority_is_the_other_class)
    result = evaluate_split(model, load_manifest(str(path)), "test", torch.device("cpu"))
    baseline = result["baseline"]
    assert baseline["majority_class"] == other and baseline["source"] == "train"
    assert baseline["accuracy"] == pytest.approx(float((labels == other).mean()))
    assert baseline["accuracy"] < 0.5 and baseline["balanced_accuracy"] == 0.5 and baseline["auc"] == 0.5
    assert 0.0 <= result["balanced_accuracy"] <= 1.0


def test_padded_training_split_keeps_the_plan(export_padded):
    manifest = load_manifest(str(export_padded))
    steps = [len(list(RankBatches(manifest, "train", rank))) for rank in (0, 1)]
    assert steps == [4, 4]
