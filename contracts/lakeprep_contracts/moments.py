"""One column's exact moments, and their merge: the same bits whatever the row order.

`lakeprep_jobs.exact_sums` computes them over a DataFrame in one Spark job (the sums as
exact fractions); the per-day fit statistics record them, and the window's fit adds the
days' moments together (`merged`): exact sums add exactly, so the merged moments of a
window's days are those of the union of their rows, bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any


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
        return to_float(self.total / self.count)

    @property
    def variance(self) -> float | None:
        """The correctly rounded sample variance (n - 1); None below 2 values, NaN with infinities."""
        if self.count < 2:
            return None
        if self.positive_infinities or self.negative_infinities:
            return math.nan
        n = self.count
        return to_float((n * self.squares - self.total * self.total) / (n * (n - 1)))

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

    def merged(self, other: Moments) -> Moments:
        """The moments of both multisets of values together (exact)."""
        return Moments(
            count=self.count + other.count,
            zeros=self.zeros + other.zeros,
            positive_infinities=self.positive_infinities + other.positive_infinities,
            negative_infinities=self.negative_infinities + other.negative_infinities,
            total=self.total + other.total,
            squares=self.squares + other.squares,
            minimum=_pick(min, self.minimum, other.minimum),
            maximum=_pick(max, self.maximum, other.maximum),
        )

    def to_json(self) -> dict[str, Any]:
        """Plain JSON: the exact sums as fraction strings (`"p/q"`), never rounded."""
        return {
            "count": self.count,
            "zeros": self.zeros,
            "positive_infinities": self.positive_infinities,
            "negative_infinities": self.negative_infinities,
            "total": str(self.total),
            "squares": str(self.squares),
            "minimum": self.minimum,
            "maximum": self.maximum,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Moments:
        return cls(
            count=int(raw["count"]),
            zeros=int(raw["zeros"]),
            positive_infinities=int(raw["positive_infinities"]),
            negative_infinities=int(raw["negative_infinities"]),
            total=Fraction(raw["total"]),
            squares=Fraction(raw["squares"]),
            minimum=None if raw["minimum"] is None else float(raw["minimum"]),
            maximum=None if raw["maximum"] is None else float(raw["maximum"]),
        )


EMPTY = Moments(0, 0, 0, 0, Fraction(0), Fraction(0), None, None)


def _pick(choose: Any, a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else choose(a, b)


def to_float(value: Fraction) -> float:
    """Correctly rounded; beyond the double range, +-inf (squares of values near 1e308)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf
