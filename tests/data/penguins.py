"""Land the real Palmer penguins data (`penguins-raw.csv`) in a lake, as its exporter wrote it.

    python -m tests.data.penguins --lake file://$PWD/.lake [--day 2007-11-16 ...]

One raw partition per egg-laying date (`Date Egg`): `<lake>/raw/penguins/dt=YYYY-MM-DD/
part-00000.csv` (the file's own header and lines, byte for byte: `Culmen Length (mm)`,
`NA` for missing values, quoted `"Adult, 1 Egg Stage"`), with `_SUCCESS` written last.
The spec that reads it is `tests/data/pipelines/penguins.yaml`. The file is read from the
`palmerpenguins` package's data with importlib.resources; the package's own loader
(pandas) is not used, so what lands is what the exporter wrote, not a re-serialization.
"""

from __future__ import annotations

import argparse
import csv
import logging
from collections.abc import Iterable, Sequence
from importlib import resources

from lakeprep_airflow import lake_fs

log = logging.getLogger(__name__)

DATE_COLUMN = "Date Egg"


def raw_csv() -> str:
    """`penguins-raw.csv` as shipped in the palmerpenguins package."""
    try:
        data = resources.files("palmerpenguins") / "data" / "penguins-raw.csv"
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "the palmerpenguins package is not installed (pip install -r requirements-dev.txt)"
        ) from err
    return data.read_text(encoding="utf-8")


def partitions() -> dict[str, str]:
    """Date Egg (YYYY-MM-DD) -> the CSV text of that day: the header, then its lines as shipped.

    The file has no quoted newlines (every record is one line), so lines are kept
    verbatim and only parsed to find their date.
    """
    header, *lines = raw_csv().splitlines(keepends=True)
    date_at = next(csv.reader([header])).index(DATE_COLUMN)
    days: dict[str, list[str]] = {}
    for line in lines:
        day = next(csv.reader([line]))[date_at]
        days.setdefault(day, [header]).append(line)
    return {day: "".join(text) for day, text in sorted(days.items())}


def land(
    lake_root: str, days: Iterable[str] | None = None, *, webhdfs_conn_id: str = "webhdfs_default"
) -> dict[str, int]:
    """Land the given days (default: all 50) under `<lake>/raw/penguins/`; return rows per day."""
    fs, root = lake_fs.resolve(lake_root, webhdfs_conn_id=webhdfs_conn_id)
    available = partitions()
    wanted = list(days) if days is not None else list(available)
    unknown = [d for d in wanted if d not in available]
    if unknown:
        raise ValueError(f"no penguins laid eggs on {unknown}; days with data: {list(available)}")
    counts = {}
    for day in wanted:
        path = lake_fs.join(root, "raw", "penguins", f"dt={day}")
        fs.delete(lake_fs.join(path, "_SUCCESS"))
        fs.write_bytes(lake_fs.join(path, "part-00000.csv"), available[day].encode("utf-8"))
        fs.write_bytes(lake_fs.join(path, "_SUCCESS"), b"")
        counts[day] = available[day].count("\n") - 1
    log.info(
        "landed %d penguins in %d daily partitions under %s", sum(counts.values()), len(counts), lake_root
    )
    return counts


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", required=True, help="lake root URI (file:// or hdfs://)")
    parser.add_argument("--day", action="append", help="a Date Egg to land (repeatable; default all)")
    parser.add_argument("--webhdfs-conn-id", default="webhdfs_default")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    counts = land(args.lake, args.day, webhdfs_conn_id=args.webhdfs_conn_id)
    print(f"landed {sum(counts.values())} penguins in {len(counts)} daily partitions under {args.lake}")


if __name__ == "__main__":
    main()
