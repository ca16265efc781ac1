"""export_shards writing a manifest over the sampled days' files (lakeprep_jobs.export_manifest)."""

from __future__ import annotations

import collections
import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from lakeprep_jobs import export_shards
from lakeprep_train.dataset import split_batches
from lakeprep_train.manifest import load_manifest, verify_shards, with_transform_document
from tests.spark_jobs.test_export_shards import fitted
from tests.spark_jobs.window_data import DAY_3, day_rows, export_params, land_sampled_day


def export(spark, root: Path, inputs: list[str], **kw) -> tuple[Path, dict]:
    out_dir = root / "export_shards" / f"dt={DAY_3}"
    p = export_params(fitted(spark, root, inputs), **{"shards": "prepared", **kw})
    return out_dir, export_shards.run(spark, inputs, f"file://{out_dir}", p)


def entry_rows(out_dir: Path, manifest: dict, split: str) -> dict[int, list[dict]]:
    """The rows each rank's entries name, read from the files with pyarrow."""
    by_rank: dict[int, list[dict]] = collections.defaultdict(list)
    for e in manifest["splits"][split]["shards"]:
        table = pq.read_table(out_dir / e["path"]).slice(e["offset"], e["rows"])
        by_rank[e["rank"]].extend(table.to_pylist())
    return by_rank


def window(spark, root: Path) -> list[str]:
    return [
        land_sampled_day(spark, root, "2013-01-02", day_rows("2013-01-02", 12, 4, 4)),
        land_sampled_day(spark, root, DAY_3, day_rows(DAY_3, 9, 4, 3)),
    ]


def test_the_export_names_the_days_files_with_exact_balanced_counts_and_equal_ranks(spark, tmp_path):
    inputs = window(spark, tmp_path)
    before = {p: p.read_bytes() for p in (tmp_path / "sample").rglob("*") if p.is_file()}
    out_dir, report = export(spark, tmp_path, inputs, balance={"strategy": "undersample", "seed": 0})
    manifest = json.loads((out_dir / "manifest.json").read_text())

    # Nothing the days wrote is touched; the export holds no shard of its own.
    assert {p: p.read_bytes() for p in (tmp_path / "sample").rglob("*") if p.is_file()} == before
    assert not list(out_dir.rglob("*.parquet"))
    assert manifest["shard_columns"] == "prepared"
    paths = {e["path"] for s in manifest["splits"].values() for e in s["shards"]}
    assert all(
        p.startswith(("../../sample/dt=2013-01-02/part-", f"../../sample/dt={DAY_3}/part-")) for p in paths
    )

    train = manifest["splits"]["train"]
    # 21 train rows (day 2: 6 + 6, day 3: 5 + 4 of classes 0 + 1): undersampled to 10 + 10.
    assert train["class_counts_natural"] == {"0": 11, "1": 10}
    assert train["class_counts"] == {"0": 10, "1": 10} and train["rows"] == 20
    rows = entry_rows(out_dir, manifest, "train")
    assert {r: len(v) for r, v in rows.items()} == {0: 10, 1: 10}
    got = [row for v in rows.values() for row in v]
    assert collections.Counter(r["label"] for r in got) == {0: 10, 1: 10}
    assert len({r["id"] for r in got}) == 20 and {r["split"] for r in got} == {"train"}
    # Class 0 loses one row, the day with more of it gives it (6 of 11 -> 5.45 of 10: day 2 keeps 5).
    kept = collections.Counter(r["id"][:10] for r in got if r["label"] == 0)
    assert kept == {"2013-01-02": 5, DAY_3: 5}
    for split, n in (("validation", 8), ("test", 7)):
        s = manifest["splits"][split]
        assert s["rows_available"] == n and s["rows"] == n - n % 2
        named = [row["id"] for v in entry_rows(out_dir, manifest, split).values() for row in v]
        assert len(set(named)) == len(named) == s["rows"]
    assert report["rows_in"] == 36 and report["rows_undersampled"] == 1
    assert report["rows_out"] == 20 + 8 + 6 and report["rows_dropped_for_balance"] == 1

    loaded = with_transform_document(load_manifest(str(out_dir / "manifest.json")))
    assert verify_shards(loaded) == []
    ids = np.concatenate([b.ids for b in split_batches(loaded, "train", with_ids=True)])
    assert sorted(ids) == sorted(r["id"] for r in got)


