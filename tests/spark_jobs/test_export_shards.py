from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from lakeprep_jobs import export_shards, fit_transform, lake_io, parquet_footer
from lakeprep_jobs.export_shards import SplitPlan
from lakeprep_train.manifest import load_manifest, verify_shards
from tests.spark_jobs.window_data import DAY_3, day_rows, export_params, fit_params, land_day

MIB = 1 << 20


def params(**kw):
    return export_params("file:///unused/transform.json", **kw)


# ------------------------------------------------------------------------- plan_split


@pytest.mark.parametrize(
    ("remainder", "world_size", "available", "rows", "per_rank", "steps"),
    [
        ("drop", 1, 11, 11, 11, 3),
        ("drop", 2, 11, 10, 5, 2),
        ("drop", 3, 11, 9, 3, 1),
        ("drop", 3, 2, 0, 0, 0),
        ("pad", 1, 11, 11, 11, 3),
        ("pad", 2, 11, 12, 6, 2),
        ("pad", 3, 11, 12, 4, 1),
        ("pad", 3, 12, 12, 4, 1),
        ("pad", 3, 1, 3, 1, 1),
    ],
)
def test_plan_split_gives_every_rank_the_same_rows(remainder, world_size, available, rows, per_rank, steps):
    plan = export_shards.plan_split(
        available, 1000.0, params(world_size=world_size, remainder=remainder, batch_size=4)
    )
    assert (plan.rows_available, plan.rows, plan.rows_per_rank, plan.steps_per_rank) == (
        available,
        rows,
        per_rank,
        steps,
    )
    assert plan.shards_per_rank == (1 if rows else 0)


@pytest.mark.parametrize("remainder", ["drop", "pad"])
def test_plan_split_of_zero_rows_is_empty(remainder):
    plan = export_shards.plan_split(0, 0.0, params(world_size=2, remainder=remainder))
    assert plan == SplitPlan(rows_available=0, rows=0, rows_per_rank=0, steps_per_rank=0, shards_per_rank=0)


def test_plan_split_sizes_shards_by_bytes_but_never_empty():
    p = params(world_size=2, target_shard_mb=1, batch_size=2)
    # 10 MiB over 1000 rows, 1 MiB shards: 10 shards, rounded up to 12 = lcm(1..4) so that
    # 1, 2, 3, 4 and 6 ranks read whole shards at train time: 6 per rank.
    assert export_shards.plan_split(1000, 10 * MIB, p).shards_per_rank == 6
    # Dropping one row of 1001 keeps 1000/1001 of the bytes: still 6 per rank.
    assert export_shards.plan_split(1001, 10 * MIB, p).shards_per_rank == 6
    # 13 MiB needs 13 shards; rounded up to 24, the next multiple of 12.
    assert export_shards.plan_split(1000, 13 * MIB, p).shards_per_rank == 12
    # Never more shards than rows on a rank: each shard holds at least one row.
    assert export_shards.plan_split(5, 10 * MIB, p).shards_per_rank == 2


@pytest.mark.parametrize(
    ("world_size", "rows", "mib", "n_shards"),
    [
        (2, 1000, 1, 2),  # one shard per rank is enough: no rounding to 12
        (2, 1000, 3, 12),
        (3, 1000, 13, 24),
        (8, 1000, 9, 24),  # lcm(12, 8)
        (5, 1000, 7, 60),  # lcm(12, 5)
        (2, 20, 3, 4),  # 12 shards would hold less than a batch each: a multiple of 2 only
    ],
)
def test_plan_split_rounds_shard_counts_for_common_world_sizes(world_size, rows, mib, n_shards):
    p = params(world_size=world_size, target_shard_mb=1, batch_size=2)
    plan = export_shards.plan_split(rows, mib * MIB, p)
    assert plan.shards_per_rank * world_size == n_shards


# ------------------------------------------------------------------- number_rows


def ids_frame(spark, n: int, seed: int = 0):
    ids = [f"id{i:04d}" for i in range(n)]
    random.Random(seed).shuffle(ids)
    return spark.createDataFrame([(i, k % 2) for k, i in enumerate(ids)], "id string, label int")


