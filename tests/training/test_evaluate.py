from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from lakeprep_train.dataset import RankBatches
from lakeprep_train.evaluate import evaluate_split
from lakeprep_train.manifest import load_manifest
from lakeprep_train.model import TabularMLP
from tests.training.conftest import write_export


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


def _evaluate_on_a_rank(rank: int, world_size: int, manifests: list[str], init_file: str, out: str) -> None:
    """One spawned process of a gloo group: evaluate each manifest's validation split, write the metrics."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        results = []
        for path in manifests:
            manifest = load_manifest(path)
            results.append(
                evaluate_split(
                    model_for(manifest),
                    manifest,
                    "validation",
                    torch.device("cpu"),
                    rank=rank,
                    world_size=world_size,
                    per_row=True,
                )
            )
        with open(f"{out}.{rank}", "w") as f:
            json.dump(results, f)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def uneven_validation(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, int]]:
    """Validation splits whose rows do not divide by 3, and one with fewer rows than 3 ranks.

    name -> (manifest, distinct validation rows).
    """
    root = tmp_path_factory.mktemp("uneven_validation")
    exports = {
        # 61 rows, remainder "drop": a 3-rank training plan would leave one row out.
        "drop": (dict(rows_per_rank={"train": 40, "validation": 61}, batch_size=8, shards_per_rank=3), 61),
        # 61 rows exported with remainder "pad": 7 of them repeat rows (same id), 54 distinct.
        "pad": (dict(rows_per_rank={"train": 40, "validation": 61}, batch_size=8, pad=7), 54),
        # 2 rows for 3 ranks: the third rank reads nothing.
        "tiny": (dict(rows_per_rank={"train": 40, "validation": 2}, batch_size=8, shards_per_rank=1), 2),
    }
    return {
        name: (write_export(root / name, world_size=1, row_group_size=5, seed=4, **options), rows)
        for name, (options, rows) in exports.items()
    }


@pytest.mark.integration
def test_three_ranks_evaluate_together_and_equal_one_process(uneven_validation, tmp_path):
    import torch.multiprocessing as mp

    names = list(uneven_validation)
    paths = [str(uneven_validation[name][0]) for name in names]
    out = tmp_path / "metrics"
    mp.spawn(_evaluate_on_a_rank, args=(3, paths, str(tmp_path / "init"), str(out)), nprocs=3, join=True)
    ranks = [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(3)]
    assert ranks[0] == ranks[1] == ranks[2]  # every rank holds the same numbers
    for name, path, evaluated in zip(names, paths, ranks[0], strict=True):
        manifest = load_manifest(path)
        alone = evaluate_split(model_for(manifest), manifest, "validation", torch.device("cpu"), per_row=True)
        distinct = uneven_validation[name][1]
        assert evaluated["rows"] == alone["rows"] == len(evaluated["outputs"]) == distinct, name
        expected_ids = {
            row_id
            for shard in manifest.split("validation").shards
            for row_id in pq.read_table(shard.location, columns=["id"]).column("id").to_pylist()
        }
        assert set(evaluated["outputs"]) == expected_ids, name
        for key in ("loss", "accuracy", "balanced_accuracy", "auc"):
            assert evaluated[key] == pytest.approx(alone[key], rel=1e-6, abs=1e-9), (name, key)
        assert evaluated["baseline"] == alone["baseline"], name
        for row_id, probabilities in alone["outputs"].items():
            assert evaluated["outputs"][row_id] == pytest.approx(probabilities, rel=1e-6), (name, row_id)
