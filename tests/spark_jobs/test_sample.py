from __future__ import annotations

import json
import math
import random

import pytest
from pyspark.testing import assertDataFrameEqual

from lakeprep_jobs import common, sample
from lakeprep_jobs.sample import SampleParams

SCHEMA = "id string, label int, num__x double"
SPLITS = {"train": 0.8, "validation": 0.1, "test": 0.1}


def rows(n0: int, n1: int, n2: int = 0, prefix: str = "f") -> list[tuple]:
    """`n0` rows of class 0, then `n1` of class 1, then `n2` of class 2, ids `<prefix><i>`."""
    labels = [0] * n0 + [1] * n1 + [2] * n2
    return [(f"{prefix}{i}", lbl, float(i % 13)) for i, lbl in enumerate(labels)]


def within_binomial(observed: int, n: int, p: float, sds: float = 4.0) -> bool:
    """|observed - n p| within `sds` binomial standard deviations (false alarm < 1e-4)."""
    return abs(observed - n * p) <= sds * math.sqrt(n * p * (1 - p))


def test_class_fractions_hold_in_expectation_and_fraction_zero_removes_a_class(spark):
    df = spark.createDataFrame(rows(3000, 800, 500), SCHEMA)
    p = SampleParams(label_classes=[0, 1, 2], fraction=1.0, class_fractions={"0": 0.3, "2": 0.0}, seed=7)

    counts = common.class_counts(sample.stratified_sample(df, p), "label")

    assert "2" not in counts  # fraction 0: none kept
    assert counts["1"] == 800  # fraction 1 (the default): all kept
    assert within_binomial(counts["0"], 3000, 0.3), counts


def test_default_fraction_applies_to_unlisted_classes(spark):
    df = spark.createDataFrame(rows(2000, 2000), SCHEMA)
    p = SampleParams(label_classes=[0, 1], fraction=0.25, class_fractions={"1": 1.0}, seed=3)
    counts = common.class_counts(sample.stratified_sample(df, p), "label")
    assert counts["1"] == 2000
    assert within_binomial(counts["0"], 2000, 0.25), counts


def test_sample_does_not_depend_on_partitioning_or_row_order(spark):
    data = rows(600, 300)
    shuffled = list(data)
    random.Random(11).shuffle(shuffled)
    p = SampleParams(label_classes=[0, 1], class_fractions={"0": 0.4, "1": 0.7}, seed=5)

    one = sample.stratified_sample(spark.createDataFrame(data, SCHEMA).repartition(1), p)
    seven = sample.stratified_sample(spark.createDataFrame(shuffled, SCHEMA).repartition(7), p)

    kept = one.collect()
    assert 0 < len(kept) < len(data)
    assertDataFrameEqual(seven, kept)


def test_a_different_seed_gives_a_different_sample(spark):
    df = spark.createDataFrame(rows(500, 0), SCHEMA)
    a = {
        r["id"]
        for r in sample.stratified_sample(df, SampleParams(label_classes=[0], fraction=0.5, seed=1)).collect()
    }
    b = {
        r["id"]
        for r in sample.stratified_sample(df, SampleParams(label_classes=[0], fraction=0.5, seed=2)).collect()
    }
    assert a != b


def test_split_of_an_id_ignores_the_seed_and_other_rows(spark):
    early = spark.createDataFrame(rows(1500, 500, prefix="f"), SCHEMA)  # ids f0..f1999
    # Overlapping data: f1000..f2999, another order, other rows around them.
    later = spark.createDataFrame(list(reversed(rows(3000, 0, prefix="f")[1000:])), SCHEMA).repartition(5)

    first = {
        r["id"]: r["split"]
        for r in sample.assign_split(
            early, SampleParams(label_classes=[0, 1], seed=1, splits=SPLITS)
        ).collect()
    }
    second = {
        r["id"]: r["split"]
        for r in sample.assign_split(
            later, SampleParams(label_classes=[0, 1], seed=99, splits=SPLITS)
        ).collect()
    }

    overlap = set(first) & set(second)
    assert len(overlap) == 1000
    assert {k: first[k] for k in overlap} == {k: second[k] for k in overlap}
    for split, share in SPLITS.items():
        n = sum(1 for s in first.values() if s == split)
        assert within_binomial(n, 2000, share), (split, n)


def test_split_shares_follow_the_params(spark):
    df = spark.createDataFrame(rows(2000, 0), SCHEMA)
    p = SampleParams(label_classes=[0], splits={"train": 0.5, "validation": 0.5, "test": 0.0})
    counts = common.class_counts(sample.assign_split(df, p), "split")
    assert "test" not in counts
    assert within_binomial(counts["train"], 2000, 0.5), counts


def test_bad_fraction_is_refused_naming_the_class():
    with pytest.raises(ValueError, match=r"sample fraction 1.5 for class '1' must be in \[0, 1\]"):
        SampleParams(label_classes=[0, 1], class_fractions={"1": 1.5})


def land(spark, tmp_path, data) -> str:
    part = f"file://{tmp_path}/select_features/dt=2013-01-01"
    spark.createDataFrame(data, SCHEMA).repartition(3).write.parquet(part)
    return part


def test_run_end_to_end_report_matches_the_output(spark, tmp_path):
    src = land(spark, tmp_path, rows(1200, 300, 40))
    out_dir = tmp_path / "sample" / "dt=2013-01-01"
    p = SampleParams(label_classes=[0, 1, 2], class_fractions={"0": 0.5, "2": 0.0}, seed=7, splits=SPLITS)
    report = sample.run(spark, [src], f"file://{out_dir}", p)

    out = spark.read.parquet(f"file://{out_dir}")
    assert out.columns == ["id", "label", "num__x", "split"]
    by_class = common.class_counts(out, "label")
    by_split_class = {
        (r["split"], str(r["label"])): r["count"] for r in out.groupBy("split", "label").count().collect()
    }

    assert report["class_counts_before"] == {"0": 1200, "1": 300, "2": 40}
    assert report["class_counts_after"] == {"0": by_class["0"], "1": by_class["1"], "2": 0}
    assert "2" not in by_class and by_class["1"] == 300
    assert within_binomial(by_class["0"], 1200, 0.5)
    assert report["splits"] == {
        s: {c: by_split_class.get((s, c), 0) for c in ("0", "1", "2")}
        for s in ("train", "validation", "test")
    }
    assert report["rows_in"] == 1540
    assert report["rows_out"] == out.count()
    assert report["rows_sampled_out"] == 1540 - out.count()
    assert json.loads((out_dir / common.REPORT_NAME).read_text()) == report


def test_run_twice_gives_the_same_partition(spark, tmp_path):
    src = land(spark, tmp_path, rows(300, 100))
    out = f"file://{tmp_path}/sample/dt=2013-01-01"
    p = SampleParams(label_classes=[0, 1], class_fractions={"0": 0.5}, seed=7)
    first_report = sample.run(spark, [src], out, p)
    first = spark.read.parquet(out).collect()

    second_report = sample.run(spark, [src], out, p)

    assert second_report == first_report
    assert 0 < len(first) < 400
    assertDataFrameEqual(spark.read.parquet(out), first)
    assert not list((tmp_path / "sample" / "_staging").iterdir())
