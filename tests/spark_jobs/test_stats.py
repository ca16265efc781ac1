from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest

from lakeprep_contracts import documents
from lakeprep_jobs import stats


def test_numeric_statistics_leave_non_finite_values_out_of_the_moments(spark):
    df = spark.createDataFrame(
        [(1.0,), (2.0,), (float("nan"),), (None,), (4.0,), (float("inf"),), (3.0,)], "x double"
    )
    col = stats.partition_stats(df, {"x": "numeric"})["columns"]["x"]
    assert {k: col[k] for k in ("count", "nulls", "nan", "min", "max", "mean")} == {
        "count": 6,  # NaN and infinity are values, counted again in `nan`
        "nulls": 1,
        "nan": 2,
        "min": 1.0,
        "max": 4.0,
        "mean": 2.5,
    }
    assert col["stddev"] == pytest.approx(math.sqrt(5 / 3))
    assert col["quantiles"]["probabilities"] == list(stats.PROBABILITIES)
    values = col["quantiles"]["values"]
    assert (values[0], values[7], values[-1]) == (1.0, 2.0, 4.0)
    assert 3 <= col["distinct_estimate"] <= 7


def test_integers_are_numeric_too_and_a_single_value_has_no_stddev(spark):
    col = stats.partition_stats(spark.createDataFrame([(5,)], "n int"), {"n": "numeric"})["columns"]["n"]
    assert (col["min"], col["max"], col["mean"], col["stddev"]) == (5.0, 5.0, 5.0, None)


def test_categorical_top_values_break_ties_by_value_and_count_the_rest(spark):
    values = ["UA"] * 4 + ["AA"] * 2 + ["B6"] * 2 + ["DL"] + [None]
    df = spark.createDataFrame([(v,) for v in values], "carrier string")
    col = stats.partition_stats(df, {"carrier": "categorical"}, top_k=2)["columns"]["carrier"]
    assert col == {
        "kind": "categorical",
        "count": 9,
        "nulls": 1,
        "distinct_estimate": 4,
        "top": [{"value": "UA", "count": 4}, {"value": "AA", "count": 2}],
        "top_k": 2,
        "other_count": 3,
    }


def test_text_tokens_are_the_ones_regex_tokenizer_makes(spark):
    from pyspark.ml.feature import RegexTokenizer

    texts = ["Boeing 737-800, Boeing", "ÉCOLE d'été 2013", None, "", "  --  "]
    df = spark.createDataFrame([(t,) for t in texts], "t string")
    col = stats.partition_stats(df, {"t": "text"}, top_k=3)["columns"]["t"]

    ml = RegexTokenizer(inputCol="t", outputCol="tokens", pattern=r"[^\p{L}\p{N}]+", gaps=True)
    expected = [r["tokens"] for r in ml.transform(df.na.drop()).collect()]
    mine = [r[0] for r in df.na.drop().select(stats.tokens(df["t"])).collect()]
    assert mine == expected
    assert mine[:2] == [["boeing", "737", "800", "boeing"], ["école", "d", "été", "2013"]]
    assert col["tokens"] == {"total": 8, "mean_per_row": 2.0, "max_per_row": 4}
    assert col["length"] == {"min": 0, "max": 22, "mean": (22 + 16 + 0 + 6) / 4}
    assert col["top"] == [
        {"value": "boeing", "count": 2},
        {"value": "2013", "count": 1},
        {"value": "737", "count": 1},
    ]
    assert (col["count"], col["nulls"], col["distinct_estimate"], col["other_count"]) == (4, 1, 7, 4)


def test_an_empty_partition_has_statistics_without_values(spark):
    df = spark.createDataFrame([], "x double, c string, t string")
    doc = stats.stats_document(
        "file:/lake/validate/d/dt=2013-01-01",
        stats.partition_stats(df, {"x": "numeric", "c": "categorical", "t": "text"}),
    )
    assert doc["rows"] == 0
    assert doc["columns"]["x"]["quantiles"]["values"] == [None] * len(stats.PROBABILITIES)
    assert doc["columns"]["c"]["top"] == []
    assert doc["columns"]["t"]["tokens"] == {"total": 0, "mean_per_row": None, "max_per_row": None}
    json.loads(stats.to_json(doc))


def test_the_document_matches_the_shared_schema_and_json_stays_strict(spark):
    df = spark.createDataFrame(
        [(1.5, "a", "x y"), (float("nan"), None, None)], "x double, c string, t string"
    )
    doc = stats.stats_document(
        "file:/p", stats.partition_stats(df, {"x": "numeric", "c": "categorical", "t": "text"})
    )
    assert list(doc) == ["format_version", "partition", "rows", "columns"]
    assert documents.problems("stats", doc) == []
    assert "NaN" not in stats.to_json(doc)
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        stats.to_json({"mean": float("nan")})


