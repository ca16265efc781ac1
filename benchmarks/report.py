"""Write RESULTS.md and results.png from a run's results (results.json holds everything)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.environment import REPO

NOTES = REPO / "benchmarks" / "NOTES.md"  # hand-written reading of the committed run, appended
INPUT_VS_FLOOR_TARGET = 0.8
INPUT_VS_PANDAS_TARGET = 5.0
PARSE_TARGET_S = 0.1
SMALL_DAY_TARGET = 2.0  # a small day's Spark time (fused) <= this x one empty submission
READERS = ("rank_batches", "pyarrow_floor", "pandas_dataloader")
STAGES = ("validate", "preprocess", "sample", "fit_transform", "export_shards")  # results.json sorts keys

NOT_DONE = """\
## Not measured yet (issue 10)

- Removing the passes that are not needed (section (a') counts what each submission
  reads; nothing was changed in the stages); the targets at 16 M rows (staged <= 4x the
  floor, fused <= 2x).
- A long-lived Spark Connect server for small partitions (the fused mode is section (e));
  a small day's Spark time per stage inside a fused submission (its task log has the
  stage's lines, the harness times whole submissions).
- The row count beyond which the single-node versions exceed an 8 GB memory budget;
  they are skipped above `--single-node-max-rows` (default 4 M).
- Scaling at 4 M and 16 M rows (16 M / 4 M time under 4.4, driver memory flat): the
  harness runs them (`make bench`); the run above did not (see its config).
- py-spy profiles (py-spy is not installed); the profiles in the reading above are
  cProfile and Spark's event log.
"""


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


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _targets(results: dict[str, Any]) -> list[str]:
    lines = ["| target | measured | |", "|---|---:|---|"]
    for rows, scale in results["scales"].items():
        at = f"{int(rows):,} rows"
        if inp := scale.get("input"):
            v = inp["vs_floor"]["median"]
            what = f"input pipeline >= {INPUT_VS_FLOOR_TARGET:.0%} of the pyarrow floor ({at})"
            lines.append(_row(what, f"{v:.0%}", _met(v >= INPUT_VS_FLOOR_TARGET)))
            v = inp["vs_pandas"]["median"]
            what = f"input pipeline >= {INPUT_VS_PANDAS_TARGET:g}x pandas + DataLoader ({at})"
            lines.append(_row(what, f"{v:.1f}x", _met(v >= INPUT_VS_PANDAS_TARGET)))
        sp = scale.get("spark")
        if sp and int(rows) >= 16_000_000:
            v = sp["ratio"]["median"]
            lines.append(_row(f"staged pipeline <= 4x the floor ({at})", f"{v:.1f}x", _met(v <= 4)))
    if small := results.get("small_day"):
        v = small["fused_vs_empty"]["median"]
        what = (
            f"a small day ({small['rows']:,} rows) fused within {SMALL_DAY_TARGET:g}x of one empty submission"
        )
        lines.append(_row(what, f"{v:.1f}x", _met(v <= SMALL_DAY_TARGET)))
        v = small["separate_vs_empty"]["median"]
        lines.append(_row("the same day as five separate submissions (for comparison)", f"{v:.1f}x", ""))
    if parse := results.get("dag_parse", {}).get("20"):
        v = parse["processor_s"]["median"]
        what = f"DAG file with 20 specs parsed in < {PARSE_TARGET_S * 1000:.0f} ms (DAG processor's time)"
        lines.append(_row(what, f"{v * 1000:.0f} ms", _met(v < PARSE_TARGET_S)))
    if parse and "cpu_s" in parse:
        v = parse["cpu_s"]["median"]
        lines.append(
            _row(
                "the same, CPU time of the parse (less load-dependent)",
                f"{v * 1000:.0f} ms",
                _met(v < PARSE_TARGET_S),
            )
        )
    return lines


def _spark_section(results: dict[str, Any]) -> list[str]:
    out = [
        "## (a) Preparation against the floor",
        "",
        "Five `spark-submit`s as `SparkStageOperator` builds them (validate, preprocess, sample, "
        "fit_transform, export_shards) against one `spark-submit` that reads the same raw CSV "
        "(validate's reader options) and writes it as zstd Parquet, same master and `--conf`. "
        "Median of the repetitions, ± half the range in % of the median. Ratios per repetition "
        "(floor and stages side by side, order alternating), then their median. *Net of start-up* "
        "takes one empty submission off each of the five stages and off the floor. *CPU* is user + "
        "system time of each submission's process tree (`wait4`), which the machine's load moves less.",
        "",
        "| rows | raw CSV | floor | staged (sum of 5) | ratio | net of start-up | CPU ratio "
        "| empty submission | peak RSS floor | peak RSS staged (max stage) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
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
                _fmt(sp["empty_s"], " s"),
                _mb(sp["floor_peak_rss_mb"]),
                _mb(sp["staged_peak_rss_mb"]),
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


def _small_day_section(results: dict[str, Any]) -> list[str]:
    if not (small := results.get("small_day")):
        return []
    out = [
        "## (e) A small day: start-up against work",
        "",
        f"One generated day of {small['rows']:,} flights (a demo day's size), prepared three ways per "
        "repetition, the order rotating: the five stages as five `spark-submit`s (separate tasks), "
        "as the two submissions of `spark.fuse_stages` (`prepare_day`: validate, preprocess, sample; "
        "`fit_and_export`: fit_transform, export_shards), both as `SparkStageOperator` builds them, "
        "and one empty submission (session start and stop). Ratios per repetition, then their median. "
        f"Both ways wrote the same row accounting per stage: {small['same_row_counts']}.",
        "",
        "| | wall | x empty | CPU | CPU x empty |",
        "|---|---:|---:|---:|---:|",
        _row(
            "five submissions",
            _fmt(small["separate_s"], " s"),
            _fmt(small["separate_vs_empty"], "x"),
            _fmt(small["separate_cpu_s"], " s"),
            _fmt(small.get("separate_cpu_vs_empty"), "x"),
        ),
        _row(
            "two fused submissions",
            _fmt(small["fused_s"], " s"),
            _fmt(small["fused_vs_empty"], "x"),
            _fmt(small["fused_cpu_s"], " s"),
            _fmt(small["fused_cpu_vs_empty"], "x"),
        ),
        _row(
            "one empty submission", _fmt(small["empty_s"], " s"), "1x", _fmt(small["empty_cpu_s"], " s"), "1x"
        ),
        "",
        f"Fused against separate: {_fmt(small['fused_vs_separate'], 'x')} of the wall time.",
    ]
    return out


def _passes_section(results: dict[str, Any]) -> list[str]:
    rows_with = [(r, s["passes"]) for r, s in results["scales"].items() if s.get("passes")]
    if not rows_with:
        return []
    out = [
        "## (a') What each submission reads and writes (Spark event log)",
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
    return out


def _input_section(results: dict[str, Any]) -> list[str]:
    out = [
        "## (b) The trainer's input pipeline",
        "",
        "Rows per second from the export's shards (all three splits, the manifest's batch size) into "
        "batches; each reader in a fresh process per repetition, readers rotating within a repetition, "
        "one untimed warm-up pass first in each process (shards in the page cache).",
        "",
        "| rows | `RankBatches` | pyarrow into numpy (floor) | pandas + TensorDataset + DataLoader "
        "| vs floor | vs pandas | peak RSS RankBatches / floor / pandas |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rows, scale in results["scales"].items():
        if not (inp := scale.get("input")):
            continue
        peaks = " / ".join(f"{inp[f'{r}_peak_rss_mb']['median']:.0f}" for r in READERS)
        out.append(
            _row(
                f"{inp['rows']:,} (export of {int(rows):,} raw)",
                *(_fmt(inp[f"{r}_rows_per_s"], " rows/s", 0) for r in READERS),
                _fmt(inp["vs_floor"], "x"),
                _fmt(inp["vs_pandas"], "x"),
                f"{peaks} MB",
            )
        )
    return out


def _parse_section(results: dict[str, Any]) -> list[str]:
    if not (parse := results.get("dag_parse")):
        return []
    out = [
        "## (c) DAG parse time of `dags/lakeprep_datasets.py`",
        "",
        "As the DAG processor spends it (`benchmarks/dag_parse.py`): `airflow.*` modules pre-imported "
        "in a warm parent, then per repetition a forked child builds `BundleDagBag(file)` and "
        "serializes the DAGs. *Processor* is fork to exit (the manager's `last_duration`), *CPU* the "
        "child's user + system time, *DagBag* its `FileLoadStat.duration`. One warm-up fork "
        "discarded. The specs are copies of `pipelines/flights.yaml` in `LAKEPREP_PIPELINES_DIR`.",
        "",
        "| specs | DAGs | processor (fork to exit) | CPU | DagBag parse | serialization |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for count, p in parse.items():
        cpu = _ms(p["cpu_s"]) if "cpu_s" in p else "-"
        out.append(
            _row(count, p["dags"], _ms(p["processor_s"]), cpu, _ms(p["dagbag_s"]), _ms(p["serialize_s"]))
        )
    return out


def _single_node_section(results: dict[str, Any]) -> list[str]:
    rows_with = [(r, s) for r, s in results["scales"].items() if s.get("single_node")]
    if not rows_with:
        return []
    out = [
        "## (d) The same preparation written the obvious way, on one node",
        "",
        "`benchmarks/single_node.py`: read, type, drop null labels, join weather and planes, split by "
        "a hash of the id, sample, impute and standardize (train statistics), hash categoricals, write "
        "zstd Parquet per split. Wall time of the whole process (imports included) and its peak RSS, "
        "beside (a)'s numbers of the same run.",
        "",
        "| rows | pandas + scikit-learn | Polars | lakeprep staged (a) | floor (a) "
        "| peak RSS pandas | Polars | staged |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rows, s in rows_with:
        sn, sp = s["single_node"], s.get("spark") or {}
        out.append(
            _row(
                f"{int(rows):,}",
                _fmt(sn["pandas_sklearn_s"], " s"),
                _fmt(sn["polars_s"], " s"),
                _fmt(sp.get("staged_s"), " s"),
                _fmt(sp.get("floor_s"), " s"),
                _mb(sn["pandas_sklearn_peak_rss_mb"]),
                _mb(sn["polars_peak_rss_mb"]),
                _mb(sp.get("staged_peak_rss_mb")),
            )
        )
    return out


def _machine(results: dict[str, Any]) -> list[str]:
    m = results["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v)
    return [
        f"- machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}; "
        f"shared: load average {m['load_average_at_start']} at the start, "
        f"{results.get('load_average_at_end')} at the end",
        f"- Python {m['python']}, {m['java']}, Spark master `{m['spark_master']}`; {versions}",
        f"- run {results['started']} .. {results.get('finished')}, {results['mode']} mode, "
        f"config `{results['config']}`",
        f"- command: `{results['command']}` (logs: `{results['logs']}`)",
        *(f"- merged from a second run: `{c}`" for c in results.get("extra_commands", [])),
    ]


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
        if sn := s.get("single_node"):
            add("pandas + scikit-learn", int(r), sn["pandas_sklearn_s"], sn["pandas_sklearn_peak_rss_mb"])
            add("Polars", int(r), sn["polars_s"], sn["polars_peak_rss_mb"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, (xs, ts, ms) in series.items():
        left.plot(xs, ts, marker="o", label=name)
        right.plot(xs, ms, marker="o", label=name)
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
        "Generated by `python -m benchmarks` (`make bench`) from `results.json` beside this file. "
        "Ratios are measured side by side in one run; absolute times drift with the machine's load.",
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
        _input_section,
        _parse_section,
        _single_node_section,
        _small_day_section,
    )
    for section in sections:
        if part := section(results):
            lines += [*part, ""]
    lines += ["![time and peak memory against rows](results.png)", ""]
    if results["mode"] == "full" and NOTES.is_file() and out.resolve() == NOTES.parent.resolve():
        lines += [NOTES.read_text().rstrip(), ""]
    lines += [NOT_DONE]
    (out / "RESULTS.md").write_text("\n".join(lines))
    plot(results, out / "results.png")
