"""The benchmark harness runs end to end and writes well-formed results (not how fast).

The quick mode is `make bench-quick`: 20 k generated rows, every measurement once, nine
real spark-submits (the five stages, the two fused ones, the floor, an empty one), so its
time is mostly JVM start-ups. The 900-row day (part `small`) runs the same code and is left
to the full run; its report section is checked on the committed results below.
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

from benchmarks import generate, report, single_node
from tests.conftest import run_command

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
    result = run_command(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(out)],
        cwd=REPO,
        env=env,
        timeout=1800,
        check=False,
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
    # The fused submissions prepared the same data as the five separate ones.
    assert set(run["fused"]["submissions"]) == {"validate+preprocess+sample", "fit_transform+export_shards"}
    assert set(run["fused"]["stages"]) == set(STAGES) and spark["same_row_counts"] is True
    assert run["fused_ratio"] == pytest.approx(run["fused_s"] / run["floor"]["wall_s"], rel=1e-2)
    # The daily path: the first three stages, and the fused day's one submission.
    daily = sum(run["stages"][s]["wall_s"] for s in ("validate", "preprocess", "sample"))
    assert run["daily_s"] == pytest.approx(daily, rel=1e-2) and run["daily_s"] < run["staged_s"]
    assert run["daily_ratio"] == pytest.approx(daily / run["floor"]["wall_s"], rel=1e-2)
    day = run["fused"]["submissions"]["validate+preprocess+sample"]["wall_s"]
    assert run["daily_fused_ratio"] == pytest.approx(day / run["floor"]["wall_s"], rel=1e-2)

    readers = scale["input"]["runs"][0]
    exported = run["stages"]["export_shards"]["rows_out"]
    assert {readers[r]["rows"] for r in ("rank_batches", "pyarrow_floor", "pandas_dataloader")} == {exported}
    assert all(readers[r]["rows_per_s"] > 0 for r in ("rank_batches", "pyarrow_floor", "pandas_dataloader"))
    # Timed passes repeat until 2 s have passed: a 20 k-row pass of the floor is milliseconds.
    assert readers["pyarrow_floor"]["passes"] > 1
    names = ("rank_batches", "pyarrow_floor", "pandas_dataloader")
    assert all(readers[r]["passes"] * readers[r]["seconds"] >= 1.0 for r in names)

    parse = results["dag_parse"]
    assert (parse["1"]["dags"], parse["20"]["dags"]) == (2, 40)  # two DAGs per spec
    assert all(r["processor_s"] >= r["dagbag_s"] > 0 for p in parse.values() for r in p["runs"])
    # The floor parsed the same number of DAGs, with nothing of lakeprep.
    assert all(r["dags"] == p["dags"] for p in parse.values() for r in p["floor"]["runs"])

    single = scale["single_node"]["runs"][0]
    for engine in single_node.ENGINES:
        assert sum(single[engine]["rows_out"].values()) == validate["rows_out"], engine  # labelled rows
    assert scale["single_node"]["same_outputs"] is True and single["outputs_differ"] == []

    assert "small_day" not in results  # quick mode: the spark part runs the fused way already

    text = (out / "RESULTS.md").read_text()
    assert "## Targets" in text and "| 20,000 |" in text and "python -m benchmarks --quick" in text
    assert "fused (sum of 2)" in text
    assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_memory_crossover_is_interpolated_between_the_scales_that_bracket_the_budget():
    # 1 GB at 1 M rows, 3 GB at 4 M, 9 GB at 16 M: 8 GB is reached 5/6 of the way from 4 M to 16 M.
    points = [(1_000_000, 1000.0), (4_000_000, 3000.0), (16_000_000, 9000.0)]
    assert report.crossover_rows(points, 8000) == (
        14_000_000,
        "interpolated between 4,000,000 and 16,000,000 rows",
    )
    # All under the budget: extrapolated from the two largest scales.
    assert report.crossover_rows(points[:2], 8000) == (
        11_500_000,
        "extrapolated between 1,000,000 and 4,000,000 rows",
    )
    assert report.crossover_rows([(1_000_000, 900.0), (4_000_000, 800.0)], 8000)[0] is None  # not growing
    assert report.crossover_rows(points[:1], 8000)[0] is None


def test_the_closing_section_lists_only_what_the_results_lack():
    bare = {"scales": {"4000000": {"spark": {}}}}
    text = report.not_done(bare)
    assert "`profile` part" in text and "not searched for" in text and "GPU host" in text
    measured = {"scales": {"4000000": {"profile": {}}}, "crossover": {"polars": {}}}
    text = report.not_done(measured)
    assert "`profile` part" not in text and "not searched for" not in text and "GPU host" in text


def test_the_heap_of_each_merged_part_is_named_in_its_section():
    scales = {"1000000": {"spark": {"driver_memory": "2g"}}, "4000000": {"spark": {"driver_memory": "2g"}}}
    assert (
        report._heaps({"scales": scales}, "spark")
        == " Driver heap (`SPARK_DRIVER_MEMORY`): 2g at every scale."
    )
    scales["4000000"]["spark"]["driver_memory"] = "4g"
    assert "2g at 1,000,000 rows, 4g at 4,000,000 rows" in report._heaps({"scales": scales}, "spark")
    assert report._heaps({"scales": {"1000000": {"spark": {}}}}, "spark") == ""


def test_the_committed_results_render(tmp_path):
    """`--report-only` on benchmarks/results.json: every part it holds gets its section and targets."""
    results = json.loads((REPO / "benchmarks" / "results.json").read_text())
    report.write(results, tmp_path)
    text = (tmp_path / "RESULTS.md").read_text()
    for part, heading in (
        ("spark", "## `spark`: preparation against the floor"),
        ("passes", "## `passes`: what each submission reads and writes"),
        ("driver", "## `driver`: the driver's memory alone"),
        ("input", "## `input`: the trainer's input pipeline"),
        ("single_node", "## `single_node`: the same preparation written the obvious way"),
    ):
        assert any(part in s for s in results["scales"].values()) == (heading in text), part
    assert ("dag_parse" in results) == ("## `parse`: DAG parse time" in text)
    if small := results.get("small_day"):
        assert "## `small`: a small day, start-up against work" in text
        v = small["fused_spark_vs_empty"]["median"]
        assert f"its Spark time (one submission) within 2x of one empty submission | {v:.1f}x" in text
    assert (tmp_path / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_scaling_is_compared_only_between_parts_of_one_run():
    def spark(seconds: float, run: str | None = None) -> dict:
        part = {"staged_s": {"median": seconds}}
        return {**part, "run": run} if run else part

    same = {"started": "A", "scales": {"1000000": {"spark": spark(100)}, "4000000": {"spark": spark(300)}}}
    (line,) = report._scaling_targets(same)
    assert "staged time grows no faster than linearly (4 M / 1 M rows <= 4.4) | 3.00 | met" in line
    merged = {  # the 4 M part merged from a later run (`--merge` stamps it)
        "started": "A",
        "scales": {"1000000": {"spark": spark(100)}, "4000000": {"spark": spark(300, run="B")}},
    }
    (line,) = report._scaling_targets(merged)
    assert "not compared: 1,000,000 rows measured in the run of A, 4,000,000 in the run of B" in line


def test_driver_memory_is_judged_on_the_driver_part_beside_the_local_mode_figures():
    def driver(staged: float, fused: float) -> dict:
        return {
            "staged_driver_peak_rss_mb": {"median": staged},
            "fused_driver_peak_rss_mb": {"median": fused},
        }

    def local(staged: float) -> dict:
        return {"staged_peak_rss_mb": {"median": staged}}

    results = {
        "started": "A",
        "scales": {
            "1000000": {"spark": local(1600), "driver": driver(1000, 1200)},
            "4000000": {"spark": local(2600), "driver": driver(1100, 1600)},
        },
    }
    lines = report._scaling_targets(results)
    assert len(lines) == 3
    # In local mode the executor's buffers count too: shown for comparison, not judged.
    assert "staged peak memory (local mode: driver and executor in one JVM) (4 M / 1 M rows) |" in lines[0]
    assert lines[0].endswith(f"| 1.62x (1600 -> 2600 MB) | {report.UNJUDGED} |")
    assert "staged driver memory flat (client mode on a standalone cluster" in lines[1]
    assert lines[1].endswith("| 1.10x (1000 -> 1100 MB) | met |")
    assert "fused driver memory flat" in lines[2]
    assert lines[2].endswith("| 1.33x (1200 -> 1600 MB) | **missed** |")


def test_a_second_run_on_the_same_work_folder_is_refused_naming_the_first(tmp_path):
    env = {**os.environ, "LAKEPREP_BENCH_DIR": str(tmp_path / "work")}
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from benchmarks.environment import work_folder_lock\n"
            "with work_folder_lock():\n"
            "    print('held', flush=True)\n"
            "    time.sleep(120)\n",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        second = run_command(
            [sys.executable, "-m", "benchmarks", "--only", "parse", "--parse-reps", "1"],
            cwd=REPO,
            env=env,
            timeout=120,
            check=False,
        )
        assert second.returncode != 0
        assert f"pid {holder.pid}" in second.stderr and "LAKEPREP_BENCH_DIR" in second.stderr
        assert not (tmp_path / "work" / "logs").exists()  # refused before measuring anything
    finally:
        holder.kill()
        holder.wait()
    # Released with the process that held it: the folder is free again.
    again = run_command(
        [
            sys.executable,
            "-c",
            "from benchmarks.environment import work_folder_lock\nwith work_folder_lock():\n    print('ok')",
        ],
        cwd=REPO,
        env=env,
        timeout=120,
        check=False,
    )
    assert again.stdout.strip() == "ok", again.stderr


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_stage_ab_runs_both_versions_of_a_stage_on_the_same_partition(tmp_path):
    env = {**os.environ, "LAKEPREP_BENCH_DIR": str(tmp_path / "work")}
    base = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    cmd = [sys.executable, "-m", "benchmarks.stage_ab", "--stage", "validate", "--rows", "3000"]
    result = run_command(
        [*cmd, "--base", base, "--reps", "1", "--warmup", "0"], cwd=REPO, env=env, timeout=900, check=False
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    summary = json.loads(result.stdout[result.stdout.index("\n{") :])
    [run] = summary["runs"]
    assert summary["same_rows"] is True and summary["base"] == base
    assert run["before"]["rows_in"] == run["after"]["rows_in"] == 3000
    assert run["after"]["rows_out"] + run["after"]["rows_quarantined"] == 3000
    assert run["wall_ratio"] == pytest.approx(run["after"]["wall_s"] / run["before"]["wall_s"], rel=1e-2)
    work = tmp_path / "work"
    assert (work / "stage_ab" / "out" / "validate-before" / "_SUCCESS").is_file()
    assert (work / "stage_ab" / "out" / "validate-after" / "_SUCCESS").is_file()
    # A commit without the stage's module is refused by name, before Spark starts.
    missing = run_command([*cmd, "--base", "0000000"], cwd=REPO, env=env, timeout=300, check=False)
    assert (
        missing.returncode != 0 and "no spark_jobs/lakeprep_jobs/validate.py at '0000000'" in missing.stderr
    )


def test_a_target_is_judged_only_when_its_repetitions_agree():
    assert report._judged({"median": 3.0, "spread_pct": 4.0}, True) == "met"
    assert report._judged({"median": 3.0, "spread_pct": 4.0}, False) == "**missed**"
    assert report._judged({"median": 0.7, "spread_pct": 231.0}, True) == (
        "not judged: the repetitions spread ±231%"
    )
    assert report._judged({"median": 0.7, "n": 1}, False) == "**missed**"  # one repetition: no spread


def test_the_small_day_parts_start_spark_as_make_demo_does(monkeypatch):
    from benchmarks.environment import demo_startup

    monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
    with demo_startup() as options:
        assert os.environ["SPARK_SUBMIT_OPTS"] == options
        assert "-XX:SharedArchiveFile=" in options and "-XX:TieredStopAtLevel=1" in options
        archive = Path(options.split("-XX:SharedArchiveFile=", 1)[1].split()[0])
        assert archive.is_file() and archive.parent == Path(sys.prefix) / "lakeprep-cache"
    assert "SPARK_SUBMIT_OPTS" not in os.environ  # the scale parts start Spark as before
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-Xshare:off")  # an explicit setting wins
    with demo_startup() as options:
        assert options == os.environ["SPARK_SUBMIT_OPTS"] == "-Xshare:off"
    assert os.environ["SPARK_SUBMIT_OPTS"] == "-Xshare:off"
