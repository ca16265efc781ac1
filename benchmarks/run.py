"""The benchmark run: data, measurements side by side, results (see benchmarks/__init__.py)."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import (
    crossover,
    dag_parse,
    day_profile,
    driver_memory,
    generate,
    input_pipeline,
    report,
    single_node,
    spark_prep,
    window,
)
from benchmarks.environment import REPO, WORK, child_env, demo_startup, machine, work_folder_lock
from benchmarks.measure import child_result, run_child, summary

FULL_ROWS = (1_000_000, 4_000_000, 16_000_000)
QUICK_ROWS = (20_000,)
PARTS = (
    "spark",
    "input",
    "parse",
    "single_node",
    "passes",
    "small",
    "profile",
    "crossover",
    "driver",
    "window",
)
# `spark` runs the fused submissions too, so quick mode leaves `small` (the same code on a
# 900-row day) out: the smoke check runs every code path once, not every size.
QUICK_PARTS = ("spark", "input", "parse", "single_node")
# Measured at each of --rows (`window`: rows per day).
SCALE_PARTS = ("spark", "input", "single_node", "passes", "profile", "driver", "window")
# (e) A demo-sized day (`make demo`'s days hold about 900 flights): start-up against work.
SMALL_DAY_ROWS = 900
# pandas holds the whole partition several times over (strings as Python objects): about
# 1.4 GB at 1 M rows and 0.5 GB per million more, so 16 M rows (about 9.5 GB, over the 8 GiB
# budget of measurement 3) still fits a 24 GiB machine; beyond it, skipped.
SINGLE_NODE_MAX_ROWS = 16_000_000


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="20 k rows, one repetition, no warm-up: the smoke check"
    )
    parser.add_argument(
        "--rows", type=int, nargs="+", help=f"scale factors (default {FULL_ROWS}; quick {QUICK_ROWS})"
    )
    parser.add_argument("--reps", type=int, help="measured repetitions (default 3; quick 1)")
    parser.add_argument("--warmup", type=int, help="discarded warm-up runs (default 1; quick 0)")
    parser.add_argument("--parse-reps", type=int, help="DAG parse repetitions (default 10; quick 2)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--small-rows", type=int, default=SMALL_DAY_ROWS, help="rows of the small day (part `small`)"
    )
    parser.add_argument("--only", nargs="+", choices=PARTS, help="measure only these parts")
    parser.add_argument("--single-node-max-rows", type=int, default=SINGLE_NODE_MAX_ROWS)
    parser.add_argument(
        "--window-days",
        type=int,
        nargs="+",
        default=list(window.DEFAULT_WINDOW_DAYS),
        metavar="N",
        help="part `window`: the window lengths a run is measured at, in days (1, the run it is "
        f"compared to, is always measured; default {window.DEFAULT_WINDOW_DAYS})",
    )
    parser.add_argument(
        "--crossover-seed",
        type=Path,
        metavar="RESULTS_JSON",
        help="part `crossover`: start the search from the single-node peaks an earlier run measured",
    )
    parser.add_argument(
        "--report-only", type=Path, metavar="RESULTS_JSON", help="rewrite RESULTS.md and the plot beside it"
    )
    parser.add_argument(
        "--merge",
        type=Path,
        metavar="OTHER_JSON",
        help="with --report-only: first put the parts OTHER_JSON measured into RESULTS_JSON, replacing "
        "the same parts there (e.g. a separate `--only passes` run), naming its command in the report",
    )
    parser.add_argument("--out", type=Path, help="results folder (default benchmarks/; quick .bench/quick/)")
    args = parser.parse_args(argv)
    quick = args.quick
    args.rows = args.rows or list(QUICK_ROWS if quick else FULL_ROWS)
    args.reps = args.reps if args.reps is not None else (1 if quick else 3)
    args.warmup = args.warmup if args.warmup is not None else (0 if quick else 1)
    args.parse_reps = args.parse_reps if args.parse_reps is not None else (2 if quick else 10)
    args.out = args.out or (WORK / "quick" if quick else REPO / "benchmarks")
    args.only = args.only or list(QUICK_PARTS if quick else PARTS)
    if min(args.window_days) < 1:
        parser.error(f"--window-days {args.window_days}: each window length must be at least 1 day")
    args.window_days = sorted({1, *args.window_days})
    return args


def _log(message: str) -> None:
    print(f"[bench {dt.datetime.now():%H:%M:%S}] {message}", flush=True)


def _rotate(
    ways: dict[str, Callable[[Path], dict[str, Any]]], logs: Path, warmup: int, reps: int, label: str
) -> list[dict[str, Any]]:
    """Each way once per repetition, the order rotating, so that none always runs first or
    after the same neighbour (page cache, JIT, the machine's load); the warm-ups discarded.
    Returns the measured repetitions, each {way: what its callable returned for rep_logs}."""
    names = list(ways)
    runs = []
    for i in range(warmup + reps):
        rep = "warm-up" if i < warmup else f"rep {i - warmup + 1}/{reps}"
        run: dict[str, Any] = {}
        for what in names[i % len(names) :] + names[: i % len(names)]:
            _log(f"  {label} {rep}: {what}")
            run[what] = ways[what](logs / f"run{i}")
        if i >= warmup:
            runs.append(run)
    return runs


def _row_counts(stages: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {st: {k: v for k, v in r.items() if k.startswith("rows_")} for st, r in stages.items()}


def _fused_totals(run: dict[str, Any]) -> None:
    """Add the fused submissions' sums to a repetition that ran `fused` and `stages`/`separate`."""
    subs = run["fused"]["submissions"].values()
    run["fused_s"] = round(sum(sub["wall_s"] for sub in subs), 3)
    run["fused_cpu_s"] = round(sum(sub["cpu_s"] for sub in subs), 3)
    run["fused_peak_rss_mb"] = max(sub["peak_rss_mb"] for sub in subs)
    # Both ways must have prepared the same data: every stage's row accounting alike.
    separate = run.get("stages") or run["separate"]
    run["same_row_counts"] = _row_counts(separate) == run["fused"]["stages"]


def _spark(lake: Path, logs: Path, warmup: int, reps: int) -> dict[str, Any]:
    """Floor, the five stages, the two fused submissions and an empty submission per
    repetition, the order rotating."""
    ds = generate.DS
    ways = {
        "floor": lambda rep_logs: spark_prep.run_floor(lake, ds, rep_logs),
        "stages": lambda rep_logs: spark_prep.run_stages(lake, ds, rep_logs),
        "fused": lambda rep_logs: spark_prep.run_fused(lake, ds, rep_logs),
        "empty": lambda rep_logs: spark_prep.run_empty(lake, ds, rep_logs),
    }
    runs = _rotate(ways, logs, warmup, reps, "spark")
    for run in runs:
        stages_s = sum(s["wall_s"] for s in run["stages"].values())
        run["staged_cpu_s"] = round(sum(s["cpu_s"] for s in run["stages"].values()), 3)
        run["cpu_ratio"] = round(run["staged_cpu_s"] / run["floor"]["cpu_s"], 3)
        startup = run["empty"]["wall_s"]
        run["staged_s"] = round(stages_s, 3)
        run["staged_peak_rss_mb"] = max(s["peak_rss_mb"] for s in run["stages"].values())
        run["ratio"] = round(stages_s / run["floor"]["wall_s"], 3)
        net_floor = run["floor"]["wall_s"] - startup
        run["ratio_net_of_startup"] = (
            round((stages_s - len(spark_prep.STAGES) * startup) / net_floor, 3) if net_floor > 0 else None
        )
        _fused_totals(run)
        run["fused_ratio"] = round(run["fused_s"] / run["floor"]["wall_s"], 3)
        run["fused_cpu_ratio"] = round(run["fused_cpu_s"] / run["floor"]["cpu_s"], 3)
        # The daily path alone (validate, preprocess, sample: the day's statistics and shards);
        # the window's stages run in the Airflow worker in the DAG (part `window` times them).
        daily = [run["stages"][st] for st in spark_prep.DAILY_STAGES]
        run["daily_s"] = round(sum(s["wall_s"] for s in daily), 3)
        run["daily_ratio"] = round(run["daily_s"] / run["floor"]["wall_s"], 3)
        run["daily_cpu_ratio"] = round(sum(s["cpu_s"] for s in daily) / run["floor"]["cpu_s"], 3)
        day_sub = run["fused"]["submissions"]["+".join(spark_prep.DAILY_STAGES)]
        run["daily_fused_s"] = day_sub["wall_s"]
        run["daily_fused_ratio"] = round(day_sub["wall_s"] / run["floor"]["wall_s"], 3)
        run["daily_fused_cpu_ratio"] = round(day_sub["cpu_s"] / run["floor"]["cpu_s"], 3)
    stages = {
        st: {
            "wall_s": summary([r["stages"][st]["wall_s"] for r in runs]),
            "cpu_s": summary([r["stages"][st]["cpu_s"] for r in runs]),
            "peak_rss_mb": summary([r["stages"][st]["peak_rss_mb"] for r in runs]),
            **_row_counts(runs[-1]["stages"])[st],
        }
        for st in spark_prep.STAGES
    }
    net = [r["ratio_net_of_startup"] for r in runs if r["ratio_net_of_startup"] is not None]
    keys = ("staged_s", "staged_peak_rss_mb", "ratio", "staged_cpu_s", "cpu_ratio")
    fused_keys = ("fused_s", "fused_cpu_s", "fused_peak_rss_mb", "fused_ratio", "fused_cpu_ratio")
    daily_keys = ("daily_s", "daily_ratio", "daily_cpu_ratio")
    daily_keys += ("daily_fused_s", "daily_fused_ratio", "daily_fused_cpu_ratio")
    return {
        "runs": runs,
        "floor_s": summary([r["floor"]["wall_s"] for r in runs]),
        "floor_peak_rss_mb": summary([r["floor"]["peak_rss_mb"] for r in runs]),
        "floor_cpu_s": summary([r["floor"]["cpu_s"] for r in runs]),
        "empty_s": summary([r["empty"]["wall_s"] for r in runs]),
        "empty_peak_rss_mb": summary([r["empty"]["peak_rss_mb"] for r in runs]),
        "empty_cpu_s": summary([r["empty"]["cpu_s"] for r in runs]),
        **{k: summary([r[k] for r in runs]) for k in (*keys, *fused_keys, *daily_keys)},
        "ratio_net_of_startup": summary(net) if net else None,
        "same_row_counts": all(r["same_row_counts"] for r in runs),
        "stages": stages,
    }


def _driver(
    lake: Path, logs: Path, warmup: int, reps: int, executors: spark_prep.Executors
) -> dict[str, Any]:
    """The five stages, the two fused submissions and an empty one on the standalone
    cluster (benchmarks.driver_memory), the order rotating: each submission's own process
    tree is its driver, its executor is measured apart."""
    ds = generate.DS
    ways = {
        "stages": lambda rep_logs: spark_prep.run_stages(lake, ds, rep_logs, executors=executors),
        "fused": lambda rep_logs: spark_prep.run_fused(lake, ds, rep_logs, executors=executors),
        "empty": lambda rep_logs: spark_prep.run_empty(lake, ds, rep_logs, executors=executors),
    }
    runs = _rotate(ways, logs, warmup, reps, "driver")
    for run in runs:
        stages = run["stages"].values()
        run["staged_s"] = round(sum(s["wall_s"] for s in stages), 3)
        run["staged_driver_peak_rss_mb"] = max(s["peak_rss_mb"] for s in stages)
        run["staged_executor_peak_rss_mb"] = max(s["executor_peak_rss_mb"] for s in stages)
        _fused_totals(run)
        subs = run["fused"]["submissions"].values()
        run["fused_driver_peak_rss_mb"] = run.pop("fused_peak_rss_mb")
        run["fused_executor_peak_rss_mb"] = max(sub["executor_peak_rss_mb"] for sub in subs)
    keys = (
        "staged_s",
        "staged_driver_peak_rss_mb",
        "staged_executor_peak_rss_mb",
        "fused_s",
        "fused_driver_peak_rss_mb",
        "fused_executor_peak_rss_mb",
    )
    return {
        "runs": runs,
        "master": child_env()["AIRFLOW_CONN_SPARK_DEFAULT"],
        "executor_conf": list(executors.conf),
        "empty_driver_peak_rss_mb": summary([r["empty"]["peak_rss_mb"] for r in runs]),
        "empty_s": summary([r["empty"]["wall_s"] for r in runs]),
        **{k: summary([r[k] for r in runs]) for k in keys},
        "same_row_counts": all(r["same_row_counts"] for r in runs),
        "stages": {
            st: {
                "driver_peak_rss_mb": summary([r["stages"][st]["peak_rss_mb"] for r in runs]),
                "executor_peak_rss_mb": summary([r["stages"][st]["executor_peak_rss_mb"] for r in runs]),
            }
            for st in spark_prep.STAGES
        },
    }


def _dag_totals(way: dict[str, Any], prefix: str) -> dict[str, float]:
    """A `spark_prep.run_dag` way's sums: its submissions (`<prefix>_spark_s`, `..._spark_cpu_s`)
    and all its tasks, the worker's included (`<prefix>_s`, `<prefix>_cpu_s`)."""
    subs, tasks = list(way["submissions"].values()), list(way["tasks"].values())
    out = {}
    for key, unit in (("wall_s", "s"), ("cpu_s", "cpu_s")):
        out[f"{prefix}_spark_{unit}"] = round(sum(x[key] for x in subs), 3)
        out[f"{prefix}_{unit}"] = round(sum(x[key] for x in subs + tasks), 3)
    return out


def _small_day(lake: Path, logs: Path, warmup: int, reps: int) -> dict[str, Any]:
    """A small day four ways per repetition, the order rotating: the five stages as the DAG
    runs them (`spark_prep.run_dag`: the daily ones submitted, the window's in the worker),
    as the fused DAG runs them (`spark.fuse_stages`: one submission and one worker task), the
    fused submission with its plan run twice in its session, and one empty submission.

    The issue's target: a demo day's Spark time, fused, within 2x of one empty submission,
    i.e. the day's work costs no more than one more start-up. *Warm* = twice - once: the
    day's stages in a JVM that has run them once (the later pass re-commits the same
    outputs), i.e. what a long-lived Spark session (a Spark Connect server) would cost per
    day, less its per-request overhead.
    """
    ds = generate.DS
    ways = {
        "separate": lambda rep_logs: spark_prep.run_dag(lake, ds, rep_logs, fused=False),
        "fused": lambda rep_logs: spark_prep.run_dag(lake, ds, rep_logs, fused=True),
        "twice": lambda rep_logs: spark_prep.run_dag(lake, ds, rep_logs, fused=True, repeat=2),
        "empty": lambda rep_logs: spark_prep.run_empty(lake, ds, rep_logs),
    }
    runs = _rotate(ways, logs, warmup, reps, "small day")
    for run in runs:
        empty, empty_cpu = run["empty"]["wall_s"], run["empty"]["cpu_s"]
        run.update(_dag_totals(run["separate"], "separate"), **_dag_totals(run["fused"], "fused"))
        run["same_row_counts"] = run["separate"]["stages"] == run["fused"]["stages"]
        # The fused plan run twice in its session: the second pass is the day in a warm JVM.
        twice = _dag_totals(run["twice"], "twice")
        run["warm_s"] = round(twice["twice_spark_s"] - run["fused_spark_s"], 3)
        run["warm_cpu_s"] = round(twice["twice_spark_cpu_s"] - run["fused_spark_cpu_s"], 3)
        for way in ("separate", "fused"):
            run[f"{way}_spark_vs_empty"] = round(run[f"{way}_spark_s"] / empty, 3)
            run[f"{way}_vs_empty"] = round(run[f"{way}_s"] / empty, 3)
            run[f"{way}_spark_cpu_vs_empty"] = round(run[f"{way}_spark_cpu_s"] / empty_cpu, 3)
        run["warm_vs_empty"] = round(run["warm_s"] / empty, 3)
        run["warm_vs_fused"] = round(run["warm_s"] / run["fused_spark_s"], 3)
        run["fused_vs_separate"] = round(run["fused_s"] / run["separate_s"], 3)
    keys = [
        f"{way}{what}"
        for way in ("separate", "fused")
        for what in (
            "_s",
            "_cpu_s",
            "_spark_s",
            "_spark_cpu_s",
            "_vs_empty",
            "_spark_vs_empty",
            "_spark_cpu_vs_empty",
        )
    ]
    keys += ["fused_vs_separate", "warm_s", "warm_cpu_s", "warm_vs_empty", "warm_vs_fused"]
    last = runs[-1]
    return {
        "runs": runs,
        "rows": last["separate"]["stages"]["validate"]["rows_in"],
        # What each way ran, in order: spark-submits and tasks in the worker.
        "tasks": {
            way: {"spark": list(last[way]["submissions"]), "worker": list(last[way]["tasks"])}
            for way in ("separate", "fused")
        },
        "empty_s": summary([r["empty"]["wall_s"] for r in runs]),
        "empty_cpu_s": summary([r["empty"]["cpu_s"] for r in runs]),
        **{k: summary([r[k] for r in runs]) for k in keys},
        "same_row_counts": all(r["same_row_counts"] for r in runs),
    }


def _input(manifest: str, logs: Path, warmup: int, reps: int, pair_root: Path) -> dict[str, Any]:
    """The readers over the export's shards, then (`prepared`) over the same drawn rows written
    as encoded and as prepared shards (input_pipeline.write_pair, not timed): the loader encoding
    at read against a plain pyarrow read of the prepared shards and against pandas + DataLoader
    over the encoded ones, side by side in one rotation."""

    def reader_run(reader: str, uri: str = manifest, name: str = "") -> Callable[[Path], dict[str, Any]]:
        def measure(rep_logs: Path) -> dict[str, Any]:
            cmd = [sys.executable, "-m", "benchmarks.input_pipeline", "--manifest", uri, "--reader", reader]
            m = run_child(cmd, env=child_env(), log=rep_logs / f"{name or reader}.log", cwd=REPO)
            return {**child_result(m), "peak_rss_mb": m.peak_rss_mb}

        return measure

    readers = list(input_pipeline.READERS)
    runs = _rotate({r: reader_run(r) for r in readers}, logs, warmup, reps, "input")
    for run in runs:
        run["vs_floor"] = round(run["rank_batches"]["rows_per_s"] / run["pyarrow_floor"]["rows_per_s"], 3)
        run["vs_pandas"] = round(
            run["rank_batches"]["rows_per_s"] / run["pandas_dataloader"]["rows_per_s"], 3
        )
    pair = child_result(
        run_child(
            [
                *(sys.executable, "-m", "benchmarks.input_pipeline"),
                "--write-pair",
                manifest,
                "--out",
                str(pair_root),
            ],
            env=child_env(),
            log=logs / "write_pair.log",
            cwd=REPO,
        )
    )
    ways = {
        "encoded": reader_run("rank_batches", pair["encoded"], "encoded"),
        "prepared": reader_run("rank_batches", pair["prepared"], "prepared"),
        "prepared_floor": reader_run("pyarrow_floor", pair["prepared"], "prepared_floor"),
        "encoded_pandas": reader_run("pandas_dataloader", pair["encoded"], "encoded_pandas"),
    }
    pair_runs = _rotate(ways, logs / "prepared", warmup, reps, "input, prepared shards")
    for run in pair_runs:
        prepared = run["prepared"]["rows_per_s"]
        run["vs_floor"] = round(prepared / run["prepared_floor"]["rows_per_s"], 3)
        run["vs_pandas"] = round(prepared / run["encoded_pandas"]["rows_per_s"], 3)
        run["vs_encoded"] = round(prepared / run["encoded"]["rows_per_s"], 3)
    return {
        "runs": runs,
        "rows": runs[-1]["rank_batches"]["rows"],
        **{f"{r}_rows_per_s": summary([x[r]["rows_per_s"] for x in runs]) for r in readers},
        **{f"{r}_peak_rss_mb": summary([x[r]["peak_rss_mb"] for x in runs]) for r in readers},
        "vs_floor": summary([r["vs_floor"] for r in runs]),
        "vs_pandas": summary([r["vs_pandas"] for r in runs]),
        "prepared": {
            "runs": pair_runs,
            "rows": pair_runs[-1]["prepared"]["rows"],
            **{f"{w}_rows_per_s": summary([x[w]["rows_per_s"] for x in pair_runs]) for w in ways},
            **{f"{w}_peak_rss_mb": summary([x[w]["peak_rss_mb"] for x in pair_runs]) for w in ways},
            **{k: summary([r[k] for r in pair_runs]) for k in ("vs_floor", "vs_pandas", "vs_encoded")},
        },
    }


def _single_node_run(lake: Path, engine: str, log: Path) -> dict[str, Any]:
    """One run of one single-node engine over the lake's partition: its result, time and peak."""
    out = WORK / "scratch" / f"single_node-{engine}"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.single_node",
        "--lake",
        str(lake),
        "--engine",
        engine,
        "--out",
        str(out),
    ]
    m = run_child(cmd, env=child_env(), log=log, cwd=REPO)
    return {**child_result(m), "wall_s": m.wall_s, "peak_rss_mb": m.peak_rss_mb}


