"""Sampled days as `sample` leaves them, and the window stages' params, for the window tests."""

from __future__ import annotations

import json
from pathlib import Path

from lakeprep_contracts import layout, window_fit
from lakeprep_jobs import lake_io
from lakeprep_jobs.export_shards import ExportParams
from lakeprep_jobs.fit_statistics import split_statistics
from lakeprep_jobs.fit_transform import FitParams

# What preprocess + sample write: id, label, features under their spec names, split.
SAMPLED_SCHEMA = "id string, label int, x double, c string, t array<string>, split string"
DAY_3 = "2013-01-03"


def land_day(
    spark,
    root: Path,
    day: str,
    rows: list[tuple],
    schema: str = SAMPLED_SCHEMA,
    params: FitParams | None = None,
) -> str:
    """A sampled partition: Parquet, _SUCCESS, the stage report and the day's fit
    statistics for `params` (default `fit_params()`), as `sample` writes them."""
    part = root / "sample" / f"dt={day}"
    df = spark.createDataFrame(rows, schema)
    df.repartition(2).write.mode("overwrite").parquet(f"file://{part}")
    assert (part / "_SUCCESS").exists()
    (part / lake_io.REPORT_NAME).write_text(json.dumps({"stage": "sample", "rows_out": len(rows)}))
    p = params or fit_params()
    statistics = split_statistics(df, window_fit.profile(p), p.label_classes)
    (part / layout.FIT_STATISTICS).write_text(json.dumps(statistics, sort_keys=True))
    return f"file://{part}"


def land_sampled_day(
    spark,
    root: Path,
    day: str,
    rows: list[tuple],
    *,
    seed: int = 0,
    rows_per_file: int = 4,
    row_group_rows: int = 2,
) -> str:
    """A sampled partition as `sample` writes it: its rows as the day's shards
    (`lakeprep_jobs.day_shards`: one split and class per file, `_shards.json`), small files
    and row groups so that slices cross them; the report and fit statistics of `land_day`."""
    from collections import Counter

    from lakeprep_jobs import day_shards

    part = root / "sample" / f"dt={day}"
    df = spark.createDataFrame(rows, SAMPLED_SCHEMA)
    counts = Counter((r[5], r[1]) for r in rows)
    day_shards.write(
        spark,
        df,
        f"file://{part}",
        dict(counts),
        seed=seed,
        rows_per_file=rows_per_file,
        row_group_rows=row_group_rows,
    )
    (part / lake_io.REPORT_NAME).write_text(json.dumps({"stage": "sample", "rows_out": len(rows)}))
    p = fit_params()
    statistics = split_statistics(df, window_fit.profile(p), p.label_classes)
    (part / layout.FIT_STATISTICS).write_text(json.dumps(statistics, sort_keys=True))
    return f"file://{part}"


def day_rows(day: str, train: int, validation: int, test: int) -> list[tuple]:
    splits = ["train"] * train + ["validation"] * validation + ["test"] * test
    return [
        (f"{day}-{i}", i % 2, float(i), "abc"[i % 3], ["w", f"t{i % 4}"], split)
        for i, split in enumerate(splits)
    ]


def fit_params(**kw) -> FitParams:
    base = dict(
        dataset="toy",
        logical_date=DAY_3,
        run_id="manual__2013-01-03T00:00:00+00:00",
        id_column="row_id",
        label_column="y",
        label_classes=[0, 1],
        numeric=[{"name": "x", "scaling": "standard", "impute": "mean", "clip_quantiles": None}],
        categorical=[{"name": "c", "encoding": "vocab", "min_frequency": 1, "max_vocab": 100, "buckets": 64}],
        text=[{"name": "t", "encoding": "vocab", "min_frequency": 1, "vocab_size": 64, "max_tokens": 3}],
        contract={
            "validate": {
                "format": "parquet",
                "columns": [
                    {"name": "row_id", "type": "string", "nullable": False},
                    {"name": "y", "type": "int", "nullable": False},
                    {"name": "x", "type": "double"},
                    {"name": "c", "type": "string"},
                    {"name": "t", "type": "string"},
                ],
                "id_column": "row_id",
                "label_column": "y",
            },
            "preprocess": {},
        },
        numeric_scaling="standard",
        numeric_impute="mean",
        clip_quantiles=None,
        categorical_encoding="vocab",
        categorical_min_frequency=1,
        categorical_max_vocab=100,
        categorical_buckets=64,
        text_encoding="vocab",
        text_min_frequency=1,
        text_vocab_size=64,
        text_max_tokens=3,
    )
    base.update(kw)
    return FitParams(**base)


def export_params(transform_uri: str, **kw) -> ExportParams:
    base = dict(
        dataset="toy",
        logical_date=DAY_3,
        run_id="manual__2013-01-03T00:00:00+00:00",
        config_hash="c0ffee" + "0" * 58,
        world_size=2,
        id_column="row_id",
        label_column="y",
        label_classes=[0, 1],
        transform_uri=transform_uri,
        batch_size=2,
        target_shard_mb=128,
        remainder="drop",
        shards="encoded",  # the materialised export; test_export_manifest tests `prepared`
        window={
            "days": ["2013-01-01", "2013-01-02", DAY_3],
            "complete": ["2013-01-02", DAY_3],
            "failed": [],
            "missing": ["2013-01-01"],
            "before_start": [],
        },
    )
    base.update(kw)
    return ExportParams(**base)
