"""The benchmark harness runs end to end and writes well-formed results (not how fast).

The quick mode is `make bench-quick`: 20 k generated rows, every measurement once, seven
real spark-submits (the five stages, the floor, an empty one), then a 900-row day as five,
two fused and one empty submission (eight more), so its time is mostly JVM start-ups
(before the small day: 12 min 42 s measured on the shared 2-core machine at a load average of 8 to
15; issue 10 measured about 70 s for a demo day's five stage submissions when idle).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pytest

from benchmarks import generate

REPO = Path(__file__).resolve().parents[2]
STAGES = ("validate", "preprocess", "sample", "fit_transform", "export_shards")


def test_generated_partition_is_reproducible_with_unique_ids(tmp_path):
    first = generate.land(tmp_path / "a", 5000, seed=3, rows_per_file=2000)
    again = generate.land(tmp_path / "b", 5000, seed=3, rows_per_file=2000)
    other = generate.land(tmp_path / "c", 5000, seed=4, rows_per_file=2000)
    assert first["sha256"] == again["sha256"] != other["sha256"]
    partition = tmp_path / "a" / "raw" / "flights" / "dt=2013-01-01"
    parts = sorted(partition.glob("part-*.csv"))
    assert len(parts) == first["files"] == 3 and (partition / "_SUCCESS").is_file()
    assert parts[0].read_text().splitlines()[0].split(",")[:3] == ["year", "month", "day"]
    table = pa.concat_tables([pacsv.read_csv(p) for p in parts])
    assert table.num_rows == 5000
    key = ["year", "month", "day", "carrier", "flight", "origin", "sched_dep_time"]
    assert table.group_by(key).aggregate([]).num_rows == 5000  # the spec's id is unique
    assert table.column("arr_delay").null_count == first["null_labels"] > 0  # cancelled flights kept
    assert pc.min(table.column("flight")).as_py() >= 1
    assert (tmp_path / "a" / "reference" / "weather" / "_SUCCESS").is_file()


@pytest.mark.integration
@pytest.mark.timeout(1800)
def test_quick_mode_runs_and_writes_well_formed_results(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "LAKEPREP_BENCH_DIR": str(tmp_path / "work")}
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    results = json.loads((out / "results.json").read_text())
    assert results["mode"] == "quick" and results["machine"]["cores"] >= 1
    [(rows, scale)] = results["scales"].items()
    assert int(rows) == scale["data"]["rows"] == 20_000

    spark = scale["spark"]
    [run] = spark["runs"]
    assert set(run["stages"]) == set(STAGES)
    validate = run["stages"]["validate"]
    assert validate["rows_in"] == 20_000
    assert validate["rows_in"] == validate["rows_out"] + validate["rows_quarantined"]
    assert validate["rows_quarantined"] == scale["data"]["null_labels"]  # null labels, nothing else
    assert run["stages"]["preprocess"]["rows_quarantined"] == 0  # generated ids are unique
    assert all(run["stages"][s]["wall_s"] > 0 and run["stages"][s]["peak_rss_mb"] > 0 for s in STAGES)
    assert run["floor"]["wall_s"] > 0 and run["empty"]["wall_s"] > 0
    assert run["ratio"] == pytest.approx(run["staged_s"] / run["floor"]["wall_s"], rel=1e-2)

    readers = scale["input"]["runs"][0]
    exported = run["stages"]["export_shards"]["rows_out"]
    assert {readers[r]["rows"] for r in ("rank_batches", "pyarrow_floor", "pandas_dataloader")} == {exported}
    assert all(readers[r]["rows_per_s"] > 0 for r in ("rank_batches", "pyarrow_floor", "pandas_dataloader"))

    parse = results["dag_parse"]
    assert (parse["1"]["dags"], parse["20"]["dags"]) == (2, 40)  # two DAGs per spec
    assert all(r["processor_s"] >= r["dagbag_s"] > 0 for p in parse.values() for r in p["runs"])

    single = scale["single_node"]["runs"][0]
    for engine in ("pandas_sklearn", "polars"):
        assert sum(single[engine]["rows_out"].values()) == validate["rows_out"], engine  # labelled rows

    small = results["small_day"]
    [small_run] = small["runs"]
    assert small["rows"] == small["data"]["rows"] == 900
    assert set(small_run["separate"]) == set(STAGES) == set(small_run["fused"]["stages"])
    assert set(small_run["fused"]["submissions"]) == {
        "validate+preprocess+sample",
        "fit_transform+export_shards",
    }
    assert small["same_row_counts"] is True
    assert small_run["fused_vs_empty"] == pytest.approx(
        small_run["fused_s"] / small_run["empty"]["wall_s"], rel=1e-2
    )

    text = (out / "RESULTS.md").read_text()
    assert "## Targets" in text and "| 20,000 |" in text and "python -m benchmarks --quick" in text
    assert "## (e) A small day: start-up against work" in text
    assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
