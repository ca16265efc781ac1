from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import torch

from lakeprep_train.dataset import RankBatches, split_batches
from lakeprep_train.manifest import load_manifest


def epoch_ids(dataset: RankBatches, epoch: int) -> list[list[str]]:
    dataset.set_epoch(epoch)
    return [list(batch.ids) for batch in dataset]


@pytest.mark.parametrize("shuffle", [False, True])
def test_each_rank_yields_the_planned_steps_and_every_row_once(export_two_ranks, shuffle):
    manifest = load_manifest(str(export_two_ranks))
    plan = manifest.split("train").plan
    expected_ids = set()
    for shard in manifest.split("train").shards:
        expected_ids.update(pq.read_table(shard.location, columns=["id"]).column("id").to_pylist())
    for epoch in range(2):
        seen: list[str] = []
        for rank in range(2):
            dataset = RankBatches(manifest, "train", rank, shuffle=shuffle, seed=3, with_ids=True)
            batches = epoch_ids(dataset, epoch)
            assert len(batches) == plan.steps_per_rank == len(dataset) == 5
            assert [len(b) for b in batches] == [32, 32, 32, 32, 22]
            seen += [row for batch in batches for row in batch]
        assert len(seen) == len(set(seen)) == 300
        assert set(seen) == expected_ids


def test_batches_have_the_tensor_layout(export_two_ranks):
    manifest = load_manifest(str(export_two_ranks))
    batch = next(iter(RankBatches(manifest, "train", 1)))
    assert batch.numeric.dtype == torch.float32 and batch.numeric.shape == (32, 1)
    assert batch.categorical.dtype == torch.int64 and batch.categorical.shape == (32, 1)
    assert batch.text.dtype == torch.int64 and batch.text.shape == (32, 1, 4)
    assert batch.label.dtype == torch.int64 and set(batch.label.tolist()) <= {0, 1}
    assert batch.ids is None


def test_rows_match_their_shard_values(export_two_ranks):
    manifest = load_manifest(str(export_two_ranks))
    shard = manifest.split("validation").shards_for_rank(0)[0]
    table = pq.read_table(shard.location)
    batch = next(iter(RankBatches(manifest, "validation", 0, with_ids=True)))
    assert list(batch.ids[:3]) == table.column("id").to_pylist()[:3]
    assert batch.text[:3, 0, :].tolist() == table.column("txt__t").to_pylist()[:3]
    assert batch.categorical[:3, 0].tolist() == table.column("cat__c").to_pylist()[:3]


def test_shuffle_is_reproducible_per_epoch_and_stays_on_its_rank(export_two_ranks):
    manifest = load_manifest(str(export_two_ranks))
    first = RankBatches(manifest, "train", 0, shuffle=True, seed=7, with_ids=True)
    again = RankBatches(manifest, "train", 0, shuffle=True, seed=7, with_ids=True)
    assert epoch_ids(first, 0) == epoch_ids(again, 0)
    assert epoch_ids(first, 0) != epoch_ids(first, 1)
    assert sorted(sum(epoch_ids(first, 0), [])) == sorted(sum(epoch_ids(first, 1), []))
    in_order = RankBatches(manifest, "train", 0, with_ids=True)
    assert sorted(sum(epoch_ids(in_order, 0), [])) == sorted(sum(epoch_ids(first, 0), []))


def test_a_shard_that_breaks_the_plan_fails_before_training(copied_export, edit_manifest):
    def move_a_row(m):
        shards = m["splits"]["train"]["shards"]
        shards[0]["rows"] -= 1
        shards[2]["rows"] += 1

    manifest = load_manifest(str(edit_manifest(copied_export, move_a_row)))
    with pytest.raises(
        ValueError, match=r"shard shards/train/shard-00000.parquet has \d+ rows, the manifest's rows says"
    ):
        RankBatches(manifest, "train", 0).check_shards()


def test_a_read_error_reaches_the_consumer(copied_export):
    manifest = load_manifest(str(copied_export))
    shard = manifest.split("train").shards_for_rank(1)[1]
    with open(shard.location, "r+b") as f:
        f.truncate(50)
    with pytest.raises(
        ValueError, match=r"splits.train rank 1 shard shards/train/shard-00003.parquet: cannot read"
    ):
        list(RankBatches(manifest, "train", 1))


def test_an_out_of_range_id_is_named(tmp_path, copied_export, edit_manifest):
    edit_manifest(copied_export, lambda m: m["features"][1].update(cardinality=3))
    manifest = load_manifest(str(copied_export))
    with pytest.raises(ValueError, match=r"categorical 'cat__c': id \d is outside \[0, cardinality=3\)"):
        list(RankBatches(manifest, "train", 0))


def test_split_batches_reads_every_rank(export_two_ranks):
    manifest = load_manifest(str(export_two_ranks))
    ids = [row for batch in split_batches(manifest, "test", with_ids=True) for row in batch.ids]
    assert len(ids) == len(set(ids)) == 120
