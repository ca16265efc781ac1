"""exact_sums: the exact moments, the same bits whatever the order or partitioning."""

from __future__ import annotations

import math
import random
import sys
from fractions import Fraction

import pytest

from lakeprep_jobs.exact_sums import exact_moments


def _values(seed: int, n: int) -> list[float]:
    """Doubles of every magnitude: where a running double sum loses bits."""
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        kind = rnd.random()
        if kind < 0.6:
            out.append(rnd.gauss(27.9, 40.0))
        elif kind < 0.8:
            out.append(rnd.uniform(-1, 1) * 10.0 ** rnd.randint(-300, 300))
        elif kind < 0.9:
            out.append(
                rnd.choice([0.0, -0.0, 1e16, -1e16, 0.1, 2.0**-1074, -(2.0**-1074), sys.float_info.max / 4])
            )
        else:
            out.append(rnd.uniform(0.5, 1.5) * 2.0 ** rnd.randint(-1074, -1020))  # subnormals
    return out


def _expected(values: list[float]) -> tuple[Fraction, Fraction]:
    return sum(map(Fraction, values), Fraction(0)), sum((Fraction(v) ** 2 for v in values), Fraction(0))


def test_the_sums_are_exact_for_every_magnitude(spark):
    values = _values(1, 3000)
    df = spark.createDataFrame([(v,) for v in values], "x double")
    m = exact_moments(df, {"x": df.x})["x"]
    total, squares = _expected(values)
    assert m.total == total and m.squares == squares
    assert m.count == len(values) and m.zeros == sum(1 for v in values if v == 0)
    assert m.mean == float(total / len(values))
    assert (m.minimum, m.maximum) == (min(values), max(values))
    assert m.variance == math.inf  # squares of values near 1e300 are beyond the double range
    small = [v for v in values if abs(v) < 1e150]
    df = spark.createDataFrame([(v,) for v in small], "x double")
    m = exact_moments(df, {"x": df.x})["x"]
    total, squares = _expected(small)
    n = len(small)
    assert m.variance == float((n * squares - total * total) / (n * (n - 1)))


def test_another_order_and_partitioning_gives_the_same_bits_where_spark_mean_may_not(spark):
    from pyspark.sql import functions as F

    rnd = random.Random(7)
    values = [rnd.gauss(27.9, 40.0) * 10.0 ** rnd.randint(-3, 3) for _ in range(4000)]
    shuffled = values[:]
    rnd.shuffle(shuffled)
    a = spark.createDataFrame([(v,) for v in values], "x double").repartition(1)
    b = spark.createDataFrame([(v,) for v in shuffled], "x double").repartition(7)
    ma, mb = (exact_moments(df, {"x": F.col("x")})["x"] for df in (a, b))
    assert ma == mb
    assert (ma.mean, ma.stddev) == (mb.mean, mb.stddev)
    # What is replaced: a running sum (Python's here, as Spark's) differs with the order.
    assert sum(values) != sum(shuffled)
    assert ma.total == sum(map(Fraction, values), Fraction(0))
    spark_mean = a.agg(F.mean("x")).first()[0]
    assert spark_mean == pytest.approx(ma.mean, rel=1e-12)


def test_a_constant_column_has_variance_zero_exactly(spark):
    df = spark.createDataFrame([(0.1,)] * 999, "x double")
    m = exact_moments(df, {"x": df.x})["x"]
    assert m.variance == 0.0 and m.stddev == 0.0 and m.mean == 0.1


def test_nulls_nan_and_infinities_are_counted_not_summed(spark):
    from pyspark.sql import functions as F

    df = spark.createDataFrame(
        [(1.0, 1.0), (None, 2.0), (float("nan"), 3.0), (3.0, float("inf")), (0.0, -1.0)], "a double, b double"
    )
    got = exact_moments(df, {"a": F.col("a"), "b": F.col("b"), "sum": F.col("a") + F.col("b")})
    a, b, s = got["a"], got["b"], got["sum"]
    assert (a.count, a.zeros, a.mean, a.non_zeros) == (3, 1, 4 / 3, 2)
    assert a.stddev == pytest.approx(math.sqrt(7 / 3), rel=1e-15)
    assert (b.count, b.positive_infinities, b.mean, b.maximum) == (5, 1, math.inf, math.inf)
    assert math.isnan(b.variance)
    assert s.count == 3 and s.mean == math.inf  # 1+1, 3+inf, 0-1; nulls and NaN out


def test_no_values(spark):
    df = spark.createDataFrame([(None,)], "x double")
    m = exact_moments(df, {"x": df.x, "y": df.x * 2})
    assert m["x"].count == 0 and m["x"].mean is None and m["x"].variance is None
    assert exact_moments(df, {}) == {}


def test_a_group_too_large_for_exact_long_sums_fails_loudly(spark, monkeypatch):
    """The limbs' LONG sums are exact below MAX_GROUP_ROWS values of one exponent; past it the
    driver refuses rather than returning a wrapped sum."""
    from lakeprep_jobs import exact_sums

    monkeypatch.setattr(exact_sums, "MAX_GROUP_ROWS", 3)
    df = spark.createDataFrame([(1.5,), (1.25,), (1.75,)], "x double")  # one exponent, three values
    with pytest.raises(OverflowError, match="'x'.*one binary exponent"):
        exact_moments(df, {"x": df["x"]})
    assert exact_moments(df.limit(2), {"x": df["x"]})["x"].count == 2


@pytest.mark.parametrize("fill", [2.5, 0.0, -1e300, 1 / 3])
def test_filled_moments_are_the_moments_of_the_filled_column(spark, fill):
    """fit_transform scales the imputed column from the raw one's moments, with no pass."""
    from pyspark.sql import functions as F

    values = [1.0, None, float("nan"), 3.0, 0.0, None, 1e-300, -7.25, 1e15]
    df = spark.createDataFrame([(v,) for v in values], "x double")
    x = F.nanvl(F.col("x"), F.lit(None).cast("double"))
    got = exact_moments(df, {"x": x})["x"].filled(len(values), fill)
    want = exact_moments(df, {"x": F.coalesce(x, F.lit(fill))})["x"]
    assert got == want
    assert (got.mean, got.variance) == (want.mean, want.variance)  # the same bits


def test_filling_needs_enough_rows_and_a_finite_fill(spark):
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(1.0,), (None,)], "x double")
    m = exact_moments(df, {"x": F.col("x")})["x"]
    assert m.filled(1, 5.0) is m  # nothing missing
    with pytest.raises(ValueError, match="fewer than the 1 values"):
        m.filled(0, 5.0)
    with pytest.raises(ValueError, match="must be finite"):
        m.filled(2, math.inf)