def test_number_rows_is_dense_and_independent_of_partitioning(spark):
    # More shuffle partitions than the session default, uncoalesced, so the per-partition
    # offsets are exercised.
    conf = {"spark.sql.shuffle.partitions": "5", "spark.sql.adaptive.coalescePartitions.enabled": "false"}
    saved = {k: spark.conf.get(k) for k in conf}
    try:
        for k, v in conf.items():
            spark.conf.set(k, v)
        one = export_shards.number_rows(ids_frame(spark, 60, seed=1).repartition(1)).collect()
        many = export_shards.number_rows(ids_frame(spark, 60, seed=2).repartition(7)).collect()
    finally:
        for k, v in saved.items():
            spark.conf.set(k, v)

    assert sorted(r["_idx"] for r in one) == list(range(60))
    assert {r["id"]: r["_idx"] for r in one} == {r["id"]: r["_idx"] for r in many}
    assert set(many[0].asDict()) == {"id", "label", "_idx"}


def test_splits_numbered_together_get_the_index_each_gets_alone(spark):
    # One sort for every split must number each exactly as sorting it alone would: the
    # shards' contents depend on it.
    conf = {"spark.sql.shuffle.partitions": "4", "spark.sql.adaptive.coalescePartitions.enabled": "false"}
    saved = {k: spark.conf.get(k) for k in conf}
    sizes = {"train": 40, "validation": 7, "test": 13}
    frames = {
        name: ids_frame(spark, n, seed=i).withColumn("_split", F.lit(name)).repartition(3)
        for i, (name, n) in enumerate(sizes.items())
    }
    try:
        for k, v in conf.items():
            spark.conf.set(k, v)
        union = frames["train"].unionByName(frames["validation"]).unionByName(frames["test"])
        together = export_shards.number_rows(union, sizes).collect()
        alone = {name: export_shards.number_rows(df).collect() for name, df in frames.items()}
    finally:
        for k, v in saved.items():
            spark.conf.set(k, v)

    for name, n in sizes.items():
        got = {r["id"]: r["_idx"] for r in together if r["_split"] == name}
        assert sorted(got.values()) == list(range(n)), name
        assert got == {r["id"]: r["_idx"] for r in alone[name]}, name


@pytest.mark.parametrize("part_bits", [0, 3, 7])
def test_numbered_in_parts_each_row_gets_its_rank_in_key_order(spark, part_bits):
    # Cut into 1, 8 or 128 parts of the hash order (fewer rows than parts: empty parts),
    # each group's rows are numbered as sorting that group alone by (key, id) would.
    from lakeprep_jobs import exact

    rows = [(f"r{i:03d}", ["a", "b", "c"][i % 7 % 3]) for i in range(150)]
    df = spark.createDataFrame(rows, "id string, g string").repartition(5)
    key = F.xxhash64("id", F.lit("seed"))
    got = exact.number_in_order(df, key, [F.col("id")], "n", F.col("g"), part_bits=part_bits)
    got = got.select("id", "g", "n", key.alias("k")).collect()

    expected = {}
    for g in {r["g"] for r in got}:
        ordered = sorted((r["k"], r["id"]) for r in got if r["g"] == g)
        expected.update({i: n for n, (_, i) in enumerate(ordered)})
    assert {r["id"]: r["n"] for r in got} == expected
    assert len(got) == 150


def test_part_bits_cut_the_largest_group_into_parts_of_about_rows_per_part():
    from lakeprep_jobs import exact

    assert exact.part_bits_for(0) == 0
    assert exact.part_bits_for(exact.ROWS_PER_PART) == 0
    assert exact.part_bits_for(exact.ROWS_PER_PART + 1) == 1
    assert exact.part_bits_for(16_000_000) == 8  # 245 parts of 65,536 -> 256
    assert exact.part_bits_for(10**15) == 16


@pytest.mark.parametrize("remainder", ["drop", "pad"])
def test_shards_assigned_per_split_together_match_each_split_alone(spark, remainder):
    p = params(world_size=3, remainder=remainder)
    sizes = {"train": 11, "validation": 4, "test": 1}
    plans = {name: export_shards.plan_split(n, 1000.0 * n, p) for name, n in sizes.items()}
    frames = {name: numbered(spark, n).withColumn("_split", F.lit(name)) for name, n in sizes.items()}
    union = frames["train"].unionByName(frames["validation"]).unionByName(frames["test"])
    together = export_shards.assign_shards(union, plans, p).collect()

    def key(r):
        return (r["id"], r["_idx"], r["_rank"], r["_shard"])

    for name, df in frames.items():
        alone = export_shards.assign_shards(df.drop("_split"), plans[name], p).collect()
        assert sorted(key(r) for r in together if r["_split"] == name) == sorted(map(key, alone)), name
        assert len(alone) == plans[name].rows


def numbered(spark, n: int):
    return spark.createDataFrame([(f"r{i}", i) for i in range(n)], "id string, _idx bigint")


