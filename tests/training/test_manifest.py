from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lakeprep_contracts import documents
from lakeprep_train import manifest as manifest_module
from lakeprep_train.manifest import ManifestError, load_manifest, parse_manifest, verify_shards
from tests.training import prepared_export

REPO = Path(__file__).resolve().parents[2]
# What the handoff puts on the trainer's path: the trainer and the contracts it reads.
TRAINER_PATH = os.pathsep.join(str(REPO / d) for d in ("training", "contracts"))


def check_cli(manifest: Path | str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lakeprep_train.manifest", "check", str(manifest)],
        env={**os.environ, "PYTHONPATH": TRAINER_PATH},
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


def test_the_exporters_manifest_matches_the_shared_schema(export_two_ranks, export_padded):
    for path in (export_two_ranks, export_padded):
        assert documents.problems("manifest", json.loads(path.read_text())) == []


def test_names_every_structural_problem_by_json_path(copied_export, edit_manifest):
    def break_structure(m):
        m["splits"]["train"]["plan"]["world_size"] = -1
        m["features"][1].pop("cardinality")
        m["features"][0]["dtype"] = "float64"
        m["source_partitions"][0]["filled_columns"] = []
        m["splits"]["test"]["shards"][2]["sha256"] = "ABC"
        m["splits"]["validation"]["rows"] = 1.0
        del m["window"]

    edit_manifest(copied_export, break_structure)
    with pytest.raises(ManifestError) as err:
        load_manifest(str(copied_export))
    assert err.value.problems == [
        "<top level>: 'window' is a required property",
        "features[0].dtype: 'float32' was expected",
        "features[1]: 'cardinality' is a required property",
        "source_partitions[0]: Additional properties are not allowed ('filled_columns' was unexpected)",
        "splits.test.shards[2].sha256: expected 64 lowercase hex digits (sha256), got 'ABC'",
        "splits.train.plan.world_size: -1 is less than the minimum of 1",
        "splits.validation.rows: 1.0 is not of type 'integer'",
    ]
    assert str(err.value).startswith(f"invalid manifest {copied_export}:\n  - <top level>: 'window'")
    assert isinstance(err.value, documents.DocumentError)


def test_refuses_the_fields_the_window_replaced(copied_export, edit_manifest):
    def old_format(m):
        m["missing_partitions"] = []
        m["features_left_out"] = []
        m["transform"] = "file:///lake/preprocess/toy/dt=2013-01-03/_transform.json"

    edit_manifest(copied_export, old_format)
    with pytest.raises(ManifestError) as err:
        load_manifest(str(copied_export))
    problems = "\n".join(err.value.problems)
    assert "'features_left_out', 'missing_partitions' were unexpected" in problems
    assert "transform: 'file:///lake/preprocess/toy/dt=2013-01-03/_transform.json' is not of type" in problems


def test_names_every_broken_rule(copied_export, edit_manifest):
    def break_rules(m):
        m["splits"]["train"]["rows"] = 301
        m["splits"]["train"]["shards"][1]["rank"] = 0
        m["splits"]["test"]["plan"]["steps_per_rank"] = 9
        m["splits"]["validation"]["class_counts"]["1"] += 1
        m["class_weights"]["2"] = 1.0

    edit_manifest(copied_export, break_rules)
    with pytest.raises(ManifestError) as err:
        load_manifest(str(copied_export))
    problems = err.value.problems
    assert "splits.train.rows: 301 != plan.world_size * plan.rows_per_rank = 2 * 150 = 300" in problems
    assert "splits.train.shards[1].rank: shard 1 belongs to rank 1 % world_size 2 = 1, got 0" in problems
    assert (
        "splits.test.plan.steps_per_rank: 9 != ceil(rows_per_rank / batch_size) = ceil(60 / 32) = 2"
        in problems
    )
    assert any(p.startswith("splits.validation.class_counts: they sum to ") for p in problems)
    assert "class_weights: keys ['0', '1', '2'] do not match label.classes ['0', '1']" in problems
    assert len(problems) == 5


def test_refuses_a_shard_count_that_does_not_match_the_plan(copied_export, edit_manifest):
    edit_manifest(copied_export, lambda m: m["splits"]["train"]["plan"].update(shards_per_rank=3))
    with pytest.raises(
        ManifestError,
        match=r"splits\.train\.shards: 4 shards != plan\.world_size \* plan\.shards_per_rank = 2 \* 3",
    ):
        load_manifest(str(copied_export))


def test_refuses_a_feature_named_twice(copied_export, edit_manifest):
    edit_manifest(copied_export, lambda m: m["features"].append(dict(m["features"][0])))
    with pytest.raises(ManifestError, match=r"features\[3\]\.name: 'num__x' is already the name"):
        load_manifest(str(copied_export))


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            lambda w: w["failed"].append("2013-01-02"),
            "window.failed: 2013-01-02 is also in window.complete",
        ),
        (lambda w: w["missing"].clear(), "window.days: ['2013-01-01'] are in none of complete, failed"),
        (lambda w: w["before_start"].append("2012-12-31"), "window.before_start: 2012-12-31 is not one of"),
        (lambda w: w["days"].reverse(), "window.days: ['2013-01-03', '2013-01-02', '2013-01-01'] must run"),
    ],
)
def test_every_window_day_has_exactly_one_outcome(copied_export, edit_manifest, change, problem):
    edit_manifest(copied_export, lambda m: change(m["window"]))
    with pytest.raises(ManifestError) as err:
        load_manifest(str(copied_export))
    assert [p for p in err.value.problems if p.startswith(problem)], err.value.problems