def _single_node(lake: Path, logs: Path, warmup: int, reps: int) -> dict[str, Any]:
    def engine_run(engine: str) -> Callable[[Path], dict[str, Any]]:
        return lambda rep_logs: _single_node_run(lake, engine, rep_logs / f"{engine}.log")

    engines = list(single_node.ENGINES)
    runs = _rotate({e: engine_run(e) for e in engines}, logs, warmup, reps, "single node")
    for run in runs:
        # Every engine prepared the same rows (single_node.CHECKS), or the run says which did not.
        run["outputs_differ"] = single_node.same_outputs({e: run[e] for e in engines})
        for line in run["outputs_differ"]:
            _log(f"  single node: outputs differ: {line}")
    return {
        "runs": runs,
        "same_outputs": not any(r["outputs_differ"] for r in runs),
        **{f"{e}_s": summary([r[e]["wall_s"] for r in runs]) for e in engines},
        **{f"{e}_peak_rss_mb": summary([r[e]["peak_rss_mb"] for r in runs]) for e in engines},
    }


def _window(lake: Path, rows: int, seed: int, days: list[int], logs: Path, warmup: int, reps: int):
    """The daily tasks of the run's day and its window tasks at each window length, the order
    rotating (benchmarks/window.py); the days are landed and prepared once, untimed."""
    run_ds = window.days_of(max(days))[-1]
    _log(f"  window: days {window.days_of(max(days))[0]}..{run_ds}, {rows:,} rows each, in {lake}")
    prepared = window.prepare_days(lake, rows, seed, window.days_of(max(days)), logs / "prepare")
    ways: dict[str, Callable[[Path], dict[str, Any]]] = {
        "daily": lambda rep_logs: window.run_daily(lake, run_ds, rep_logs)
    }
    for n in days:
        ways[f"window_{n}"] = lambda rep_logs, n=n: window.run_window(lake, run_ds, n, rep_logs)
    runs = _rotate(ways, logs, warmup, reps, "window")
    for run in runs:
        run["figures"] = window.run_figures(run, days)
    return {
        "runs": runs,
        "run_ds": run_ds,
        "rows_per_day": rows,
        "window_days": days,
        "prepared": prepared,
        **window.summarize(runs, days),
    }


