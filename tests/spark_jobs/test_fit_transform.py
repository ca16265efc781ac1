"""fit_transform: fitted once, on the window's train split only; transform.json as the contract."""

from __future__ import annotations

import json
import math
import statistics

import pytest
from pyspark.testing import assertDataFrameEqual

from lakeprep_jobs import fit_transform, transform
from lakeprep_jobs.fit_transform import FitError
from tests.spark_jobs.window_data import DAY_3, day_rows, fit_params, land_day

SCHEMA = "id string, label int, x double, c string, t array<string>, split string"


def frame(spark, rows):
    return spark.createDataFrame(rows, SCHEMA)


def fitted(spark, rows, **kw):
    train = frame(spark, rows).filter("split = 'train'")
    doc, _ = fit_transform.fit(train, fit_params(**kw), rows=train.count(), partitions=["p"])
    return doc


def test_numeric_statistics_come_from_train_rows_only(spark):
    rows = [
        ("a", 0, 1.0, "x", [], "train"),
        ("b", 1, 3.0, "x", [], "train"),
        ("c", 0, None, "x", [], "train"),
        ("d", 1, float("nan"), "x", [], "train"),
        ("e", 0, 1000.0, "x", [], "validation"),
        ("f", 1, -1000.0, "x", [], "test"),
    ]
    (num,) = fitted(spark, rows)["numeric"]
    # Fill = mean of the present train values (2.0); the std is of the imputed column
    # [1, 3, 2, 2]: validation and test values never enter.
    assert num["fill"] == 2.0
    assert num["center"] == 2.0
    assert num["scale"] == pytest.approx(statistics.stdev([1.0, 3.0, 2.0, 2.0]))
    assert num["output"] == "num__x" and num["clip"] is None


@pytest.mark.parametrize(
    ("scaling", "center", "scale"),
    [("minmax", 1.0, 9.0), ("none", 0.0, 1.0), ("robust", 3.0, 5.0)],
)
def test_other_scalings(spark, scaling, center, scale):
    rows = [(str(i), 0, float(v), "x", [], "train") for i, v in enumerate([1, 2, 3, 7, 10])]
    (num,) = fitted(
        spark,
        rows,
        numeric=[{"name": "x", "scaling": scaling, "impute": "median", "clip_quantiles": None}],
    )["numeric"]
    assert (num["center"], num["scale"], num["fill"]) == (center, scale, 3.0)


def test_clipping_by_train_quantiles(spark):
    rows = [(str(i), 0, float(i), "x", [], "train") for i in range(101)]
    (num,) = fitted(
        spark,
        rows,
        numeric=[{"name": "x", "scaling": "none", "impute": "mean", "clip_quantiles": [0.1, 0.9]}],
    )["numeric"]
    assert num["clip"] == {"lower": 10.0, "upper": 90.0, "quantiles": [0.1, 0.9]}


def test_vocabulary_order_cutoff_and_cap(spark):
    values = ["b"] * 3 + ["a"] * 3 + ["c"] * 2 + ["d"]
    rows = [(str(i), 0, 1.0, v, [v, "tok"], "train") for i, v in enumerate(values)]
    rows.append(("v", 0, 1.0, "zzz", ["only-validation"], "validation"))
    doc = fitted(
        spark,
        rows,
        categorical=[{"name": "c", "encoding": "vocab", "min_frequency": 2, "max_vocab": 2, "buckets": 8}],
    )
    (cat,) = doc["categorical"]
    # Count descending, ties by value: a (3), b (3); c passes the cutoff but not the cap.
    assert cat["vocabulary"] == ["a", "b"] and cat["counts"] == [3, 3]
    assert cat["cardinality"] == 4 and cat["rare_values"] == 2
    (text,) = doc["text"]
    assert text["vocabulary"][0] == "tok" and "only-validation" not in text["vocabulary"]
    assert text["cardinality"] == len(text["vocabulary"]) + 2


def test_hash_encodings_record_buckets(spark):
    rows = [("1", 0, 1.0, "x", ["a"], "train")]
    doc = fitted(
        spark,
        rows,
        categorical=[{"name": "c", "encoding": "hash", "min_frequency": 1, "max_vocab": 9, "buckets": 16}],
        text=[{"name": "t", "encoding": "hash", "min_frequency": 1, "vocab_size": 32, "max_tokens": 2}],
    )
    assert doc["categorical"][0]["buckets"] == 16 and "vocabulary" not in doc["categorical"][0]
    assert doc["text"][0]["cardinality"] == 32


def test_a_numeric_without_train_values_is_dropped_with_the_reason(spark):
    rows = [("1", 0, None, "x", [], "train"), ("2", 0, 5.0, "x", [], "validation")]
    doc = fitted(spark, rows)
    assert doc["numeric"] == []
    assert doc["dropped"] == [{"name": "x", "reason": "no values on the window's train split (1 rows)"}]


def test_non_finite_statistics_fail_naming_the_column(spark):
    rows = [("1", 0, float("inf"), "x", [], "train"), ("2", 0, 1.0, "x", [], "train")]
    with pytest.raises(FitError, match="mean of x is inf"):
        fitted(spark, rows)


