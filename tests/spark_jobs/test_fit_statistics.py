"""Per-day fit statistics and the window's fit as their merge (fit_statistics, day_statistics, window_fit)."""

from __future__ import annotations

import json
import random

import pytest

from lakeprep_contracts import day_statistics, layout, window_fit
from lakeprep_contracts.day_statistics import StatisticsError
from lakeprep_jobs import fit_transform, sample
from lakeprep_jobs.fit_statistics import split_statistics
from tests.spark_jobs.window_data import DAY_3, fit_params, land_day

SCHEMA = (
    "id string, label int, x double, y double, w double, c string, h string, t array<string>, split string"
)
DAYS = ("2013-01-01", "2013-01-02", DAY_3)


def day(name: str, n: int, seed: int) -> list[tuple]:
    """A day whose features depend on the label (so the tests have something to find),
    with missing values, NaN, repeated and distinct values, and every split."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = int(rng.random() < 0.35)
        x = None if rng.random() < 0.1 else rng.gauss(2.0 * label, 1.0)
        y = float("nan") if rng.random() < 0.05 else float(rng.randint(0, 40) + 10 * label)
        w = rng.gauss(0, 1) if x is None else x * 0.5 + rng.gauss(0, 0.3)
        c = None if rng.random() < 0.05 else rng.choice("abcd" if label else "abce")
        h = f"k{rng.randint(0, 30)}"
        t = [rng.choice(["to", "be", "or", "not"]) for _ in range(rng.randint(0, 3))] + [f"l{label}"]
        split = rng.choices(["train", "validation", "test"], [0.8, 0.1, 0.1])[0]
        rows.append((f"{name}-{i}", label, x, y, w, c, h, t, split))
    return rows


def params(**kw) -> window_fit.FitParams:
    base = dict(
        numeric=[
            {"name": "x", "scaling": "standard", "impute": "mean", "clip_quantiles": None},
            {"name": "y", "scaling": "minmax", "impute": "mean", "clip_quantiles": None},
            {"name": "w", "scaling": "none", "impute": "mean", "clip_quantiles": None},
        ],
        categorical=[
            {"name": "c", "encoding": "vocab", "min_frequency": 2, "max_vocab": 3, "buckets": 64},
            {"name": "h", "encoding": "hash", "min_frequency": 1, "max_vocab": 100, "buckets": 16},
        ],
        text=[{"name": "t", "encoding": "vocab", "min_frequency": 1, "vocab_size": 5, "max_tokens": 3}],
    )
    base.update(kw)
    return fit_params(**base)


def day_docs(spark, p, sizes=(300, 250, 280)):
    frames = [
        spark.createDataFrame(day(d, n, seed), SCHEMA)
        for seed, (d, n) in enumerate(zip(DAYS, sizes, strict=True))
    ]
    docs = [
        (d, split_statistics(f, window_fit.profile(p), p.label_classes))
        for d, f in zip(DAYS, frames, strict=True)
    ]
    return frames, docs


def union_fit(frames, p):
    union = frames[0]
    for f in frames[1:]:
        union = union.unionByName(f)
    train = union.filter("split = 'train'")
    doc, notes = fit_transform.fit(train, p, rows=train.count(), partitions=list(DAYS))
    return doc, notes


def merged_fit(docs, p):
    stats = day_statistics.merge(docs, "train", window_fit.profile(p))
    return window_fit.fit(stats, p)


@pytest.mark.parametrize(
    "knobs",
    [
        {"selector_mode": "fpr"},
        {"selector_mode": "numTopFeatures", "selector_threshold": 2, "selector_label_type": "continuous"},
        {"pca_components": 2},
    ],
    ids=["anova-chi2", "f-regression", "pca"],
)
def test_a_merged_fit_of_the_days_equals_the_fit_of_their_union(spark, knobs):
    p = params(**knobs)
    frames, docs = day_docs(spark, p)
    merged, merged_notes = merged_fit(docs, p)
    direct, direct_notes = union_fit(frames, p)
    # Every fitted number, bit for bit: exact sums and counts do not care how rows are grouped.
    assert merged == direct
    assert merged_notes == direct_notes
    # ... and in any order of the days.
    assert merged_fit(list(reversed(docs)), p)[0] | {"fitted_on": None} == merged | {"fitted_on": None}
    assert merged["fitted_on"]["rows"] == sum(
        sum(r[8] == "train" for r in day(d, n, s))
        for s, (d, n) in enumerate(zip(DAYS, (300, 250, 280), strict=True))
    )


def test_merged_statistics_are_those_of_the_union_rows(spark):
    p = params()
    frames, docs = day_docs(spark, p)
    stats = day_statistics.merge(docs, "train", window_fit.profile(p))
    rows = [r for f in frames for r in f.collect() if r["split"] == "train"]
    x = [r["x"] for r in rows if r["x"] is not None]
    assert stats.rows == len(rows)
    assert stats.numeric["x"].overall.count == len(x)
    assert float(stats.numeric["x"].overall.total) == pytest.approx(sum(x), rel=1e-12)
    assert stats.rows_per_class == {
        "0": sum(r["label"] == 0 for r in rows),
        "1": sum(r["label"] == 1 for r in rows),
    }
    tokens = [tok for r in rows for tok in r["t"]]
    assert stats.text["t"] == {tok: tokens.count(tok) for tok in set(tokens)}
    c_counts = sum(stats.categorical["c"].values(), start=day_statistics.Counter())
    assert c_counts == {v: sum(r["c"] == v for r in rows) for v in {r["c"] for r in rows} if v is not None}


@pytest.mark.parametrize("q", [0.05, 0.25, 0.5, 0.9])
def test_merged_quantiles_are_within_the_grids_rank_error(spark, q):
    col = {"name": "x", "scaling": "none", "impute": "mean", "clip_quantiles": [q, 0.99]}
    p = params(numeric=[col])
    frames, docs = day_docs(spark, p, sizes=(3000, 2500, 2800))
    doc, _ = merged_fit(docs, p)
    lower = doc["numeric"][0]["clip"]["lower"]
    values = sorted(
        r["x"] for f in frames for r in f.collect() if r["split"] == "train" and r["x"] is not None
    )
    rank = sum(v <= lower for v in values) / len(values)
    # docs/TRANSFORM.md: within about 1 / GRID in rank of the union's quantile (plus ties).
    assert abs(rank - q) <= 2 / day_statistics.GRID + 1 / len(values)
    assert lower in values  # a value of the column, as percentile_approx returns


def test_one_small_day_gives_the_exact_quantiles(spark):
    rows = [(str(i), 0, float(v), 0.0, 0.0, "a", "k", [], "train") for i, v in enumerate([1, 2, 3, 7, 10])]
    col = {"name": "x", "scaling": "robust", "impute": "median", "clip_quantiles": None}
    p = params(numeric=[col])
    stats = split_statistics(spark.createDataFrame(rows, SCHEMA), window_fit.profile(p), p.label_classes)
    doc, _ = merged_fit([("d", stats)], p)
    (num,) = doc["numeric"]
    assert (num["fill"], num["center"], num["scale"]) == (3.0, 3.0, 5.0)


def test_days_profiled_for_another_fit_are_refused_naming_them(spark):
    p = params()
    _, docs = day_docs(spark, p)
    wider = params(pca_components=2)
    with pytest.raises(StatisticsError, match=r"2013-01-01 \(lacks the numerics' cross products \(PCA\)\)"):
        day_statistics.merge(docs, "train", window_fit.profile(wider))
    renamed = params(
        categorical=[{"name": "c", "encoding": "hash", "min_frequency": 1, "max_vocab": 9, "buckets": 8}]
    )
    with pytest.raises(StatisticsError, match=r"lacks c\).*Rerun `sample` for those days"):
        day_statistics.merge(docs, "train", window_fit.profile(renamed))


def test_fit_transform_reads_statistics_not_rows(spark, tmp_path):
    from tests.spark_jobs.job_count import spark_jobs

    p = params()
    inputs = [land_day(spark, tmp_path, d, day(d, 120, s), SCHEMA, params=p) for s, d in enumerate(DAYS)]
    out = f"file://{tmp_path}/fit"
    report, jobs = spark_jobs(spark, lambda: fit_transform.run(spark, inputs, out, p))
    assert report["fitted_on_rows"] == sum(
        sum(r[8] == "train" for r in day(d, 120, s)) for s, d in enumerate(DAYS)
    )
    # No Spark job at all: the days' statistics are small files read through Hadoop's FileSystem.
    assert jobs == [], jobs
    # A day sampled before the statistics existed is refused with the fix.
    (tmp_path / "sample" / f"dt={DAYS[1]}" / layout.FIT_STATISTICS).unlink()
    with pytest.raises(StatisticsError, match=rf"without {layout.FIT_STATISTICS} .*dt={DAYS[1]}"):
        fit_transform.run(spark, inputs, out, p)


def test_sample_writes_the_days_statistics_once_and_a_rerun_writes_the_same_bytes(spark, tmp_path):
    p = params()
    src = tmp_path / "preprocess"
    rows = [r[:8] for r in day(DAY_3, 200, 3)]
    spark.createDataFrame(rows, SCHEMA.rsplit(",", 1)[0]).write.parquet(f"file://{src}")
    sp = sample.SampleParams(label_classes=[0, 1], seed=7, fit_profile=window_fit.profile(p))
    out = tmp_path / "sample"
    report = sample.run(spark, [f"file://{src}"], f"file://{out}", sp)
    first = (out / layout.FIT_STATISTICS).read_bytes()
    doc = json.loads(first)
    written = spark.read.parquet(f"file://{out}")
    assert (
        sum(sum(s["rows"].values()) for s in doc["splits"].values()) == report["rows_out"] == written.count()
    )
    assert doc["splits"]["train"]["rows"]["1"] == written.filter("split = 'train' AND label = 1").count()
    # The statistics are those of the rows written, whatever partitioning the rerun reads.
    assert doc == split_statistics(written, window_fit.profile(p), [0, 1])
    sample.run(spark, [f"file://{src}"], f"file://{out}", sp)
    assert (out / layout.FIT_STATISTICS).read_bytes() == first