def _crossover_seeds(
    results: dict[str, Any], seed_file: Path | None
) -> dict[str, list[tuple[int, float, str]]]:
    """Per engine, the single-node peaks already measured: this run's scales, then the seed file's."""
    sources = [(results, None)]
    if seed_file:
        sources.append((json.loads(seed_file.read_text()), seed_file))
    seeds: dict[str, list[tuple[int, float, str]]] = {e: [] for e in single_node.ENGINES}
    for source, path in sources:
        for rows, scale in source["scales"].items():
            sn = scale.get("single_node")
            # A merged part carries the start of the run that measured it (`run`).
            name = (
                "this run"
                if path is None
                else f"{path} (run of {(sn or {}).get('run', source.get('started'))})"
            )
            for engine in single_node.ENGINES:
                # A run from before an engine existed has no figure for it.
                measured = sn and f"{engine}_peak_rss_mb" in sn
                if measured and int(rows) not in {r for r, _, _ in seeds[engine]}:
                    seeds[engine].append((int(rows), sn[f"{engine}_peak_rss_mb"]["median"], name))
    return seeds


def _crossover(results: dict[str, Any], seed_file: Path | None, seed: int, logs: Path) -> dict[str, Any]:
    """Per single-node engine, the row counts that bracket its crossing of the memory budget
    (benchmarks/crossover.py), each measured once on data generated at that count."""
    out = {}
    all_seeds = _crossover_seeds(results, seed_file)
    if not any(all_seeds.values()):
        raise SystemExit(
            "crossover: no single-node measurement to start from; run the single_node part with it "
            "or name an earlier results.json with --crossover-seed"
        )
    for engine, seeds in all_seeds.items():
        if not seeds:
            _log(f"  crossover {engine}: no single-node measurement of it to start from, not searched")
            continue

        def measure(rows: int, engine: str = engine) -> dict[str, Any]:
            lake = WORK / "data" / f"flights-{rows}-s{seed}"
            _log(f"  crossover {engine}: {rows:,} rows (data in {lake})")
            generate.land(lake, rows, seed)
            m = _single_node_run(lake, engine, logs / f"{engine}-{rows}.log")
            _log(f"  crossover {engine}: {rows:,} rows, peak {m['peak_rss_mb']:.0f} MB, {m['wall_s']:.0f} s")
            return {"peak_rss_mb": m["peak_rss_mb"], "wall_s": m["wall_s"]}

        out[engine] = crossover.search(measure, seeds)
    return out


