"""A continuous label's target in the window's fit: per-day moments, merged exactly."""

from __future__ import annotations

import math
import random
import statistics
from fractions import Fraction

import pytest

from lakeprep_contracts import day_statistics, labels, window_fit
from lakeprep_contracts.day_statistics import StatisticsError
from lakeprep_contracts.window_fit import FitError
from lakeprep_jobs import fit_transform
from lakeprep_jobs.fit_statistics import split_statistics
from tests.spark_jobs.window_data import DAY_3, fit_params

SCHEMA = "id string, label int, target double, x double, c string, t array<string>, split string"
DAYS = ("2013-01-01", "2013-01-02", DAY_3)


def day(name: str, n: int, seed: int) -> list[tuple]:
    """A day of a numeric target (its quartile bin as `label`, as preprocess writes it) on
    a wide scale, so the merged moments are checked where float sums would round."""
    rng = random.Random(seed)
    values = sorted(rng.gauss(150.0, 70.0) * 1e3 + 1e9 for _ in range(n))
    rows = []
    for i, v in enumerate(values):
        split = rng.choices(["train", "validation", "test"], [0.7, 0.15, 0.15])[0]
        x = None if rng.random() < 0.1 else v / 1e3 + rng.gauss(0, 5)
        rows.append((f"{name}-{i}", 4 * i // n, v, x, "ab"[i % 2], ["w"], split))
    return rows


def params(**kw) -> window_fit.FitParams:
    return fit_params(label_classes=[0, 1, 2, 3], label_type=labels.CONTINUOUS, **kw)


def test_the_target_fitted_from_merged_days_is_that_of_the_union_of_their_train_rows(spark):
    p = params()
    frames = [
        spark.createDataFrame(day(d, n, s), SCHEMA)
        for s, (d, n) in enumerate(zip(DAYS, (90, 70, 80), strict=True))
    ]
    docs = [
        (d, split_statistics(f, window_fit.profile(p), p.label_classes))
        for d, f in zip(DAYS, frames, strict=True)
    ]
    merged, _ = window_fit.fit(day_statistics.merge(docs, "train", window_fit.profile(p)), p)
    union = frames[0].unionByName(frames[1]).unionByName(frames[2]).filter("split = 'train'")
    direct, _ = fit_transform.fit(union, p, rows=union.count(), partitions=list(DAYS))
    assert merged["label"] == direct["label"]
    target = merged["label"]["target"]
    values = [r["target"] for r in union.collect()]
    assert target["column"] == "target" and target["rows"] == len(values)
    # Exact sums: the correctly rounded mean and sample standard deviation of the union's rows.
    assert target["mean"] == float(statistics.mean(map(Fraction, values)))
    assert target["std"] == pytest.approx(statistics.stdev(values), rel=1e-12)
    assert merged["label"]["type"] == "continuous" and merged["label"]["classes"] == [0, 1, 2, 3]
    fit_transform.check_document(merged, "transform.json")  # the schema takes it
    # Only the train rows: the validation and test targets are not in the fit.
    everything = [r["target"] for f in frames for r in f.collect()]
    assert target["rows"] < len(everything)
    assert not math.isclose(target["mean"], statistics.fmean(everything), rel_tol=0, abs_tol=0)


def test_days_profiled_without_the_target_are_named_and_the_classes_profile_is_unchanged(spark):
    p = params()
    classes = fit_params()
    assert "target" not in window_fit.profile(classes)
    frame = spark.createDataFrame(day(DAYS[0], 40, 1), SCHEMA)
    stale = split_statistics(frame, window_fit.profile(classes), p.label_classes)
    with pytest.raises(StatisticsError, match=r"2013-01-01 \(lacks the continuous label's target\)"):
        day_statistics.merge([(DAYS[0], stale)], "train", window_fit.profile(p))


def test_a_constant_target_is_refused_naming_the_label(spark):
    p = params()
    rows = [(f"r{i}", i % 4, 7.5, 1.0, "a", ["w"], "train") for i in range(8)]
    doc = split_statistics(spark.createDataFrame(rows, SCHEMA), window_fit.profile(p), p.label_classes)
    with pytest.raises(
        FitError, match=r"label 'y' is continuous but takes one value \(7\.5\) on the window's 8"
    ):
        window_fit.fit(day_statistics.merge([(DAYS[0], doc)], "train", window_fit.profile(p)), p)
