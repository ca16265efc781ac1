from __future__ import annotations

import collections
import gc
import hashlib
import json
import math
import threading
import time
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from lakeprep_train import dataset
from lakeprep_train.dataset import RankBatches, ShardSpan, plan_rank, split_batches
from lakeprep_train.manifest import load_manifest, with_transform_document
from tests.training import prepared_export


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
    # Ids as the shards hold them (int32: half the bytes to pin and copy); the label int64.
    assert batch.categorical.dtype == torch.int32 and batch.categorical.shape == (32, 1)
    assert batch.text.dtype == torch.int32 and batch.text.shape == (32, 1, 4)
    assert batch.label.dtype == torch.int64 and set(batch.label.tolist()) <= {0, 1}
    assert batch.ids is None


def test_the_attention_mask_marks_tokens_not_padding():
    text = torch.tensor([[[101, 7, 102, 0]], [[101, 102, 0, 0]]], dtype=torch.int32)
    batch = dataset.Batch(
        numeric=torch.zeros(2, 0),
        categorical=torch.zeros(2, 0, dtype=torch.int32),
        text=text,
        label=torch.zeros(2, dtype=torch.int64),
    )
    assert batch.attention_mask.dtype == torch.uint8
    assert batch.attention_mask.tolist() == [[[1, 1, 1, 0]], [[1, 1, 0, 0]]]


def test_rows_match_their_shard_values(export_two_ranks):
    manifest = load_manifest(str(export_two_ranks))
    shard = manifest.split("validation").shards_for_rank(0)[0]
    table = pq.read_table(shard.location)
    batch = next(iter(RankBatches(manifest, "validation", 0, with_ids=True)))
    assert list(batch.ids[:3]) == table.column("id").to_pylist()[:3]
    assert batch.text[:3, 0, :].tolist() == table.column("txt__t").to_pylist()[:3]
    assert batch.categorical[:3, 0].tolist() == table.column("cat__c").to_pylist()[:3]


def test_shuffle_is_reproducible_per_epoch_and_the_ranks_cover_the_split(export_two_ranks):
    manifest = load_manifest(str(export_two_ranks))

    def epoch_order(epoch: int) -> list[str]:
        ranks = [RankBatches(manifest, "train", r, shuffle=True, seed=7, with_ids=True) for r in (0, 1)]
        return [row for ds in ranks for batch in epoch_ids(ds, epoch) for row in batch]

    assert epoch_order(0) == epoch_order(0)
    assert epoch_order(0) != epoch_order(1)
    # The export's 300 rows divide by its 2 ranks: every epoch reads each row once.
    assert sorted(epoch_order(0)) == sorted(epoch_order(1)) == sorted(set(epoch_order(0)))
    in_order = [RankBatches(manifest, "train", r, with_ids=True) for r in (0, 1)]
    assert sorted(epoch_order(0)) == sorted(row for ds in in_order for b in epoch_ids(ds, 0) for row in b)


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


def corrupt_shard(manifest_path, shard: str, column: str, row: int, value) -> None:
    """Rewrite one value of a shard in place, keeping its row groups of 40 rows."""
    path = manifest_path.parent / "shards" / "train" / shard
    rows = pq.read_table(path).to_pylist()
    rows[row][column] = value
    table = pa.Table.from_pylist(rows, schema=pq.read_schema(path))
    pq.write_table(table, path, row_group_size=40, compression="zstd")


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("num__x", float("nan"), r"numeric column\(s\) \['num__x'\] hold NaN or infinity"),
        ("num__x", float("-inf"), r"numeric column\(s\) \['num__x'\] hold NaN or infinity"),
        ("cat__c", -1, r"categorical 'cat__c': id -1 is outside \[0, cardinality=8\)"),
        ("cat__c", 8, r"categorical 'cat__c': id 8 is outside \[0, cardinality=8\)"),
        ("txt__t", [1, 2, 16, 0], r"text 'txt__t': id 16 is outside \[0, vocab_size=16\)"),
        ("label", 7, r"label value 7 is not in label.classes \[0, 1\]"),
    ],
)
def test_a_corrupt_value_fails_naming_the_shard_and_column(copied_export, column, value, message):
    # Row 50 is in the shard's second row group, read by the background threads after
    # batches of the first shards were handed out: the error still reaches the consumer.
    corrupt_shard(copied_export, "shard-00002.parquet", column, 50, value)
    manifest = load_manifest(str(copied_export))
    assert pq.read_metadata(manifest.split("train").shards[2].location).num_row_groups == 3
    with pytest.raises(
        ValueError, match=r"splits.train rank 0 shard shards/train/shard-00002.parquet: " + message
    ):
        list(RankBatches(manifest, "train", 0, world_size=1))


