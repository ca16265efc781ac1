"""(d) The same preparation written the obvious way on one node: pandas + scikit-learn, Polars, DuckDB.

    python -m benchmarks.single_node --lake <lake folder> --engine <one of ENGINES> --out <folder>

What a user would write instead of the Spark stages, on the same raw partition and
reference tables: read the CSV parts, type the columns, drop rows without a label,
derive the id, label and weekday (New York time), left-join weather and planes, split
80/10/10 by a hash of the id, sample (fraction 1.0 per class and split, as the flights
spec), impute means and standardize the numeric features with statistics of the train
split, hash the categoricals into buckets (256, as the spec does for `dest`), write one
zstd Parquet file per split. No quarantine, no de-duplication, no statistics, no
vocabularies, text or balancing: less than lakeprep does, so it flatters the baseline.

Four engines: pandas + scikit-learn and eager Polars hold the whole partition in memory;
Polars' streaming engine (one lazy plan, `collect(engine="streaming")`) and DuckDB (SQL
over the same CSV parts, spilling past its memory limit) process it in batches. Each
reports `CHECKS`, which every engine must agree on (`same_outputs`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.measure import emit_result

ENGINES = ("pandas_sklearn", "polars", "polars_streaming", "duckdb")
NAMES = {
    "pandas_sklearn": "pandas + scikit-learn",
    "polars": "Polars",
    "polars_streaming": "Polars streaming",
    "duckdb": "DuckDB",
}
# What every engine must agree on, counted on the joined rows before the split (the splits
# and the categorical buckets hash with each engine's own function, so their counts differ):
# the typing and the null-label filter (rows, delayed), the id (distinct ids), the weekday
# in New York time (Sundays), the two left joins (rows with a weather and a plane match).
CHECKS = ("rows", "delayed", "ids", "weather_matched", "planes_matched", "sundays")
DS = "2013-01-01"
NUMERIC = ["distance", "hour", "temp", "wind_speed", "precip", "visib", "plane_year", "seats"]
CATEGORICAL = ["carrier", "origin", "dest", "day_of_week"]
WEATHER_KEYS = ["origin", "year", "month", "day", "hour"]
BUCKETS = 256
SEED = 7
TIME_ZONE = "America/New_York"


def _parts(lake: Path) -> list[Path]:
    return sorted((lake / "raw" / "flights" / f"dt={DS}").glob("part-*.csv"))


def pandas_sklearn(lake: Path, out: Path) -> tuple[dict[str, int], dict[str, int]]:
    import numpy as np
    import pandas as pd
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    ints = ["year", "month", "day", "sched_dep_time", "sched_arr_time", "flight", "hour", "minute"]
    dtypes = {
        **{c: "Int64" for c in [*ints, "dep_time", "arr_time"]},
        **{c: "float64" for c in ["dep_delay", "arr_delay", "air_time", "distance"]},
        **{c: "string" for c in ["carrier", "tailnum", "origin", "dest", "time_hour"]},
    }
    flights = pd.concat([pd.read_csv(p, dtype=dtypes) for p in _parts(lake)], ignore_index=True)
    flights = flights[flights["arr_delay"].notna()].copy()
    flights["delayed"] = (flights["arr_delay"] > 15).astype("int64")
    flights["flight_id"] = (
        flights["year"].astype(str)
        + "-"
        + flights["month"].astype(str).str.zfill(2)
        + "-"
        + flights["day"].astype(str).str.zfill(2)
        + "-"
        + flights["carrier"]
        + "-"
        + flights["flight"].astype(str)
        + "-"
        + flights["origin"]
        + "-"
        + flights["sched_dep_time"].astype(str)
    )
    local = pd.to_datetime(flights["time_hour"], utc=True).dt.tz_convert(TIME_ZONE)
    flights["day_of_week"] = ((local.dt.dayofweek + 1) % 7 + 1).astype(str)  # Spark's 1 = Sunday

    weather = pd.read_csv(lake / "reference" / "weather" / "part-00000.csv")
    weather = weather[[*WEATHER_KEYS, "temp", "wind_speed", "precip", "visib"]].drop_duplicates(WEATHER_KEYS)
    weather[["year", "month", "day", "hour"]] = weather[["year", "month", "day", "hour"]].astype("Int64")
    planes = pd.read_csv(lake / "reference" / "planes" / "part-00000.csv")
    planes = planes[["tailnum", "year", "seats"]].rename(columns={"year": "plane_year"})
    frame = flights.merge(weather, on=WEATHER_KEYS, how="left").merge(planes, on="tailnum", how="left")
    checks = {
        "rows": len(frame),
        "delayed": int(frame["delayed"].sum()),
        "ids": int(frame["flight_id"].nunique()),
        "weather_matched": int(frame["temp"].notna().sum()),
        "planes_matched": int(frame["seats"].notna().sum()),
        "sundays": int((frame["day_of_week"] == "1").sum()),
    }

    bucket = pd.util.hash_array(frame["flight_id"].to_numpy(dtype=object)) % 100
    frame["split"] = np.select([bucket < 80, bucket < 90], ["train", "validation"], "test")
    frame = frame.groupby(["split", "delayed"], group_keys=False).sample(frac=1.0, random_state=SEED)

    numeric = make_pipeline(SimpleImputer(strategy="mean"), StandardScaler())
    numeric.fit(frame.loc[frame["split"] == "train", NUMERIC].astype("float64"))
    features = pd.DataFrame(
        numeric.transform(frame[NUMERIC].astype("float64")), columns=[f"num__{c}" for c in NUMERIC]
    )
    for c in CATEGORICAL:
        values = frame[c].astype(str).to_numpy(dtype=object)
        features[f"cat__{c}"] = (pd.util.hash_array(values) % BUCKETS).astype("int64")
    features["id"] = frame["flight_id"].to_numpy()
    features["label"] = frame["delayed"].to_numpy()
    features["split"] = frame["split"].to_numpy()
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, part in features.groupby("split"):
        part.drop(columns="split").to_parquet(out / f"{split}.parquet", compression="zstd", index=False)
        counts[split] = len(part)
    return counts, checks


def _polars_exprs():
    """The Polars expressions the eager and the streaming versions share."""
    import polars as pl

    derived = {
        "delayed": (pl.col("arr_delay") > 15).cast(pl.Int64),
        "flight_id": pl.concat_str(
            [
                pl.col("year").cast(pl.String),
                pl.col("month").cast(pl.String).str.zfill(2),
                pl.col("day").cast(pl.String).str.zfill(2),
                pl.col("carrier"),
                pl.col("flight").cast(pl.String),
                pl.col("origin"),
                pl.col("sched_dep_time").cast(pl.String),
            ],
            separator="-",
        ),
        "day_of_week": (
            pl.col("time_hour").str.to_datetime(time_zone="UTC").dt.convert_time_zone(TIME_ZONE).dt.weekday()
            % 7
            + 1
        ).cast(pl.String),
    }
    bucket = pl.col("flight_id").hash(SEED) % 100
    split = (
        pl.when(bucket < 80)
        .then(pl.lit("train"))
        .when(bucket < 90)
        .then(pl.lit("validation"))
        .otherwise(pl.lit("test"))
    )
    # Fraction 1.0 per class and split: every row kept, in a shuffled order.
    sampled = pl.int_range(pl.len()).shuffle(SEED).over("split", "delayed") < pl.len().over(
        "split", "delayed"
    )
    stats = [
        *[pl.col(c).cast(pl.Float64).mean().alias(f"{c}_mean") for c in NUMERIC],
        *[pl.col(c).cast(pl.Float64).std().alias(f"{c}_std") for c in NUMERIC],
    ]
    return derived, split, sampled, stats


def _polars_features(stats: dict[str, float]) -> list:
    import polars as pl

    return [
        *[
            (
                (pl.col(c).cast(pl.Float64).fill_null(stats[f"{c}_mean"]) - stats[f"{c}_mean"])
                / (stats[f"{c}_std"] or 1.0)
            ).alias(f"num__{c}")
            for c in NUMERIC
        ],
        *[
            (pl.col(c).cast(pl.String).hash(SEED) % BUCKETS).cast(pl.Int64).alias(f"cat__{c}")
            for c in CATEGORICAL
        ],
        pl.col("flight_id").alias("id"),
        pl.col("delayed").alias("label"),
        "split",
    ]


def _polars_checks(frame) -> dict[str, int]:
    """`CHECKS` of the joined frame (eager or lazy: a lazy one is collected for them)."""
    import polars as pl

    checks = frame.select(
        rows=pl.len(),
        delayed=pl.col("delayed").sum(),
        ids=pl.col("flight_id").n_unique(),
        weather_matched=pl.col("temp").is_not_null().sum(),
        planes_matched=pl.col("seats").is_not_null().sum(),
        sundays=(pl.col("day_of_week") == "1").sum(),
    )
    if isinstance(checks, pl.LazyFrame):
        checks = checks.collect(engine="streaming")
    return {k: int(v) for k, v in checks.row(0, named=True).items()}


def _write_splits(features, out: Path) -> dict[str, int]:
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for (split,), part in features.partition_by("split", as_dict=True).items():
        part.drop("split").write_parquet(out / f"{split}.parquet", compression="zstd")
        counts[split] = part.height
    return counts


def polars(lake: Path, out: Path) -> tuple[dict[str, int], dict[str, int]]:
    import polars as pl

    derived, split, sampled, stats = _polars_exprs()
    flights = pl.concat(
        [pl.read_csv(p, null_values=[""], schema_overrides={"distance": pl.Float64}) for p in _parts(lake)]
    )
    flights = flights.filter(pl.col("arr_delay").is_not_null()).with_columns(**derived)
    weather = (
        pl.read_csv(lake / "reference" / "weather" / "part-00000.csv", null_values=[""])
        .select([*WEATHER_KEYS, "temp", "wind_speed", "precip", "visib"])
        .unique(subset=WEATHER_KEYS, keep="first")
        .with_columns([pl.col(c).cast(flights.schema[c]) for c in ["year", "month", "day", "hour"]])
    )
    planes = pl.read_csv(lake / "reference" / "planes" / "part-00000.csv", null_values=[""]).select(
        "tailnum", pl.col("year").cast(pl.Float64).alias("plane_year"), pl.col("seats").cast(pl.Float64)
    )
    frame = flights.join(weather, on=WEATHER_KEYS, how="left").join(planes, on="tailnum", how="left")
    checks = _polars_checks(frame)
    frame = frame.with_columns(split=split).filter(sampled)
    train_stats = frame.filter(pl.col("split") == "train").select(*stats).row(0, named=True)
    return _write_splits(frame.select(*_polars_features(train_stats)), out), checks


def polars_streaming(lake: Path, out: Path) -> tuple[dict[str, int], dict[str, int]]:
    """The Polars version as one lazy plan over the CSV parts, each result collected by the
    streaming engine (`collect(engine="streaming")`), which processes the scan in batches."""
    import polars as pl

    derived, split, sampled, stats = _polars_exprs()
    ints = {c: pl.Int64 for c in ["year", "month", "day", "hour"]}
    flights = (
        pl.scan_csv(_parts(lake), null_values=[""], schema_overrides={"distance": pl.Float64})
        .filter(pl.col("arr_delay").is_not_null())
        .with_columns(**derived)
        .with_columns([pl.col(c).cast(t) for c, t in ints.items()])
    )
    weather = (
        pl.scan_csv(lake / "reference" / "weather" / "part-00000.csv", null_values=[""])
        .select([*WEATHER_KEYS, "temp", "wind_speed", "precip", "visib"])
        .unique(subset=WEATHER_KEYS, keep="first", maintain_order=True)
        .with_columns([pl.col(c).cast(t) for c, t in ints.items()])
    )
    planes = pl.scan_csv(lake / "reference" / "planes" / "part-00000.csv", null_values=[""]).select(
        "tailnum", pl.col("year").cast(pl.Float64).alias("plane_year"), pl.col("seats").cast(pl.Float64)
    )
    joined = flights.join(weather, on=WEATHER_KEYS, how="left").join(planes, on="tailnum", how="left")
    checks = _polars_checks(joined)
    frame = joined.with_columns(split=split).filter(sampled)
    train_stats = (
        frame.filter(pl.col("split") == "train").select(*stats).collect(engine="streaming").row(0, named=True)
    )
    features = frame.select(*_polars_features(train_stats)).collect(engine="streaming")
    return _write_splits(features, out), checks


def _sql_string(value: object) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def duckdb(lake: Path, out: Path) -> tuple[dict[str, int], dict[str, int]]:
    """The same preparation as DuckDB SQL over the CSV parts (DuckDB spills to disk past its
    memory limit, 80 % of the machine's by default)."""
    import duckdb as ddb

    con = ddb.connect()
    ints = ["year", "month", "day", "flight", "sched_dep_time", "hour"]
    types = {
        **{c: "BIGINT" for c in ints},
        **{c: "DOUBLE" for c in ["arr_delay", "distance"]},
        **{c: "VARCHAR" for c in ["carrier", "tailnum", "origin", "dest", "time_hour"]},
    }
    files = ", ".join(_sql_string(p) for p in _parts(lake))
    typed = ", ".join(f"{_sql_string(c)}: {_sql_string(t)}" for c, t in types.items())
    # A view: DDL takes no prepared parameters, so the literals are quoted here.
    con.execute(
        f"CREATE TEMP VIEW raw AS SELECT * FROM read_csv([{files}], header = true, types = {{{typed}}})"
    )
    weather = _sql_string(lake / "reference" / "weather" / "part-00000.csv")
    planes = _sql_string(lake / "reference" / "planes" / "part-00000.csv")
    keys = ", ".join(WEATHER_KEYS)
    con.execute(f"""
        CREATE TEMP TABLE frame AS
        WITH flights AS (
            SELECT *,
                CAST(arr_delay > 15 AS BIGINT) AS delayed,
                concat_ws('-', year, lpad(CAST(month AS VARCHAR), 2, '0'), lpad(CAST(day AS VARCHAR), 2, '0'),
                          carrier, flight, origin, sched_dep_time) AS flight_id,
                -- Spark's dayofweek: 1 = Sunday (DuckDB's: 0 = Sunday)
                CAST(dayofweek(timezone('{TIME_ZONE}', CAST(time_hour AS TIMESTAMPTZ))) + 1 AS VARCHAR)
                    AS day_of_week
            FROM raw WHERE arr_delay IS NOT NULL
        ),
        weather AS (
            SELECT {keys}, temp, wind_speed, precip, visib FROM (
                SELECT *, row_number() OVER (PARTITION BY {keys} ORDER BY line) AS nth
                FROM (SELECT *, row_number() OVER () AS line FROM read_csv({weather}, header = true))
            ) WHERE nth = 1
        ),
        planes AS (
            SELECT tailnum, CAST(year AS DOUBLE) AS plane_year, CAST(seats AS DOUBLE) AS seats
            FROM read_csv({planes}, header = true)
        )
        SELECT f.*, w.temp, w.wind_speed, w.precip, w.visib, p.plane_year, p.seats,
            CASE WHEN hash(f.flight_id) % 100 < 80 THEN 'train'
                 WHEN hash(f.flight_id) % 100 < 90 THEN 'validation' ELSE 'test' END AS split
        FROM flights f
        LEFT JOIN weather w USING ({keys})
        LEFT JOIN planes p USING (tailnum)
    """)
    names = ("rows", "delayed", "ids", "weather_matched", "planes_matched", "sundays")
    values = con.execute("""
        SELECT count(*), sum(delayed), count(DISTINCT flight_id), count(temp), count(seats),
            count(*) FILTER (WHERE day_of_week = '1')
        FROM frame
    """).fetchone()
    checks = {k: int(v) for k, v in zip(names, values, strict=True)}
    # Fraction 1.0 per class and split: every row kept, in an order shuffled by the seed.
    stats = ", ".join(
        f"avg(CAST({c} AS DOUBLE)) AS {c}_mean, stddev_samp(CAST({c} AS DOUBLE)) AS {c}_std" for c in NUMERIC
    )
    numeric = ", ".join(
        f"(coalesce(CAST({c} AS DOUBLE), s.{c}_mean) - s.{c}_mean) / coalesce(nullif(s.{c}_std, 0), 1) "
        f"AS num__{c}"
        for c in NUMERIC
    )
    categorical = ", ".join(
        f"CAST(hash(CAST({c} AS VARCHAR)) % {BUCKETS} AS BIGINT) AS cat__{c}" for c in CATEGORICAL
    )
    con.execute(f"""
        CREATE TEMP TABLE features AS
        WITH sampled AS (
            SELECT * FROM (
                SELECT *,
                    row_number() OVER (PARTITION BY split, delayed ORDER BY hash(flight_id, {SEED})) AS nth,
                    count(*) OVER (PARTITION BY split, delayed) AS n
                FROM frame
            ) WHERE nth <= n * 1.0
        ),
        s AS (SELECT {stats} FROM sampled WHERE split = 'train')
        SELECT {numeric}, {categorical}, flight_id AS id, delayed AS label, split FROM sampled, s
    """)
    con.execute("DROP TABLE frame")
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for (split,) in con.execute("SELECT DISTINCT split FROM features ORDER BY split").fetchall():
        target = _sql_string(out / f"{split}.parquet")
        con.execute(
            f"COPY (SELECT * EXCLUDE (split) FROM features WHERE split = {_sql_string(split)}) TO {target} "
            "(FORMAT parquet, COMPRESSION zstd)"
        )
        counts[split] = con.execute(
            "SELECT count(*) FROM features WHERE split = $s", {"s": split}
        ).fetchone()[0]
    return counts, checks


ENGINE_RUNS = {
    "pandas_sklearn": pandas_sklearn,
    "polars": polars,
    "polars_streaming": polars_streaming,
    "duckdb": duckdb,
}


def same_outputs(results: dict[str, dict[str, Any]]) -> list[str]:
    """The engines whose `checks` or total rows out differ from the first engine's, each
    named with its values beside the first's; empty when all agree."""
    (first, ref), *others = results.items()

    def seen(r: dict[str, Any]) -> dict[str, int]:
        return {**r["checks"], "rows_out": sum(r["rows_out"].values())}

    return [
        f"{engine}: {seen(r)} where {first} has {seen(ref)}" for engine, r in others if seen(r) != seen(ref)
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", type=Path, required=True)
    parser.add_argument("--engine", choices=ENGINES, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    counts, checks = ENGINE_RUNS[args.engine](args.lake, args.out)
    emit_result(
        {
            "engine": args.engine,
            "seconds": round(time.perf_counter() - start, 4),
            "rows_out": counts,
            "checks": checks,
        }
    )


if __name__ == "__main__":
    main()
