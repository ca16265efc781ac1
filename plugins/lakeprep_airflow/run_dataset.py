"""Run a dataset's DAG for a range of days on this machine: what `make run` calls.

    python -m lakeprep_airflow.run_dataset --dataset flights --from 2013-01-01 --to 2013-01-03 \\
        --lake file:///.../.lake [--spark-cache .venv/lakeprep-cache] [--dry-run]

One `airflow dags test lakeprep_<dataset> <day>` per day, oldest first (each day's
window reads the days before it), then the per-day summary (`lakeprep_airflow.summary`).
Airflow's settings (AIRFLOW_HOME, the DAG and plugin folders, the lake root Variable,
the Spark connection, PYTHONPATH) come from the environment, as the Makefile exports
them. Before anything runs, the dataset, the dates and the raw partitions are checked,
so a mistake fails in a second naming what is wrong, not after Spark started or a
sensor waited out its timeout:

- the dataset is a spec in the pipelines folder (``$LAKEPREP_PIPELINES_DIR``, else
  ``<repo>/pipelines``), by its name; an unknown name lists the available ones;
- the spec validates (the error names the file and the field);
- the days are ``YYYY-MM-DD``, in order, and inside the spec's ``start_date`` and
  ``end_date`` (the partition sensor refuses others);
- each day's raw partition is complete: ``_SUCCESS`` and the spec's ``min_files`` and
  ``min_bytes`` (the sensor would otherwise wait ``timeout_seconds``, 6 hours by default).

Each day's Airflow output goes to ``$AIRFLOW_HOME/run-<dataset>-<day>.log``; a failed day
prints that log's tail and stops the range (exit status 1). A refusal exits with 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lakeprep_airflow.partition_status import check_partition
from lakeprep_airflow.spec import DatasetSpec, SpecError, discover_specs, expand, load_spec, pipelines_dir

LOG_TAIL_LINES = 60


class RunRefused(ValueError):
    """A dataset, date range or lake that the run cannot start with; the message says why."""


def find_spec(name: str, directory: Path | None = None) -> DatasetSpec:
    """The validated spec whose name is `name`, or RunRefused naming it and listing the others."""
    directory = directory or pipelines_dir()
    available = [path.stem for path in discover_specs(directory)]
    listed = ", ".join(available) if available else "none"
    where = f"{directory} (set LAKEPREP_PIPELINES_DIR for another folder)"
    if not name:
        raise RunRefused(f"no dataset given: set DATASET=<name>; the specs in {where}: {listed}")
    path = directory / f"{name}.yaml"
    if not path.is_file():
        raise RunRefused(
            f"no dataset spec named {name!r}: {path} does not exist; the specs in {where}: {listed}. "
            f"A new dataset is a file {directory}/<name>.yaml (docs/SPEC.md)"
        )
    try:
        return load_spec(path)
    except SpecError as err:
        raise RunRefused(f"dataset {name!r} cannot run: {err}") from err


def run_days(spec: DatasetSpec, first: str, last: str) -> list[str]:
    """The days from `first` to `last` (YYYY-MM-DD, both included), inside the spec's dates."""
    days = []
    for label, value in (("FROM", first), ("TO", last)):
        try:
            days.append(dt.date.fromisoformat(value))
        except ValueError:
            raise RunRefused(f"{label} {value!r} must be a date YYYY-MM-DD") from None
    start, end = days
    if start > end:
        raise RunRefused(f"FROM {start} is after TO {end}")
    for key, bad in (("start_date", lambda d, b: d < b), ("end_date", lambda d, b: d > b)):
        bound = spec.data.get(key)
        if bound is None:
            continue
        bound_day = dt.date.fromisoformat(str(bound)[:10])
        outside = [d for d in (start, end) if bad(d, bound_day)]
        if outside:
            raise RunRefused(
                f"dataset {spec.name!r}: {outside[0]} is outside its dates ({key} {bound_day} in "
                f"{spec.path}); pick days from {spec.data.get('start_date', 'any')} "
                f"to {spec.data.get('end_date', 'any')}"
            )
    return [(start + dt.timedelta(days=n)).isoformat() for n in range((end - start).days + 1)]