def test_batches_are_writable_tensors_read_without_warnings(export_two_ranks):
    # One text feature is handed over as a view of the decoded ids, not a copy: it must
    # still be an ordinary writable tensor (torch warns on read-only numpy memory), and
    # writing into one batch must leave the next read of the rows as they are.
    manifest = load_manifest(str(export_two_ranks))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = next(iter(RankBatches(manifest, "train", 0)))
        first.text += 1
        first.numeric.zero_()
        again = next(iter(RankBatches(manifest, "train", 0)))
    assert torch.equal(first.text, again.text + 1)
    assert again.numeric.abs().sum() > 0


def test_a_text_column_becomes_its_id_matrix_without_a_copy():
    # Sliced, as a rank's span slices a row group: the view starts at the slice's ids.
    column = pa.chunked_array([pa.array([[1, 2], [3, 4], [5, 6]], pa.list_(pa.int32()))]).slice(1)
    tokens = dataset._token_matrix(column, 2, 2, "shard-0")
    values = column.chunk(0).flatten()
    assert tokens.tolist() == [[3, 4], [5, 6]] and tokens.flags.writeable
    assert tokens.ctypes.data == values.buffers()[1].address + values.offset * 4


def test_text_features_of_different_lengths_share_one_zero_padded_tensor(copied_export, edit_manifest):
    # A second text feature, 2 ids long, beside txt__t (4): both in one [B, 2, 4] tensor.
    for path in sorted((copied_export.parent / "shards").rglob("*.parquet")):
        table = pq.read_table(path)
        short = pa.array([[i % 7 + 1, 0] for i in range(table.num_rows)], type=pa.list_(pa.int32()))
        pq.write_table(table.append_column("txt__u", short), path, row_group_size=40)

    def add_feature(raw):
        raw["features"].append(
            {"name": "txt__u", "role": "text", "dtype": "int32", "shape": [2], "vocab_size": 16}
        )
        for split in raw["splits"].values():
            for shard in split["shards"]:
                data = (copied_export.parent / shard["path"]).read_bytes()
                shard["bytes"], shard["sha256"] = len(data), hashlib.sha256(data).hexdigest()

    manifest = load_manifest(str(edit_manifest(copied_export, add_feature)))
    shard = pq.read_table(manifest.split("train").shards[0].location)
    batch = next(iter(RankBatches(manifest, "train", 0, world_size=1)))
    assert batch.text.shape == (32, 2, 4)
    assert batch.text[:5, 0, :].tolist() == shard.column("txt__t").to_pylist()[:5]
    assert batch.text[:5, 1, :].tolist() == [[i % 7 + 1, 0, 0, 0] for i in range(5)]


def test_finite_numerics_whose_sum_overflows_float32_still_read(copied_export):
    for row in range(4):
        corrupt_shard(copied_export, "shard-00000.parquet", "num__x", row, 3e38)
    manifest = load_manifest(str(copied_export))
    first = next(iter(RankBatches(manifest, "train", 0, world_size=1)))
    assert first.numeric[:4, 0].tolist() == [pytest.approx(3e38)] * 4


@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_batches_are_the_same_with_or_without_the_background_threads(export_odd, prefetch):
    manifest = load_manifest(str(export_odd))
    reference = epoch_ids(
        RankBatches(manifest, "train", 0, shuffle=True, seed=2, with_ids=True, prefetch=0), 1
    )
    data = RankBatches(manifest, "train", 0, shuffle=True, seed=2, with_ids=True, prefetch=prefetch)
    assert epoch_ids(data, 1) == reference
    # A resumed epoch reads the same batches from its start step on.
    data.set_epoch(1, start_step=3)
    assert [list(batch.ids) for batch in data] == reference[3:]


