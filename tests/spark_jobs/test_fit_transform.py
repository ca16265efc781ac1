"""fit_transform: fitted once, on the window's train split only; transform.json as the contract."""

from __future__ import annotations

import json
import math
import random
import statistics

import pytest

from lakeprep_contracts import encode
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


def encoded_in_process(df, doc) -> dict:
    """The one encoder called in this process on the rows Spark holds (collected as Arrow)."""
    table = df.toArrow()
    return encode.encode({name: table.column(name) for name in table.column_names}, doc)


def assert_spark_applies_the_one_encoder(df, doc) -> None:
    """Spark's apply (mapInArrow on the executors) gives exactly what `encode` gives here."""
    ordered = df.orderBy("id")
    out = transform.apply_transform(ordered, doc).orderBy("id").toArrow()
    expected = encoded_in_process(ordered, doc)
    assert out.column_names[: len(["id"])] == ["id"]
    for name, values in expected.items():
        got = out.column(name).to_pylist()
        assert got == values.tolist(), name  # bit for bit: float32 values compared as Python floats


def test_spark_applies_the_transform_with_the_one_encoder(spark):
    rows = day_rows(DAY_3, 6, 2, 2)
    doc = fitted(spark, rows)
    assert_spark_applies_the_one_encoder(frame(spark, rows), doc)


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
    # The defaults: the variance threshold runs (nothing is constant), no selector, no PCA.
    assert report["selected"] == {"numeric": ["num__x"], "categorical": ["cat__c"]}
    assert report["pca"] is None and report["warnings"] == [] and report["dropped"] == []

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
    assert (out_a / "_SUCCESS").exists() and not (out_a / "spark_model").exists()


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


def test_a_small_fit_runs_few_spark_jobs(spark, tmp_path):
    """Passes over the train split are counted as the status tracker sees them (a job each)."""
    from tests.spark_jobs.job_count import spark_jobs

    inputs = [land_day(spark, tmp_path, DAY_3, day_rows(DAY_3, 6, 3, 3))]
    out = f"file://{tmp_path}/fit"
    report, jobs = spark_jobs(spark, lambda: fit_transform.run(spark, inputs, out, fit_params()))
    assert report["fitted_on_rows"] == 6
    # 13 measured: the split counts, the exact moments, the vocabularies, the Spark model's
    # metadata; 18 while the vocabularies' kept values and rare counts were two passes.
    assert len(jobs) <= 13, f"{len(jobs)} jobs\n" + "\n".join(jobs)


def test_a_window_without_train_rows_fails_clearly(spark, tmp_path):
    inputs = [land_day(spark, tmp_path, DAY_3, day_rows(DAY_3, 0, 2, 2))]
    with pytest.raises(FitError, match="no train rows to fit the transform on"):
        fit_transform.run(spark, inputs, f"file://{tmp_path}/fit", fit_params())
    assert not (tmp_path / "fit").exists()


# ------------------------------------------------------------------ selection and PCA

WIDE = (
    "id string, label int, good double, noise double, flat double, a double, b double, z double, "
    "sparse double, c string, d string, t array<string>, split string"
)