def test_the_prepared_export_encodes_at_read_what_the_encoded_export_writes(spark, tmp_path):
    """The loader's features for a row of the prepared export are the encoded export's."""
    inputs = window(spark, tmp_path)
    out_dir, _ = export(spark, tmp_path, inputs, world_size=1)
    other = tmp_path / "encoded"
    export_shards.run(
        spark, inputs, f"file://{other}", export_params(fitted(spark, tmp_path, inputs), world_size=1)
    )

    def features(manifest_path: Path) -> dict[str, tuple]:
        m = with_transform_document(load_manifest(str(manifest_path)))
        out = {}
        for split in ("train", "validation", "test"):
            for b in split_batches(m, split, with_ids=True):
                for i, row_id in enumerate(b.ids):
                    out[row_id] = (
                        b.numeric[i].tolist(),
                        b.categorical[i].tolist(),
                        b.text[i].tolist(),
                        int(b.label[i]),
                    )
        return out

    assert features(out_dir / "manifest.json") == features(other / "manifest.json")


def test_an_id_on_several_days_is_named_once_from_the_latest_day(spark, tmp_path):
    first = day_rows("2013-01-01", 4, 2, 2)
    second = day_rows("2013-01-02", 4, 2, 2)
    again = (first[0][0], first[0][1], 100.0, "a", ["w"], "train")
    moved = (second[6][0], second[6][1], 7.5, "c", ["w"], "validation")
    inputs = [
        land_sampled_day(spark, tmp_path, "2013-01-01", first),
        land_sampled_day(spark, tmp_path, "2013-01-02", [*second, again]),
        land_sampled_day(spark, tmp_path, DAY_3, [*day_rows(DAY_3, 3, 2, 2), moved]),
    ]
    out_dir, report = export(spark, tmp_path, inputs, world_size=1)
    manifest = json.loads((out_dir / "manifest.json").read_text())
    assert report["rows_in"] == 8 + 9 + 8 and report["rows_superseded"] == 2
    # Day 1's train file of class 0 keeps one row of two; day 2's test file of class 0 held
    # the moved row alone, so none is left to write.
    assert report["files_rewritten"] == 1
    rows = {
        s: [r for v in entry_rows(out_dir, manifest, s).values() for r in v]
        for s in ("train", "validation", "test")
    }
    ids = [r["id"] for v in rows.values() for r in v]
    assert len(ids) == len(set(ids)) == 25 - 2
    assert next(r for r in rows["train"] if r["id"] == first[0][0])["x"] == 100.0
    assert second[6][0] in {r["id"] for r in rows["validation"]} - {r["id"] for r in rows["test"]}
    rewritten = sorted(p.relative_to(out_dir).as_posix() for p in out_dir.rglob("*.parquet"))
    assert rewritten and all(p.startswith("superseded/dt=") for p in rewritten)
    for e in manifest["splits"]["train"]["shards"] + manifest["splits"]["test"]["shards"]:
        data = (out_dir / e["path"]).read_bytes()
        assert e["sha256"] == hashlib.sha256(data).hexdigest() and e["bytes"] == len(data)
    assert verify_shards(load_manifest(str(out_dir / "manifest.json"))) == []


def test_a_rerun_writes_the_same_manifest(spark, tmp_path):
    inputs = window(spark, tmp_path)
    out_dir, _ = export(spark, tmp_path, inputs, balance={"strategy": "oversample", "seed": 1})
    first = {p.name: p.read_bytes() for p in out_dir.iterdir() if p.is_file()}
    export(spark, tmp_path, inputs, balance={"strategy": "oversample", "seed": 1})
    assert {p.name: p.read_bytes() for p in out_dir.iterdir() if p.is_file()} == first
    manifest = json.loads(first["manifest.json"])
    assert manifest["splits"]["train"]["class_counts"] == {"0": 11, "1": 11}