@pytest.mark.parametrize(
    "path", ["shards/../../etc/passwd", "/etc/passwd", "file:///etc/passwd", "../a/../../b"]
)
def test_refuses_a_shard_path_outside_the_relative_layout(copied_export, edit_manifest, path):
    """Relative to the manifest's folder; `..` only as leading segments (a prepared export's
    `../../../sample/...`), never in the middle, no scheme, no absolute path."""
    edit_manifest(copied_export, lambda m: m["splits"]["train"]["shards"][0].update(path=path))
    with pytest.raises(ManifestError, match=r"splits\.train\.shards\[0\]\.path: expected a path relative"):
        load_manifest(str(copied_export))


def test_a_shard_path_may_climb_to_the_sampled_days(copied_export, edit_manifest):
    """The schema lets leading `..` through: the file's absence is the shard check's to name."""
    edit_manifest(
        copied_export,
        lambda m: m["splits"]["train"]["shards"][0].update(
            path="../../../sample/toy/dt=2013-01-03/part-x.parquet"
        ),
    )
    manifest = load_manifest(str(copied_export))
    problems = verify_shards(manifest)
    assert any("part-x.parquet" in p for p in problems), problems


def test_resolves_the_transform_against_the_manifests_folder(export_two_ranks):
    raw = json.loads(export_two_ranks.read_text())
    assert load_manifest(str(export_two_ranks)).transform is None
    raw["transform"] = {"uri": "../fit_transform/transform.json", "sha256": "c" * 64}
    relative = parse_manifest(raw, "file:///lake/export_shards/toy/dt=2013-01-03/manifest.json").transform
    assert relative.location == "file:///lake/export_shards/toy/dt=2013-01-03/../fit_transform/transform.json"
    assert relative.sha256 == "c" * 64
    raw["transform"]["uri"] = "hdfs://nn:8020/lake/fit_transform/toy/dt=2013-01-03/transform.json"
    absolute = parse_manifest(raw, str(export_two_ranks)).transform
    assert absolute.location == raw["transform"]["uri"]


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
    # 300 train rows at batch 32, whatever the world size the trainer finds:
    assert (
        "train per epoch by world size: 1: 300 rows/rank, 10 steps; 2: 150 rows/rank, 5 steps;"
        in result.stdout
    )
    assert "8: 37 rows/rank, 2 steps, 4 dropped" in result.stdout


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


# ----------------------------------------------------- prepared shards and shard slices


def test_a_prepared_manifest_without_a_transform_is_refused_naming_the_field(tmp_path, edit_manifest):
    _, prepared = prepared_export.write_pair(tmp_path)
    edit_manifest(prepared, lambda m: m.update(transform=None))
    with pytest.raises(ManifestError, match=r"transform: required when shard_columns is 'prepared'"):
        load_manifest(str(prepared))


def test_shard_columns_is_encoded_or_prepared(tmp_path, edit_manifest):
    encoded, prepared = prepared_export.write_pair(tmp_path)
    assert load_manifest(str(encoded)).shard_columns == "encoded"  # absent: today's shards
    edit_manifest(prepared, lambda m: m.update(shard_columns="raw"))
    with pytest.raises(ManifestError, match=r"shard_columns"):
        load_manifest(str(prepared))


