"""Land Efron et al.'s diabetes data (scikit-learn's bundled copy) in a lake: a regression.

    python -m tests.data.diabetes --lake file://$PWD/.lake [--day 2024-01-01 ...]

scikit-learn ships the raw measurements (`diabetes_data_raw.csv.gz`: age, sex, BMI,
blood pressure and six blood serum values per patient, space-separated) and the target
(`diabetes_target.csv.gz`: disease progression one year later, a number from 25 to 346)
as two files; this writes what a feed would send instead: one CSV per day with a
`Patient` number, the ten measurements under the paper's headers (`AGE`, `BMI`, `S1`,
...) and the target as `Y`. Patient i lands on day `DAYS[i % len(DAYS)]`, with `_SUCCESS`
written last. `bad_rows` are appended to a day as they are given (a target that is not a
number, for example). The spec that reads it is `tests/data/pipelines/diabetes.yaml`.
The package's loader (NumPy) is not used: the files are read as shipped, with
importlib.resources.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import logging
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources

from lakeprep_airflow import lake_fs

log = logging.getLogger(__name__)

DAYS = ("2024-01-01", "2024-01-02", "2024-01-03")
MEASUREMENTS = ("AGE", "SEX", "BMI", "BP", "S1", "S2", "S3", "S4", "S5", "S6")
HEADER = ("Patient", *MEASUREMENTS, "Y")


def _shipped(name: str) -> list[str]:
    try:
        data = (resources.files("sklearn.datasets") / "data" / name).read_bytes()
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "scikit-learn is not installed (pip install -r requirements-dev.txt)"
        ) from err
    return [line for line in gzip.decompress(data).decode("utf-8").splitlines() if line.strip()]


def shipped_rows() -> list[list[str]]:
    """`[patient, 10 measurements as written, progression]` per patient of the shipped files."""
    measurements = _shipped("diabetes_data_raw.csv.gz")
    targets = _shipped("diabetes_target.csv.gz")
    if len(measurements) != len(targets):
        raise ValueError(f"diabetes: {len(measurements)} rows of measurements, {len(targets)} targets")
    # The target is written as `1.510000000000000000e+02`: the feed sends `151`.
    return [
        [str(i + 1), *m.split(), f"{float(t):g}"]
        for i, (m, t) in enumerate(zip(measurements, targets, strict=True))
    ]


def partitions(bad_rows: Mapping[str, Sequence[Sequence[str]]] | None = None) -> dict[str, str]:
    """Day -> that day's CSV text: the header, its patients, then its `bad_rows`."""
    days: dict[str, list[Sequence[str]]] = {d: [] for d in DAYS}
    for i, row in enumerate(shipped_rows()):
        days[DAYS[i % len(DAYS)]].append(row)
    for day, rows in (bad_rows or {}).items():
        days[day].extend(rows)
    out = {}
    for day, rows in days.items():
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(HEADER)
        writer.writerows(rows)
        out[day] = buffer.getvalue()
    return out


def land(
    lake_root: str,
    days: Iterable[str] | None = None,
    *,
    bad_rows: Mapping[str, Sequence[Sequence[str]]] | None = None,
    webhdfs_conn_id: str = "webhdfs_default",
) -> dict[str, int]:
    """Land the given days (default: all) under `<lake>/raw/diabetes/`; return rows per day."""
    fs, root = lake_fs.resolve(lake_root, webhdfs_conn_id=webhdfs_conn_id)
    available = partitions(bad_rows)
    wanted = list(days) if days is not None else list(available)
    unknown = [d for d in wanted if d not in available]
    if unknown:
        raise ValueError(f"diabetes days are {list(available)}, not {unknown}")
    counts = {}
    for day in wanted:
        path = lake_fs.join(root, "raw", "diabetes", f"dt={day}")
        fs.delete(lake_fs.join(path, "_SUCCESS"))
        fs.write_bytes(lake_fs.join(path, "part-00000.csv"), available[day].encode("utf-8"))
        fs.write_bytes(lake_fs.join(path, "_SUCCESS"), b"")
        counts[day] = available[day].count("\n") - 1
    log.info(
        "landed %d patients in %d daily partitions under %s", sum(counts.values()), len(counts), lake_root
    )
    return counts


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", required=True, help="lake root URI (file:// or hdfs://)")
    parser.add_argument("--day", action="append", help=f"a day to land (repeatable; default {list(DAYS)})")
    parser.add_argument("--webhdfs-conn-id", default="webhdfs_default")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    counts = land(args.lake, args.day, webhdfs_conn_id=args.webhdfs_conn_id)
    print(f"landed {sum(counts.values())} patients in {len(counts)} daily partitions under {args.lake}")


if __name__ == "__main__":
    main()