def test_assign_shards_drop_keeps_the_first_rows_and_balances_ranks(spark):
    p = params(world_size=3)
    plan = SplitPlan(rows_available=8, rows=6, rows_per_rank=2, steps_per_rank=1, shards_per_rank=2)
    out = export_shards.assign_shards(numbered(spark, 8), plan, p).collect()

    assert sorted(r["id"] for r in out) == [f"r{i}" for i in range(6)]
    assert collections.Counter(r["_rank"] for r in out) == {0: 2, 1: 2, 2: 2}
    assert {r["_shard"] for r in out} == set(range(6))
    assert all(r["_shard"] % 3 == r["_rank"] for r in out)


@pytest.mark.parametrize(("available", "world_size"), [(7, 3), (1, 3), (2, 4)])
def test_assign_shards_pad_repeats_rows_to_equal_counts(spark, available, world_size):
    p = params(world_size=world_size, remainder="pad")
    plan = export_shards.plan_split(available, 1000.0, p)
    out = export_shards.assign_shards(numbered(spark, available), plan, p).collect()

    per_rank = collections.Counter(r["_rank"] for r in out)
    assert per_rank == dict.fromkeys(range(world_size), plan.rows_per_rank)
    assert len(out) == plan.rows > available
    assert sorted(r["_idx"] for r in out) == list(range(plan.rows))
    assert {r["id"] for r in out} == {f"r{i}" for i in range(available)}  # only repeats added
    assert all(r["_shard"] % world_size == r["_rank"] for r in out)


# ---------------------------------------------------------------------------- run()


def fitted(spark, root: Path, inputs: list[str]) -> str:
    """The window's transform, fitted for real: the URI of its transform.json."""
    out = root / "fit_transform" / f"dt={DAY_3}"
    fit_transform.run(spark, inputs, f"file://{out}", fit_params())
    return f"file://{out}/transform.json"


def window(spark, root: Path) -> list[str]:
    """Two complete days (the oldest of three is missing). Train 4 + 3 = 7 rows, validation 4, test 4."""
    return [
        land_day(spark, root, "2013-01-02", day_rows("2013-01-02", 4, 2, 2)),
        land_day(spark, root, DAY_3, day_rows(DAY_3, 3, 2, 2)),
    ]


def export(spark, root: Path, inputs: list[str], **kw) -> tuple[Path, dict]:
    out_dir = root / "export_shards" / f"dt={DAY_3}"
    report = export_shards.run(
        spark, inputs, f"file://{out_dir}", export_params(fitted(spark, root, inputs), **kw)
    )
    return out_dir, report


def shard_rows(folder: Path, manifest: dict, split: str) -> dict[int, list[dict]]:
    """Rows per rank, read from the shard files with pyarrow (rank = shard index % world size)."""
    w = manifest["splits"][split]["plan"]["world_size"]
    by_rank: dict[int, list[dict]] = collections.defaultdict(list)
    files = sorted((folder / "shards" / split).glob("shard-*.parquet"))
    for f in files:
        index = int(f.stem.split("-")[1])
        by_rank[index % w].extend(pq.read_table(f).to_pylist())
    return by_rank