def test_apply_transform_sql_semantics(spark):
    rows = [
        ("a", 0, 1.0, "a", ["a", "tok"], "train"),
        ("b", 1, 3.0, "b", ["tok"], "train"),
        ("c", 0, None, None, None, "validation"),
        ("d", 1, float("nan"), "never-seen", ["x", "y", "z", "w"], "test"),
    ]
    doc = fitted(spark, rows)
    out = {r["id"]: r for r in transform.apply_transform(frame(spark, rows), doc).collect()}
    std = statistics.stdev([1.0, 3.0])
    assert out["a"]["num__x"] == pytest.approx((1.0 - 2.0) / std)
    assert out["c"]["num__x"] == 0.0 and out["d"]["num__x"] == 0.0  # null and NaN -> fill
    vocab = doc["categorical"][0]["vocabulary"]
    assert out["a"]["cat__c"] == vocab.index("a") + 2
    assert out["c"]["cat__c"] == 0 and out["d"]["cat__c"] == 1  # missing, unseen
    tokens = doc["text"][0]["vocabulary"]
    assert out["a"]["txt__t"] == [tokens.index("a") + 2, tokens.index("tok") + 2, 0]
    assert out["c"]["txt__t"] == [0, 0, 0]  # no text: all padding
    assert out["d"]["txt__t"] == [1, 1, 1]  # unseen tokens, truncated to max_tokens
    assert out["d"]["split"] == "test" and set(out["a"].asDict()) == {
        "id",
        "label",
        "split",
        "num__x",
        "cat__c",
        "txt__t",
    }


def test_vocabulary_values_are_quoted_safely(spark):
    tricky = ["it's", "back\\slash", "new\nline", "ünï", "`tick`"]
    rows = [(str(i), 0, 1.0, v, [v], "train") for i, v in enumerate(tricky)]
    doc = fitted(spark, rows)
    out = transform.apply_transform(frame(spark, rows), doc).collect()
    vocab = doc["categorical"][0]["vocabulary"]
    assert sorted(vocab) == sorted(tricky)
    assert {r["cat__c"] for r in out} == {vocab.index(v) + 2 for v in tricky}


def test_pipeline_model_applies_the_same_transform(spark, tmp_path):
    rows = day_rows(DAY_3, 6, 2, 2)
    doc = fitted(spark, rows)
    path = f"file://{tmp_path}/model"
    transform.pipeline_model(doc).write().overwrite().save(path)
    from pyspark.ml import PipelineModel

    loaded = PipelineModel.load(path).transform(frame(spark, rows))
    expected = transform.apply_transform(frame(spark, rows), doc)
    assertDataFrameEqual(loaded.select(*expected.columns), expected)


def test_run_fits_on_train_only_validation_changes_leave_transform_json_identical(spark, tmp_path):
    rows = day_rows(DAY_3, 6, 3, 3)
    inputs = [land_day(spark, tmp_path / "a", DAY_3, rows)]
    out_a = tmp_path / "a" / "fit"
    report = fit_transform.run(spark, inputs, f"file://{out_a}", fit_params())
    assert report["fitted_on_rows"] == 6 and report["rows_per_split"] == {
        "train": 6,
        "validation": 3,
        "test": 3,
    }

    # Same train rows, every validation and test value changed.
    changed = [r if r[5] == "train" else (r[0], 1 - r[1], r[2] * 100, "new", ["other"], r[5]) for r in rows]
    inputs_b = [land_day(spark, tmp_path / "b", DAY_3, changed)]
    out_b = tmp_path / "b" / "fit"
    fit_transform.run(spark, inputs_b, f"file://{out_b}", fit_params())
    doc_a = json.loads((out_a / "transform.json").read_text())
    doc_b = json.loads((out_b / "transform.json").read_text())
    doc_a["fitted_on"].pop("partitions")
    doc_b["fitted_on"].pop("partitions")
    assert doc_a == doc_b
    assert (out_a / "spark_model").is_dir() and (out_a / "_SUCCESS").exists()


def test_same_raw_value_gets_the_same_feature_whichever_day_it_arrived(spark, tmp_path):
    # Day 1 and day 3 hold x = 190 among different neighbours: one window, one scaling.
    d1 = [("d1-a", 0, 190.0, "one", ["w"], "train"), ("d1-b", 1, 150.0, "one", ["w"], "train")]
    d3 = [("d3-a", 0, 190.0, "one", ["w"], "train"), ("d3-b", 1, 230.0, "two", ["w"], "train")]
    inputs = [land_day(spark, tmp_path, "2013-01-01", d1), land_day(spark, tmp_path, DAY_3, d3)]
    out = tmp_path / "fit"
    fit_transform.run(spark, inputs, f"file://{out}", fit_params())
    doc = json.loads((out / "transform.json").read_text())
    encoded = transform.apply_transform(spark.read.parquet(*inputs), doc).collect()
    values = {r["id"]: r["num__x"] for r in encoded}
    assert values["d1-a"] == values["d3-a"]
    # A categorical constant on day 1 ("one") stays in the window's vocabulary.
    assert doc["categorical"][0]["vocabulary"] == ["one", "two"]
    assert math.isfinite(values["d3-b"])


def test_run_twice_gives_the_same_transform(spark, tmp_path):
    inputs = [land_day(spark, tmp_path, DAY_3, day_rows(DAY_3, 6, 2, 2))]
    out = tmp_path / "fit"
    fit_transform.run(spark, inputs, f"file://{out}", fit_params())
    first = (out / "transform.json").read_bytes()
    fit_transform.run(spark, inputs, f"file://{out}", fit_params())
    assert (out / "transform.json").read_bytes() == first


def test_a_window_without_train_rows_fails_clearly(spark, tmp_path):
    inputs = [land_day(spark, tmp_path, DAY_3, day_rows(DAY_3, 0, 2, 2))]
    with pytest.raises(FitError, match="no train rows to fit the transform on"):
        fit_transform.run(spark, inputs, f"file://{tmp_path}/fit", fit_params())
    assert not (tmp_path / "fit").exists()
