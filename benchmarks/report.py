"""Write RESULTS.md and results.png from a run's results (results.json holds everything)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks import crossover, single_node, window
from lakeprep_contracts import pipeline

INPUT_VS_FLOOR_TARGET = 0.8
INPUT_VS_PANDAS_TARGET = 5.0
PARSE_TARGET_S = 0.1
SMALL_DAY_TARGET = 2.0  # a small day's Spark time (fused) <= this x one empty submission
TARGET_ROWS = 16_000_000  # the scale at which the preparation targets are judged
STAGED_TARGET = 4.0  # staged pipeline <= this x the floor
FUSED_TARGET = 2.0  # fused mode <= this x the floor
DAILY_TARGET = 3.0  # the daily path (validate, preprocess, sample) <= this x the floor
SCALING_TARGET = 4.4  # time at 4x the rows <= this x (no worse than linear, with slack)
# "Driver memory flat": peak RSS of the largest submission's process tree at 4x the rows at
# most this x. Judged on the driver alone in client mode on a standalone cluster (part
# `driver`); part `spark`'s local-mode figures are shown beside, where the driver JVM is
# also the executor. Spark's memory is bounded by its settings, not the data; 1.25 leaves
# room for page-cache-sized noise.
FLAT_MEMORY_TARGET = 1.25
MEMORY_BUDGET_MB = crossover.BUDGET_MB  # the single-node crossover: peak RSS against the budget
READERS = ("rank_batches", "pyarrow_floor", "pandas_dataloader")
STAGES = pipeline.STAGES  # in pipeline order (results.json sorts keys)

# What a run leaves unmeasured, each bullet shown while its part is missing from the results.
NOT_PROFILED = """\
- The `profile` part (py-spy and the event log) at scale: it ran on the small day only, so
  the stages' cost at scale is read from the jobs and passes of part `passes` and from stage A/B
  runs (`python -m benchmarks.stage_ab`).
"""
NOT_SEARCHED = """\
- The single-node versions' crossing of the memory budget is interpolated between the
  measured scales, not searched for (`python -m benchmarks --only crossover`).
"""
NO_GPU = """\
- The trainer's input pipeline on a GPU host (pinned batches copied to the device while
  the step runs): this machine has none; part `input` measures batches on the CPU.
