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

import csv
import io
import logging
from collections.abc import Iterable, Sequence
from importlib import resources

from tests.data import daily_csv

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


def partitions(bad_rows: daily_csv.Rows | None = None) -> dict[str, str]:
    """Day -> that day's CSV text: the header, its flowers, then its `bad_rows`."""
    return daily_csv.partitions(HEADER, shipped_rows(), DAYS, bad_rows)


def land(
    lake_root: str,
    days: Iterable[str] | None = None,
    *,
    bad_rows: daily_csv.Rows | None = None,
    webhdfs_conn_id: str = "webhdfs_default",
) -> dict[str, int]:
    """Land the given days (default: all) under `<lake>/raw/iris/`; return rows per day."""
    return daily_csv.land(lake_root, "iris", partitions(bad_rows), days, webhdfs_conn_id=webhdfs_conn_id)


def main(argv: Sequence[str] | None = None) -> None:
    daily_csv.main(__doc__, DAYS, land, argv)


if __name__ == "__main__":
    main()
