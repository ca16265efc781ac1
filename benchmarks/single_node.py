"""(d) The same preparation written the obvious way on one node: pandas + scikit-learn, Polars.

    python -m benchmarks.single_node --lake <lake folder> --engine pandas_sklearn|polars --out <folder>

What a user would write instead of the Spark stages, on the same raw partition and
reference tables: read the CSV parts, type the columns, drop rows without a label,
derive the id, label and weekday (New York time), left-join weather and planes, split
80/10/10 by a hash of the id, sample (fraction 1.0 per class and split, as the flights
spec), impute means and standardize the numeric features with statistics of the train
split, hash the categoricals into buckets (256, as the spec does for `dest`), write one
zstd Parquet file per split. No quarantine, no de-duplication, no statistics, no
vocabularies, text or balancing: less than lakeprep does, so it flatters the baseline.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.measure import emit_result

ENGINES = ("pandas_sklearn", "polars")
DS = "2013-01-01"
NUMERIC = ["distance", "hour", "temp", "wind_speed", "precip", "visib", "plane_year", "seats"]
CATEGORICAL = ["carrier", "origin", "dest", "day_of_week"]
WEATHER_KEYS = ["origin", "year", "month", "day", "hour"]
BUCKETS = 256
SEED = 7
TIME_ZONE = "America/New_York"


def _parts(lake: Path) -> list[Path]:
    return sorted((lake / "raw" / "flights" / f"dt={DS}").glob("part-*.csv"))


def pandas_sklearn(lake: Path, out: Path) -> dict[str, int]:
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
    return counts


def polars(lake: Path, out: Path) -> dict[str, int]:
    import polars as pl

    flights = pl.concat(
        [pl.read_csv(p, null_values=[""], schema_overrides={"distance": pl.Float64}) for p in _parts(lake)]
    )
    flights = flights.filter(pl.col("arr_delay").is_not_null()).with_columns(
        delayed=(pl.col("arr_delay") > 15).cast(pl.Int64),
        flight_id=pl.concat_str(
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
        day_of_week=(
            pl.col("time_hour").str.to_datetime(time_zone="UTC").dt.convert_time_zone(TIME_ZONE).dt.weekday()
            % 7
            + 1
        ).cast(pl.String),
    )
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
    bucket = pl.col("flight_id").hash(SEED) % 100
    frame = frame.with_columns(
        split=pl.when(bucket < 80)
        .then(pl.lit("train"))
        .when(bucket < 90)
        .then(pl.lit("validation"))
        .otherwise(pl.lit("test"))
    )
    frame = frame.filter(
        pl.int_range(pl.len()).shuffle(SEED).over("split", "delayed") < pl.len().over("split", "delayed")
    )
    train = frame.filter(pl.col("split") == "train")
    stats = train.select(
        *[pl.col(c).cast(pl.Float64).mean().alias(f"{c}_mean") for c in NUMERIC],
        *[pl.col(c).cast(pl.Float64).std().alias(f"{c}_std") for c in NUMERIC],
    ).row(0, named=True)
    features = frame.select(
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
    )
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for (split,), part in features.partition_by("split", as_dict=True).items():
        part.drop("split").write_parquet(out / f"{split}.parquet", compression="zstd")
        counts[split] = part.height
    return counts


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", type=Path, required=True)
    parser.add_argument("--engine", choices=ENGINES, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    counts = {"pandas_sklearn": pandas_sklearn, "polars": polars}[args.engine](args.lake, args.out)
    emit_result({"engine": args.engine, "seconds": round(time.perf_counter() - start, 4), "rows_out": counts})


if __name__ == "__main__":
    main()