def reader_threads(before: set[threading.Thread], wait_s: float = 0.0) -> list[str]:
    """Names of the reader's threads started since ``before`` that are alive (after up to ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = [t.name for t in set(threading.enumerate()) - before if t.name.startswith("lakeprep-")]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def test_a_consumer_that_stops_early_stops_the_threads(export_odd):
    manifest = load_manifest(str(export_odd))
    before = set(threading.enumerate())
    batches = iter(RankBatches(manifest, "train", 0, prefetch=2))
    next(batches)
    assert sorted(reader_threads(before)) == ["lakeprep-prefetch", "lakeprep-read"]
    batches.close()
    assert reader_threads(before) == []
    # An iterator dropped before its end stops its threads too (they do not hold it).
    abandoned = iter(RankBatches(manifest, "train", 0, prefetch=2))
    next(abandoned)
    del abandoned
    gc.collect()
    assert reader_threads(before, wait_s=5) == []


def test_prepared_items_cross_in_parts_and_in_order():
    """What pin_memory takes (a copy per batch), here a marker: every item, in order."""
    runs = iter([list(range(150)), [], list(range(150, 160))])
    items = list(dataset._Background(runs, 2, lambda x: -x, "lakeprep-test"))
    assert items == [-x for x in range(160)]  # 150 > PINNED_PART_BATCHES: several parts


def test_split_batches_reads_every_rank(export_two_ranks):
    manifest = load_manifest(str(export_two_ranks))
    ids = [row for batch in split_batches(manifest, "test", with_ids=True) for row in batch.ids]
    assert len(ids) == len(set(ids)) == 120


# ------------------------------------------------ one export, any world size (read-time plan)


def shard_ids(manifest, split: str = "train") -> list[str]:
    return [
        row
        for shard in manifest.split(split).shards
        for row in pq.read_table(shard.location, columns=["id"]).column("id").to_pylist()
    ]


def read_every_rank(manifest, world_size: int, epoch: int, **options) -> list[list[list[str]]]:
    """Each rank's batches of row ids, as ``world_size`` separate readers see them."""
    return [
        epoch_ids(RankBatches(manifest, "train", r, world_size=world_size, with_ids=True, **options), epoch)
        for r in range(world_size)
    ]


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize(
    ("world_size", "per_rank", "steps", "dropped"), [(1, 301, 10, 0), (2, 150, 5, 1), (3, 100, 4, 1)]
)
def test_one_export_drop_any_world_size_equal_steps_each_row_at_most_once(
    export_odd, shuffle, world_size, per_rank, steps, dropped
):
    manifest = load_manifest(str(export_odd))
    assert manifest.split("train").plan.world_size == 1
    every_id = set(shard_ids(manifest))
    assert len(every_id) == 301
    for epoch in (0, 1):
        ranks = read_every_rank(manifest, world_size, epoch, shuffle=shuffle, seed=5)
        assert [len(batches) for batches in ranks] == [steps] * world_size
        assert [sum(len(b) for b in batches) for batches in ranks] == [per_rank] * world_size
        seen = [row for batches in ranks for batch in batches for row in batch]
        assert len(seen) == len(set(seen)) == world_size * per_rank
        assert set(seen) <= every_id and len(every_id - set(seen)) == dropped
    plan = RankBatches(manifest, "train", world_size - 1, world_size=world_size).plan
    assert (plan.rows_per_rank, plan.steps_per_rank, plan.rows_dropped, plan.rows_padded) == (
        per_rank,
        steps,
        dropped,
        0,
    )


@pytest.mark.parametrize(("world_size", "per_rank", "padded"), [(1, 301, 0), (2, 151, 1), (3, 101, 2)])
def test_one_export_pad_any_world_size_every_row_once_plus_repeats(
    export_odd_padded, world_size, per_rank, padded
):
    manifest = load_manifest(str(export_odd_padded))
    every_id = set(shard_ids(manifest))
    for epoch in (0, 1):
        values: dict[str, set[float]] = {}
        counts: dict[int, int] = {}
        for rank in range(world_size):
            ds = RankBatches(
                manifest, "train", rank, world_size=world_size, shuffle=True, seed=5, with_ids=True
            )
            ds.set_epoch(epoch)
            batches = list(ds)
            assert len(batches) == math.ceil(per_rank / 32)  # steps_per_rank, equal on every rank
            counts[rank] = sum(len(b) for b in batches)
            for batch in batches:
                for row, x in zip(batch.ids, batch.numeric[:, 0].tolist(), strict=True):
                    values.setdefault(row, set()).add(x)
        assert counts == dict.fromkeys(range(world_size), per_rank)
        assert set(values) == every_id  # every row read
        assert all(len(v) == 1 for v in values.values())  # a padded row is an exact repeat
    ids = [
        row
        for batches in read_every_rank(manifest, world_size, 1, shuffle=True, seed=5)
        for b in batches
        for row in b
    ]
    repeats = collections.Counter(ids)
    assert sorted(n for n in repeats.values() if n > 1) == [2] * padded
    assert len(ids) == 301 + padded
    assert RankBatches(manifest, "train", 0, world_size=world_size).plan.rows_padded == padded


