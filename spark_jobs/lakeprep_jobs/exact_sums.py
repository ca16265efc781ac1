"""Order-independent moments of double columns: the same bits whatever the row order.

Spark's `mean`, `stddev_samp` and `Summarizer` add doubles in the order rows arrive, and
floating-point addition is not associative: the same rows read in another order (a
backfill's parallel runs, a rerun whose upstream files got other names, a retry on
other executors) give a mean that differs in its last bits, and every scaled value
with it. Here the sums are exact, so they cannot depend on the order:

- a finite non-zero double is `m * 2**-s` with an integer `|m| < 2**55` (s from the
  value's binary exponent; both factors are exact: `v * 2**s` only shifts the exponent);
- per (column, s), Spark sums `m` and, split as `m = hi * 2**28 + lo`, the three parts
  of `m**2` (`hi**2`, `hi*lo`, `lo**2`, each below 2**56) as `DECIMAL(38, 0)`, which is
  exact integer arithmetic (it overflows only past 2**70 rows of one exponent);
- the driver adds the per-exponent integers, scaled by their powers of two, as Python
  fractions: the exact sum and sum of squares, rounded once at the end.

So the mean is the correctly rounded mean, and the sample variance is the correctly
rounded `(n * sum(v**2) - sum(v)**2) / (n * (n - 1))`: 0 exactly for a constant
column. One `groupBy` over the columns stacked with `explode`, with map-side partial
aggregation (at most columns x distinct exponents small rows are shuffled): the same
single pass as `df.agg(mean, stddev)`. Zeros, nulls, NaN and infinities are counted,
not summed (a column with an infinity has an infinite mean).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

_HALF = 28  # m = hi * 2**28 + lo: hi < 2**27, lo < 2**28, each product < 2**56


@dataclass(frozen=True)
class Moments:
    """One column's exact statistics over its non-null, non-NaN values."""

    count: int  # values counted (finite and infinite; nulls and NaN are not)
    zeros: int
    positive_infinities: int
    negative_infinities: int
    total: Fraction  # exact sum of the finite values
    squares: Fraction  # exact sum of their squares
    minimum: float | None
    maximum: float | None

    @property
    def mean(self) -> float | None:
        """The correctly rounded mean; +-inf or NaN when infinities were counted."""
        if not self.count:
            return None
        if self.positive_infinities or self.negative_infinities:
            return (
                math.nan
                if self.positive_infinities and self.negative_infinities
                else (math.inf if self.positive_infinities else -math.inf)
            )
        return _to_float(self.total / self.count)

    @property
    def variance(self) -> float | None:
        """The correctly rounded sample variance (n - 1); None below 2 values, NaN with infinities."""
        if self.count < 2:
            return None
        if self.positive_infinities or self.negative_infinities:
            return math.nan
        n = self.count
        return _to_float((n * self.squares - self.total * self.total) / (n * (n - 1)))

    @property
    def stddev(self) -> float | None:
        """`sqrt(variance)`: the sample standard deviation, as `stddev_samp`."""
        v = self.variance
        return None if v is None else (math.nan if math.isnan(v) else math.sqrt(v))

    @property
    def non_zeros(self) -> int:
        return self.count - self.zeros


def _to_float(value: Fraction) -> float:
    """Correctly rounded; beyond the double range, +-inf (squares of values near 1e308)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def exact_moments(df: DataFrame, values: dict[str, Column]) -> dict[str, Moments]:
    """`{name: Moments}` of each expression over `df`'s rows, in one Spark job.

    Each expression is cast to double; nulls and NaN are skipped, as Spark's `mean` skips
    nulls. The result depends only on the multiset of values per name.
    """
    from pyspark.sql import functions as F

    if not values:
        return {}
    names = list(values)
    stacked = df.select(
        F.explode(
            F.array(
                *[
                    F.struct(F.lit(i).alias("k"), values[n].cast("double").alias("v"))
                    for i, n in enumerate(names)
                ]
            )
        ).alias("e")
    ).select(F.col("e.k").alias("k"), F.col("e.v").alias("v"))
    v = F.col("v")
    counted = stacked.where(v.isNotNull() & ~F.isnan(v))
    finite = (F.abs(v) < F.lit(math.inf)) & (v != 0)
    # floor(log2|v|) is the binary exponent E or, log2 being rounded, E +- 1; with
    # s = 53 - floor(log2|v|), |v| * 2**s is an integer in [2**52, 2**55) for all three.
    # 2**s is applied in two factors so that neither overflows (s reaches 1128 for
    # subnormals); a power-of-two product is exact.
    shift = F.lit(53) - F.floor(F.log2(F.abs(v))).cast("int")
    first = F.floor(shift / 2).cast("int")
    mantissa = (v * F.pow(F.lit(2.0), first) * F.pow(F.lit(2.0), shift - first)).cast("long")
    hi = F.shiftright(F.abs(mantissa), _HALF)
    lo = F.abs(mantissa) - F.shiftleft(hi, _HALF)
    kind = (
        F.when(v == 0, F.lit("zero"))
        .when(v == F.lit(math.inf), F.lit("+inf"))
        .when(v == F.lit(-math.inf), F.lit("-inf"))
        .otherwise(F.lit("finite"))
    )
    dec = "decimal(38,0)"
    grouped = (
        counted.select(
            "k",
            kind.alias("kind"),
            F.when(finite, shift).alias("s"),
            F.when(finite, mantissa).alias("m"),
            F.when(finite, hi * hi).alias("hh"),
            F.when(finite, hi * lo).alias("hl"),
            F.when(finite, lo * lo).alias("ll"),
            v,
        )
        .groupBy("k", "kind", "s")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.sum(F.col("m").cast(dec)).alias("m"),
            F.sum(F.col("hh").cast(dec)).alias("hh"),
            F.sum(F.col("hl").cast(dec)).alias("hl"),
            F.sum(F.col("ll").cast(dec)).alias("ll"),
            F.min("v").alias("min"),
            F.max("v").alias("max"),
        )
        .collect()
    )
    acc = {
        i: {
            "count": 0,
            "zeros": 0,
            "+inf": 0,
            "-inf": 0,
            "total": Fraction(0),
            "squares": Fraction(0),
            "min": None,
            "max": None,
        }
        for i in range(len(names))
    }
    for row in grouped:
        a = acc[row["k"]]
        a["count"] += row["n"]
        if row["kind"] == "zero":
            a["zeros"] += row["n"]
        elif row["kind"] in ("+inf", "-inf"):
            a[row["kind"]] += row["n"]
        else:
            s = int(row["s"])
            scale = Fraction(1, 2**s) if s >= 0 else Fraction(2**-s)
            a["total"] += int(row["m"]) * scale
            square = (int(row["hh"]) << (2 * _HALF)) + (int(row["hl"]) << (_HALF + 1)) + int(row["ll"])
            a["squares"] += square * scale * scale
        for bound, pick in (("min", min), ("max", max)):
            if row[bound] is not None:
                a[bound] = row[bound] if a[bound] is None else pick(a[bound], row[bound])
    return {
        name: Moments(
            count=a["count"],
            zeros=a["zeros"],
            positive_infinities=a["+inf"],
            negative_infinities=a["-inf"],
            total=a["total"],
            squares=a["squares"],
            minimum=None if a["min"] is None else float(a["min"]),
            maximum=None if a["max"] is None else float(a["max"]),
        )
        for name, a in ((names[i], acc[i]) for i in range(len(names)))
    }