def test_run_writes_balanced_shards_and_a_manifest_the_trainer_accepts(spark, tmp_path):
    inputs = window(spark, tmp_path)
    out_dir, report = export(spark, tmp_path, inputs, target_shard_mb=1e-6)

    manifest_path = out_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    assert manifest["window"]["missing"] == ["2013-01-01"]
    assert manifest["window"]["complete"] == ["2013-01-02", DAY_3]
    assert [s["uri"] for s in manifest["source_partitions"]] == inputs
    assert [s["rows"] for s in manifest["source_partitions"]] == [8, 7]
    assert [f["name"] for f in manifest["features"]] == ["num__x", "cat__c", "txt__t"]
    transform_doc = json.loads((tmp_path / "fit_transform" / f"dt={DAY_3}" / "transform.json").read_text())
    assert manifest["features"][1]["cardinality"] == len(transform_doc["categorical"][0]["vocabulary"]) + 2
    assert manifest["features"][2]["shape"] == [3]
    transform_bytes = (tmp_path / "fit_transform" / f"dt={DAY_3}" / "transform.json").read_bytes()
    assert manifest["transform"] == {
        "uri": "transform.json",
        "sha256": hashlib.sha256(transform_bytes).hexdigest(),
    }
    assert (out_dir / "transform.json").read_bytes() == transform_bytes

    train = manifest["splits"]["train"]
    assert (train["rows_available"], train["rows"]) == (7, 6)
    assert train["plan"]["rows_per_rank"] == 3 and train["plan"]["steps_per_rank"] == 2
    assert train["class_counts"] == {"0": 4, "1": 3}
    # No balancing by default: the train split as sampled, uniform class weights.
    assert train["class_counts_natural"] == {"0": 4, "1": 3}
    assert manifest["class_weights"] == {"0": 1.0, "1": 1.0}
    assert manifest["balance"] == {
        "strategy": "none",
        "target_ratio": 1.0,
        "augment": "none",
        "synthetic_rows": 0,
        "report": "sampling.json",
    }
    for name, split in manifest["splits"].items():
        assert len(split["shards"]) % 2 == 0 and len(split["shards"]) > 0, name
        assert [s["rank"] for s in split["shards"]] == [i % 2 for i in range(len(split["shards"]))]

    # Rows per rank, from the files themselves.
    train_rows = shard_rows(out_dir, manifest, "train")
    assert {r: len(v) for r, v in train_rows.items()} == {0: 3, 1: 3}
    ids = [row["id"] for v in train_rows.values() for row in v]
    assert len(set(ids)) == 6  # dropped, not repeated
    assert all(i.startswith(("2013-01-02-", "2013-01-03-")) for i in ids)
    for split in ("validation", "test"):
        assert {r: len(v) for r, v in shard_rows(out_dir, manifest, split).items()} == {0: 2, 1: 2}

    # Manifest entries match the bytes on disk.
    on_disk = sorted(p.relative_to(out_dir).as_posix() for p in out_dir.glob("shards/*/*.parquet"))
    listed = sorted(s["path"] for split in manifest["splits"].values() for s in split["shards"])
    assert listed == on_disk
    for split in manifest["splits"].values():
        for s in split["shards"]:
            data = (out_dir / s["path"]).read_bytes()
            assert s["bytes"] == len(data)
            assert s["sha256"] == hashlib.sha256(data).hexdigest()
            assert s["rows"] == pq.read_metadata(out_dir / s["path"]).num_rows

    schema = pq.read_schema(out_dir / train["shards"][0]["path"])
    assert schema.field("id").type == pa.string()
    assert schema.field("label").type == pa.int32()
    assert schema.field("num__x").type == pa.float32()
    assert schema.field("cat__c").type == pa.int32()
    assert schema.field("txt__t").type.value_type == pa.int32()
    assert "split" not in schema.names and "_shard" not in schema.names
    assert schema.field("is_synthetic").type == pa.bool_()

    assert (out_dir / "_SUCCESS").exists()
    assert json.loads((out_dir / lake_io.REPORT_NAME).read_text()) == report
    assert report["rows_in"] == 15 and report["rows_out"] == 14 and report["rows_dropped_for_balance"] == 1
    assert not [p for p in out_dir.rglob("*") if p.name.startswith("_tmp_")]

    # The cross-runtime contract: the trainer's own checker finds nothing wrong.
    loaded = load_manifest(str(manifest_path))
    assert verify_shards(loaded) == []
    assert loaded.split("train").plan.rows_per_rank == 3


def test_shards_are_written_in_row_groups_of_whole_batches(spark, tmp_path):
    """Row groups bounded by rows, not by the writer's buffered bytes: whole batches but the last."""
    days = [("2013-01-02", day_rows("2013-01-02", 40, 12, 12)), (DAY_3, day_rows(DAY_3, 30, 12, 12))]
    inputs = [land_day(spark, tmp_path, d, rows) for d, rows in days]
    out_dir, _ = export(spark, tmp_path, inputs, batch_size=4, row_group_mb=1e-9)  # a batch a group
    manifest = json.loads((out_dir / "manifest.json").read_text())
    train = manifest["splits"]["train"]
    assert len(train["shards"]) == 2 and train["plan"]["rows_per_rank"] == 35
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            meta = pq.read_metadata(out_dir / shard["path"])
            groups = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
            whole, last = divmod(shard["rows"], 4)
            assert groups == [4] * whole + ([last] if last else []), shard["path"]
    assert verify_shards(load_manifest(str(out_dir / "manifest.json"))) == []


def test_row_groups_are_whole_batches_of_about_row_group_mb_decoded():
    p = params(batch_size=256, row_group_mb=8)
    assert export_shards.row_group_rows(112, p) == 292 * 256  # 8 MiB of 112-byte rows: 292 batches
    assert export_shards.row_group_rows(1 << 20, p) == 256  # wider than a group: still one batch
    assert export_shards.row_group_rows(64, params(batch_size=4, row_group_mb=12 * 64 / MIB)) == 12
    assert export_shards.row_group_rows(112, params(batch_size=1, row_group_mb=1)) == MIB // 112


