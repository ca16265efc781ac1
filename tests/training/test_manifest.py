from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakeprep_train.manifest import ManifestError, load_manifest, verify_shards

TRAINING = Path(__file__).resolve().parents[2] / "training"


def check_cli(manifest: Path | str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lakeprep_train.manifest", "check", str(manifest)],
        env={**os.environ, "PYTHONPATH": str(TRAINING)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_loads_the_plan_and_resolves_shards(export_two_ranks):
    manifest = load_manifest(str(export_two_ranks))
    train = manifest.split("train")
    assert train.plan.world_size == 2 and train.plan.steps_per_rank == 5
    assert [s.rank for s in train.shards] == [0, 1, 0, 1]
    assert sum(s.rows for s in train.shards_for_rank(1)) == 150
    assert train.shards[0].location == str(export_two_ranks.parent / "shards/train/shard-00000.parquet")
    assert [f.role for f in manifest.features] == ["numeric", "categorical", "text"]


def test_loads_a_file_uri(export_two_ranks):
    manifest = load_manifest(export_two_ranks.as_uri())
    assert (
        manifest.split("test").shards[1].location
        == (export_two_ranks.parent / "shards/test/shard-00001.parquet").as_uri()
    )
    assert verify_shards(manifest) == []


def test_refuses_another_format_version(copied_export, edit_manifest):
    edit_manifest(copied_export, lambda m: m.update(format_version=2))
    with pytest.raises(ManifestError, match=r"format_version: expected 1, got 2") as err:
        load_manifest(str(copied_export))
    assert str(copied_export) in str(err.value)


def test_refuses_a_shard_count_that_is_not_a_multiple_of_world_size(copied_export, edit_manifest):
    def drop_last_shard(m):
        m["splits"]["validation"]["shards"].pop()

    edit_manifest(copied_export, drop_last_shard)
    with pytest.raises(
        ManifestError, match=r"splits\.validation\.shards: 3 shards is not a multiple of plan\.world_size 2"
    ):
        load_manifest(str(copied_export))


def test_names_every_broken_field(copied_export, edit_manifest):
    def break_fields(m):
        m["splits"]["train"]["rows"] = 301
        m["splits"]["train"]["shards"][1]["rank"] = 0
        m["splits"]["test"]["plan"]["steps_per_rank"] = 9
        m["features"][1].pop("cardinality")

    edit_manifest(copied_export, break_fields)
    with pytest.raises(ManifestError) as err:
        load_manifest(str(copied_export))
    problems = "\n".join(err.value.problems)
    assert "splits.train.rows: 301 != plan.world_size * plan.rows_per_rank = 2 * 150 = 300" in problems
    assert "splits.train.shards[1].rank: shard 1 belongs to rank 1 % world_size 2 = 1, got 0" in problems
    assert "splits.test.plan.steps_per_rank: 9 != ceil(rows_per_rank / batch_size)" in problems
    assert "features[1] (cat__c).cardinality: expected a positive integer, got None" in problems


def test_refuses_a_shard_path_outside_the_export(copied_export, edit_manifest):
    edit_manifest(copied_export, lambda m: m["splits"]["train"]["shards"][0].update(path="../../etc/passwd"))
    with pytest.raises(ManifestError, match=r"splits\.train\.shards\[0\]\.path: expected a path relative"):
        load_manifest(str(copied_export))


def test_verify_passes_intact_shards(export_two_ranks):
    assert verify_shards(load_manifest(str(export_two_ranks))) == []


def test_verify_catches_a_truncated_shard(copied_export):
    shard = copied_export.parent / "shards/train/shard-00002.parquet"
    size = shard.stat().st_size
    with open(shard, "r+b") as f:
        f.truncate(size // 2)
    problems = verify_shards(load_manifest(str(copied_export)))
    text = "\n".join(problems)
    at = "splits.train.shards[2] (shards/train/shard-00002.parquet)"
    assert f"{at}.bytes: manifest says {size}, file has {size // 2}" in text
    assert "splits.train.shards[2] (shards/train/shard-00002.parquet).sha256" in text
    assert "not a readable Parquet file" in text
    assert all("shard-00002" in p for p in problems)


def test_verify_catches_a_changed_checksum(copied_export, edit_manifest):
    edit_manifest(copied_export, lambda m: m["splits"]["test"]["shards"][1].update(sha256="ab" * 32))
    problems = verify_shards(load_manifest(str(copied_export)))
    assert len(problems) == 1
    assert problems[0].startswith(
        f"splits.test.shards[1] (shards/test/shard-00001.parquet).sha256: manifest says {'ab' * 32}"
    )


def test_verify_catches_a_changed_byte(copied_export):
    shard = copied_export.parent / "shards/validation/shard-00000.parquet"
    data = bytearray(shard.read_bytes())
    data[len(data) // 3] ^= 0xFF
    shard.write_bytes(bytes(data))
    problems = verify_shards(load_manifest(str(copied_export)))
    assert any(
        p.startswith("splits.validation.shards[0] (shards/validation/shard-00000.parquet).sha256")
        for p in problems
    )


def test_verify_catches_a_wrong_row_count(copied_export, edit_manifest):
    def move_a_row(m):
        shards = m["splits"]["train"]["shards"]
        shards[0]["rows"] -= 1
        shards[2]["rows"] += 1  # same rank, so the plan still adds up

    edit_manifest(copied_export, move_a_row)
    problems = verify_shards(load_manifest(str(copied_export)))
    assert any("shards[0] (shards/train/shard-00000.parquet).rows: manifest says" in p for p in problems)


def test_check_cli_accepts_a_good_export(export_two_ranks):
    result = check_cli(export_two_ranks)
    assert result.returncode == 0, result.stderr
    assert "ok, 12 shards verified" in result.stdout


def test_check_cli_lists_problems_and_exits_1(copied_export):
    shard = copied_export.parent / "shards/test/shard-00003.parquet"
    shard.write_bytes(shard.read_bytes()[:100])
    result = check_cli(copied_export)
    assert result.returncode == 1
    assert "shards/test/shard-00003.parquet" in result.stderr
    assert "problem(s)" in result.stderr


def test_check_cli_reports_a_structural_error(copied_export, edit_manifest):
    edit_manifest(copied_export, lambda m: m.update(format_version="1"))
    result = check_cli(copied_export)
    assert result.returncode == 1
    assert "format_version: expected 1, got '1'" in result.stderr