def test_verify_passes_prepared_shards_and_names_a_wrong_column_type(tmp_path):
    _, prepared = prepared_export.write_pair(tmp_path)
    assert verify_shards(load_manifest(str(prepared))) == []
    shard = prepared.parent / "shards" / "shard-00002.parquet"
    table = pq.read_table(shard)
    table = table.set_column(
        table.schema.get_field_index("plane_model"), "plane_model", table.column("carrier")
    )
    pq.write_table(table, shard)
    problems = verify_shards(load_manifest(str(prepared)))
    assert (
        "splits.train.shards[2] (shards/shard-00002.parquet): column 'plane_model' has type string, "
        "expected strings" in problems
    )


def test_verify_a_prepared_manifest_checks_its_transform(tmp_path):
    _, prepared = prepared_export.write_pair(tmp_path)
    (prepared.parent / "transform.json").write_text("{}")
    [problem] = verify_shards(load_manifest(str(prepared)))
    assert problem.startswith("transform.sha256 is ")


def test_verify_hashes_each_file_once_and_checks_every_slice(tmp_path, edit_manifest, monkeypatch):
    encoded, _ = prepared_export.write_pair(tmp_path, rows=90, files=2)

    def slice_files(m):
        first, second = m["splits"]["train"]["shards"]
        del second["file_rows"]  # a slice without it: the file needs at least offset + rows rows
        m["splits"]["train"]["shards"] = [
            {**first, "offset": 5, "rows": 40},
            {**second, "offset": 0, "rows": 45},
            {**first, "offset": 0, "rows": 45},
            {**second, "offset": 30, "rows": 20},  # past the end of its 45 rows
        ]
        plan = m["splits"]["train"]["plan"]
        plan.update(shards_per_rank=4, rows_per_rank=150, steps_per_rank=10)
        m["splits"]["train"].update(rows=150, rows_available=150, class_counts={"0": 150, "1": 0})

    edit_manifest(encoded, slice_files)
    opened = []
    open_input = manifest_module.storage.open_input
    monkeypatch.setattr(
        manifest_module.storage, "open_input", lambda loc: opened.append(loc) or open_input(loc)
    )
    problems = verify_shards(load_manifest(str(encoded)))
    assert problems == [
        "splits.train.shards[3] (shards/shard-00001.parquet).rows: manifest says 20 from offset 30, Parquet "
        "footer says 45: the file has 45 rows, but the entry reads rows [30, 50) (offset 30 + rows 20): "
        "past the file's end"
    ]
    # Each file opened twice (its hash, its footer), whatever the entries slicing it.
    assert (
        sorted(os.path.basename(loc) for loc in opened if loc.endswith(".parquet"))
        == ["shard-00000.parquet"] * 2 + ["shard-00001.parquet"] * 2
    )


def test_a_slice_past_a_recorded_file_end_is_refused_when_loading(tmp_path, edit_manifest):
    encoded, _ = prepared_export.write_pair(tmp_path, rows=90, files=2)
    edit_manifest(encoded, lambda m: m["splits"]["train"]["shards"][1].update(offset=30, rows=20))
    with pytest.raises(
        ManifestError, match=r"splits.train.shards\[1\]: offset 30 \+ rows 20 = 50 is past the file's end"
    ):
        load_manifest(str(encoded))


def test_entries_of_one_file_must_agree_on_it(tmp_path, edit_manifest):
    encoded, _ = prepared_export.write_pair(tmp_path, rows=90, files=2)

    def repeat_with_other_bytes(m):
        shards = m["splits"]["train"]["shards"]
        shards.append({**shards[0], "bytes": shards[0]["bytes"] + 1})
        m["splits"]["train"]["plan"]["shards_per_rank"] = 3

    edit_manifest(encoded, repeat_with_other_bytes)
    with pytest.raises(ManifestError, match=r"shards\[2\].bytes: .* but shards\[0\] names the same file"):
        load_manifest(str(encoded))


def test_synthetic_entries_are_refused_outside_train_and_without_a_read_time_augmentation(
    copied_export, edit_manifest
):
    """Evaluation sees real rows only; a synthetic entry needs prepared shards and the
    augmentation's parameter, or the loader could not make its rows."""

    def mark(m):
        m["splits"]["validation"]["shards"][0]["synthetic"] = 1
        m["splits"]["train"]["shards"][0]["synthetic"] = 1

    edit_manifest(copied_export, mark)
    with pytest.raises(ManifestError) as err:
        load_manifest(str(copied_export))
    problems = "\n".join(err.value.problems)
    assert "splits.validation.shards[0].synthetic: only the train split may hold synthetic rows" in problems
    assert "shard_columns: synthetic entries are augmented at read, which needs 'prepared' shards" in problems
    assert "balance.augment: 'none', but entries are marked synthetic" in problems
