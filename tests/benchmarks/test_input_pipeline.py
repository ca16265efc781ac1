"""Section (b)'s readers and the same rows written as encoded and as prepared shards."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from benchmarks import input_pipeline, report
from benchmarks.measure import summary
from lakeprep_train.dataset import split_batches
from lakeprep_train.manifest import load_manifest, verify_shards, with_transform_document
from tests.training import prepared_export


def _export(root: Path) -> str:
    """An export as export_shards writes it: encoded shards, the transform beside the manifest."""
    encoded, prepared = prepared_export.write_pair(root, rows=150, files=3, row_group_size=16)
    raw = json.loads(encoded.read_text())
    raw["transform"] = json.loads(prepared.read_text())["transform"]
    shutil.copy(prepared.parent / "transform.json", encoded.parent / "transform.json")
    encoded.write_text(json.dumps(raw))
    return f"file://{encoded}"


def test_the_pair_holds_the_same_rows_both_ways_in_the_exports_files(tmp_path):
    export = _export(tmp_path / "export")
    encoded_uri, prepared_uri = input_pipeline.write_pair(export, tmp_path / "pair", seed=3)
    encoded = load_manifest(encoded_uri)
    prepared = with_transform_document(load_manifest(prepared_uri))
    assert encoded.shard_columns == "encoded" and prepared.shard_columns == "prepared"
    assert verify_shards(encoded) == [] and verify_shards(prepared) == []
    source = load_manifest(export)
    for name, split in source.splits.items():
        for ours in (encoded, prepared):
            assert [s.path for s in ours.split(name).shards] == [s.path for s in split.shards]
        for left, right in zip(split.shards, prepared.split(name).shards, strict=True):
            old = pq.ParquetFile(left.location.removeprefix("file://")).metadata
            new = pq.ParquetFile(right.location.removeprefix("file://")).metadata
            groups = [old.row_group(i).num_rows for i in range(old.num_row_groups)]
            assert [new.row_group(i).num_rows for i in range(new.num_row_groups)] == groups
    for name in source.splits:
        left = list(split_batches(encoded, name, with_ids=True))
        right = list(split_batches(prepared, name, with_ids=True))
        assert len(left) == len(right) > 0
        for a, b in zip(left, right, strict=True):  # bit for bit, float32 as its int32 bits
            assert torch.equal(a.numeric.view(torch.int32), b.numeric.view(torch.int32))
            assert torch.equal(a.categorical, b.categorical) and torch.equal(a.text, b.text)
            assert list(a.ids) == list(b.ids)
    # The drawn rows exercise the transform: missing values, unseen categories, long token lists.
    shard = prepared.split("train").shards[0].location.removeprefix("file://")
    table = pq.read_table(shard)
    for name in ("distance", "x", "y", "carrier", "day_of_week", "plane_model", "note"):
        assert table.column(name).null_count > 0, name
    assert pc.max(pc.list_value_length(table.column("plane_model"))).as_py() > 4  # max_tokens 4
    ids = torch.cat([b.categorical[:, 0] for b in split_batches(prepared, "train")])
    assert {0, 1} <= set(ids.tolist())  # missing and unseen carriers


def test_every_reader_reads_every_row_of_both_kinds_of_shard(tmp_path):
    export = _export(tmp_path / "export")
    encoded_uri, prepared_uri = input_pipeline.write_pair(export, tmp_path / "pair")
    rows = sum(s.rows for s in load_manifest(export).splits.values())
    for uri in (encoded_uri, prepared_uri):
        for reader in input_pipeline.READERS:
            if reader == "pandas_dataloader" and uri == prepared_uri:
                continue  # pandas reads what it can batch as it is: the encoded shards
            result = input_pipeline.measure(uri, reader, min_seconds=0)
            # Batches drop the remainder (the plan's); the floor reads whole files.
            assert rows - 16 * len(load_manifest(uri).splits) <= result["rows"] <= rows, (uri, reader)
            assert result["passes"] >= 1 and result["rows_per_s"] > 0


def test_the_input_section_renders_the_prepared_shards_beside_the_encoded():
    def way(rows_per_s: float) -> dict:
        return {"rows_per_s": rows_per_s, "peak_rss_mb": 300.0, "passes": 3, "rows": 900_000}

    readers = {"rank_batches": way(6e6), "pyarrow_floor": way(8e6), "pandas_dataloader": way(1e6)}
    pair = {"prepared": way(3e6), "prepared_floor": way(4e6), "encoded": way(6e6), "encoded_pandas": way(5e5)}
    inp = {
        "runs": [readers],
        "rows": 900_000,
        **{f"{r}_{k}": summary([v[k]]) for r, v in readers.items() for k in ("rows_per_s", "peak_rss_mb")},
        "vs_floor": summary([0.75]),
        "vs_pandas": summary([6.0]),
        "prepared": {
            "runs": [pair],
            "rows": 900_000,
            **{f"{w}_{k}": summary([v[k]]) for w, v in pair.items() for k in ("rows_per_s", "peak_rss_mb")},
            "vs_floor": summary([0.75]),
            "vs_pandas": summary([6.0]),
            "vs_encoded": summary([0.5]),
        },
    }
    lines = report._input_section({"scales": {"1000000": {"input": inp}}})
    row = next(line for line in lines if line.startswith("| 900,000") and "3000000 rows/s" in line)
    assert row == (
        "| 900,000 (export of 1,000,000 raw) | 3000000 rows/s | 4000000 rows/s | 6000000 rows/s "
        "| 500000 rows/s | 0.75x | 6.00x | 0.50x | 300 / 300 / 300 / 300 MB |"
    )
    del inp["prepared"]  # a run before prepared shards were measured: no second table
    assert not any(
        "pyarrow read of the prepared" in line
        for line in report._input_section({"scales": {"1000000": {"input": inp}}})
    )