"""


def not_done(results: dict[str, Any]) -> str:
    """The closing section: what this machine or this run did not measure."""
    profiled = any("profile" in s for s in results["scales"].values())
    gaps = ("" if profiled else NOT_PROFILED) + ("" if results.get("crossover") else NOT_SEARCHED) + NO_GPU
    return "## Not measured yet\n\n" + gaps


def _fmt(s: dict | None, unit: str = "", digits: int = 2) -> str:
    """Median and, with several repetitions, ± half the range in % of the median."""
    if not s:
        return "-"
    spread = f" ±{s['spread_pct']}%" if s["n"] > 1 else ""
    return f"{s['median']:.{digits}f}{unit}{spread}"


def _ms(s: dict) -> str:
    spread = f" ±{s['spread_pct']}%" if s["n"] > 1 else ""
    return f"{s['median'] * 1000:.0f} ms{spread}"


def _mb(s: dict | None) -> str:
    return f"{s['median']:.0f} MB" if s else "-"


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


# A target is judged on the median of its repetitions only when they agree: beyond this
# spread (half the range, in % of the median) the machine's noise, not the code, decides.
MAX_JUDGED_SPREAD_PCT = 50.0


def _judged(measured: dict[str, Any], ok: bool) -> str:
    """`_met`, or why not: repetitions that disagree by more than the noise allows."""
    spread = measured.get("spread_pct") or 0.0
    if spread > MAX_JUDGED_SPREAD_PCT:
        return f"not judged: the repetitions spread ±{spread:.0f}%"
    return _met(ok)


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _targets(results: dict[str, Any]) -> list[str]:
    lines = ["| target | measured | |", "|---|---:|---|"]
    for rows, scale in results["scales"].items():
        at = f"{int(rows):,} rows"
        if inp := scale.get("input"):
            v = inp["vs_floor"]["median"]
            what = f"input pipeline >= {INPUT_VS_FLOOR_TARGET:.0%} of the pyarrow floor ({at})"
            lines.append(_row(what, f"{v:.0%}", _judged(inp["vs_floor"], v >= INPUT_VS_FLOOR_TARGET)))
            v = inp["vs_pandas"]["median"]
            what = f"input pipeline >= {INPUT_VS_PANDAS_TARGET:g}x pandas + DataLoader ({at})"
            lines.append(_row(what, f"{v:.1f}x", _judged(inp["vs_pandas"], v >= INPUT_VS_PANDAS_TARGET)))
        if pair := (scale.get("input") or {}).get("prepared"):
            v = pair["vs_floor"]["median"]
            what = (
                f"the transform applied at read (prepared shards) >= {INPUT_VS_FLOOR_TARGET:.0%} of a "
                f"plain pyarrow read of them ({at})"
            )
            lines.append(_row(what, f"{v:.0%}", _judged(pair["vs_floor"], v >= INPUT_VS_FLOOR_TARGET)))
            if "vs_pandas" in pair:
                v = pair["vs_pandas"]["median"]
                what = f"the same >= {INPUT_VS_PANDAS_TARGET:g}x pandas + DataLoader ({at})"
                lines.append(_row(what, f"{v:.1f}x", _judged(pair["vs_pandas"], v >= INPUT_VS_PANDAS_TARGET)))
        sp = scale.get("spark")
        if sp and int(rows) >= TARGET_ROWS:
            v = sp["ratio"]["median"]
            what = f"staged pipeline <= {STAGED_TARGET:g}x the floor ({at})"
            lines.append(_row(what, f"{v:.1f}x", _judged(sp["ratio"], v <= STAGED_TARGET)))
            if fused := sp.get("fused_ratio"):
                v = fused["median"]
                what = f"fused mode <= {FUSED_TARGET:g}x the floor ({at})"
                lines.append(_row(what, f"{v:.1f}x", _judged(fused, v <= FUSED_TARGET)))
            daily_ways = (
                ("daily_ratio", "staged"),
                ("daily_cpu_ratio", "staged, CPU time"),
                ("daily_fused_ratio", "fused, one submission"),
                ("daily_fused_cpu_ratio", "fused, CPU time"),
            )
            for key, way in daily_ways:
                if daily := sp.get(key):
                    v = daily["median"]
                    what = (
                        f"the daily path (validate, preprocess, sample: the day's statistics and shards; "
                        f"{way}) <= {DAILY_TARGET:g}x the floor ({at})"
                    )
                    lines.append(_row(what, f"{v:.1f}x", _judged(daily, v <= DAILY_TARGET)))
    lines += _scaling_targets(results)
    lines += _window_targets(results)
    lines += _budget_targets(results)
    if small := results.get("small_day"):
        v = small["fused_spark_vs_empty"]["median"]
        what = (
            f"a small day ({small['rows']:,} rows) fused: its Spark time (one submission) within "
            f"{SMALL_DAY_TARGET:g}x of one empty submission"
        )
        lines.append(_row(what, f"{v:.1f}x", _judged(small["fused_spark_vs_empty"], v <= SMALL_DAY_TARGET)))
        v = small["fused_vs_empty"]["median"]
        what = "the same with its task in the worker (`fit_and_export`'s execute), x one empty submission"
        lines.append(_row(what, f"{v:.1f}x", ""))
        v = small["separate_spark_vs_empty"]["median"]
        n = len(small["tasks"]["separate"]["spark"])
        what = f"the same day as separate tasks ({n} submissions; for comparison), Spark time"
        lines.append(_row(what, f"{v:.1f}x", ""))
        if warm := small.get("warm_vs_empty"):
            what = (
                "the same day in an already warm session (what a long-lived Spark Connect server would "
                "leave per day), x one empty submission"
            )
            lines.append(
                _row(what, f"{warm['median']:.1f}x", _judged(warm, warm["median"] <= SMALL_DAY_TARGET))
            )
    if parse := results.get("dag_parse", {}).get("20"):
        v = parse["processor_s"]["median"]
        what = f"DAG file with 20 specs parsed in < {PARSE_TARGET_S * 1000:.0f} ms (DAG processor's time)"
        lines.append(_row(what, f"{v * 1000:.0f} ms", _judged(parse["processor_s"], v < PARSE_TARGET_S)))
    if parse and "cpu_s" in parse:
        v = parse["cpu_s"]["median"]
        lines.append(
            _row(
                "the same, CPU time of the parse (less load-dependent)",
                f"{v * 1000:.0f} ms",
                _met(v < PARSE_TARGET_S),
            )
        )
    if parse and (floor := parse.get("floor")):
        v = floor["processor_s"]["median"]
        what = f"Airflow's own floor: the same {parse['dags']} DAGs as EmptyOperators, no lakeprep code"
        lines.append(
            _row(what, f"{v * 1000:.0f} ms", "(the target is below it)" if v >= PARSE_TARGET_S else "")
        )
    return lines


def _pairs(results: dict[str, Any], part: str) -> list[tuple[int, int, dict, dict]]:
    """(rows, 4 x rows, part at rows, part at 4 x rows) for the measured scales 4x apart."""
    have = {int(r): s[part] for r, s in results["scales"].items() if s.get(part)}
    return [(r, 4 * r, have[r], have[4 * r]) for r in sorted(have) if 4 * r in have]


LOCAL_JVM = "local mode: driver and executor in one JVM"
# (key, what, bound, a memory ratio, judged as a target). Part `spark`'s local-mode peaks
# are shown beside the drivers' for comparison, not judged: in one JVM they measure the
# executor's buffers as much as the driver.
SCALING_CHECKS = {
    "spark": (
        ("staged_s", "staged time grows no faster than linearly", SCALING_TARGET, False, True),
        ("staged_cpu_s", "staged CPU time grows no faster than linearly", SCALING_TARGET, False, True),
        ("fused_s", "fused time grows no faster than linearly", SCALING_TARGET, False, True),
        ("fused_cpu_s", "fused CPU time grows no faster than linearly", SCALING_TARGET, False, True),
        ("staged_peak_rss_mb", f"staged peak memory ({LOCAL_JVM})", FLAT_MEMORY_TARGET, True, False),
        ("fused_peak_rss_mb", f"fused peak memory ({LOCAL_JVM})", FLAT_MEMORY_TARGET, True, False),
    ),
    "driver": (
        (
            "staged_driver_peak_rss_mb",
            "staged driver memory flat (client mode on a standalone cluster, largest stage's driver)",
            FLAT_MEMORY_TARGET,
            True,
            True,
        ),
        (
            "fused_driver_peak_rss_mb",
            "fused driver memory flat (client mode on a standalone cluster, larger submission's driver)",
            FLAT_MEMORY_TARGET,
            True,
            True,
        ),
    ),
}
UNJUDGED = "for comparison (the target is judged on the drivers alone)"


def _scaling_targets(results: dict[str, Any]) -> list[str]:
    """Time (no faster than linear) and peak memory (flat) between scales 4x apart."""
    lines = []
    for part, checks in SCALING_CHECKS.items():
        lines += _scaling_rows(results, part, checks)
    return lines


def _scaling_rows(results: dict[str, Any], part: str, checks: tuple) -> list[str]:
    lines = []
    for small, large, a, b in _pairs(results, part):
        at = f"{large // 10**6} M / {small // 10**6} M rows"
        runs = (a.get("run", results["started"]), b.get("run", results["started"]))
        if runs[0] != runs[1]:
            # Absolute times drift from run to run: a ratio across runs says nothing.
            lines.append(
                _row(
                    f"scaling ({at}, part `{part}`)",
                    f"not compared: {small:,} rows measured in the run of {runs[0]}, "
                    f"{large:,} in the run of {runs[1]}",
                    "",
                )
            )
            continue
        for key, what, target, memory, judged in checks:
            if key in a and key in b:
                v = b[key]["median"] / a[key]["median"]
                shown = (
                    f"{v:.2f}x ({a[key]['median']:.0f} -> {b[key]['median']:.0f} MB)"
                    if memory
                    else f"{v:.2f}"
                )
                verdict = _met(v <= target) if judged else UNJUDGED
                lines.append(
                    _row(f"{what} ({at}{' <= ' + format(target, 'g') if judged else ''})", shown, verdict)
                )
    return lines


def crossover_rows(points: list[tuple[int, float]], budget_mb: float) -> tuple[int | None, str]:
    """The row count at which peak memory reaches the budget, linear between (or beyond) the
    two measured points that bracket it (or the two largest), and how it was found."""
    points = sorted(points)
    if len(points) < 2:
        return None, "one measured point"
    over = [i for i, (_, mb) in enumerate(points) if mb >= budget_mb]
    i = max(over[0], 1) if over else len(points) - 1
    (r0, m0), (r1, m1) = points[i - 1], points[i]
    if m1 <= m0:
        return None, "memory did not grow with rows"
    rows = r0 + (budget_mb - m0) * (r1 - r0) / (m1 - m0)
    how = "interpolated" if over and over[0] > 0 else "extrapolated"
    return int(round(rows, -5)), f"{how} between {r0:,} and {r1:,} rows"


def _budget_targets(results: dict[str, Any]) -> list[str]:
    scales = {int(r): s for r, s in results["scales"].items()}
    lines = []
    budget = f"{MEMORY_BUDGET_MB / 1024:g} GiB"
    for engine, name in single_node.NAMES.items():
        points = [
            (r, s["single_node"][f"{engine}_peak_rss_mb"]["median"])
            for r, s in sorted(scales.items())
            if f"{engine}_peak_rss_mb" in s.get("single_node", {})
        ]
        if searched := results.get("crossover", {}).get(engine):
            how = (
                f"searched: {len(searched['steps'])} more runs on generated data, "
                f"bracket {crossover.width(searched):.1%} wide"
            )
            lines.append(
                _row(f"{name} exceeds {budget} between (peak RSS, {how})", crossover.describe(searched), "")
            )
            continue
        rows, how = crossover_rows(points, MEMORY_BUDGET_MB)
        if rows is not None:
            lines.append(_row(f"{name} exceeds {budget} beyond (peak RSS, {how})", f"{rows:,} rows", ""))
    for r, s in sorted(scales.items()):
        sn, sp = s.get("single_node"), s.get("spark")
        if not (sn and sp):
            continue
        lake = max(sp["staged_peak_rss_mb"]["median"], sp.get("fused_peak_rss_mb", {}).get("median", 0))
        over = [
            name
            for engine, name in single_node.NAMES.items()
            if sn.get(f"{engine}_peak_rss_mb", {}).get("median", 0) > MEMORY_BUDGET_MB
        ]
        if over:
            what = f"at {r:,} rows {' and '.join(over)} over {budget}, lakeprep under it"
            lines.append(_row(what, f"lakeprep peak {lake:.0f} MB", _met(lake <= MEMORY_BUDGET_MB)))
    return lines


def _window_targets(results: dict[str, Any]) -> list[str]:
    """Issue 30: a run at the longest window measured within `window.TARGET_RATIO` of the same
    run at 1 day, judged on CPU time (all tasks, and the Spark submissions alone)."""
    lines = []
    for rows, scale in results["scales"].items():
        if not (w := scale.get("window")):
            continue
        n = max(w["window_days"])
        run = w["windows"][str(n)]["run"]
        at = f"{n} days against 1, {int(rows):,} rows a day"
        for key, what in (("cpu_ratio", "CPU time"), ("spark_cpu_ratio", "Spark CPU time")):
            if key in run:
                v = run[key]["median"]
                target = window.TARGET_RATIO
                lines.append(
                    _row(
                        f"a run's {what} at a longer window <= {target:g}x ({at})",
                        f"{v:.2f}x",
                        _judged(run[key], v <= target),
                    )
                )
        if "wall_ratio" in run:
            lines.append(_row(f"the same, wall time ({at})", f"{run['wall_ratio']['median']:.2f}x", ""))
        projected = _projected_ratio(w, window.TARGET_DAYS)
        if projected is not None and n < window.TARGET_DAYS:
            lines.append(
                _row(
                    f"a run's CPU time at {window.TARGET_DAYS} days <= {window.TARGET_RATIO:g}x, projected "
                    f"(the window tasks' CPU per added day, 1 to {n} days, continued linearly; "
                    f"{int(rows):,} rows a day)",
                    f"{projected:.2f}x",
                    _met(projected <= window.TARGET_RATIO),
                )
            )
    return lines


def _projected_ratio(w: dict[str, Any], days: int) -> float | None:
    """The run at `days` against the run at 1 day, the window tasks' CPU continued linearly
    from the shortest to the longest window measured (None without two lengths): what the
    issue's target is about when the machine cannot prepare `days` days."""
    lengths = sorted(int(n) for n in w["windows"])
    if len(lengths) < 2 or lengths[0] != 1:
        return None
    first, last = w["windows"]["1"], w["windows"][str(lengths[-1])]
    per_day = (last["cpu_s"]["median"] - first["cpu_s"]["median"]) / (lengths[-1] - 1)
    at_one = first["run"]["cpu_s"]["median"]
    return (at_one + per_day * (days - 1)) / at_one