def test_the_read_time_order_depends_on_seed_and_epoch_only(export_odd):
    manifest = load_manifest(str(export_odd))

    def order(world_size: int, epoch: int, seed: int = 5) -> list[str]:
        ranks = read_every_rank(manifest, world_size, epoch, shuffle=True, seed=seed)
        return [row for batches in ranks for batch in batches for row in batch]

    assert order(3, 1) == order(3, 1)
    assert order(3, 0) != order(3, 1)
    assert order(3, 1) != order(3, 1, seed=6)
    # The dropped row moves with the epoch's order, so over epochs every row is trained on.
    every_id = set(shard_ids(manifest))
    dropped = [every_id - set(order(2, epoch)) for epoch in range(4)]
    assert all(len(d) == 1 for d in dropped) and len(set().union(*dropped)) > 1


def test_plan_rank_refuses_more_ranks_than_rows(export_odd):
    manifest = load_manifest(str(export_odd))
    with pytest.raises(
        ValueError, match=r"splits.train: the split has 301 rows, fewer than the 302 ranks of this run"
    ):
        plan_rank(manifest.split("train"), 302, 0)
    with pytest.raises(ValueError, match=r"rank 3 must be in \[0, world_size=3\)"):
        plan_rank(manifest.split("train"), 3, 3)


def test_a_rank_reads_only_the_shards_of_its_chunk(export_odd):
    split = load_manifest(str(export_odd)).split("train")
    spans = [plan_rank(split, 3, r).spans for r in range(3)]
    # In manifest order the ranks' chunks are consecutive: rank 0 starts at shard 0, row 0.
    assert spans[0][0] == ShardSpan(0, 0, spans[0][0].stop)
    assert sum(s.stop - s.start for r in spans for s in r) == 300
    assert spans[2][-1].index == len(split.shards) - 1 and spans[2][-1].stop == split.shards[-1].rows - 1