def wide_rows(n: int = 200) -> list[tuple]:
    """Rows whose right answers are known by construction.

    Rows come in pairs (label 0, label 1) that share `noise`, `a`, `b`, `z`, `sparse` and `d`,
    so those have the same distribution in both classes (ANOVA F and chi-squared exactly 0);
    `good` moves 3 standard deviations with the label and `c` follows it 9 times in 10;
    `flat` is constant; `b` is almost `2 a`, `z` independent of both.
    """
    rng = random.Random(7)
    rows = []
    for i in range(0, n, 2):
        noise, a, z = rng.gauss(0, 1), rng.gauss(0, 1), rng.gauss(0, 1)
        b = 2 * a + 0.05 * rng.gauss(0, 1)
        sparse = rng.uniform(1, 2) if i % 10 == 0 else 0.0
        d = "xy"[(i // 2) % 2]
        for label in (0, 1):
            good = 3.0 * label + rng.gauss(0, 1)
            c = "ab"[label] if rng.random() < 0.9 else "ab"[1 - label]
            rows.append((f"r{i + label}", label, good, noise, 5.0, a, b, z, sparse, c, d, ["w"], "train"))
    return rows


def num(name: str, scaling: str = "standard") -> dict:
    return {"name": name, "scaling": scaling, "impute": "mean", "clip_quantiles": None}


def cat(name: str) -> dict:
    return {"name": name, "encoding": "vocab", "min_frequency": 1, "max_vocab": 100, "buckets": 64}


def fitted_wide(spark, numerics, categoricals=(), **kw):
    train = spark.createDataFrame(wide_rows(), WIDE)
    params = fit_params(
        numeric=[n if isinstance(n, dict) else num(n) for n in numerics],
        categorical=[cat(c) for c in categoricals],
        **kw,
    )
    doc, notes = fit_transform.fit(train, params, rows=train.count(), partitions=["p"])
    fit_transform.check_document(doc, "test")
    return train, doc, notes


def scores(doc, step):
    return {s["name"]: s for s in doc["selection"][step]["scores"]}


def test_selection_keeps_the_informative_and_drops_noise_and_constants(spark):
    train, doc, notes = fitted_wide(spark, ["good", "noise", "flat"], ["c", "d"], selector_mode="fpr")
    assert [e["output"] for e in doc["numeric"]] == ["num__good"]
    assert [e["output"] for e in doc["categorical"]] == ["cat__c"]
    assert [e["output"] for e in doc["text"]] == ["txt__t"]  # text is never tested
    dropped = {d["name"]: d["reason"] for d in doc["dropped"]}
    assert dropped["flat"] == "variance 0 <= min_variance 1e-06 (constant on the window's train split)"
    assert dropped["noise"].startswith("ANOVA F p-value 1 is not below fpr 0.05")
    assert dropped["d"].startswith("chi-squared p-value 1 is not below fpr 0.05")
    assert notes["constant_numerics"] == ["flat"]
    variance = scores(doc, "variance_threshold")
    assert variance["good"]["statistic"] == pytest.approx(1.0) and variance["good"]["kept"]
    assert variance["flat"] == {
        "name": "flat",
        "output": "num__flat",
        "test": "variance",
        "statistic": 0.0,
        "p_value": None,
        "degrees_of_freedom": None,
        "kept": False,
        "reason": dropped["flat"],
    }
    univariate = scores(doc, "univariate")
    assert set(univariate) == {"good", "noise", "c", "d"}  # the constant never reaches the test
    assert univariate["good"]["test"] == "anova_f" and univariate["good"]["p_value"] < 1e-12
    assert univariate["good"]["statistic"] > 100 and univariate["good"]["kept"]
    assert univariate["noise"]["p_value"] > 0.99 and not univariate["noise"]["kept"]
    assert univariate["c"]["test"] == "chi_squared" and univariate["c"]["degrees_of_freedom"] == 1
    assert univariate["c"]["p_value"] < 1e-12 and univariate["d"]["statistic"] == 0.0
    assert doc["selection"]["univariate"]["threshold"] == 0.05  # Spark's default for fpr
    encoded = transform.apply_transform(train, doc)
    assert encoded.columns == ["id", "label", "split", "num__good", "cat__c", "txt__t"]


def test_num_top_features_against_a_continuous_label_uses_f_regression(spark):
    _, doc, _ = fitted_wide(
        spark,
        ["noise", "good", "z"],
        ["d"],
        selector_mode="numTopFeatures",
        selector_threshold=1,
        selector_label_type="continuous",
    )
    univariate = scores(doc, "univariate")
    assert {s["test"] for s in univariate.values()} == {"f_regression", None}
    assert [e["output"] for e in doc["numeric"]] == ["num__good"]
    # Spark has no test of a categorical feature against a continuous label: kept, untested.
    assert univariate["d"]["kept"] and univariate["d"]["p_value"] is None
    assert univariate["d"]["reason"].startswith("not tested")
    assert "is not among the 1 lowest of 3 (numTopFeatures)" in univariate["z"]["reason"]


def test_a_selector_that_keeps_nothing_fails_listing_the_scores(spark):
    with pytest.raises(FitError) as err:
        fitted_wide(spark, ["noise", "z"], ["d"], text=[], selector_mode="fwe")
    message = str(err.value)
    assert "selector_mode fwe with threshold 0.05 keeps none of the 3 features it tested" in message
    assert "noise (ANOVA F statistic" in message and "d (chi-squared statistic 0.0, p-value 1.0)" in message


def test_pca_variance_keeps_the_fewest_components_reaching_the_share(spark):
    train, doc, notes = fitted_wide(spark, ["a", "b", "z"], pca_variance=0.95)
    pca = doc["pca"]
    # a and b are one direction (2 of the 3 unit variances), z the other: k = 2.
    assert pca["k"] == 2 and pca["outputs"] == ["num__pc1", "num__pc2"]
    assert [e["output"] for e in doc["numeric"]] == ["num__pc1", "num__pc2"]
    assert doc["numeric"][1] == {"name": "pc2", "output": "num__pc2", "pca_component": 2}
    assert [e["name"] for e in pca["inputs"]] == ["a", "b", "z"]
    first, second = pca["explained_variance"]
    assert first < 0.95 <= first + second and first == pytest.approx(2 / 3, abs=0.03)
    assert notes["warnings"] == []
    # What the recorded numbers claim, measured on the transform's own output: each
    # component's share of the inputs' total train variance (3 unit variances), mean 0,
    # the components uncorrelated; within float32's rounding, the type the features are
    # encoded in (each value within a relative 6e-8 of its double).
    rows = transform.apply_transform(train, doc).collect()
    pcs = [[r["num__pc1"] for r in rows], [r["num__pc2"] for r in rows]]
    for values, share in zip(pcs, pca["explained_variance"], strict=True):
        assert statistics.fmean(values) == pytest.approx(0.0, abs=1e-6)
        assert statistics.variance(values) / 3 == pytest.approx(share, rel=1e-6)
    assert statistics.correlation(*pcs) == pytest.approx(0.0, abs=1e-6)
    # The manifest lists the components as the numeric features (export_shards reads the document).
    from lakeprep_jobs.export_shards import feature_schema

    assert [f["name"] for f in feature_schema(doc) if f["role"] == "numeric"] == ["num__pc1", "num__pc2"]


def test_pca_with_every_component_explains_all_variance(spark):
    _, doc, _ = fitted_wide(spark, ["a", "b", "z"], pca_components=3)
    assert doc["pca"]["k"] == 3 and doc["pca"]["variance_target"] is None
    assert sum(doc["pca"]["explained_variance"]) == pytest.approx(1.0, abs=1e-12)
    assert doc["pca"]["explained_variance"] == sorted(doc["pca"]["explained_variance"], reverse=True)


def test_pca_centres_explicitly_and_warns_when_that_densifies_a_sparse_input(spark):
    # minmax keeps `sparse` at 0 on 80% of the rows and leaves every mean above 0: Spark's
    # PCAModel.transform would not centre; the document's mean is subtracted in both paths.
    train, doc, notes = fitted_wide(spark, [num("a", "minmax"), num("sparse", "minmax")], pca_components=1)
    assert all(m > 0.05 for m in doc["pca"]["mean"])
    (warning,) = notes["warnings"]
    assert "num__sparse (80% zeros" in warning and "makes every projected row dense" in warning
    values = [r["num__pc1"] for r in transform.apply_transform(train, doc).collect()]
    assert statistics.fmean(values) == pytest.approx(0.0, abs=1e-6)  # float32 features


def test_pca_components_beyond_the_numerics_left_fail_naming_them(spark):
    with pytest.raises(
        FitError, match=r"pca_components 2 is more than the 1 numerics left after selection \['a'\]"
    ):
        fitted_wide(spark, ["a", "flat"], pca_components=2)


def test_pca_without_numerics_left_fails(spark):
    with pytest.raises(FitError, match="PCA has no numeric inputs.*flat: variance 0"):
        fitted_wide(spark, ["flat"], pca_variance=0.9)


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"pca_components": 2, "pca_variance": 0.9}, "pca_components 2 and pca_variance 0.9 are exclusive"),
        (
            {"pca_components": 3},
            r"pca_components 3 must be in \[1, 1\]: there are 1 numeric features \['x'\]",
        ),
        ({"pca_variance": 1.5}, r"pca_variance 1.5 must be in \(0, 1\]"),
        ({"selector_mode": "kbest"}, "selector_mode 'kbest' must be one of"),
        ({"selector_mode": "numTopFeatures", "selector_threshold": 2.5}, "must be a whole number >= 1"),
        (
            {"selector_mode": "fdr", "selector_threshold": 5},
            r"selector_threshold 5 must be in \[0, 1\] for fdr",
        ),
        ({"selector_label_type": "ordinal"}, "selector_label_type 'ordinal' must be one of"),
    ],
)
def test_selection_and_pca_knobs_are_checked_before_spark_starts(knobs, message):
    with pytest.raises(ValueError, match=message):
        fit_params(**knobs)


def test_pca_beyond_the_per_day_cross_products_limit_is_refused_before_spark_starts():
    columns = [num(f"x{i}") for i in range(fit_transform.PCA_MAX_COLUMNS + 1)]
    with pytest.raises(ValueError, match="PCA over 65 numerics: .* more than 64 inputs are refused"):
        fit_params(numeric=columns, pca_components=2)
    fit_transform.check_pca_size(fit_transform.PCA_MAX_COLUMNS)  # the limit itself is allowed


def test_spark_applies_selection_and_pca_with_the_one_encoder(spark):
    train, doc, _ = fitted_wide(spark, ["good", "flat", "a", "b", "z"], ["c", "d"], pca_variance=0.9)
    assert doc["pca"] and [d["name"] for d in doc["dropped"]] == ["flat"]
    expected = transform.apply_transform(train, doc)
    assert "num__pc1" in expected.columns and "num__good" not in expected.columns
    assert_spark_applies_the_one_encoder(train, doc)
