"""The single-node memory crossover's search (benchmarks/crossover.py), against memory models."""

from __future__ import annotations

import pytest

from benchmarks import crossover


def linear(per_million_mb: float, base_mb: float = 300.0):
    """A measurer whose peak grows linearly with rows; records what it was asked."""
    asked: list[int] = []

    def measure(rows: int) -> dict:
        asked.append(rows)
        return {"peak_rss_mb": base_mb + per_million_mb * rows / 1e6, "wall_s": 1.0}

    return measure, asked


def test_the_search_brackets_the_crossing_within_the_tolerance_from_two_seeds():
    # 1,200 MB per million rows over 300 MB: 8,192 MB is crossed at 6,576,667 rows.
    measure, asked = linear(1200)
    seeds = [(4_000_000, 300 + 4800, "seed"), (16_000_000, 300 + 19200, "seed")]
    result = crossover.search(measure, seeds, budget_mb=8192)
    assert result["closed"]
    assert result["under"]["rows"] <= 6_576_667 < result["over"]["rows"]
    assert crossover.width(result) <= crossover.TOLERANCE
    assert result["under"]["peak_rss_mb"] <= 8192 < result["over"]["peak_rss_mb"]
    assert len(asked) <= 3 and all(r % crossover.STEP_ROWS == 0 for r in asked)
    assert [s["rows"] for s in result["steps"]] == asked
    assert crossover.describe(result) == f"{result['under']['rows']:,} to {result['over']['rows']:,} rows"


def test_a_curved_memory_profile_still_closes_the_bracket():
    # Memory grows faster than linearly (the secant overshoots): the bracket still closes.
    asked = []

    def measure(rows: int) -> dict:
        asked.append(rows)
        return {"peak_rss_mb": 500 + 60 * (rows / 1e6) ** 2}

    result = crossover.search(
        measure, [(1_000_000, 560, "s"), (16_000_000, 500 + 60 * 256, "s")], budget_mb=8192
    )
    crossing = (7692 / 60) ** 0.5 * 1e6  # 11.32 M rows
    assert result["closed"], result
    assert result["under"]["rows"] <= crossing < result["over"]["rows"]


def test_from_one_side_the_search_extrapolates_until_it_crosses():
    measure, asked = linear(1000)
    result = crossover.search(measure, [(1_000_000, 1300, "s"), (2_000_000, 2300, "s")], budget_mb=8192)
    assert result["closed"]
    assert result["under"]["rows"] <= 7_892_000 < result["over"]["rows"]
    # From above only: it comes down.
    measure, asked = linear(1000)
    result = crossover.search(measure, [(10_000_000, 10300, "s"), (12_000_000, 12300, "s")], budget_mb=8192)
    assert result["closed"] and result["under"]["rows"] <= 7_892_000 < result["over"]["rows"]


def test_a_measurement_on_the_line_is_stepped_past_not_repeated():
    # The seeds' line predicts the crossing exactly; the point measured there is just under, so
    # the next one is a margin past it, not the same count again.
    measure, asked = linear(1000, base_mb=192)
    result = crossover.search(measure, [(4_000_000, 4192, "s"), (12_000_000, 12192, "s")], budget_mb=8192)
    assert asked[0] == 8_000_000
    assert len(set(asked)) == len(asked)
    assert result["closed"] and result["under"]["rows"] == 8_000_000


def test_memory_that_does_not_reach_the_budget_gives_no_bracket():
    result = crossover.search(
        lambda rows: {"peak_rss_mb": 700.0}, [(1_000_000, 700, "s"), (2_000_000, 700, "s")], max_steps=3
    )
    assert not result["closed"] and result["over"] is None and len(result["steps"]) == 3
    assert crossover.describe(result).startswith("under the budget up to ")
    assert crossover.width(result) == float("inf")


def test_the_search_needs_a_point_to_start_from():
    with pytest.raises(ValueError, match="at least one measured point"):
        crossover.next_rows({}, 8192)
    # One point: memory taken as proportional to rows.
    assert crossover.next_rows({2_000_000: 2048.0}, 8192) == 8_000_000


def test_the_report_gives_the_searched_bracket_instead_of_the_interpolation():
    from benchmarks import report

    measure, _ = linear(1200)
    seeds = [(4_000_000, 5100.0, "this run"), (16_000_000, 19500.0, "this run")]
    searched = crossover.search(measure, seeds, budget_mb=report.MEMORY_BUDGET_MB)
    peaks = {4_000_000: 5100.0, 16_000_000: 19500.0}
    scales = {
        str(r): {"single_node": {f"{e}_peak_rss_mb": {"median": mb} for e in ("pandas_sklearn", "polars")}}
        for r, mb in peaks.items()
    }
    results = {"scales": scales}
    interpolated = "\n".join(report._budget_targets(results))
    assert "interpolated between 4,000,000 and 16,000,000 rows" in interpolated
    assert report._crossover_section(results) == []
    results["crossover"] = {"pandas_sklearn": searched}
    lines = report._budget_targets(results)
    pandas = next(line for line in lines if line.startswith("| pandas"))
    assert f"| {crossover.describe(searched)} |" in pandas and "searched: " in pandas
    assert any(line.startswith("| Polars exceeds") and "interpolated" in line for line in lines)
    section = "\n".join(report._crossover_section(results))
    for step in searched["steps"]:
        assert f"| pandas + scikit-learn | {step['rows']:,} | {step['peak_rss_mb']:.0f} MB |" in section
    assert f"**{crossover.describe(searched)}**" in section


def test_seeds_name_the_run_that_measured_them(tmp_path):
    from benchmarks import run

    def part(mb: float, stamp: str | None = None) -> dict:
        sn = {f"{e}_peak_rss_mb": {"median": mb} for e in ("pandas_sklearn", "polars")}
        return {"single_node": {**sn, "run": stamp} if stamp else sn}

    earlier = {
        "started": "2026-12-01",
        "scales": {"4000000": part(4000.0, "2026-12-03"), "1000000": part(900.0)},
    }
    path = tmp_path / "results.json"
    path.write_text(__import__("json").dumps(earlier))
    this = {"scales": {"4000000": part(4100.0)}}
    seeds = run._crossover_seeds(this, path)["pandas_sklearn"]
    # This run's 4 M measurement wins over the file's; a merged part names its own run.
    assert sorted(seeds) == [
        (1_000_000, 900.0, f"{path} (run of 2026-12-01)"),
        (4_000_000, 4100.0, "this run"),
    ]
    earlier_only = run._crossover_seeds({"scales": {}}, path)["polars"]
    assert (4_000_000, 4000.0, f"{path} (run of 2026-12-03)") in earlier_only
    # Engines the earlier runs did not have start without seeds (and are left unsearched).
    assert run._crossover_seeds(this, path)["duckdb"] == []