def test_every_column_is_profiled_in_two_passes_over_the_data(spark):
    """One scalar aggregate and one grouping of (column, value) pairs, whatever the width."""
    rows = [(1.0, 2, "a", "b", "c d"), (2.0, 3, "a", None, "e")]
    reads = spark.sparkContext.accumulator(0)

    def counted(row):
        reads.add(1)
        return row

    df = spark.createDataFrame(
        spark.sparkContext.parallelize(rows, 1).map(counted), "x double, y int, c string, k string, t string"
    )
    stats.partition_stats(
        df, {"x": "numeric", "y": "numeric", "c": "categorical", "k": "categorical", "t": "text"}
    )
    assert reads.value == 2 * len(rows)


def test_unknown_kinds_and_columns_are_refused(spark):
    df = spark.createDataFrame([(1,)], "x int")
    with pytest.raises(ValueError, match="statistics asked for column"):
        stats.partition_stats(df, {"y": "numeric"})
    with pytest.raises(ValueError, match="kind 'ordinal'"):
        stats.partition_stats(df, {"x": "ordinal"})
    with pytest.raises(ValueError, match="weighted by 'n', which is not a column"):
        stats.partition_stats(df, {"x": "numeric"}, weight="n")


KINDS = {"x": "numeric", "y": "numeric", "c": "categorical", "t": "text"}


def _weighted_rows(seed: int) -> list[tuple]:
    """Rows with repeated, null, NaN and infinite values, each with a weight of 1 to 40."""
    import random

    rng = random.Random(seed)
    specials = [None, float("nan"), float("inf"), float("-inf")]
    rows = []
    for _ in range(40):
        x = rng.choice([*specials, *[float(rng.randint(-5, 30)) / 4 for _ in range(12)]])
        y = rng.choice([None, 1e9 + rng.randint(0, 3), 1e9])  # large, close together: a stable spread
        c = rng.choice([None, "AA", "UA", "B6", " DL"])
        t = rng.choice([None, "", "Boeing 737", "AIRBUS a320 neo", "boeing"])
        rows.append((x, y, c, t, rng.randint(1, 40)))
    return rows


@pytest.mark.parametrize("seed", [1, 2])
def test_weighted_rows_give_the_statistics_of_the_rows_they_stand_for(spark, seed):
    rows = _weighted_rows(seed)
    schema = "x double, y double, c string, t string, w long"
    weighted = spark.createDataFrame(rows, schema)
    expanded = spark.createDataFrame([row for row in rows for _ in range(row[-1])], schema)
    assert expanded.count() < stats.QUANTILE_ACCURACY  # percentile_approx still exact

    mine = stats.partition_stats(weighted, KINDS, top_k=3, weight="w")
    want = stats.partition_stats(expanded, KINDS, top_k=3)
    assert mine["rows"] == want["rows"] == sum(r[-1] for r in rows)
    for j, name in enumerate(KINDS):
        got, exp = dict(mine["columns"][name]), dict(want["columns"][name])
        if exp["kind"] == "numeric":
            # The moments against the exact ones: Spark's stddev_samp of the expanded rows is
            # off by about 1e-8 for `y` (values near 1e9), the weighted pass is not.
            finite = [(Fraction(r[j]), r[-1]) for r in rows if r[j] is not None and math.isfinite(r[j])]
            n = sum(w for _, w in finite)
            mean = sum(v * w for v, w in finite) / n
            var = sum(w * (v - mean) ** 2 for v, w in finite) / (n - 1)
            assert got.pop("mean") == pytest.approx(float(mean), rel=1e-15), name
            assert got.pop("stddev") == pytest.approx(math.sqrt(var), rel=1e-12), name
            assert exp.pop("mean") == pytest.approx(float(mean), rel=1e-9)
            assert exp.pop("stddev") == pytest.approx(math.sqrt(var), rel=1e-6)
        if "length" in exp:
            assert got["length"].pop("mean") == pytest.approx(exp["length"].pop("mean"), rel=1e-12)
        assert got == exp, name


def test_stacked_tables_weigh_the_same_rows_and_name_the_partitions_row_count(spark):
    """preprocess's reference tables: each holds its own columns, the others null."""
    left = spark.createDataFrame([(1.0, 3), (None, 2), (4.0, 1)], "x double, w long")
    right = spark.createDataFrame([("a", 5), (None, 1)], "c string, w long")
    stacked = left.unionByName(right, allowMissingColumns=True)
    doc = stats.partition_stats(stacked, {"x": "numeric", "c": "categorical"}, weight="w", rows=6)
    assert doc["rows"] == 6
    x, c = doc["columns"]["x"], doc["columns"]["c"]
    assert (x["count"], x["nulls"], x["min"], x["max"], x["mean"]) == (4, 2, 1.0, 4.0, 7.0 / 4)
    assert x["stddev"] == pytest.approx(math.sqrt((3 * 0.75**2 + 2.25**2) / 3))
    assert x["quantiles"]["values"][7] == 1.0 and x["quantiles"]["values"][-1] == 4.0  # rank 2 of 4; the max
    assert (c["count"], c["nulls"], c["top"]) == (5, 1, [{"value": "a", "count": 5}])
