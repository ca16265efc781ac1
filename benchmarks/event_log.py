"""Passes over the data, from Spark's event log (`spark.eventLog.enabled`).

Per submission: the jobs and tasks Spark ran, and what its tasks read and wrote (input,
output and shuffle bytes, from each `SparkListenerTaskEnd`'s task metrics). Input bytes
over the size of the stage's input says how many times the stage read its data; the
`--passes` run of the harness adds the event log to each submission and nothing else.
"""

from __future__ import annotations

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