def check_raw_partitions(spec: DatasetSpec, lake_root: str, days: Sequence[str]) -> None:
    """Every day's raw partition is complete, or RunRefused naming the first that is not."""
    if not lake_root:
        raise RunRefused("no lake root: pass --lake (the Makefile passes AIRFLOW_VAR_LAKEPREP_LAKE_ROOT)")
    source = spec.source
    min_files, min_bytes = source.get("min_files", 1), source.get("min_bytes", 0)
    for day in days:
        status = check_partition(expand(source["uri"], lake_root=lake_root, ds=day))
        if not status.complete(min_files, min_bytes):
            raise RunRefused(
                f"dataset {spec.name!r}, {day}: the raw partition is not complete (needs _SUCCESS, "
                f">= {min_files} data file(s), >= {min_bytes} bytes): {status.describe()}; land the "
                f"day's files and _SUCCESS there first (source.uri in {spec.path})"
            )


@dataclass(frozen=True)
class DayRun:
    day: str
    argv: list[str]
    log: Path


def plan(spec: DatasetSpec, days: Sequence[str], airflow_home: Path) -> list[DayRun]:
    """One `airflow dags test` per day, with the file its output goes to."""
    return [
        DayRun(
            day, ["airflow", "dags", "test", spec.dag_id, day], airflow_home / f"run-{spec.name}-{day}.log"
        )
        for day in days
    ]


def _spark_submit_opts(cache_dir: Path | None) -> None:
    """Map Spark's classes from the class-data archive (docs/PIPELINE.md); a set value wins."""
    if "SPARK_SUBMIT_OPTS" in os.environ:
        return
    from lakeprep_airflow import spark_startup

    os.environ["SPARK_SUBMIT_OPTS"] = spark_startup.java_options(spark_startup.ensure_archive(cache_dir))


def _run(day_run: DayRun) -> bool:
    print(f"=== {' '.join(day_run.argv)}", flush=True)
    day_run.log.parent.mkdir(parents=True, exist_ok=True)
    with day_run.log.open("w") as log:
        code = subprocess.run(day_run.argv, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    lines = day_run.log.read_text(errors="replace").splitlines()
    if code != 0:
        print("\n".join(lines[-LOG_TAIL_LINES:]))
        print(f"run {day_run.day} failed (exit {code}); full log: {day_run.log}", flush=True)
        return False
    finished = [line for line in lines if "state=" in line or "DagRun Finished" in line]
    print(finished[-1] if finished else f"run {day_run.day} succeeded; log: {day_run.log}", flush=True)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lakeprep_airflow.run_dataset", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--dataset", required=True, help="the spec's name (pipelines/<name>.yaml)")
    parser.add_argument("--from", dest="first", required=True, help="first day, YYYY-MM-DD")
    parser.add_argument("--to", dest="last", help="last day, YYYY-MM-DD (default: the first)")
    parser.add_argument("--lake", default=os.environ.get("AIRFLOW_VAR_LAKEPREP_LAKE_ROOT", ""))
    parser.add_argument("--spark-cache", type=Path, help="folder of Spark's class-data archive")
    parser.add_argument("--dry-run", action="store_true", help="check and print the commands only")
    args = parser.parse_args(argv)
    try:
        spec = find_spec(args.dataset)
        days = run_days(spec, args.first, args.last or args.first)
        check_raw_partitions(spec, args.lake, days)
    except RunRefused as err:
        print(f"run refused: {err}", file=sys.stderr)
        return 2
    airflow_home = Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow")
    runs = plan(spec, days, airflow_home)
    if args.dry_run:
        for day_run in runs:
            print(f"{' '.join(day_run.argv)} > {day_run.log}")
        return 0
    _spark_submit_opts(args.spark_cache)
    for day_run in runs:
        if not _run(day_run):
            return 1
    from lakeprep_airflow import summary

    summary.main(["--lake", args.lake, "--dataset", spec.name, "--from", days[0], "--to", days[-1]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
