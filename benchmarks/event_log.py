"""Passes over the data, from Spark's event log (`spark.eventLog.enabled`).

Per submission: the jobs and tasks Spark ran, and what its tasks read and wrote (input,
output and shuffle bytes, from each `SparkListenerTaskEnd`'s task metrics). Input bytes
over the size of the stage's input says how many times the stage read its data; the
`--passes` run of the harness adds the event log to each submission and nothing else.
"""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa


def conf_args(folder: Path) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    return ["--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir=file://{folder}"]


def events(folder: Path) -> Iterator[dict[str, Any]]:
    """Every event of the event log files under `folder` (one submission's), in order.

    Spark 4 writes rolling logs (`eventlog_v2_<app>/events_<n>_<app>`), zstd-compressed."""
    for path in sorted(folder.rglob("events_*")):
        compression = "zstd" if path.suffix == ".zstd" else None
        with pa.input_stream(str(path), compression=compression) as raw:
            for line in io.TextIOWrapper(raw, encoding="utf-8"):
                yield json.loads(line)


def summarize(folder: Path) -> dict[str, Any]:
    """Totals over the event log files in `folder` (one submission's)."""
    totals = {
        "jobs": 0,
        "stages": 0,
        "tasks": 0,
        "input_mb": 0.0,
        "input_records": 0,
        "output_mb": 0.0,
        "shuffle_read_mb": 0.0,
        "shuffle_write_mb": 0.0,
        "spill_disk_mb": 0.0,
    }
    mb = 2**20
    for event in events(folder):
        kind = event.get("Event")
        if kind == "SparkListenerJobStart":
            totals["jobs"] += 1
        elif kind == "SparkListenerStageCompleted":
            totals["stages"] += 1
        elif kind == "SparkListenerTaskEnd":
            totals["tasks"] += 1
            metrics = event.get("Task Metrics") or {}
            inp = metrics.get("Input Metrics") or {}
            out = metrics.get("Output Metrics") or {}
            read = metrics.get("Shuffle Read Metrics") or {}
            write = metrics.get("Shuffle Write Metrics") or {}
            totals["input_mb"] += inp.get("Bytes Read", 0) / mb
            totals["input_records"] += inp.get("Records Read", 0)
            totals["output_mb"] += out.get("Bytes Written", 0) / mb
            totals["shuffle_read_mb"] += (
                read.get("Remote Bytes Read", 0) + read.get("Local Bytes Read", 0)
            ) / mb
            totals["shuffle_write_mb"] += write.get("Shuffle Bytes Written", 0) / mb
            totals["spill_disk_mb"] += metrics.get("Disk Bytes Spilled", 0) / mb
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in totals.items()}


def job_times(folder: Path) -> list[dict[str, Any]]:
    """Each job of a submission, in order: its id, call site and seconds from submission to end.

    The call site is the name of the job's first stage (`collect at validate.py:476`: for
    PySpark, the Python line of the action; `short_site`), which says which pass of a stage
    it was.
    """
    started: dict[int, tuple[str, int, int]] = {}
    jobs = []
    for event in events(folder):
        kind = event.get("Event")
        if kind == "SparkListenerJobStart":
            infos = sorted(event.get("Stage Infos") or [], key=lambda s: s["Stage ID"])
            name = short_site(infos[0]["Stage Name"]) if infos else "(no stage)"
            tasks = sum(s.get("Number of Tasks", 0) for s in infos)
            started[event["Job ID"]] = (name, event["Submission Time"], tasks)
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in started:
            name, begin, tasks = started.pop(event["Job ID"])
            jobs.append(
                {
                    "job": event["Job ID"],
                    "call_site": name,
                    "seconds": (event["Completion Time"] - begin) / 1000,
                    "tasks": tasks,
                }
            )
    return sorted(jobs, key=lambda j: j["job"])


def short_site(call_site: str) -> str:
    """A call site as a reader wants it: the file's name, not its path (`collect at validate.py:476`);
    the jobs adaptive execution submits from its own threads (shuffle and broadcast stages)
    under one name."""
    if "CompletableFuture.java" in call_site:
        return "query stages of adaptive execution"
    action, _, where = call_site.partition(" at ")
    return f"{action} at {where.rsplit('/', 1)[-1]}" if where else call_site


def by_call_site(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`job_times` grouped by call site, the most seconds first: where a submission's jobs spent."""
    sites: dict[str, dict[str, Any]] = {}
    for job in jobs:
        site = sites.setdefault(job["call_site"], {"call_site": job["call_site"], "jobs": 0, "seconds": 0.0})
        site["jobs"] += 1
        site["seconds"] += job["seconds"]
    ranked = sorted(sites.values(), key=lambda s: (-s["seconds"], s["call_site"]))
    return [{**s, "seconds": round(s["seconds"], 2)} for s in ranked]


def main(argv: list[str] | None = None) -> None:
    """`python -m benchmarks.event_log FOLDER`: the jobs of one submission's event log by call site."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if not any(args.folder.rglob("events_*")):
        raise SystemExit(f"no Spark event log (events_*) under {args.folder}")
    jobs = job_times(args.folder)
    print(f"{len(jobs)} jobs, {sum(j['seconds'] for j in jobs):.1f} s in jobs")
    for site in by_call_site(jobs):
        print(f"{site['seconds']:8.1f} s {site['jobs']:4d} job(s)  {site['call_site']}")


if __name__ == "__main__":
    main()