def _heaps(results: dict[str, Any], part: str) -> str:
    """` Driver heap: 2g (all scales).` from the parts merged from other runs, which each
    carry their run's heap; empty when none does (the header's machine line holds)."""
    heaps = {
        f"{int(r):,}": s[part]["driver_memory"]
        for r, s in sorted(results["scales"].items(), key=lambda kv: int(kv[0]))
        if s.get(part, {}).get("driver_memory")
    }
    if not heaps:
        return ""
    if len(set(heaps.values())) == 1 and len(heaps) == sum(
        1 for s in results["scales"].values() if part in s
    ):
        return f" Driver heap (`SPARK_DRIVER_MEMORY`): {next(iter(heaps.values()))} at every scale."
    return (
        " Driver heap (`SPARK_DRIVER_MEMORY`): "
        + ", ".join(f"{h} at {r} rows" for r, h in heaps.items())
        + "."
    )


def _spark_section(results: dict[str, Any]) -> list[str]:
    out = [
        "## `spark`: preparation against the floor",
        "",
        "Five `spark-submit`s as `SparkStageOperator` builds them (validate, preprocess, sample, "
        "fit_transform, export_shards) against one `spark-submit` that reads the same raw CSV "
        "(validate's reader options) and writes it as zstd Parquet, same master and `--conf`. "
        "*Fused* is the same five stages as the two submissions of `spark.fuse_stages` "
        "(`prepare_day`, `fit_and_export`). "
        "Median of the repetitions, ± half the range in % of the median. Ratios per repetition "
        "(floor, stages, fused and empty side by side, order rotating), then their median. *Net of start-up* "
        "takes one empty submission off each of the five stages and off the floor. *CPU* is user + "
        "system time of each submission's process tree (`wait4`), which the machine's load moves less."
        + _heaps(results, "spark"),
        "",
        "| rows | raw CSV | floor | staged (sum of 5) | ratio | net of start-up | CPU ratio "
        "| fused (sum of 2) | ratio | CPU ratio | daily path staged (3) | ratio "
        "| daily path fused (1) | ratio | empty submission | peak RSS floor "
        "| peak RSS staged (max stage) | fused |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rows, scale in results["scales"].items():
        if not (sp := scale.get("spark")):
            continue
        out.append(
            _row(
                f"{int(rows):,}",
                f"{scale['data']['bytes'] / 2**20:.0f} MiB",
                _fmt(sp["floor_s"], " s"),
                _fmt(sp["staged_s"], " s"),
                _fmt(sp["ratio"], "x"),
                _fmt(sp["ratio_net_of_startup"], "x"),
                _fmt(sp.get("cpu_ratio"), "x"),
                _fmt(sp.get("fused_s"), " s"),
                _fmt(sp.get("fused_ratio"), "x"),
                _fmt(sp.get("fused_cpu_ratio"), "x"),
                _fmt(sp.get("daily_s"), " s"),
                _fmt(sp.get("daily_ratio"), "x"),
                _fmt(sp.get("daily_fused_s"), " s"),
                _fmt(sp.get("daily_fused_ratio"), "x"),
                _fmt(sp["empty_s"], " s"),
                _mb(sp["floor_peak_rss_mb"]),
                _mb(sp["staged_peak_rss_mb"]),
                _mb(sp.get("fused_peak_rss_mb")),
            )
        )
    for rows, scale in results["scales"].items():
        if not (sp := scale.get("spark")):
            continue
        floor = sp["floor_s"]["median"]
        cpu = f"CPU {_fmt(sp['floor_cpu_s'], ' s')}; " if "floor_cpu_s" in sp else ""
        out += [
            "",
            f"Per stage at {int(rows):,} rows (floor {_fmt(sp['floor_s'], ' s')}, {cpu}one empty submission "
            f"{_fmt(sp['empty_s'], ' s')}):",
            "",
            "| stage | time | x floor | CPU | peak RSS (process tree) | rows in | rows out | quarantined |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for stage in STAGES:
            st = sp["stages"][stage]
            out.append(
                _row(
                    stage,
                    _fmt(st["wall_s"], " s"),
                    f"{st['wall_s']['median'] / floor:.1f}x",
                    _fmt(st.get("cpu_s"), " s"),
                    _mb(st["peak_rss_mb"]),
                    st["rows_in"],
                    st["rows_out"],
                    st["rows_quarantined"],
                )
            )
    return out


def _driver_section(results: dict[str, Any]) -> list[str]:
    """Part `driver`: the driver's memory alone, in client mode on a standalone cluster."""
    measured = sorted(
        ((int(rows), scale["driver"]) for rows, scale in results["scales"].items() if scale.get("driver")),
        key=lambda measured_at: measured_at[0],
    )
    if not measured:
        return []
    first = measured[0][1]
    out = [
        "## `driver`: the driver's memory alone (client mode on a standalone cluster)",
        "",
        "In local mode (part `spark`) the driver JVM is also the only executor, so a submission's peak "
        "is as much the executor's shuffle and sort buffers as the driver's. Here the same five stages, "
        "the two fused submissions and an empty submission, built by the operator as in part `spark`, run "
        f"against a standalone master and one worker on loopback (`hadoop/cluster.py`, `{first['master']}`), "
        "in client mode: the submission's process tree (launcher, driver JVM, Python driver) is the "
        "driver alone; the executor, a child of the worker, is sampled apart (every 50 ms, its process "
        f"tree). Same data on `file://`, same driver heap, executor `{' '.join(first['executor_conf'])}`. "
        "Median of the repetitions; the stages' peak is the largest of the five.",
        "",
        "| rows | staged driver peak | staged executor peak | fused driver peak | fused executor peak "
        "| empty submission's driver | staged time | fused time | same row counts as part `spark` |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for rows, d in measured:
        spark = results["scales"][str(rows)].get("spark")
        same = "-"
        if spark and spark.get("runs") and d.get("runs"):
            same = str(spark["runs"][-1]["fused"]["stages"] == d["runs"][-1]["fused"]["stages"])
        out.append(
            _row(
                f"{rows:,}",
                _mb(d["staged_driver_peak_rss_mb"]),
                _mb(d["staged_executor_peak_rss_mb"]),
                _mb(d["fused_driver_peak_rss_mb"]),
                _mb(d["fused_executor_peak_rss_mb"]),
                _mb(d["empty_driver_peak_rss_mb"]),
                _fmt(d["staged_s"], " s"),
                _fmt(d["fused_s"], " s"),
                same,
            )
        )
    rows, last = measured[-1]
    out += [
        "",
        f"Per stage at {rows:,} rows (peak RSS of each process tree):",
        "",
        "| stage | driver | executor |",
        "|---|---:|---:|",
        *[
            _row(
                st,
                _mb(last["stages"][st]["driver_peak_rss_mb"]),
                _mb(last["stages"][st]["executor_peak_rss_mb"]),
            )
            for st in STAGES
        ],
    ]
    return out


def _startup_note(part: dict[str, Any]) -> str:
    """How the part's spark-submits started (runs before the option was recorded: unknown)."""
    if "spark_submit_opts" not in part:
        return ""
    return (
        f" Every submission, the empty one included, started as `make demo`'s do: "
        f"`SPARK_SUBMIT_OPTS={part['spark_submit_opts']}` (`lakeprep_airflow.spark_startup`)."
    )


def _small_day_section(results: dict[str, Any]) -> list[str]:
    if not (small := results.get("small_day")):
        return []

    def tasks(way: str) -> str:
        ran = small["tasks"][way]
        return f"{', '.join(ran['spark'])} submitted; {', '.join(ran['worker'])} in the worker"

    def way_row(label: str, way: str) -> str:
        return _row(
            label,
            _fmt(small[f"{way}_spark_s"], " s"),
            _fmt(small[f"{way}_spark_vs_empty"], "x"),
            _fmt(small[f"{way}_spark_cpu_s"], " s"),
            _fmt(small[f"{way}_spark_cpu_vs_empty"], "x"),
            _fmt(small[f"{way}_s"], " s"),
            _fmt(small[f"{way}_vs_empty"], "x"),
        )

    return [
        "## `small`: a small day, start-up against work",
        "",
        f"One generated day of {small['rows']:,} flights (a demo day's size), its five stages run "
        "as the DAG the spec builds runs them (`spark_prep.run_dag`), several ways per repetition, "
        "the order rotating: as separate tasks, as the fused tasks of `spark.fuse_stages`, the "
        "fused submission with its plan run twice in its session (*warm* = that less the fused "
        "submission: the day's stages in a JVM that has run them once, which is what a long-lived "
        "Spark session, such as a Spark Connect server, would cost per day less its request "
        "overhead), and one empty submission (session start and stop). The window's stages run "
        'in the Airflow worker without Spark (docs/PIPELINE.md "Where the stages run"), measured '
        "as part `window` measures a Python task: its `execute` alone. *Spark* sums the submissions; "
        "*all tasks* adds the worker's. Ratios per repetition, then their median. Both ways wrote "
        f"the same row accounting per stage: {small['same_row_counts']}." + _startup_note(small),
        "",
        "| | Spark wall | x empty | Spark CPU | CPU x empty | all tasks wall | x empty |",
        "|---|---:|---:|---:|---:|---:|---:|",
        way_row(f"separate tasks ({tasks('separate')})", "separate"),
        way_row(f"fused tasks ({tasks('fused')})", "fused"),
        _row(
            "the fused plan again in the same session (warm: twice - once)",
            _fmt(small["warm_s"], " s"),
            _fmt(small["warm_vs_empty"], "x"),
            _fmt(small["warm_cpu_s"], " s"),
            "",
            "",
            "",
        ),
        _row(
            "one empty submission",
            _fmt(small["empty_s"], " s"),
            "1x",
            _fmt(small["empty_cpu_s"], " s"),
            "1x",
            "",
            "",
        ),
        "",
        f"Fused against separate, all tasks: {_fmt(small['fused_vs_separate'], 'x')} of the wall time. "
        "The fused Spark time is the daily submission's alone; part `profile` shows where it goes.",
    ]


def _profile_table(title: str, submissions: dict[str, Any]) -> list[str]:
    out = [
        "",
        title,
        "",
        "| task | part | wall | jobs | in jobs | JVM outside jobs | Python | waits longest at |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    blank = ("", "", "", "", "")
    for name, sub in submissions.items():
        if sub.get("kind") == "python":  # a task in the worker, no Spark: timed, not profiled
            out.append(
                _row(
                    name,
                    "in the Airflow worker, no Spark: its `execute`",
                    f"{sub['wall_s']:.1f} s",
                    0,
                    "",
                    "",
                    f"{sub['cpu_s']:.1f} s CPU",
                    f"the whole child (imports, the DAG built) {sub['process_wall_s']:.1f} s",
                )
            )
            continue
        out.append(
            _row(name, "launcher + JVM before the Python driver", f"{sub['before_driver_s']:.1f} s", *blank)
        )
        out.append(_row("", "session start", f"{sub['session_start_s']:.1f} s", *blank))
        # results.json sorts keys: the plan's order is the submission's name
        for stage, st in ((x, sub["stages"][x]) for x in name.split("+") if x in sub["stages"]):
            waits = "; ".join(f"`{site}` {sec:.1f} s" for site, sec in st["longest_jvm_waits"][:3])
            out.append(
                _row(
                    "",
                    stage,
                    f"{st['wall_s']:.1f} s",
                    st["jobs"],
                    f"{st['in_jobs_s']:.1f} s",
                    f"{st['jvm_outside_jobs_s']:.1f} s",
                    f"{st['python_s']:.1f} s",
                    waits,
                )
            )
        out.append(_row("", "session stop", f"{sub['session_stop_s']:.1f} s", *blank))
        out.append(_row("", "imports, plan, other", f"{sub['driver_other_s']:.1f} s", *blank))
        out.append(
            _row(
                "",
                f"**sampled total** (measured {sub['wall_s']:.1f} s)",
                f"{sub['sampled_s']:.1f} s",
                "",
                "",
                "",
                "",
                f"{sub['python_workers']} Python worker processes",
            )
        )
    return out


def _profile_section(results: dict[str, Any]) -> list[str]:
    tables = []
    if small := results.get("small_profile"):
        tables += _profile_table(
            f"The small day ({small['data']['rows']:,} rows):{_startup_note(small)}", small["submissions"]
        )
    for rows, scale in results["scales"].items():
        if prof := scale.get("profile"):
            subs = prof["submissions"]
            # A profile whose window stages ran as a submission measured them as part `spark` runs them.
            submitted = [n for n, x in subs.items() if x.get("kind") != "python" and "fit_transform" in n]
            how = f" ({submitted[0]} submitted to Spark, as part `spark` submits it)" if submitted else ""
            tables += _profile_table(f"At {int(rows):,} rows{how}:", subs)
    if not tables:
        return []
    return [
        "## `profile`: where the fused tasks' time goes (py-spy and the event log)",
        "",
        "`benchmarks/day_profile.py`: the fused DAG's tasks for the day; a spark-submit once under "
        "`py-spy record --idle` and with Spark's event log, a task the DAG runs in the Airflow worker "
        "(no Spark) timed as part `window` times it (its `execute`). For a submission, "
        "the Python driver's main thread, wall clock. *In jobs*: the union of "
        "the stage's Spark jobs (each tagged with its `lakeprep.stage` local property); *JVM outside "
        "jobs*: the stage's waits on py4j less its jobs (analysis, optimisation, code generation, the "
        "file system, footers); *Python*: the driver's own code. *Waits longest at*: the lakeprep "
        "lines whose py4j calls took longest. py-spy's raw samples (flamegraph.pl's input) and the "
        "event logs are in the run's log folder." + _heaps(results, "profile"),
        *tables,
    ]


def _passes_section(results: dict[str, Any]) -> list[str]:
    rows_with = [(r, s["passes"]) for r, s in results["scales"].items() if s.get("passes")]
    if not rows_with:
        return []
    out = [
        "## `passes`: what each submission reads and writes (Spark event log)",
        "",
        "One extra pass with `spark.eventLog.enabled` (not in the timings above): jobs, tasks and the "
        "task metrics summed over the submission. *Reads* = input bytes read by its tasks / its input "
        "partition's size on disk (raw CSV for validate and the floor, the previous stage's Parquet "
        "otherwise): a stage that reads its input twice shows about 2 (column pruning pushes it below 1). "
        "Spark counts a read of a cached block as input too (`RDD.getOrCompute`), so this counts passes "
        "over the data from disk or from the cache, cached blocks at their in-memory size (larger than "
        "the Parquet on disk): for stages that cache, the job count is the safer measure of passes.",
    ]
    for rows, passes in rows_with:
        out += [
            "",
            f"At {int(rows):,} rows:",
            "",
            "| submission | jobs | tasks | input on disk | read by tasks | reads | written | shuffle write "
            "| spilled to disk |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name in ("floor", *STAGES):
            p = passes["floor"] if name == "floor" else passes["stages"][name]
            out.append(
                _row(
                    name,
                    p["jobs"],
                    p["tasks"],
                    f"{p['input_on_disk_mb']} MB",
                    f"{p['input_mb']} MB",
                    p["reads"],
                    f"{p['output_mb']} MB",
                    f"{p['shuffle_write_mb']} MB",
                    f"{p['spill_disk_mb']} MB",
                )
            )
        out += _call_sites_table(passes)
    return out


def _call_sites_table(passes: dict[str, Any]) -> list[str]:
    """Where each submission's jobs spent their time, by the Python line of the action."""
    subs = [("floor", passes["floor"])] + [(s, passes["stages"][s]) for s in STAGES]
    if not any(p.get("call_sites") for _, p in subs):
        return []  # a results file from before the call sites were recorded
    out = [
        "",
        "Where the jobs' time went: the call sites (the action's Python line) with the most seconds "
        "from job submission to end, jobs at one site summed (`python -m benchmarks.event_log "
        "<events folder>` lists them all).",
        "",
        "| submission | call site: seconds (jobs) |",
        "|---|---|",
    ]
    for name, p in subs:
        sites = "; ".join(
            f"`{s['call_site']}`: {s['seconds']:.1f} s ({s['jobs']})" for s in p.get("call_sites", [])
        )
        out.append(_row(name, sites or "-"))
    return out


def _input_section(results: dict[str, Any]) -> list[str]:
    out = [
        "## `input`: the trainer's input pipeline",
        "",
        "Rows per second from the export's shards (all three splits, the manifest's batch size) into "
        "batches; each reader in a fresh process per repetition, readers rotating within a repetition, "
        "one untimed warm-up pass first in each process (shards in the page cache), then timed passes "
        "for at least 2 s (the median pass counts; *passes* per process, RankBatches / floor / pandas).",
        "",
        "| rows | `RankBatches` | pyarrow into numpy (floor) | pandas + TensorDataset + DataLoader "
        "| vs floor | vs pandas | peak RSS RankBatches / floor / pandas | passes |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rows, scale in results["scales"].items():
        if not (inp := scale.get("input")):
            continue
        peaks = " / ".join(f"{inp[f'{r}_peak_rss_mb']['median']:.0f}" for r in READERS)
        # Runs before timed passes were repeated (one pass each) have no count.
        passes = " / ".join(str(inp["runs"][-1][r].get("passes", 1)) for r in READERS)
        out.append(
            _row(
                f"{inp['rows']:,} (export of {int(rows):,} raw)",
                *(_fmt(inp[f"{r}_rows_per_s"], " rows/s", 0) for r in READERS),
                _fmt(inp["vs_floor"], "x"),
                _fmt(inp["vs_pandas"], "x"),
                f"{peaks} MB",
                passes,
            )
        )
    pairs = [
        (r, s["input"]["prepared"]) for r, s in results["scales"].items() if "prepared" in s.get("input", {})
    ]
    if pairs:
        ways = ("prepared", "prepared_floor", "encoded", "encoded_pandas")
        out += [
            "",
            'Prepared shards encoded at read (`shard_columns: "prepared"`): drawn rows in the export\'s '
            "files and row groups, written once as prepared shards and once as the encoded shards "
            "`encode` makes of them (`input_pipeline.write_pair`), the four readers rotating in one run. "
            "*vs floor*: `RankBatches` over the prepared shards / a plain pyarrow read of them (numbers "
            "into numpy, strings left as Arrow); *vs pandas*: / pandas + DataLoader over the encoded "
            "shards; *vs encoded*: / `RankBatches` over the encoded shards.",
            "",
            "| rows | `RankBatches`, prepared | pyarrow read of the prepared (floor) "
            "| `RankBatches`, encoded | pandas + DataLoader, encoded | vs floor | vs pandas | vs encoded "
            "| peak RSS prepared / floor / encoded / pandas |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for rows, pair in pairs:
            peaks = " / ".join(f"{pair[f'{w}_peak_rss_mb']['median']:.0f}" for w in ways)
            out.append(
                _row(
                    f"{pair['rows']:,} (export of {int(rows):,} raw)",
                    *(_fmt(pair[f"{w}_rows_per_s"], " rows/s", 0) for w in ways),
                    _fmt(pair["vs_floor"], "x"),
                    _fmt(pair["vs_pandas"], "x"),
                    _fmt(pair["vs_encoded"], "x"),
                    f"{peaks} MB",
                )
            )
    return out


def _parse_section(results: dict[str, Any]) -> list[str]:
    if not (parse := results.get("dag_parse")):
        return []
    out = [
        "## `parse`: DAG parse time of `dags/lakeprep_datasets.py`",
        "",
        "As the DAG processor spends it (`benchmarks/dag_parse.py`): `airflow.*` modules pre-imported "
        "in a warm parent, then per repetition a forked child builds `BundleDagBag(file)` and "
        "serializes the DAGs. *Processor* is fork to exit (the manager's `last_duration`), *CPU* the "
        "child's user + system time, *DagBag* its `FileLoadStat.duration`. One warm-up fork "
        "discarded (it writes the modules' bytecode, which the others read, as Python does by "
        "default). The specs are copies of `pipelines/flights.yaml` in `LAKEPREP_PIPELINES_DIR`.",
        "",
        "*Airflow floor*: the same DAGs rebuilt from their shape (ids, schedules, trigger-form Params "
        "with their schemas, task ids, edges) with `EmptyOperator`s and nothing of lakeprep "
        "(`benchmarks/jobs/floor_dags.py`; the Params declared after the tasks, as lakeprep's DAG "
        "factory declares them), parsed the same way: what Airflow itself spends on them.",
        "",
        "| specs | DAGs | processor (fork to exit) | CPU | DagBag parse | serialization "
        "| Airflow floor: processor | CPU | serialization |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for count, p in parse.items():
        cpu = _ms(p["cpu_s"]) if "cpu_s" in p else "-"
        floor = p.get("floor")
        floors = [_ms(floor[k]) for k in ("processor_s", "cpu_s", "serialize_s")] if floor else ["-"] * 3
        out.append(
            _row(
                count,
                p["dags"],
                _ms(p["processor_s"]),
                cpu,
                _ms(p["dagbag_s"]),
                _ms(p["serialize_s"]),
                *floors,
            )
        )
    return out


def _window_section(results: dict[str, Any]) -> list[str]:
    rows_with = [(r, s["window"]) for r, s in results["scales"].items() if s.get("window")]
    if not rows_with:
        return []
    out = [
        "## `window`: each day's work done once, a run at an N-day window against 1 day",
        "",
        "`benchmarks/window.py`: the run's day through the daily tasks, then the window tasks of "
        "the DAG the spec builds at each window length (days landed and prepared once, each day "
        "its own rows); each task a measured child process, a spark-submit or a Python task's "
        "`execute`. A run at N days = the daily tasks + the window tasks at N; ratios against the "
        "run at 1 day.",
    ]
    for rows, w in rows_with:
        daily = w["daily"]
        kinds = ", ".join(f"{t} ({daily['tasks'][t]['kind']})" for t in _in_order(daily))
        first = next(iter(w["windows"].values()))
        wkinds = ", ".join(f"{t} ({first['tasks'][t]['kind']})" for t in _in_order(first))
        out += [
            "",
            f"{int(rows):,} rows a day, the run's day {w['run_ds']}. Daily tasks: {kinds}; window "
            f"tasks: {wkinds}.",
            "",
            "| window | rows exported | daily CPU | window CPU | window Spark CPU | window wall "
            "| run CPU | run Spark CPU | run wall | run CPU vs 1 day | Spark CPU vs 1 day | wall vs 1 day "
            "| window CPU vs 1 day |",
            "|---:" * 13 + "|",
        ]
        for n, x in w["windows"].items():
            run = x["run"]

            def ratio(s: dict | None) -> str:
                return "-" if not s else _fmt(s, "x")

            out.append(
                _row(
                    f"{n} day{'s' if n != '1' else ''}",
                    f"{x['export'].get('rows_out') or 0:,}",
                    _fmt(daily["cpu_s"], " s"),
                    _fmt(x["cpu_s"], " s"),
                    _fmt(x["spark_cpu_s"], " s"),
                    _fmt(x["wall_s"], " s"),
                    _fmt(run["cpu_s"], " s"),
                    _fmt(run["spark_cpu_s"], " s"),
                    _fmt(run["wall_s"], " s"),
                    ratio(run.get("cpu_ratio")),
                    ratio(run.get("spark_cpu_ratio")),
                    ratio(run.get("wall_ratio")),
                    ratio(run.get("window_cpu_ratio")),
                )
            )
        longest = w["windows"][str(max(w["window_days"]))]
        out += [
            "",
            f"Window tasks at {max(w['window_days'])} days, CPU: "
            + ", ".join(f"{t} {_fmt(longest['tasks'][t]['cpu_s'], ' s')}" for t in _in_order(longest))
            + ".",
        ]
    return out


def _in_order(part: dict[str, Any]) -> list[str]:
    """A window part's task ids in pipeline order (`order`; results.json sorts `tasks`)."""
    return part.get("order") or list(part["tasks"])


def _single_node_section(results: dict[str, Any]) -> list[str]:
    rows_with = [(r, s) for r, s in results["scales"].items() if s.get("single_node")]
    if not rows_with:
        return []
    out = [
        "## `single_node`: the same preparation written the obvious way, on one node",
        "",
        "`benchmarks/single_node.py`: read, type, drop null labels, join weather and planes, split by "
        "a hash of the id, sample, impute and standardize (train statistics), hash categoricals, write "
        "zstd Parquet per split. Wall time of the whole process (imports included) and its peak RSS, "
        "beside part `spark`'s numbers of the same run. The targets above give the row count at which each "
        f"single-node version's peak RSS reaches the {MEMORY_BUDGET_MB / 1024:g} GiB budget, "
        + (
            "searched (below)."
            if results.get("crossover")
            else "linear between the measured scales that bracket it."
        ),
        "",
        "| rows | " + " | ".join(single_node.NAMES.values()) + " | lakeprep staged (a) | fused (a) "
        "| floor (a) | peak RSS " + " | ".join(single_node.NAMES.values()) + " | staged | fused "
        "| same rows |",
        "|---:" * (2 * len(single_node.NAMES) + 6) + "|---|",
    ]
    for rows, s in rows_with:
        sn, sp = s["single_node"], s.get("spark") or {}
        same = sn.get("same_outputs")
        out.append(
            _row(
                f"{int(rows):,}",
                *(_fmt(sn.get(f"{e}_s"), " s") for e in single_node.NAMES),
                _fmt(sp.get("staged_s"), " s"),
                _fmt(sp.get("fused_s"), " s"),
                _fmt(sp.get("floor_s"), " s"),
                *(_mb(sn.get(f"{e}_peak_rss_mb")) for e in single_node.NAMES),
                _mb(sp.get("staged_peak_rss_mb")),
                _mb(sp.get("fused_peak_rss_mb")),
                "-" if same is None else ("yes" if same else "**no**: " + "; ".join(_differ(sn))),
            )
        )
    return out + _crossover_section(results)


def _differ(sn: dict[str, Any]) -> list[str]:
    return [line for run in sn["runs"] for line in run.get("outputs_differ", [])]


def _crossover_section(results: dict[str, Any]) -> list[str]:
    searched = results.get("crossover")
    if not searched:
        return []
    out = [
        "",
        f"**Where each crosses the {MEMORY_BUDGET_MB / 1024:g} GiB budget, searched** "
        "(`benchmarks/crossover.py`): from the peaks above (the seeds), each version ran once more "
        "on data generated at the row count where the line through the nearest points under and "
        "over the budget meets it, stepped inside the bracket, until a count under the budget "
        f"and one over it were at most {next(iter(searched.values()))['tolerance']:.0%} apart.",
        "",
        "| version | rows | peak RSS | wall | measured |",
        "|---|---:|---:|---:|---|",
    ]
    for engine, name in single_node.NAMES.items():
        if not (result := searched.get(engine)):
            continue
        for seed in sorted(result["seeds"], key=lambda x: x["rows"]):
            out.append(_row(name, f"{seed['rows']:,}", f"{seed['peak_rss_mb']:.0f} MB", "", seed["source"]))
        for i, step in enumerate(result["steps"], 1):
            wall = f"{step['wall_s']:.0f} s" if "wall_s" in step else ""
            out.append(
                _row(name, f"{step['rows']:,}", f"{step['peak_rss_mb']:.0f} MB", wall, f"search step {i}")
            )
        out.append(_row(f"**{name}**", f"**{crossover.describe(result)}**", "", "", ""))
    return out


def _machine(results: dict[str, Any]) -> list[str]:
    """The machine and the versions every table below was measured with."""
    m = results["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v)
    return [
        f"- machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}, "
        "a busy machine: shared with other work (other engineers' tests and builds ran beside "
        "the runs, so wall times drift; ratios are measured side by side)",
        f"- Python {m['python']}, {m['java']}, Spark master `{m['spark_master']}`, driver heap "
        f"`{m.get('driver_memory', '1g (Spark default)')}` unless a section names another"
        + (f", `SPARK_SUBMIT_OPTS={m['spark_submit_opts']}`" if m.get("spark_submit_opts") else "")
        + f"; {versions}",
    ]


# The parts of results.json each section renders: per-scale parts (`scales.<rows>.<part>`)
# and whole-run ones (top-level keys). A section left out here names no command.
SECTION_PARTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "_spark_section": (("spark",), ()),
    "_passes_section": (("passes",), ()),
    "_driver_section": (("driver",), ()),
    "_input_section": (("input",), ()),
    "_parse_section": ((), ("dag_parse",)),
    "_single_node_section": (("single_node",), ("crossover",)),
    "_small_day_section": ((), ("small_day",)),
    "_profile_section": (("profile",), ("small_profile",)),
    "_window_section": (("window",), ()),
}
RUN_PARTS = {
    "dag_parse": "the DAG parse",
    "crossover": "the search of the budget's crossing",
    "small_day": "the small day",
    "small_profile": "the small day's profile",
}


def _run_command(results: dict[str, Any], started: str) -> str:
    """The command of the run that started at `started`: this file's own run or one merged
    into it with `--report-only ... --merge` (which records each merged run's command)."""
    if started == results["started"]:
        return results["command"]
    return results.get("merged_commands", {}).get(started, "(command not recorded)")


def measured_by(
    results: dict[str, Any], scale_parts: tuple[str, ...], run_parts: tuple[str, ...]
) -> list[str]:
    """The command that measured a section's table, and the run's date; when its rows or
    parts come from several runs, each run's command and what it measured."""
    runs: dict[str, list[str]] = {}
    for rows, scale in sorted(results["scales"].items(), key=lambda kv: int(kv[0])):
        for part in scale_parts:
            if part in scale:
                started = scale[part].get("run", results["started"])
                runs.setdefault(started, []).append(f"{int(rows):,} rows")
    for key in run_parts:
        if key in results:
            started = results.get("merged_parts", {}).get(key, results["started"])
            runs.setdefault(started, []).append(RUN_PARTS.get(key, key))
    if not runs:
        return []

    def said(started: str) -> str:
        return f"`{_run_command(results, started)}` on {started[:10]}"

    if len(runs) == 1:
        return ["", f"Measured by {said(next(iter(runs)))}."]
    return ["", "Measured by:", *(f"- {said(s)}: {', '.join(what)}" for s, what in sorted(runs.items()))]


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, tuple[list[int], list[float], list[float]]] = {}

    def add(name: str, rows: int, seconds: dict, mb: dict) -> None:
        xs, ts, ms = series.setdefault(name, ([], [], []))
        xs.append(rows)
        ts.append(seconds["median"])
        ms.append(mb["median"])

    for r, s in results["scales"].items():
        if sp := s.get("spark"):
            add("Spark floor", int(r), sp["floor_s"], sp["floor_peak_rss_mb"])
            add("lakeprep staged (5 submits)", int(r), sp["staged_s"], sp["staged_peak_rss_mb"])
            if "fused_s" in sp:
                add("lakeprep fused (2 submits)", int(r), sp["fused_s"], sp["fused_peak_rss_mb"])
        for engine, name in single_node.NAMES.items():
            if f"{engine}_s" in (sn := s.get("single_node", {})):
                add(name, int(r), sn[f"{engine}_s"], sn[f"{engine}_peak_rss_mb"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, (xs, ts, ms) in series.items():
        left.plot(xs, ts, marker="o", label=name)
        right.plot(xs, ms, marker="o", label=name)
    right.axhline(MEMORY_BUDGET_MB, color="grey", linestyle="--", linewidth=0.8)
    right.annotate(
        f"{MEMORY_BUDGET_MB / 1024:g} GiB budget",
        (0.02, MEMORY_BUDGET_MB),
        xycoords=("axes fraction", "data"),
        fontsize=7,
        va="bottom",
    )
    for ax, ylabel in ((left, "wall time (s, median)"), (right, "peak RSS (MB, process tree)")):
        ax.set_xscale("log")
        ax.set_xlabel("raw rows")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    if series:
        left.legend(fontsize=8)
    cores = results["machine"]["cores"]
    fig.suptitle(f"lakeprep preparation, {cores} cores, shared ({results['started']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(results: dict[str, Any], out: Path) -> None:
    lines = [
        "# lakeprep benchmarks",
        "",
        "Rendered from `results.json` beside this file (`python -m benchmarks --report-only "
        "benchmarks/results.json`; `make bench` measures anew). Each table names the command that "
        "measured it. Ratios are measured side by side in one run; absolute times drift with the "
        "machine's load.",
        "",
        *_machine(results),
        "",
        "## Targets",
        "",
        *_targets(results),
        "",
    ]
    sections = (
        _spark_section,
        _passes_section,
        _driver_section,
        _input_section,
        _parse_section,
        _single_node_section,
        _small_day_section,
        _profile_section,
        _window_section,
    )
    for section in sections:
        if part := section(results):
            lines += [*part, *measured_by(results, *SECTION_PARTS.get(section.__name__, ((), ()))), ""]
    lines += ["![time and peak memory against rows](results.png)", ""]
    lines += [not_done(results)]
    (out / "RESULTS.md").write_text("\n".join(lines))
    plot(results, out / "results.png")
