"""Land Fisher's iris data (scikit-learn's `iris.csv`) in a lake, the species by name.

    python -m tests.data.iris --lake file://$PWD/.lake [--day 2024-01-01 ...]

The file scikit-learn ships holds the species as 0, 1, 2 after a header that lists the
names (`150,4,setosa,versicolor,virginica`); this writes what a feed would send instead:
one CSV per day with the exporter's headers (`Sepal Length (cm)`, ...), a `Flower`
number and the species' name (`setosa`). Flower i lands on day `DAYS[i % len(DAYS)]`,
with `_SUCCESS` written last. `bad_rows` are appended to a day as they are given (a
species the spec does not list, for example). The spec that reads it is
`tests/data/pipelines/iris.yaml`. The package's loader (NumPy) is not used: the rows are
read from the CSV file as shipped, with importlib.resources.
"""

from __future__ import annotations

import argparse
import csv
import io
import logging
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources

from lakeprep_airflow import lake_fs

log = logging.getLogger(__name__)

DAYS = ("2024-01-01", "2024-01-02", "2024-01-03")
HEADER = (
    "Flower",
    "Sepal Length (cm)",
    "Sepal Width (cm)",
    "Petal Length (cm)",
    "Petal Width (cm)",
    "Species",
)


def shipped_rows() -> list[list[str]]:
    """`[flower, 4 measurements as written, species name]` per row of scikit-learn's iris.csv."""
    try:
        text = (resources.files("sklearn.datasets") / "data" / "iris.csv").read_text(encoding="utf-8")
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "scikit-learn is not installed (pip install -r requirements-dev.txt)"
        ) from err
    first, *records = list(csv.reader(io.StringIO(text)))
    names = first[2:]  # `150,4,setosa,versicolor,virginica`: rows, features, then the names
    return [[str(i + 1), *r[:4], names[int(r[4])]] for i, r in enumerate(records) if r]


def partitions(bad_rows: Mapping[str, Sequence[Sequence[str]]] | None = None) -> dict[str, str]:
    """Day -> that day's CSV text: the header, its flowers, then its `bad_rows`."""
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
    """Land the given days (default: all) under `<lake>/raw/iris/`; return rows per day."""
    fs, root = lake_fs.resolve(lake_root, webhdfs_conn_id=webhdfs_conn_id)
    available = partitions(bad_rows)
    wanted = list(days) if days is not None else list(available)
    unknown = [d for d in wanted if d not in available]
    if unknown:
        raise ValueError(f"iris days are {list(available)}, not {unknown}")
    counts = {}
    for day in wanted:
        path = lake_fs.join(root, "raw", "iris", f"dt={day}")
        fs.delete(lake_fs.join(path, "_SUCCESS"))
        fs.write_bytes(lake_fs.join(path, "part-00000.csv"), available[day].encode("utf-8"))
        fs.write_bytes(lake_fs.join(path, "_SUCCESS"), b"")
        counts[day] = available[day].count("\n") - 1
    log.info(
        "landed %d flowers in %d daily partitions under %s", sum(counts.values()), len(counts), lake_root
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
    print(f"landed {sum(counts.values())} flowers in {len(counts)} daily partitions under {args.lake}")


if __name__ == "__main__":
    main()
