"""The benchmark run: data, measurements side by side, results (see benchmarks/__init__.py)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import dag_parse, generate, input_pipeline, report, single_node, spark_prep
from benchmarks.environment import REPO, WORK, child_env, machine
from benchmarks.measure import child_result, run_child, summary

FULL_ROWS = (1_000_000, 4_000_000, 16_000_000)
QUICK_ROWS = (20_000,)
PARTS = ("spark", "input", "parse", "single_node", "passes", "small")
QUICK_PARTS = ("spark", "input", "parse", "single_node", "small")
SCALE_PARTS = ("spark", "input", "single_node", "passes")  # measured at each of --rows
# (e) A demo-sized day (`make demo`'s days hold about 900 flights): start-up against work.
SMALL_DAY_ROWS = 900
# pandas holds the whole partition several times over (strings as Python objects): at
# 16 M rows that is beyond what a shared 24 GiB machine should be asked for.
SINGLE_NODE_MAX_ROWS = 4_000_000


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
        "--report-only", type=Path, metavar="RESULTS_JSON", help="rewrite RESULTS.md and the plot beside it"
    )
    parser.add_argument(
        "--merge",
        type=Path,
        metavar="OTHER_JSON",
        help="with --report-only: first add the parts OTHER_JSON measured that RESULTS_JSON lacks "
        "(e.g. a separate `--only passes` run), naming its command in the report",
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
    return args


def _log(message: str) -> None:
    print(f"[bench {dt.datetime.now():%H:%M:%S}] {message}", flush=True)


def _spark(lake: Path, logs: Path, warmup: int, reps: int) -> dict[str, Any]:
    """Floor, stages and an empty submission per repetition, the order alternating."""
    runs = []
    for i in range(warmup + reps):
        label = "warm-up" if i < warmup else f"rep {i - warmup + 1}/{reps}"
        order = ("floor", "stages", "empty") if i % 2 == 0 else ("stages", "floor", "empty")
        run: dict[str, Any] = {}
        for what in order:
            _log(f"  spark {label}: {what}")
            rep_logs = logs / f"run{i}"
            if what == "floor":
                run["floor"] = spark_prep.run_floor(lake, generate.DS, rep_logs)
            elif what == "empty":
                run["empty"] = spark_prep.run_empty(lake, generate.DS, rep_logs)
            else:
                run["stages"] = spark_prep.run_stages(lake, generate.DS, rep_logs)
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
        if i >= warmup:
            runs.append(run)
    stages = {
        st: {
            "wall_s": summary([r["stages"][st]["wall_s"] for r in runs]),
            "cpu_s": summary([r["stages"][st]["cpu_s"] for r in runs]),
            "peak_rss_mb": summary([r["stages"][st]["peak_rss_mb"] for r in runs]),
            "rows_in": runs[-1]["stages"][st]["rows_in"],
            "rows_out": runs[-1]["stages"][st]["rows_out"],
            "rows_quarantined": runs[-1]["stages"][st]["rows_quarantined"],
        }
        for st in spark_prep.STAGES
    }
    net = [r["ratio_net_of_startup"] for r in runs if r["ratio_net_of_startup"] is not None]
    return {
        "runs": runs,
        "floor_s": summary([r["floor"]["wall_s"] for r in runs]),
        "floor_peak_rss_mb": summary([r["floor"]["peak_rss_mb"] for r in runs]),
        "empty_s": summary([r["empty"]["wall_s"] for r in runs]),
        "empty_peak_rss_mb": summary([r["empty"]["peak_rss_mb"] for r in runs]),
        "staged_s": summary([r["staged_s"] for r in runs]),
        "staged_peak_rss_mb": summary([r["staged_peak_rss_mb"] for r in runs]),
        "ratio": summary([r["ratio"] for r in runs]),
        "staged_cpu_s": summary([r["staged_cpu_s"] for r in runs]),
        "floor_cpu_s": summary([r["floor"]["cpu_s"] for r in runs]),
        "empty_cpu_s": summary([r["empty"]["cpu_s"] for r in runs]),
        "cpu_ratio": summary([r["cpu_ratio"] for r in runs]),
        "ratio_net_of_startup": summary(net) if net else None,
        "stages": stages,
    }


def _small_day(lake: Path, logs: Path, warmup: int, reps: int) -> dict[str, Any]:
    """A small day three ways per repetition, the order rotating: the five stages as five
    submissions, as the two fused ones (`spark.fuse_stages`), and one empty submission.

    The issue's target: a demo day's Spark time within 2x of one empty submission, i.e.
    the day's work and the start-ups beyond the first cost no more than one start-up.
    """
    ways = ("separate", "fused", "empty")
    runs = []
    for i in range(warmup + reps):
        label = "warm-up" if i < warmup else f"rep {i - warmup + 1}/{reps}"
        run: dict[str, Any] = {}
        for what in ways[i % 3 :] + ways[: i % 3]:
            _log(f"  small day {label}: {what}")
            rep_logs = logs / f"run{i}"
            if what == "separate":
                run["separate"] = spark_prep.run_stages(lake, generate.DS, rep_logs)
            elif what == "fused":
                run["fused"] = spark_prep.run_fused(lake, generate.DS, rep_logs)
            else:
                run["empty"] = spark_prep.run_empty(lake, generate.DS, rep_logs)
        empty = run["empty"]["wall_s"]
        run["separate_s"] = round(sum(st["wall_s"] for st in run["separate"].values()), 3)
        run["fused_s"] = round(sum(sub["wall_s"] for sub in run["fused"]["submissions"].values()), 3)
        run["separate_cpu_s"] = round(sum(st["cpu_s"] for st in run["separate"].values()), 3)
        run["fused_cpu_s"] = round(sum(sub["cpu_s"] for sub in run["fused"]["submissions"].values()), 3)
        run["separate_vs_empty"] = round(run["separate_s"] / empty, 3)
        run["fused_vs_empty"] = round(run["fused_s"] / empty, 3)
        run["fused_vs_separate"] = round(run["fused_s"] / run["separate_s"], 3)
        run["separate_cpu_vs_empty"] = round(run["separate_cpu_s"] / run["empty"]["cpu_s"], 3)
        run["fused_cpu_vs_empty"] = round(run["fused_cpu_s"] / run["empty"]["cpu_s"], 3)
        # Both ways must have prepared the same day: every stage's row accounting alike.
        counts = {
            st: {k: v for k, v in r.items() if k.startswith("rows_")} for st, r in run["separate"].items()
        }
        run["same_row_counts"] = counts == run["fused"]["stages"]
        if i >= warmup:
            runs.append(run)
    keys = (
        "separate_s",
        "fused_s",
        "separate_cpu_s",
        "fused_cpu_s",
        "separate_vs_empty",
        "fused_vs_empty",
        "fused_vs_separate",
        "separate_cpu_vs_empty",
        "fused_cpu_vs_empty",
    )
    return {
        "runs": runs,
        "rows": runs[-1]["separate"]["validate"]["rows_in"],
        "empty_s": summary([r["empty"]["wall_s"] for r in runs]),
        "empty_cpu_s": summary([r["empty"]["cpu_s"] for r in runs]),
        **{k: summary([r[k] for r in runs]) for k in keys},
        "same_row_counts": all(r["same_row_counts"] for r in runs),
    }


def _input(manifest: str, logs: Path, warmup: int, reps: int) -> dict[str, Any]:
    readers = list(input_pipeline.READERS)
    runs = []
    for i in range(warmup + reps):
        run = {}
        for reader in readers[i % len(readers) :] + readers[: i % len(readers)]:
            _log(f"  input {'warm-up' if i < warmup else f'rep {i - warmup + 1}/{reps}'}: {reader}")
            cmd = [
                sys.executable,
                "-m",
                "benchmarks.input_pipeline",
                "--manifest",
                manifest,
                "--reader",
                reader,
            ]
            m = run_child(cmd, env=child_env(), log=logs / f"run{i}-{reader}.log", cwd=REPO)
            run[reader] = {**child_result(m), "peak_rss_mb": m.peak_rss_mb}
        run["vs_floor"] = round(run["rank_batches"]["rows_per_s"] / run["pyarrow_floor"]["rows_per_s"], 3)
        run["vs_pandas"] = round(
            run["rank_batches"]["rows_per_s"] / run["pandas_dataloader"]["rows_per_s"], 3
        )
        if i >= warmup:
            runs.append(run)
    return {
        "runs": runs,
        "rows": runs[-1]["rank_batches"]["rows"],
        **{f"{r}_rows_per_s": summary([x[r]["rows_per_s"] for x in runs]) for r in readers},
        **{f"{r}_peak_rss_mb": summary([x[r]["peak_rss_mb"] for x in runs]) for r in readers},
        "vs_floor": summary([r["vs_floor"] for r in runs]),
        "vs_pandas": summary([r["vs_pandas"] for r in runs]),
    }


def _single_node(lake: Path, logs: Path, warmup: int, reps: int) -> dict[str, Any]:
    engines = list(single_node.ENGINES)
    runs = []
    for i in range(warmup + reps):
        run = {}
        for engine in engines if i % 2 == 0 else engines[::-1]:
            _log(f"  single node {'warm-up' if i < warmup else f'rep {i - warmup + 1}/{reps}'}: {engine}")
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
            m = run_child(cmd, env=child_env(), log=logs / f"run{i}-{engine}.log", cwd=REPO)
            run[engine] = {**child_result(m), "wall_s": m.wall_s, "peak_rss_mb": m.peak_rss_mb}
        if i >= warmup:
            runs.append(run)
    return {
        "runs": runs,
        **{f"{e}_s": summary([r[e]["wall_s"] for r in runs]) for e in engines},
        **{f"{e}_peak_rss_mb": summary([r[e]["peak_rss_mb"] for r in runs]) for e in engines},
    }


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
        m = run_child(
            cmd, env=child_env(LAKEPREP_PIPELINES_DIR=str(folder)), log=logs / f"parse-{count}.log", cwd=REPO
        )
        runs = child_result(m)["runs"]
        out[str(count)] = {
            "specs": count,
            "dags": runs[0]["dags"],
            "runs": runs,
            **{k: summary([r[k] for r in runs]) for k in ("processor_s", "cpu_s", "dagbag_s", "serialize_s")},
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
        results["small_day"] = {"data": data, **_small_day(lake, logs / "small", args.warmup, args.reps)}
        save()
    for rows in args.rows if set(SCALE_PARTS) & set(args.only) else []:
        lake = WORK / "data" / f"flights-{rows}-s{args.seed}"
        _log(f"{rows} rows: data in {lake}")
        scale: dict[str, Any] = {"data": generate.land(lake, rows, args.seed)}
        scale_logs = logs / f"rows-{rows}"
        results["scales"][str(rows)] = scale
        if "spark" in args.only or "input" in args.only:
            scale["spark"] = _spark(lake, scale_logs / "spark", args.warmup, args.reps)
            save()
        if "input" in args.only:
            manifest = spark_prep.manifest_uri(lake, generate.DS)
            scale["input"] = _input(manifest, scale_logs / "input", args.warmup, args.reps)
            save()
        if "passes" in args.only:
            scale["passes"] = _passes(lake, scale_logs / "passes")
            save()
        if "single_node" in args.only and rows <= args.single_node_max_rows:
            scale["single_node"] = _single_node(lake, scale_logs / "single_node", args.warmup, args.reps)
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
            for rows, scale in other["scales"].items():
                target = results["scales"].setdefault(rows, {"data": scale["data"]})
                for part, value in scale.items():
                    target.setdefault(part, value)
            for key in ("dag_parse", "small_day"):
                if key in other and key not in results:
                    results[key] = other[key]
            extra = f"{other['command']} ({other['started']}, parts {other['config']['parts']})"
            results.setdefault("extra_commands", [])
            if extra not in results["extra_commands"]:
                results["extra_commands"].append(extra)
            args.report_only.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
        report.write(results, args.report_only.parent)
        return
    run(argv)


if __name__ == "__main__":
    main()
