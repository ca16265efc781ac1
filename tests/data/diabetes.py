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

import gzip
import logging
from collections.abc import Iterable, Sequence
from importlib import resources

from tests.data import daily_csv

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


def partitions(bad_rows: daily_csv.Rows | None = None) -> dict[str, str]:
    """Day -> that day's CSV text: the header, its patients, then its `bad_rows`."""
    return daily_csv.partitions(HEADER, shipped_rows(), DAYS, bad_rows)


def land(
    lake_root: str,
    days: Iterable[str] | None = None,
    *,
    bad_rows: daily_csv.Rows | None = None,
    webhdfs_conn_id: str = "webhdfs_default",
) -> dict[str, int]:
    """Land the given days (default: all) under `<lake>/raw/diabetes/`; return rows per day."""
    return daily_csv.land(lake_root, "diabetes", partitions(bad_rows), days, webhdfs_conn_id=webhdfs_conn_id)


def main(argv: Sequence[str] | None = None) -> None:
    daily_csv.main(__doc__, DAYS, land, argv)


if __name__ == "__main__":
    main()