def test_every_split_gets_the_one_transform(spark, tmp_path):
    inputs = window(spark, tmp_path)
    out_dir, _ = export(spark, tmp_path, inputs)
    manifest = json.loads((out_dir / "manifest.json").read_text())
    doc = json.loads((tmp_path / "fit_transform" / f"dt={DAY_3}" / "transform.json").read_text())
    (num,) = doc["numeric"]
    raw = {r["id"]: r["x"] for r in spark.read.parquet(*inputs).collect()}
    for split in ("train", "validation", "test"):
        for rows in shard_rows(out_dir, manifest, split).values():
            for row in rows:
                expected = (raw[row["id"]] - num["center"]) / num["scale"]
                assert row["num__x"] == pytest.approx(expected, rel=1e-6), (split, row["id"])


def test_pad_mode_repeats_rows_to_equal_counts(spark, tmp_path):
    # Train 4 + 3 = 7 rows; validation has a single row, fewer than the 2 repeats it needs.
    inputs = [
        land_day(spark, tmp_path, "2013-01-02", day_rows("2013-01-02", 4, 1, 2)),
        land_day(spark, tmp_path, DAY_3, day_rows(DAY_3, 3, 0, 2)),
    ]
    out_dir, _ = export(spark, tmp_path, inputs, world_size=3, remainder="pad")

    manifest = json.loads((out_dir / "manifest.json").read_text())
    train = manifest["splits"]["train"]
    assert (train["rows_available"], train["rows"], train["plan"]["rows_per_rank"]) == (7, 9, 3)
    by_rank = shard_rows(out_dir, manifest, "train")
    assert {r: len(v) for r, v in by_rank.items()} == {0: 3, 1: 3, 2: 3}
    ids = collections.Counter(row["id"] for v in by_rank.values() for row in v)
    assert len(ids) == 7 and sorted(ids.values()) == [1] * 5 + [2] * 2
    validation = shard_rows(out_dir, manifest, "validation")
    assert {r: [row["id"] for row in v] for r, v in validation.items()} == {
        0: ["2013-01-02-4"],
        1: ["2013-01-02-4"],
        2: ["2013-01-02-4"],
    }
    assert manifest["splits"]["test"]["rows"] == 6
    assert verify_shards(load_manifest((out_dir / "manifest.json").as_uri())) == []


def test_an_incomplete_input_fails_clearly(spark, tmp_path):
    inputs = window(spark, tmp_path)
    transform_uri = fitted(spark, tmp_path, inputs)
    (tmp_path / "sample" / "dt=2013-01-02" / "_SUCCESS").unlink()
    with pytest.raises(FileNotFoundError, match="complete sampled partitions .*dt=2013-01-02"):
        export_shards.run(spark, inputs, f"file://{tmp_path}/export/x", export_params(transform_uri))
    assert not (tmp_path / "export" / "x").exists()


def test_a_numeric_that_would_be_infinite_fails_naming_the_column(spark, tmp_path):
    inputs = window(spark, tmp_path)
    transform_uri = fitted(spark, tmp_path, inputs)
    rows = day_rows(DAY_3, 3, 2, 2)
    rows[4] = (rows[4][0], 0, float("inf"), "a", [], "validation")
    land_day(spark, tmp_path, DAY_3, rows)
    with pytest.raises(ValueError, match=r"num__x': 1\}"):
        export_shards.run(spark, inputs, f"file://{tmp_path}/export/x", export_params(transform_uri))


def test_run_twice_gives_the_same_export(spark, tmp_path):
    inputs = window(spark, tmp_path)
    out_dir, _ = export(spark, tmp_path, inputs)
    first = {p.relative_to(out_dir): p.read_bytes() for p in out_dir.rglob("*") if p.is_file()}

    out_dir, _ = export(spark, tmp_path, inputs)
    second = {p.relative_to(out_dir): p.read_bytes() for p in out_dir.rglob("*") if p.is_file()}

    assert Path("manifest.json") in second
    assert sorted(second) == sorted(first)
    assert json.loads(second[Path("manifest.json")]) == json.loads(first[Path("manifest.json")])
    assert second == first
    assert not list((tmp_path / "export_shards" / "_staging").iterdir())


