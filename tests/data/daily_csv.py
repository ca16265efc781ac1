"""Land a small real dataset as a lake's daily CSV partitions (the tests' PyPI datasets).

Each `tests/data/<name>.py` reads its rows as the package ships them and gives a header;
this spreads them over days (row i on `days[i % len(days)]`), appends any `bad_rows` to
their day as given, and lands each day under `<lake>/raw/<name>/dt=<day>/part-00000.csv`
with `_SUCCESS` written last, as a feed would.
"""

from __future__ import annotations

import argparse
import csv
import io
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from lakeprep_airflow import lake_fs

log = logging.getLogger(__name__)

Rows = Mapping[str, Sequence[Sequence[str]]]


def partitions(
    header: Sequence[str], rows: Sequence[Sequence[str]], days: Sequence[str], bad_rows: Rows | None = None
) -> dict[str, str]:
    """Day -> that day's CSV text: the header, its rows, then its `bad_rows`."""
    by_day: dict[str, list[Sequence[str]]] = {d: [] for d in days}
    for i, row in enumerate(rows):
        by_day[days[i % len(days)]].append(row)
    for day, extra in (bad_rows or {}).items():
        by_day[day].extend(extra)
    out = {}
    for day, day_rows in by_day.items():
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(day_rows)
        out[day] = buffer.getvalue()
    return out


def land(
    lake_root: str,
    name: str,
    available: Mapping[str, str],
    days: Iterable[str] | None = None,
    *,
    webhdfs_conn_id: str = "webhdfs_default",
) -> dict[str, int]:
    """Land the given days (default: all of `available`) under `<lake>/raw/<name>/`; rows per day."""
    fs, root = lake_fs.resolve(lake_root, webhdfs_conn_id=webhdfs_conn_id)
    wanted = list(days) if days is not None else list(available)
    unknown = [d for d in wanted if d not in available]
    if unknown:
        raise ValueError(f"{name} days are {list(available)}, not {unknown}")
    counts = {}
    for day in wanted:
        path = lake_fs.join(root, "raw", name, f"dt={day}")
        fs.delete(lake_fs.join(path, "_SUCCESS"))
        fs.write_bytes(lake_fs.join(path, "part-00000.csv"), available[day].encode("utf-8"))
        fs.write_bytes(lake_fs.join(path, "_SUCCESS"), b"")
        counts[day] = len(list(csv.reader(io.StringIO(available[day])))) - 1  # a field may hold newlines
    total = sum(counts.values())
    log.info("landed %d %s rows in %d daily partitions under %s", total, name, len(counts), lake_root)
    return counts


def main(
    doc: str, days: Sequence[str], land_days: Callable[..., dict[str, int]], argv: Sequence[str] | None = None
) -> None:
    """The command line of a dataset module: `--lake URI [--day D ...] [--webhdfs-conn-id C]`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--lake", required=True, help="lake root URI (file:// or hdfs://)")
    parser.add_argument("--day", action="append", help=f"a day to land (repeatable; default {list(days)})")
    parser.add_argument("--webhdfs-conn-id", default="webhdfs_default")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    counts = land_days(args.lake, args.day, webhdfs_conn_id=args.webhdfs_conn_id)
    print(f"landed {sum(counts.values())} rows in {len(counts)} daily partitions under {args.lake}")