def test_a_day_without_its_shards_document_is_refused_naming_it(spark, tmp_path):
    inputs = window(spark, tmp_path)
    (Path(inputs[0].removeprefix("file://")) / "_shards.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"dt=2013-01-02.*Rerun `sample`"):
        export(spark, tmp_path, inputs)


def test_the_encoded_layout_materialises_shards_in_spark(spark, tmp_path):
    inputs = window(spark, tmp_path)
    out_dir, report = export(
        spark, tmp_path, inputs, shards="encoded", balance={"augment": "smote", "seed": 0}
    )
    assert report["shard_columns"] == "encoded" and list(out_dir.glob("shards/train/*.parquet"))
    assert json.loads((out_dir / "manifest.json").read_text()).get("shard_columns", "encoded") == "encoded"


def test_smote_at_read_moves_each_synthetic_row_towards_a_same_class_row(spark, tmp_path):
    from lakeprep_train.dataset import RankBatches

    inputs = window(spark, tmp_path)
    plain, _ = export(spark, tmp_path / "plain", inputs, world_size=1)
    loaded = with_transform_document(load_manifest(str(plain / "manifest.json")))
    real = {
        row_id: (float(b.numeric[i, 0]), int(b.label[i]))
        for b in split_batches(loaded, "train", with_ids=True)
        for i, row_id in enumerate(b.ids)
    }
    balance = {"augment": "smote", "smote_candidates": 4, "synthetic_per_row": 1}
    out_dir, report = export(spark, tmp_path, inputs, world_size=1, balance=balance)
    manifest = json.loads((out_dir / "manifest.json").read_text())
    assert manifest["shard_columns"] == "prepared" and manifest["balance"]["smote_candidates"] == 4
    assert report["rows_synthetic"] == 21
    loaded = with_transform_document(load_manifest(str(out_dir / "manifest.json")))
    read: dict[str, list[float]] = collections.defaultdict(list)
    for b in RankBatches(loaded, "train", 0, world_size=1, seed=2, with_ids=True):
        for i, row_id in enumerate(b.ids):
            read[row_id].append(float(b.numeric[i, 0]))
    assert read.keys() == real.keys()
    moved = 0
    for row_id, values in read.items():
        x, label = real[row_id]
        assert len(values) == 2 and any(abs(v - x) < 1e-6 for v in values)  # the row itself
        synthetic = values[0] if abs(values[1] - x) < 1e-6 else values[1]
        same_class = [v for v, c in real.values() if c == label]
        assert min(same_class) - 1e-6 <= synthetic <= max(same_class) + 1e-6  # between class rows
        moved += abs(synthetic - x) > 1e-9
    assert moved >= 15  # all but rows alone in their group, or lambda near 0


def test_jitter_names_each_balanced_row_again_as_a_synthetic_copy_the_loader_augments(spark, tmp_path):
    """Train only; exact counts; the loader's noise differs by epoch; evaluation sees real rows."""
    from lakeprep_train.dataset import RankBatches

    inputs = window(spark, tmp_path)
    balance = {"strategy": "undersample", "augment": "jitter", "jitter_sigma": 0.5, "synthetic_per_row": 2}
    out_dir, report = export(spark, tmp_path, inputs, world_size=1, balance=balance)
    manifest = json.loads((out_dir / "manifest.json").read_text())
    train = manifest["splits"]["train"]
    assert train["class_counts"] == {"0": 30, "1": 30} and train["class_counts_natural"] == {"0": 11, "1": 10}
    assert report["rows_synthetic"] == manifest["balance"]["synthetic_rows"] == 40
    assert manifest["balance"]["jitter_sigma"] == 0.5
    assert {e.get("synthetic", 0) for e in train["shards"]} == {0, 1, 2}
    for split in ("validation", "test"):
        assert not any("synthetic" in e for e in manifest["splits"][split]["shards"])
    sampling = json.loads((out_dir / "sampling.json").read_text())
    assert sampling["synthetic"]["train"] == {"0": 20, "1": 20}

    loaded = with_transform_document(load_manifest(str(out_dir / "manifest.json")))
    data = RankBatches(loaded, "train", 0, world_size=1, seed=5, with_ids=True)

    def rows(epoch: int) -> dict[str, list[float]]:
        data.set_epoch(epoch)
        out: dict[str, list[float]] = collections.defaultdict(list)
        for b in data:
            for i, row_id in enumerate(b.ids):
                out[row_id].append(float(b.numeric[i, 0]))
        return out

    first, again, later = rows(0), rows(0), rows(1)
    assert len(first) == 20 and all(len(v) == 3 for v in first.values())  # the row and 2 copies
    assert first == again
    assert first != later
    for values in first.values():
        assert len(set(values)) == 3  # each copy jittered its own way
    for split in ("validation", "test"):
        ids = [i for b in split_batches(loaded, split, with_ids=True) for i in b.ids]
        assert len(ids) == len(set(ids))