def test_empty_test_split_and_absent_class_still_give_a_manifest_the_trainer_accepts(spark, tmp_path):
    # Only label 0 rows in train (ids with even i), no test rows at all.
    rows = [r for r in day_rows(DAY_3, 6, 2, 0) if r[5] != "train" or r[1] == 0]
    inputs = [land_day(spark, tmp_path, DAY_3, rows)]
    out_dir, _ = export(spark, tmp_path, inputs, world_size=2)
    manifest = json.loads((out_dir / "manifest.json").read_text())
    assert manifest["splits"]["test"]["rows"] == 0 and manifest["splits"]["test"]["shards"] == []
    assert manifest["class_weights"] == {"0": 1.0, "1": 1.0}
    assert verify_shards(load_manifest((out_dir / "manifest.json").as_uri())) == []


def test_validation_split_smaller_than_world_size_is_refused(spark, tmp_path):
    inputs = [land_day(spark, tmp_path, DAY_3, day_rows(DAY_3, 6, 1, 2))]
    with pytest.raises(ValueError, match="the validation split has 1 rows, fewer than world_size 2"):
        export(spark, tmp_path, inputs, world_size=2)


def test_sampling_report_counts_every_step_and_reweight_sets_the_class_weights(spark, tmp_path):
    # Train 4 + 3 = 7 rows (labels 0,1,0,1 and 0,1,0): reweight changes no row, only the weights.
    inputs = window(spark, tmp_path)
    for uri, before in zip(inputs, ({"0": 6, "1": 5}, {"0": 5, "1": 4}), strict=True):
        report_path = Path(uri.removeprefix("file://")) / lake_io.REPORT_NAME
        report_path.write_text(json.dumps({"stage": "sample", "rows_out": 8, "class_counts_before": before}))
    out_dir, report = export(spark, tmp_path, inputs, balance={"strategy": "reweight"})

    manifest = json.loads((out_dir / "manifest.json").read_text())
    assert manifest["class_weights"] == {"0": round(7 / 8, 6), "1": round(7 / 6, 6)}
    assert manifest["balance"]["strategy"] == "reweight" and manifest["balance"]["synthetic_rows"] == 0
    assert manifest["splits"]["train"]["class_counts"] == manifest["splits"]["train"]["class_counts_natural"]

    sampling = json.loads((out_dir / "sampling.json").read_text())
    assert sampling["days"] == 2 and sampling["balance"]["strategy"] == "reweight"
    assert [s["step"] for s in sampling["steps"]] == ["before_sampling", "sample", "balance", "augment"]
    before, sampled, balanced, augmented = sampling["steps"]
    assert before == {
        "step": "before_sampling",
        "class_counts": {"0": 11, "1": 9},
        "splits": None,
        "days_reported": 2,
    }
    assert sampled["splits"] == {
        "train": {"0": 4, "1": 3},
        "validation": {"0": 2, "1": 2},
        "test": {"0": 2, "1": 2},
    }
    assert sampled["class_counts"] == {"0": 8, "1": 7}
    assert balanced["splits"] == sampled["splits"] == augmented["splits"]
    assert sampling["synthetic"]["validation"] == {"0": 0, "1": 0}
    assert sampling["class_weights"] == manifest["class_weights"]
    assert report["rows_undersampled"] == report["rows_oversampled"] == report["rows_synthetic"] == 0


# ------------------------------------------------------------------ reproducible bytes


def _reversed_encodings(data: bytes) -> bytes:
    """The file as another JVM may write it: every column chunk's encodings in reverse order."""
    offset, footer = parquet_footer.split_file(data, len(data))
    meta, _, _ = parquet_footer._read(footer, 0, parquet_footer._STRUCT)
    out = bytearray(footer)
    for row_group, _, _ in meta[4][1]:
        for chunk, _, _ in row_group[1][1]:
            items = chunk[3][1][2][1]
            parquet_footer._sort_elements(out, items, key=lambda item: -item[0])
    return data[:offset] + bytes(out) + data[offset + len(footer) :]


def test_canonical_footer_ignores_the_order_the_writer_listed_encodings_in(spark, tmp_path):
    inputs = window(spark, tmp_path)
    out_dir, _ = export(spark, tmp_path, inputs)
    manifest = json.loads((out_dir / "manifest.json").read_text())
    shard = out_dir / manifest["splits"]["train"]["shards"][0]["path"]
    written = shard.read_bytes()

    permuted = _reversed_encodings(written)
    other = tmp_path / "permuted.parquet"
    other.write_bytes(permuted)
    assert permuted != written and len(permuted) == len(written)
    assert pq.read_table(other).equals(pq.read_table(shard))  # the same file to a reader
    encodings = [pq.read_metadata(shard).row_group(0).column(i).encodings for i in range(6)]
    assert any(len(e) > 1 for e in encodings)
    # Committing a shard rewrites a non-canonical footer (the pages copied in the JVM) into
    # what the export wrote: sorted encodings, as any JVM would get ...
    moved = tmp_path / "committed" / "shard.parquet"
    assert parquet_footer.commit_shard(spark, f"file://{other}", f"file://{moved}") is True
    assert moved.read_bytes() == written and not other.exists()
    # ... and only renames a canonical one.
    assert parquet_footer.commit_shard(spark, f"file://{moved}", f"file://{other}") is False
    assert other.read_bytes() == written and not moved.exists()
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet at all")
    with pytest.raises(parquet_footer.FooterError, match="junk.parquet is not a Parquet file"):
        parquet_footer.commit_shard(spark, f"file://{junk}", f"file://{tmp_path}/never.parquet")


