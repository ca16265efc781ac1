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
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from lakeprep_contracts.moments import EMPTY, Moments

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

_HALF = 28  # m = hi * 2**28 + lo: hi < 2**27, lo < 2**28, each product < 2**56
_LIMB = (1 << _HALF) - 1
# Rows of one (column, exponent) below which a LONG sum of limbs (< 2**28 each) cannot overflow.
MAX_GROUP_ROWS = 1 << 35
_SQUARE_PARTS = ("hh", "hl", "ll")  # hi*hi, hi*lo, lo*lo of |m|


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
    if not values:
        return {}
    grouped = exact_moments_by(df, values, ())
    return grouped.get((), {name: EMPTY for name in values})


def exact_moments_by(
    df: DataFrame, values: dict[str, Column], by: Sequence[str]
) -> dict[tuple, dict[str, Moments]]:
    """`{(group values...): {name: Moments}}`: `exact_moments` per group of the `by`
    columns, still one Spark job (the groups join the key of the one `groupBy`). A group
    appears when one of its rows has a value; a name with no value there has empty moments."""
    from pyspark.sql import functions as F

    if not values:
        return {}
    names = list(values)
    by = list(by)
    stacked = df.select(
        *by,
        F.explode(
            F.array(
                *[
                    F.struct(F.lit(i).alias("k"), values[n].cast("double").alias("v"))
                    for i, n in enumerate(names)
                ]
            )
        ).alias("e"),
    ).select(*by, F.col("e.k").alias("k"), F.col("e.v").alias("v"))
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
    keep = (*by, "k", "kind", "s", "v")
    shifted = counted.select(
        *by,
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
        limbed.groupBy(*by, "k", "kind", "s")
        .agg(
            F.count(F.lit(1)).alias("n"),
            *[F.sum(name).alias(name) for name in limb_names],
            F.min("v").alias("min"),
            F.max("v").alias("max"),
        )
        .collect()
    )
    acc: dict[tuple, dict[int, dict[str, Any]]] = {}
    for row in grouped:
        group = tuple(row[c] for c in by)
        a = acc.setdefault(group, {}).setdefault(row["k"], _empty_sums())
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
        group: {names[i]: _moments(sums.get(i, _empty_sums())) for i in range(len(names))}
        for group, sums in acc.items()
    }


def _empty_sums() -> dict[str, Any]:
    return {
        "count": 0,
        "zeros": 0,
        "+inf": 0,
        "-inf": 0,
        "total": Fraction(0),
        "squares": Fraction(0),
        "min": None,
        "max": None,
    }


def _moments(a: dict[str, Any]) -> Moments:
    return Moments(
        count=a["count"],
        zeros=a["zeros"],
        positive_infinities=a["+inf"],
        negative_infinities=a["-inf"],
        total=a["total"],
        squares=a["squares"],
        minimum=None if a["min"] is None else float(a["min"]),
        maximum=None if a["max"] is None else float(a["max"]),
    )