def _gather_rank_ids(rank: int, world_size: int, manifest_path: str, init_file: str, out: str) -> None:
    """One spawned process: plan from the process group's world size, gather every rank's ids."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        manifest = load_manifest(manifest_path)
        data = RankBatches(
            manifest,
            "train",
            dist.get_rank(),
            world_size=dist.get_world_size(),
            shuffle=True,
            seed=9,
            with_ids=True,
        )
        epochs = []
        for epoch in (0, 1):
            data.set_epoch(epoch)
            epochs.append({"steps": len(data), "ids": [list(b.ids) for b in data]})
        gathered: list = [None] * world_size
        dist.all_gather_object(gathered, {"epochs": epochs, "plan": data.plan.to_json()})
        if rank == 0:
            with open(out, "w") as f:
                json.dump(gathered, f)
    finally:
        dist.destroy_process_group()


@pytest.mark.integration
@pytest.mark.parametrize(("world_size", "steps", "dropped"), [(1, 10, 0), (2, 5, 1), (3, 4, 1)])
def test_processes_of_a_gloo_group_read_one_export_each_row_once(
    export_odd, tmp_path, world_size, steps, dropped
):
    import torch.multiprocessing as mp

    out = tmp_path / "gathered.json"
    mp.spawn(
        _gather_rank_ids,
        args=(world_size, str(export_odd), str(tmp_path / "init"), str(out)),
        nprocs=world_size,
        join=True,
    )
    ranks = json.loads(out.read_text())
    every_id = set(shard_ids(load_manifest(str(export_odd))))
    orders = []
    for epoch in (0, 1):
        per_rank = [r["epochs"][epoch] for r in ranks]
        assert [len(r["ids"]) for r in per_rank] == [r["steps"] for r in per_rank] == [steps] * world_size
        seen = [row for r in per_rank for batch in r["ids"] for row in batch]
        assert len(seen) == len(set(seen)) == 301 - dropped
        assert len(every_id - set(seen)) == dropped
        orders.append(seen)
    assert orders[0] != orders[1]
    assert {r["plan"]["rows_dropped_per_epoch"] for r in ranks} == {dropped}
    # The same (seed, epoch) in one process gives what the group read.
    assert orders[1] == [
        row
        for b in read_every_rank(load_manifest(str(export_odd)), world_size, 1, shuffle=True, seed=9)
        for x in b
        for row in x
    ]


# ------------------------------------- prepared shards, encoded at read time; shard slices


def batches_of(manifest, world_size: int, rank: int, **options) -> list:
    ds = RankBatches(manifest, "train", rank, world_size=world_size, with_ids=True, **options)
    ds.check_shards()
    ds.set_epoch(1)
    return list(ds)


def assert_same_batches(left: list, right: list) -> None:
    assert len(left) == len(right)
    for a, b in zip(left, right, strict=True):
        # Bit for bit: float32 compared as its int32 bits (NaN, -0.0 and all).
        assert torch.equal(a.numeric.view(torch.int32), b.numeric.view(torch.int32))
        assert torch.equal(a.categorical, b.categorical) and torch.equal(a.text, b.text)
        assert torch.equal(a.label, b.label) and list(a.ids) == list(b.ids)
        assert a.numeric.dtype == b.numeric.dtype and a.text.dtype == b.text.dtype


@pytest.mark.parametrize(("world_size", "shuffle"), [(1, False), (2, True), (3, False)])
def test_prepared_shards_give_the_batches_of_their_encoded_shards(tmp_path, world_size, shuffle):
    encoded_path, prepared_path = prepared_export.write_pair(tmp_path)
    encoded = load_manifest(str(encoded_path))
    prepared = with_transform_document(load_manifest(str(prepared_path)))
    assert prepared.shard_columns == "prepared" and encoded.shard_columns == "encoded"
    for rank in range(world_size):
        left = batches_of(encoded, world_size, rank, shuffle=shuffle, seed=4)
        right = batches_of(prepared, world_size, rank, shuffle=shuffle, seed=4)
        assert_same_batches(left, right)
    # The rows exercise what the transform does: missing, clipped, unseen, cut and padded.
    everything = [b for r in range(world_size) for b in batches_of(prepared, world_size, r)]
    numeric = torch.cat([b.numeric for b in everything])
    categorical = torch.cat([b.categorical for b in everything])
    text = torch.cat([b.text for b in everything])
    assert numeric[:, 0].max() == pytest.approx((2000 - 900) / 400)  # clipped at the upper bound
    assert numeric[:, 0].min() == pytest.approx((100 - 900) / 400)
    assert (numeric[:, 0] == (1000 - 900) / 400).any()  # missing: the fill, 0.25 exactly
    assert set(categorical[:, 0].tolist()) == {0, 1, 2, 3, 4}  # missing, unseen, the vocabulary
    assert (text[:, 0, :] != 0).all(dim=1).any() and (text[:, 0, :] == 0).all(dim=1).any()
    assert (text[:, 1, 3] == 0).all()  # note keeps 3 tokens, padded to the tensor's 4
    assert set(text[:, 1, :3].unique().tolist()) == {0, 1, 2, 3}


def test_split_batches_of_prepared_shards_equal_the_encoded(tmp_path):
    encoded_path, prepared_path = prepared_export.write_pair(tmp_path, row_group_size=7)
    encoded = load_manifest(str(encoded_path))
    prepared = with_transform_document(load_manifest(str(prepared_path)))
    assert_same_batches(
        list(split_batches(encoded, "train", with_ids=True)),
        list(split_batches(prepared, "train", with_ids=True)),
    )


def test_prepared_shards_need_the_transform_document(tmp_path):
    _, prepared_path = prepared_export.write_pair(tmp_path)
    with pytest.raises(ValueError, match=r"shard_columns is 'prepared'.*with_transform_document"):
        RankBatches(load_manifest(str(prepared_path)), "train", 0)


def test_a_prepared_shard_with_a_wrong_column_type_is_refused_naming_it(tmp_path):
    _, prepared_path = prepared_export.write_pair(tmp_path)
    shard = prepared_path.parent / "shards" / "shard-00001.parquet"
    table = pq.read_table(shard)
    table = table.set_column(
        table.schema.get_field_index("carrier"), "carrier", pa.array(range(table.num_rows), pa.int64())
    )
    pq.write_table(table, shard, row_group_size=16)
    manifest = with_transform_document(load_manifest(str(prepared_path)))
    message = r"shard shards/shard-00001.parquet:? column 'carrier' has type int64, expected string"
    with pytest.raises(ValueError, match=message):
        RankBatches(manifest, "train", 0).check_shards()
    with pytest.raises(ValueError, match=message):
        list(RankBatches(manifest, "train", 0))


def write_slices(tmp_path, entries, *, remainder="drop", batch_size=8):
    """Files A (50 rows) and B (40 rows) of encoded rows in row groups of 8; ``entries`` slice them."""
    doc = prepared_export.transform_doc()
    rows = prepared_export.prepared_rows(90, seed=3)
    encoded = prepared_export.encoded_rows(rows, doc)
    files = {
        "A": prepared_export.write_file(encoded.slice(0, 50), tmp_path / "shards" / "shard-a.parquet", 8),
        "B": prepared_export.write_file(encoded.slice(50, 40), tmp_path / "shards" / "shard-b.parquet", 8),
    }
    ids = {"A": encoded.column("id").to_pylist()[:50], "B": encoded.column("id").to_pylist()[50:]}
    manifest_entries = []
    expected: list[str] = []
    for name, offset, count, keep_file_rows in entries:
        entry = {**files[name], "offset": offset, "rows": count}
        if not keep_file_rows:
            del entry["file_rows"]
        manifest_entries.append(entry)
        expected += ids[name][offset : offset + count]
    path = prepared_export.write_manifest(
        tmp_path, manifest_entries, batch_size=batch_size, remainder=remainder
    )
    return path, expected


SLICES = [
    ("A", 10, 20, True),
    ("B", 0, 40, True),
    ("A", 10, 20, True),
    ("B", 0, 15, False),
    ("A", 33, 17, True),
]


@pytest.mark.parametrize("remainder", ["drop", "pad"])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_shard_slices_give_exactly_the_rows_they_name(tmp_path, world_size, remainder):
    path, expected = write_slices(tmp_path, SLICES, remainder=remainder)
    manifest = load_manifest(str(path))
    n = len(expected)
    assert n == 112 and len(set(expected)) < n  # a repeated slice repeats its rows
    per_rank = n // world_size if remainder == "drop" else math.ceil(n / world_size)
    ranks = []
    for rank in range(world_size):
        batches = batches_of(manifest, world_size, rank)
        assert len(batches) == math.ceil(per_rank / 8)  # equal steps on every rank
        ranks.append([row for b in batches for row in b.ids])
    assert [len(r) for r in ranks] == [per_rank] * world_size
    assert [row for r in ranks for row in r] == (expected + expected)[: per_rank * world_size]


def test_shuffled_slices_permute_entries_and_read_every_row(tmp_path):
    path, expected = write_slices(tmp_path, SLICES)
    manifest = load_manifest(str(path))
    for epoch in (0, 1):
        seen = []
        for rank in range(2):
            ds = RankBatches(manifest, "train", rank, world_size=2, shuffle=True, seed=1, with_ids=True)
            ds.set_epoch(epoch)
            seen += [row for b in ds for row in b.ids]
        assert collections.Counter(seen) == collections.Counter(expected)


def test_a_slice_reads_only_the_row_groups_it_overlaps(tmp_path, monkeypatch):
    path, expected = write_slices(tmp_path, [("A", 10, 20, True)])
    groups = []
    read = pq.ParquetFile.read_row_group
    monkeypatch.setattr(
        pq.ParquetFile, "read_row_group", lambda self, g, **kw: groups.append(g) or read(self, g, **kw)
    )
    [batch_ids] = [[row for b in batches_of(load_manifest(str(path)), 1, 0) for row in b.ids]]
    assert batch_ids == expected
    assert sorted(groups) == [1, 2, 3]  # rows 8..31 of the file, in groups of 8


@pytest.mark.parametrize(
    ("slices", "message"),
    [
        ([("A", 10, 20, True), ("B", 30, 20, False)], r"has 40 rows, but the entry reads rows \[30, 50\)"),
        ([("A", 0, 40, True), ("B", 0, 25, False)], None),
    ],
)
def test_a_slice_past_the_files_end_is_refused_naming_the_shard(tmp_path, slices, message):
    path, expected = write_slices(tmp_path, slices)
    manifest = load_manifest(str(path))
    if message is None:  # a prefix without file_rows reads
        assert [row for b in batches_of(manifest, 1, 0) for row in b.ids] == expected
        return
    at = r"splits.train rank 0:? shard shards/shard-b.parquet:? "
    with pytest.raises(ValueError, match=at + message):
        RankBatches(manifest, "train", 0).check_shards()
    with pytest.raises(ValueError, match=at + message):
        list(RankBatches(manifest, "train", 0))


def test_file_rows_must_equal_the_files_row_count(tmp_path, edit_manifest):
    path, _ = write_slices(tmp_path, [("A", 0, 20, True), ("B", 0, 40, True)])
    edit_manifest(path, lambda m: m["splits"]["train"]["shards"][0].update(file_rows=49))
    with pytest.raises(
        ValueError, match=r"shard shards/shard-a.parquet has 50 rows, the manifest's file_rows says 49"
    ):
        RankBatches(load_manifest(str(path)), "train", 0).check_shards()


# ------------------------------------------- the shuffle buffer: files of one class each


def write_class_files(tmp_path, *, rows_per_class: int = 256, row_group_size: int = 64):
    """A split of two files of one class each (the prepared layout), in row groups of 64 rows."""
    doc = prepared_export.transform_doc()
    rows = prepared_export.encoded_rows(prepared_export.prepared_rows(2 * rows_per_class, seed=8), doc)
    entries = []
    for label in (0, 1):
        part = rows.slice(label * rows_per_class, rows_per_class)
        part = part.set_column(
            part.schema.get_field_index("label"), "label", pa.array([label] * rows_per_class, pa.int32())
        )
        path = tmp_path / "shards" / f"part-train-{label}-00000.parquet"
        entries.append({**prepared_export.write_file(part, path, row_group_size), "rows": rows_per_class})
    return prepared_export.write_manifest(tmp_path, entries, batch_size=64)


def test_the_shuffle_buffer_mixes_the_classes_of_one_class_files(tmp_path):
    manifest = load_manifest(str(write_class_files(tmp_path)))
    every_id = shard_ids(manifest)

    def read(epoch: int, *, start_step: int = 0, **options) -> list:
        ds = RankBatches(manifest, "train", 0, world_size=1, shuffle=True, seed=3, with_ids=True, **options)
        ds.set_epoch(epoch, start_step=start_step)
        return list(ds)

    first = read(0, shuffle_rows=512)  # the buffer spans both files
    assert [len(b) for b in first] == [64] * 8
    assert all(set(b.label.tolist()) == {0, 1} for b in first)  # no batch of one class
    assert collections.Counter(row for b in first for row in b.ids) == collections.Counter(every_id)
    assert_same_batches(read(0, shuffle_rows=512), first)  # the same (seed, epoch): the same batches
    assert_same_batches(read(0, shuffle_rows=512, prefetch=0), first)  # with or without the threads
    later = read(1, shuffle_rows=512)
    assert [list(b.ids) for b in later] != [list(b.ids) for b in first]
    assert sorted(row for b in later for row in b.ids) == sorted(every_id)
    # A resumed epoch gives the batches the uninterrupted one gave from its start step on.
    assert_same_batches(read(1, start_step=5, shuffle_rows=512), later[5:])
    # A buffer of two row groups still mixes rows across the file's row groups, and flushes
    # its last, partial fill: the same rows in the planned steps.
    small = read(0, shuffle_rows=100)
    assert [len(b) for b in small] == [64] * 8
    assert sorted(row for b in small for row in b.ids) == sorted(every_id)


def test_the_shuffle_buffer_holds_a_bounded_number_of_rows_and_yields_each_once():
    blocks = [
        {"label": np.arange(start, start + n)} for start, n in [(0, 10), (10, 30), (40, 5), (45, 40), (85, 7)]
    ]
    mixed = list(dataset._shuffle_buffer(iter(blocks), 32, np.random.default_rng(0)))
    assert [len(b["label"]) for b in mixed] == [40, 45, 7]  # held until 32 or more, then the rest
    assert sorted(np.concatenate([b["label"] for b in mixed]).tolist()) == list(range(92))
    assert mixed[0]["label"].tolist() != list(range(40))  # permuted together
    assert {int(x) for x in mixed[0]["label"][:20]} & set(range(10, 40))  # across the blocks


@pytest.mark.parametrize("rows", [0, -5, 2.5, True])
def test_shuffle_rows_must_be_a_positive_count(export_two_ranks, rows):
    with pytest.raises(ValueError, match=r"shuffle_rows .* must be a positive number of rows"):
        RankBatches(load_manifest(str(export_two_ranks)), "train", 0, shuffle=True, shuffle_rows=rows)