def _folder_mb(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20, 1)


def _passes(lake: Path, logs: Path) -> dict[str, Any]:
    """One more floor and staged pass with Spark's event log on: what each submission read.

    Not timed against the others (the event log adds its own writes); `reads` is the bytes
    the stage's tasks read over the size of its input partition on disk.
    """
    _log("  passes: floor and stages with the event log")
    events = logs / "events"
    floor = spark_prep.run_floor(lake, generate.DS, logs, events)
    stages = spark_prep.run_stages(lake, generate.DS, logs, events)
    part = f"flights/dt={generate.DS}"
    raw_mb = _folder_mb(lake / "raw" / part)
    inputs = {
        "validate": lake / "raw" / part,
        "preprocess": lake / "validate" / part,
        "sample": lake / "preprocess" / part,
        "fit_transform": lake / "sample" / part,
        "export_shards": lake / "sample" / part,
    }
    out = {"floor": {**floor["event_log"], "input_on_disk_mb": raw_mb}, "stages": {}}
    out["floor"]["reads"] = round(floor["event_log"]["input_mb"] / raw_mb, 2)
    for stage, st in stages.items():
        on_disk = _folder_mb(inputs[stage])
        out["stages"][stage] = {
            **st["event_log"],
            "input_on_disk_mb": on_disk,
            "reads": round(st["event_log"]["input_mb"] / on_disk, 2) if on_disk else None,
        }
    return out


