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


def test_f_regression_against_the_target_from_merged_days_is_that_of_the_union_of_their_rows(spark):
    """Univariate selection of a continuous label: each numeric's F against the target, from
    the days' exact sums of its products with the target, is scikit-learn's f_regression on
    the union's imputed train rows, and keeps what Spark ML's UnivariateFeatureSelector
    (continuous features and label, fpr) keeps; one numeric follows the target, one is noise."""
    import numpy as np
    from pyspark.ml.feature import UnivariateFeatureSelector, VectorAssembler
    from pyspark.sql import functions as F
    from sklearn.feature_selection import f_regression

    schema = (
        "id string, label int, target double, x double, noise double, c string, t array<string>, split string"
    )
    names = ("x", "noise")
    numerics = [{"name": n, "scaling": "standard", "impute": "mean", "clip_quantiles": None} for n in names]
    p = params(numeric=numerics, selector_mode="fpr", selector_label_type="continuous")
    assert window_fit.profile(p)["target_products"] is True
    rng = random.Random(11)
    frames = []
    for s, (d, n) in enumerate(zip(DAYS, (90, 70, 80), strict=True)):
        rows = [r[:4] + (None if rng.random() < 0.15 else rng.gauss(0, 1),) + r[4:] for r in day(d, n, s)]
        frames.append(spark.createDataFrame(rows, schema))
    docs = [
        (d, split_statistics(f, window_fit.profile(p), p.label_classes))
        for d, f in zip(DAYS, frames, strict=True)
    ]
    doc, _ = window_fit.fit(day_statistics.merge(docs, "train", window_fit.profile(p)), p)
    union = frames[0].unionByName(frames[1]).unionByName(frames[2]).filter("split = 'train'")
    direct, _ = fit_transform.fit(union, p, rows=union.count(), partitions=list(DAYS))
    assert direct["selection"] == doc["selection"]
    assert doc["selection"]["univariate"]["label_type"] == "continuous"
    scores = {s["name"]: s for s in doc["selection"]["univariate"]["scores"]}
    # The same rows imputed as the fit imputes them (the train mean of each).
    means = union.agg(*[F.avg(n).alias(n) for n in names]).first().asDict()
    rows = union.select("target", *[F.coalesce(F.col(n), F.lit(means[n])).alias(n) for n in names]).collect()
    features = np.array([[r[n] for n in names] for r in rows])
    statistic, p_values = f_regression(features, np.array([r["target"] for r in rows]))
    for i, name in enumerate(names):
        assert scores[name]["test"] == "f_regression" and scores[name]["degrees_of_freedom"] == len(rows) - 2
        assert scores[name]["statistic"] == pytest.approx(statistic[i], rel=1e-6), name
        # p-values near 1e-61: compared by their logarithm (F's last digits move them).
        assert math.log(scores[name]["p_value"]) == pytest.approx(math.log(p_values[i]), rel=1e-6), name
    assert [e["fill"] for e in doc["numeric"]] == [pytest.approx(means["x"], rel=1e-15)]
    assert [e["name"] for e in doc["numeric"]] == ["x"] and not scores["noise"]["kept"]
    assert {d["name"]: d["reason"] for d in doc["dropped"]}["noise"].startswith("F-regression p-value")
    imputed = spark.createDataFrame(
        [(float(r["target"]), *map(float, f)) for r, f in zip(rows, features, strict=True)],
        "target double, x double, noise double",
    )
    selector = UnivariateFeatureSelector(featuresCol="v", labelCol="target", selectionMode="fpr")
    selector.setFeatureType("continuous").setLabelType("continuous").setSelectionThreshold(0.05)
    vectors = VectorAssembler(inputCols=list(names), outputCol="v").transform(imputed)
    assert [names[i] for i in selector.fit(vectors).selectedFeatures] == ["x"]


def test_days_profiled_without_the_targets_products_are_named_when_selection_needs_them(spark):
    p = params(selector_mode="fpr", selector_label_type="continuous")
    frame = spark.createDataFrame(day(DAYS[0], 40, 1), SCHEMA)
    stale = split_statistics(frame, window_fit.profile(params()), p.label_classes)
    with pytest.raises(
        StatisticsError, match=r"products with the continuous label's target \(F-regression\)"
    ):
        day_statistics.merge([(DAYS[0], stale)], "train", window_fit.profile(p))
    with pytest.raises(ValueError, match=r"selector_label_type 'categorical' with label_type 'continuous'"):
        params(selector_mode="fpr")