def test_a_rerun_in_another_jvm_writes_byte_identical_shards_and_fingerprints(spark, tmp_path):
    """The same rows, landed twice (new part-file names), exported by two JVMs: same bytes."""
    lake_a, lake_b = tmp_path / "a", tmp_path / "b"
    days = [("2013-01-02", day_rows("2013-01-02", 40, 12, 12)), (DAY_3, day_rows(DAY_3, 30, 12, 12))]
    inputs_a = [land_day(spark, lake_a, d, rows) for d, rows in days]
    inputs_b = [land_day(spark, lake_b, d, rows) for d, rows in days]
    names = {p.name for p in lake_a.glob("sample/*/*.parquet")}
    assert names and not names & {p.name for p in lake_b.glob("sample/*/*.parquet")}
    transform_uri = fitted(spark, lake_a, inputs_a)
    p = export_params(transform_uri)

    out_a = lake_a / "export_shards" / f"dt={DAY_3}"
    export_shards.run(spark, inputs_a, f"file://{out_a}", p)
    out_b = lake_b / "export_shards" / f"dt={DAY_3}"
    argv = ["--output", f"file://{out_b}", "--params", json.dumps(dataclasses.asdict(p))]
    for uri in inputs_b:
        argv += ["--input", uri]
    env = {
        **os.environ,
        "PYSPARK_SUBMIT_ARGS": "--master local[2] --conf spark.sql.shuffle.partitions=2 "
        "--conf spark.ui.enabled=false --conf spark.sql.session.timeZone=UTC pyspark-shell",
    }
    done = subprocess.run(
        [sys.executable, "-m", "lakeprep_jobs.export_shards", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]

    a = json.loads((out_a / "manifest.json").read_text())
    b = json.loads((out_b / "manifest.json").read_text())
    shards = {
        m: [(s["path"], s["sha256"]) for v in x["splits"].values() for s in v["shards"]]
        for m, x in ((0, a), (1, b))
    }
    assert len(shards[0]) >= 6 and shards[0] == shards[1]
    fingerprints = [[s["fingerprint"] for s in x["source_partitions"]] for x in (a, b)]
    assert fingerprints[0] == fingerprints[1] and len(set(fingerprints[0])) == 2
    # Apart from where the lake is, the manifests are equal.
    for x in (a, b):
        for s in x["source_partitions"]:
            s["uri"] = s["uri"].rsplit("/", 1)[-1]
    assert a == b
    for rel in [s for s, _ in shards[0]]:
        assert (out_a / rel).read_bytes() == (out_b / rel).read_bytes()


def test_a_fingerprint_follows_the_rows_not_the_files(spark, tmp_path):
    rows = day_rows(DAY_3, 6, 2, 2)
    (one,) = export_shards.fingerprint_partitions(spark, [land_day(spark, tmp_path / "a", DAY_3, rows)])
    # The same rows in another order and another number of files.
    part = tmp_path / "b" / "sample" / f"dt={DAY_3}"
    spark.createDataFrame(
        rows[::-1], "id string, label int, x double, c string, t array<string>, split string"
    ).repartition(3).write.parquet(f"file://{part}")
    (same,) = export_shards.fingerprint_partitions(spark, [f"file://{part}"])
    changed = [rows[0][:2] + (rows[0][2] + 1,) + rows[0][3:], *rows[1:]]
    (other,) = export_shards.fingerprint_partitions(spark, [land_day(spark, tmp_path / "c", DAY_3, changed)])
    duplicated = [*rows, rows[0]]
    (more,) = export_shards.fingerprint_partitions(
        spark, [land_day(spark, tmp_path / "d", DAY_3, duplicated)]
    )
    assert one == same
    assert len({one, other, more}) == 3


def test_shards_are_sized_by_the_decoded_row_width_not_by_stored_bytes():
    features = [
        {"name": "num__a", "role": "numeric", "dtype": "float32", "shape": []},
        {"name": "cat__b", "role": "categorical", "dtype": "int32", "shape": [], "cardinality": 3},
        {"name": "txt__c", "role": "text", "dtype": "int32", "shape": [8], "vocab_size": 9},
    ]
    assert export_shards.row_bytes(features) == export_shards.ROW_OVERHEAD_BYTES + 4 + 4 + 32
    assert export_shards.row_bytes([]) == export_shards.ROW_OVERHEAD_BYTES


def test_the_written_shards_are_verified_without_reading_their_rows_again(spark, tmp_path):
    """Each split's shard rows come from the footers (no Spark job); only the bytes are read
    back, for their sha256."""
    from tests.spark_jobs.job_count import spark_jobs

    inputs = window(spark, tmp_path)
    transform = fitted(spark, tmp_path, inputs)
    out = f"file://{tmp_path}/export"
    report, jobs = spark_jobs(spark, lambda: export_shards.run(spark, inputs, out, export_params(transform)))
    manifest = json.loads((tmp_path / "export" / "manifest.json").read_text())
    for split, entry in manifest["splits"].items():
        for shard in entry["shards"]:
            written = pq.ParquetFile(tmp_path / "export" / shard["path"]).metadata.num_rows
            assert shard["rows"] == written, split
    assert report["rows_out"] == sum(s["rows"] for s in manifest["splits"].values())
    # The fingerprints come from the aggregate that counts the window: the same as alone.
    fingerprints = [s["fingerprint"] for s in manifest["source_partitions"]]
    assert fingerprints == export_shards.fingerprint_partitions(spark, inputs)
    assert len(set(fingerprints)) == len(inputs)
    # 15 measured; 43 while each split was numbered and written in jobs of its own, and the
    # window's counts, finite check, synthetic check and the sources' fingerprints were
    # separate aggregates (each read of a day inferring its schema in a job); 52 while
    # each split's rows were counted by a Spark read of its shards.
    assert len(jobs) <= 15, f"{len(jobs)} jobs\n" + "\n".join(jobs)


def test_an_id_on_several_days_is_exported_once_from_the_latest_day(spark, tmp_path):
    """The same record delivered on two (or three) days reaches its split once, as the latest day has it."""
    first = day_rows("2013-01-01", 4, 2, 2)
    second = day_rows("2013-01-02", 4, 2, 2)
    third = day_rows(DAY_3, 3, 2, 2)
    # Day 1's train row 0 again on day 2 and on day 3 (corrected x each time), and day 2's
    # test row 6 again on day 3, where it was assigned to validation.
    again = (first[0][0], first[0][1], 100.0, "a", ["w"], "train")
    later = (first[0][0], first[0][1], 200.0, "b", ["w"], "train")
    moved = (second[6][0], second[6][1], 7.5, "c", ["w"], "validation")
    inputs = [
        land_day(spark, tmp_path, "2013-01-01", first),
        land_day(spark, tmp_path, "2013-01-02", [*second, again]),
        land_day(spark, tmp_path, DAY_3, [*third, later, moved]),
    ]
    out_dir, report = export(spark, tmp_path, inputs, world_size=1)
    manifest = json.loads((out_dir / "manifest.json").read_text())
    assert report["rows_in"] == 8 + 9 + 9
    # Day 1's row 0 twice (day 1 and day 2 lose to day 3), day 2's test row once.
    assert report["rows_superseded"] == 3
    rows = {
        s: [r for rows in shard_rows(out_dir, manifest, s).values() for r in rows]
        for s in ("train", "validation", "test")
    }
    ids = [r["id"] for split_rows in rows.values() for r in split_rows]
    assert len(ids) == len(set(ids)) == 26 - 3
    assert first[0][0] in {r["id"] for r in rows["train"]}
    assert second[6][0] in {r["id"] for r in rows["validation"]}
    assert second[6][0] not in {r["id"] for r in rows["test"]}
    # The latest day's values: x = 200 is the largest x of the window, so the largest scaled value.
    latest = next(r for r in rows["train"] if r["id"] == first[0][0])
    assert latest["num__x"] == max(r["num__x"] for r in rows["train"])
    assert manifest["splits"]["train"]["class_counts"] == {
        c: sum(str(r["label"]) == c for r in rows["train"]) for c in ("0", "1")
    }
    # The sources are still fingerprinted whole: every row of every day counted.
    assert [s["rows"] for s in manifest["source_partitions"]] == [8, 9, 9]


def test_a_window_without_repeated_ids_supersedes_nothing(spark, tmp_path):
    out_dir, report = export(spark, tmp_path, window(spark, tmp_path))
    assert report["rows_superseded"] == 0