def _parse(logs: Path, reps: int) -> dict[str, Any]:
    out = {}
    for count in (1, 20):
        _log(f"dag parse: {count} spec(s), {reps} repetition(s)")
        folder = dag_parse.write_specs(WORK / f"pipelines-{count}", count)
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.dag_parse",
            "--pipelines",
            str(folder),
            "--reps",
            str(reps),
            "--warmup",
            "1",
        ]
        env = child_env(LAKEPREP_PIPELINES_DIR=str(folder))
        m = run_child(cmd, env=env, log=logs / f"parse-{count}.log", cwd=REPO)
        runs = child_result(m)["runs"]
        # Airflow's floor: the same DAGs (tasks, edges, Params) as EmptyOperators, nothing of lakeprep.
        _log(f"dag parse: the Airflow floor of the same {runs[0]['dags']} DAGs")
        shapes = WORK / f"dag-shapes-{count}.json"
        m = run_child(
            [*cmd, "--floor", str(shapes)], env=env, log=logs / f"parse-{count}-floor.log", cwd=REPO
        )
        floor = child_result(m)["runs"]
        keys = ("processor_s", "cpu_s", "dagbag_s", "serialize_s")
        out[str(count)] = {
            "specs": count,
            "dags": runs[0]["dags"],
            "runs": runs,
            **{k: summary([r[k] for r in runs]) for k in keys},
            "floor": {"runs": floor, **{k: summary([r[k] for r in floor]) for k in keys}},
        }
    return out


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = _parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    stamp = started.strftime("%Y%m%dT%H%M%S")
    logs = WORK / "logs" / stamp
    results: dict[str, Any] = {
        "command": "python -m benchmarks " + shlex.join(list(argv if argv is not None else sys.argv[1:])),
        "mode": "quick" if args.quick else "full",
        "started": started.isoformat(timespec="seconds"),
        "config": {
            "rows": args.rows,
            "reps": args.reps,
            "warmup": args.warmup,
            "parse_reps": args.parse_reps,
            "seed": args.seed,
            "small_rows": args.small_rows,
            "parts": args.only,
            "single_node_max_rows": args.single_node_max_rows,
            "window_days": args.window_days,
            "crossover_seed": None if args.crossover_seed is None else str(args.crossover_seed),
            "rows_per_file": generate.ROWS_PER_FILE,
            "ds": generate.DS,
        },
        "machine": machine(),
        "logs": str(logs),
        "scales": {},
    }
    args.out.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every part, so that an interrupted run keeps what it measured
        (args.out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")

    if "parse" in args.only:
        results["dag_parse"] = _parse(logs, args.parse_reps)
        save()
    if "small" in args.only:
        lake = WORK / "data" / f"flights-{args.small_rows}-s{args.seed}"
        _log(f"small day, {args.small_rows} rows: data in {lake}")
        data = generate.land(lake, args.small_rows, args.seed)
        with demo_startup() as options:
            small = _small_day(lake, logs / "small", args.warmup, args.reps)
        results["small_day"] = {"data": data, "spark_submit_opts": options, **small}
        save()
    if "profile" in args.only:
        lake = WORK / "data" / f"flights-{args.small_rows}-s{args.seed}"
        _log(f"profile of the small day, {args.small_rows} rows: data in {lake}")
        data = generate.land(lake, args.small_rows, args.seed)
        with demo_startup() as options:
            submissions = day_profile.run(lake, generate.DS, logs / "profile")
        results["small_profile"] = {"data": data, "spark_submit_opts": options, "submissions": submissions}
        save()
    # The standalone cluster of part `driver`: started at its first scale, stopped after the last.
    with contextlib.ExitStack() as clusters:
        executors: spark_prep.Executors | None = None
        for rows in args.rows if set(SCALE_PARTS) & set(args.only) else []:
            lake = WORK / "data" / f"flights-{rows}-s{args.seed}"
            _log(f"{rows} rows: data in {lake}")
            scale: dict[str, Any] = {"data": generate.land(lake, rows, args.seed)}
            scale_logs = logs / f"rows-{rows}"
            results["scales"][str(rows)] = scale
            if "spark" in args.only:
                scale["spark"] = _spark(lake, scale_logs / "spark", args.warmup, args.reps)
                save()
            elif "input" in args.only:
                # The export the readers read, prepared once and not timed: an `--only input` run
                # measures the readers alone (and, merged, replaces only the input tables).
                _log("  input: the export, prepared once by the two fused submissions (not timed)")
                spark_prep.run_fused(lake, generate.DS, scale_logs / "export")
            if "input" in args.only:
                manifest = spark_prep.manifest_uri(lake, generate.DS)
                pair_root = WORK / "data" / f"prepared-{rows}-s{args.seed}"
                scale["input"] = _input(manifest, scale_logs / "input", args.warmup, args.reps, pair_root)
                save()
            if "passes" in args.only:
                scale["passes"] = _passes(lake, scale_logs / "passes")
                save()
            if "profile" in args.only:
                _log("  profile: py-spy + event log of the fused submission, the worker task timed")
                scale["profile"] = {"submissions": day_profile.run(lake, generate.DS, scale_logs / "profile")}
                save()
            if "single_node" in args.only and rows <= args.single_node_max_rows:
                scale["single_node"] = _single_node(lake, scale_logs / "single_node", args.warmup, args.reps)
                save()
            if "window" in args.only:
                day_lake = WORK / "data" / f"window-{rows}-s{args.seed}"
                scale["window"] = _window(
                    day_lake, rows, args.seed, args.window_days, scale_logs / "window", args.warmup, args.reps
                )
                save()
            if "driver" in args.only:
                if executors is None:
                    _log("  driver: the standalone cluster (hadoop/cluster.py)")
                    executors = clusters.enter_context(driver_memory.standalone())
                scale["driver"] = _driver(lake, scale_logs / "driver", args.warmup, args.reps, executors)
                save()
    if "crossover" in args.only:
        _log(f"crossover: the row counts where the single-node versions pass {crossover.BUDGET_MB} MB")
        results["crossover"] = _crossover(results, args.crossover_seed, args.seed, logs / "crossover")
        save()
    results["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    results["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    save()
    report.write(results, args.out)
    _log(f"results: {args.out / 'RESULTS.md'}, {args.out / 'results.json'}, {args.out / 'results.png'}")
    return results


def main(argv: Sequence[str] | None = None) -> None:
    args = _parse_args(argv)
    if args.report_only:
        results = json.loads(args.report_only.read_text())
        if args.merge:
            other = json.loads(args.merge.read_text())
            # The other run's parts replace these (a part measured again is measured anew),
            # each stamped with the run that measured it (`run`: its start) and that run's
            # heap (`driver_memory`, which the header's machine line gives for the first run): only parts of
            # one run are compared across scales (report._scaling_targets).
            for rows, scale in other["scales"].items():
                stamped = {
                    part: value
                    if part == "data"
                    else {
                        **value,
                        "run": other["started"],
                        "driver_memory": other["machine"].get("driver_memory"),
                    }
                    for part, value in scale.items()
                }
                results["scales"].setdefault(rows, {}).update(stamped)
            results["scales"] = dict(sorted(results["scales"].items(), key=lambda kv: int(kv[0])))
            for key in ("dag_parse", "small_day", "small_profile", "crossover"):
                if key in other:
                    results[key] = other[key]
                    results.setdefault("merged_parts", {})[key] = other["started"]
            results.setdefault("merged_commands", {})[other["started"]] = other["command"]
            # Only the commands of runs whose parts are still here: the report names, under each
            # table, the run that measured it (report.measured_by); replaced runs live in git.
            in_use = {p.get("run") for s in results["scales"].values() for k, p in s.items() if k != "data"}
            in_use |= set(results.get("merged_parts", {}).values())
            results["merged_commands"] = {s: c for s, c in results["merged_commands"].items() if s in in_use}
            args.report_only.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
        report.write(results, args.report_only.parent)
        return
    with work_folder_lock():
        run(argv)


if __name__ == "__main__":
    main()
