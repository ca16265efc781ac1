"""Order-independent moments of double columns: the same bits whatever the row order.

Spark's `mean`, `stddev_samp` and `Summarizer` add doubles in the order rows arrive, and
floating-point addition is not associative: the same rows read in another order (a
backfill's parallel runs, a rerun whose upstream files got other names, a retry on
other executors) give a mean that differs in its last bits, and every scaled value
with it. Here the sums are exact, so they cannot depend on the order:

- a finite non-zero double is `m * 2**-s` with an integer `|m| < 2**55` (s from the
  value's binary exponent; both factors are exact: `v * 2**s` only shifts the exponent);
- per (column, s), Spark sums integers below 2**28 as LONG, which is exact: `m` as
  `m = mh * 2**28 + ml` (`ml` in [0, 2**28)), and the three parts of `m**2` with
  `|m| = hi * 2**28 + lo` (`hi**2`, `hi*lo`, `lo**2`, each below 2**56) each split the
  same way into two limbs below 2**28. A sum of n such limbs stays below 2**63 while
  n < 2**35 rows of one exponent, which the driver checks (a group that large fails
  loudly instead of wrapping). LONG sums are primitive additions in generated code;
  `DECIMAL(38, 0)` sums, which the first version used, allocate a BigDecimal per row and
  made `fit_transform` at 4 M rows several times slower than the rest of the stage;
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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

_HALF = 28  # m = hi * 2**28 + lo: hi < 2**27, lo < 2**28, each product < 2**56
_LIMB = (1 << _HALF) - 1
# Rows of one (column, exponent) below which a LONG sum of limbs (< 2**28 each) cannot overflow.
MAX_GROUP_ROWS = 1 << 35
_SQUARE_PARTS = ("hh", "hl", "ll")  # hi*hi, hi*lo, lo*lo of |m|


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

    def filled(self, rows: int, fill: float) -> Moments:
        """The moments of the same column over `rows` rows with each missing value (null or
        NaN: `rows - count` of them) replaced by the finite `fill`, exactly as
        `exact_moments` would find them over `coalesce(value, fill)`, with no pass over the
        data: the sums are exact, so adding the fills to them is too."""
        if rows < self.count:
            raise ValueError(f"filled: {rows} rows, fewer than the {self.count} values counted")
        if not math.isfinite(fill):
            raise ValueError(f"filled: the fill {fill!r} must be finite")
        missing, exact = rows - self.count, Fraction(fill)
        if not missing:
            return self
        return Moments(
            count=rows,
            zeros=self.zeros + (missing if fill == 0 else 0),
            positive_infinities=self.positive_infinities,
            negative_infinities=self.negative_infinities,
            total=self.total + missing * exact,
            squares=self.squares + missing * exact * exact,
            minimum=fill if self.minimum is None else min(self.minimum, fill),
            maximum=fill if self.maximum is None else max(self.maximum, fill),
        )


def _to_float(value: Fraction) -> float:
    """Correctly rounded; beyond the double range, +-inf (squares of values near 1e308)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _limbs(name: str, x: Column) -> list[Column]:
    """`x = high * 2**28 + low` with `low` in [0, 2**28) (an arithmetic shift floors)."""
    from pyspark.sql import functions as F

    return [F.shiftright(x, _HALF).alias(f"{name}_h"), x.bitwiseAND(F.lit(_LIMB)).alias(f"{name}_l")]


def _joined(row: Any, name: str) -> int:
    """The exact integer sum from its two LONG limb sums: high * 2**28 + low."""
    return (int(row[f"{name}_h"]) << _HALF) + int(row[f"{name}_l"])


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
    kind = (
        F.when(v == 0, F.lit("zero"))
        .when(v == F.lit(math.inf), F.lit("+inf"))
        .when(v == F.lit(-math.inf), F.lit("-inf"))
        .otherwise(F.lit("finite"))
    )
    # One projection per step, each value computed once and then referenced by name (Spark
    # does not merge a projection into the next when that would compute an expensive
    # expression twice). Rows that are not finite get a null exponent, so every later
    # column is null for them and the sums skip them.
    # floor(log2|v|) is the binary exponent E or, log2 being rounded, E +- 1; with
    # s = 53 - floor(log2|v|), |v| * 2**s is an integer in [2**52, 2**55) for all three.
    # 2**s is applied in two factors so that neither overflows (s reaches 1128 for
    # subnormals); a power-of-two product is exact.
    keep = ("k", "kind", "s", "v")
    shifted = counted.select(
        "k",
        kind.alias("kind"),
        F.when(finite, F.lit(53) - F.floor(F.log2(F.abs(v))).cast("int")).alias("s"),
        v,
    )
    shift = F.col("s")
    first = F.floor(shift / 2).cast("int")
    with_m = shifted.select(
        *keep, (v * F.pow(F.lit(2.0), first) * F.pow(F.lit(2.0), shift - first)).cast("long").alias("m")
    )
    m = F.col("m")
    split = with_m.select(
        *keep,
        *_limbs("m", m),
        F.shiftright(F.abs(m), _HALF).alias("hi"),
        F.abs(m).bitwiseAND(F.lit(_LIMB)).alias("lo"),
    )
    hi, lo = F.col("hi"), F.col("lo")
    m_limbs = ("m_h", "m_l")
    squared = split.select(
        *keep, *m_limbs, (hi * hi).alias("hh"), (hi * lo).alias("hl"), (lo * lo).alias("ll")
    )
    limbed = squared.select(
        *keep, *m_limbs, *[c for name in _SQUARE_PARTS for c in _limbs(name, F.col(name))]
    )
    limb_names = [f"{name}_{half}" for name in ("m", *_SQUARE_PARTS) for half in ("h", "l")]
    grouped = (
        limbed.groupBy("k", "kind", "s")
        .agg(
            F.count(F.lit(1)).alias("n"),
            *[F.sum(name).alias(name) for name in limb_names],
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
            if row["n"] >= MAX_GROUP_ROWS:
                raise OverflowError(
                    f"exact_moments: {row['n']} values of {names[row['k']]!r} share one binary exponent; "
                    f"the LONG sums of their limbs are exact below {MAX_GROUP_ROWS} per exponent"
                )
            s = int(row["s"])
            scale = Fraction(1, 2**s) if s >= 0 else Fraction(2**-s)
            a["total"] += _joined(row, "m") * scale
            square = (
                (_joined(row, "hh") << (2 * _HALF)) + (_joined(row, "hl") << (_HALF + 1)) + _joined(row, "ll")
            )
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
