"""Drift of each feature against the trailing window: pure functions over `_stats.json` docs.

`validate` (and `preprocess`, for reference-table columns) write per-partition statistics
(`lakeprep_contracts/schemas/stats.schema.json`). This module compares the run's day with
the window's earlier days, pooled, without reading any data:

- **numeric** columns: population stability index (PSI). Each day's distribution is
  known only through its quantiles, so its CDF is the linear interpolation between them;
  the reference is the count-weighted mixture of the earlier days' CDFs. Bins are the
  pooled reference's deciles (`bins` equal-probability bins), plus one bin for missing
  values (null or NaN), so a rise in nulls is drift too.
- **categorical** columns and **text** tokens: Jensen-Shannon distance (base 2, in [0, 1])
  over the top values, one "other" bucket and one "null" bucket.

A distance is judged against the noise its rows imply: a permutation null of the day's and
the window's bucket counts (`distance_noise`, seeded from the inputs) gives its median
(`noise`) and the bound chance exceeds with probability `alpha`/2; the threshold is the
larger of that bound and the knob's. Beside it the largest standardized shift (a mean in
standard deviations, a value's share as Cohen's h) is judged against its standard error,
so a change too narrow for the distance at 140 rows is still seen. Days under `min_rows`
and columns marked `drift: ignore` are recorded, not judged.

Every value is recorded, under the threshold or not; `check_drift` raises `DriftError`
when the action is `stop` and a feature drifts. No Spark, no Airflow: the operator
(`lakeprep_airflow.operators.drift`) does the reading and writing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import statistics
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from typing import Any

from lakeprep_contracts import knobs

FORMAT_VERSION = 1
# Floor for an empty bin's share: ln(a / 0) is infinite, and a bin that is empty on one
# side is what drift looks like, so it must weigh a lot but stay finite.
EPSILON = 1e-4
METRICS = {"numeric": "psi", "categorical": "jsd", "text": "jsd"}
# Bootstrap pairs per feature: the 0.995 quantile rests on the ten largest of them.
BOOTSTRAP_DRAWS = 2000
# A bucket's share is tested on its own when the smaller side expects this many rows in it
# (the rule of thumb for a normal approximation of a count).
MIN_EXPECTED_ROWS = 5
# A column's `drift` in the spec: `ignore` records without judging (calendar features).
IGNORE = "ignore"


class DriftError(Exception):
    """Features drift beyond their thresholds and the action is `stop`.

    The message names every drifting feature with what is over its threshold (the
    distance, the shift or both); `report` is the full drift report (it is written
    before this is raised).
    """

    def __init__(self, report: Mapping[str, Any]) -> None:
        self.report = report
        self.features = list(report["drifting"])
        listed = "; ".join(
            reason for n in self.features for reason in drift_reasons(n, report["features"][n])
        )
        super().__init__(
            f"drift in {len(self.features)} feature(s) of {report['partition']} against "
            f"{len(report['reference_partitions'])} earlier day(s): {listed} (action: stop)"
        )


@dataclasses.dataclass(frozen=True)
class DriftParams:
    """The `stages.check_drift` knobs, defaulted and checked by their one declaration
    (`lakeprep_contracts.knobs`, group `check_drift`); an unknown key is refused."""

    psi_threshold: float
    jsd_threshold: float
    action: str
    min_reference_days: int
    bins: int
    alpha: float
    min_effect: float
    min_rows: int

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any] | None) -> DriftParams:
        return cls(**knobs.parse("check_drift", params, what="drift"))

    def threshold(self, kind: str) -> float:
        return self.psi_threshold if METRICS[kind] == "psi" else self.jsd_threshold


# --------------------------------------------------------------------------- numeric: PSI


@dataclasses.dataclass(frozen=True)
class NumericDay:
    """One day's numeric column: rows, missing (null or NaN) and the finite values' CDF.

    `values`/`probs` are the CDF's knots: non-decreasing values at increasing
    probabilities. Between knots the CDF is linear; a repeated value is a jump (a point
    mass); below the first knot it is 0 and from the last one on it is 1, so mass outside
    the known quantiles sits on the extreme knots.
    """

    rows: int
    missing: int
    values: tuple[float, ...]
    probs: tuple[float, ...]

    @property
    def finite(self) -> int:
        return self.rows - self.missing

    def cdf(self, x: float) -> float:
        """P(X <= x) (right-continuous)."""
        v, p = self.values, self.probs
        i = bisect_right(v, x) - 1  # last knot <= x
        if i < 0:
            return 0.0
        if i == len(v) - 1:
            return 1.0
        return p[i] + (p[i + 1] - p[i]) * (x - v[i]) / (v[i + 1] - v[i])

    def cdf_left(self, x: float) -> float:
        """P(X < x): the CDF's limit from the left (differs from `cdf` at a point mass)."""
        v, p = self.values, self.probs
        i = bisect_left(v, x)  # first knot >= x
        if i == 0:
            return 0.0
        if i == len(v):
            return 1.0
        return p[i - 1] + (p[i] - p[i - 1]) * (x - v[i - 1]) / (v[i] - v[i - 1])


def numeric_day(column: Mapping[str, Any], where: str = "") -> NumericDay:
    """A numeric column's stats as a `NumericDay`.

    `count` is the non-null values, of which `nan` are NaN; null and NaN together are the
    missing bin. Quantile values are null only when there is no finite value.
    """
    count, nulls, nan = column["count"], column["nulls"], column.get("nan", 0)
    rows, missing = count + nulls, nulls + nan
    if rows - missing <= 0:
        return NumericDay(rows=rows, missing=rows, values=(), probs=())
    quantiles = column["quantiles"]
    probs, values = list(quantiles["probabilities"]), list(quantiles["values"])
    if len(probs) != len(values) or not probs:
        raise ValueError(
            f"{where}quantiles: {len(probs)} probabilities and {len(values)} values; "
            "expected the same non-zero number"
        )
    if any(v is None for v in values):
        raise ValueError(f"{where}quantiles.values: has nulls, but the column has {rows - missing} values")
    if any(b <= a for a, b in zip(probs, probs[1:], strict=False)):
        raise ValueError(f"{where}quantiles.probabilities: {probs} must be strictly increasing")
    if any(b < a for a, b in zip(values, values[1:], strict=False)):
        raise ValueError(f"{where}quantiles.values: {values} must be non-decreasing")
    # Quantiles that stop short of 0 or 1 are completed with the column's min and max.
    low, high = column.get("min"), column.get("max")
    if probs[0] > 0 and low is not None and low <= values[0]:
        probs, values = [0.0, *probs], [float(low), *values]
    if probs[-1] < 1 and high is not None and high >= values[-1]:
        probs, values = [*probs, 1.0], [*values, float(high)]
    return NumericDay(rows=rows, missing=missing, values=tuple(float(v) for v in values), probs=tuple(probs))


def pooled_quantiles(days: Sequence[NumericDay], probabilities: Sequence[float]) -> list[float]:
    """Quantiles of the count-weighted mixture of the days' CDFs (finite values only).

    The mixture is linear between the union of all knots, so each quantile is found
    exactly: the first knot where the mixture reaches the probability, then either the
    jump at that knot or linear interpolation inside the segment before it.
    """
    days = [d for d in days if d.finite > 0]
    total = sum(d.finite for d in days)
    if not total:
        return []
    knots = sorted({v for d in days for v in d.values})

    def mixture(x: float, left: bool = False) -> float:
        return sum(d.finite * (d.cdf_left(x) if left else d.cdf(x)) for d in days) / total

    at_knot = [mixture(k) for k in knots]
    out: list[float] = []
    for q in probabilities:
        j = next((j for j, f in enumerate(at_knot) if f >= q - 1e-12), len(knots) - 1)
        if j == 0:
            out.append(knots[0])
            continue
        before, reached = at_knot[j - 1], mixture(knots[j], left=True)
        if reached >= q:
            out.append(knots[j - 1] + (q - before) / (reached - before) * (knots[j] - knots[j - 1]))
        else:
            out.append(knots[j])  # the mixture jumps over q at this knot
    return out


def bin_shares(days: Sequence[NumericDay], edges: Sequence[float]) -> list[float]:
    """Shares of all rows in `(-inf, e1], (e1, e2], ..., (ek, inf)` and, last, the missing bin."""
    rows = sum(d.rows for d in days)
    if not rows:
        raise ValueError("bin_shares needs at least one row")
    bounds = [-math.inf, *edges, math.inf]
    shares = []
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        mass = 0.0
        for d in days:
            if d.finite > 0:
                upper = 1.0 if hi == math.inf else d.cdf(hi)
                lower = 0.0 if lo == -math.inf else d.cdf(lo)
                mass += d.finite * (upper - lower)
        shares.append(mass / rows)
    shares.append(sum(d.missing for d in days) / rows)
    return shares


def psi(actual: Sequence[float], expected: Sequence[float], epsilon: float = EPSILON) -> float:
    """Population stability index, sum((a - e) * ln(a / e)), with empty bins floored at epsilon."""
    total = 0.0
    for a, e in zip(actual, expected, strict=True):
        a, e = max(a, epsilon), max(e, epsilon)
        total += (a - e) * math.log(a / e)
    return total


def numeric_bins(
    current: NumericDay, reference: Sequence[NumericDay], bins: int = 10
) -> tuple[list[float], list[float]]:
    """(current's, pooled reference's) shares in the reference's quantile bins and the missing bin."""
    cuts = pooled_quantiles(reference, [k / bins for k in range(1, bins)])
    edges = sorted(set(cuts))  # a point mass makes several quantiles one edge
    return bin_shares([current], edges), bin_shares(reference, edges)


def numeric_psi(current: NumericDay, reference: Sequence[NumericDay], bins: int = 10) -> float:
    """PSI of `current` against the pooled `reference` days, on the reference's quantile bins."""
    return psi(*numeric_bins(current, reference, bins))


# ------------------------------------------------------------------- categorical/text: JSD


@dataclasses.dataclass(frozen=True)
class CategoryDay:
    """One day's categorical column (or text tokens): shares of its rows.

    `values` maps each top value to its share, `other` is the rest of the non-null mass,
    `null` the null rows' share. `complete` is true when nothing fell outside the top
    (`other_count` 0), so a value absent from `values` is known to have share 0.
    """

    rows: int
    values: dict[Any, float]
    other: float
    null: float
    complete: bool


def category_day(column: Mapping[str, Any]) -> CategoryDay:
    """A categorical column's stats, or a text column's top tokens, as shares of its rows.

    For text the non-null rows' mass is spread over tokens in proportion to token counts
    (a row is a draw of one of its tokens), so null rows and tokens share one distribution.
    """
    count, nulls = column["count"], column["nulls"]
    rows = count + nulls
    if not rows:
        return CategoryDay(rows=0, values={}, other=0.0, null=0.0, complete=True)
    top = {t["value"]: t["count"] for t in column["top"]}
    other_count = column.get("other_count", 0)
    listed = sum(top.values()) + other_count
    present = count / rows
    if listed:
        values = {v: present * n / listed for v, n in top.items()}
        other = present * other_count / listed
    else:  # non-null rows without a single token (empty strings): all "other"
        values, other = {}, present
    return CategoryDay(rows=rows, values=values, other=other, null=nulls / rows, complete=other_count == 0)


def _buckets(days: Sequence[CategoryDay], keep: Sequence[Any]) -> list[float]:
    """The row-weighted mixture of `days` over `keep` values, then "other", then "null"."""
    rows = sum(d.rows for d in days)
    kept = set(keep)
    out = [sum(d.rows * d.values.get(v, 0.0) for d in days) / rows for v in keep]
    other = sum(d.rows * (d.other + sum(s for v, s in d.values.items() if v not in kept)) for d in days)
    out.append(other / rows)
    out.append(sum(d.rows * d.null for d in days) / rows)
    return out


def jensen_shannon_distance(p: Sequence[float], q: Sequence[float]) -> float:
    """sqrt(JS divergence), base 2: 0 for equal distributions, 1 for disjoint ones."""

    def kl_to_mean(x: Sequence[float], m: Sequence[float]) -> float:
        return sum(a * math.log2(a / b) for a, b in zip(x, m, strict=True) if a > 0)

    mean = [(a + b) / 2 for a, b in zip(p, q, strict=True)]
    divergence = 0.5 * kl_to_mean(p, mean) + 0.5 * kl_to_mean(q, mean)
    return min(1.0, math.sqrt(max(0.0, divergence)))


@dataclasses.dataclass(frozen=True)
class Buckets:
    """What a categorical's distance compares: labelled buckets and each side's shares.

    `labels` are `("value", v)` for the kept values, then `("other", None)` when it is
    compared, then `("null", None)`; `compared` and `reference_compared` are the shares of
    each side's rows that the buckets hold (1 unless "other" is left out).
    """

    labels: list[tuple[str, Any]]
    shares: list[float]
    reference_shares: list[float]
    compared: float
    reference_compared: float


def category_buckets(current: CategoryDay, reference: Sequence[CategoryDay]) -> Buckets:
    """The current day's and the pooled reference's shares of the kept values, "other", "null".

    A value gets its own bucket only where every day's share of it is known (it is in
    that day's top, or that day's top is complete); elsewhere it is folded into "other"
    on every side. A value that merely crossed the top-k cut between days is not drift.

    When some day's top is not complete, "other" is left out and the remaining buckets
    are compared as shares of the rows they hold: a day's "other" then holds the values
    it cut, each of them present that day (count >= 1), while the other days count the
    same values as they fell (often 0). With 87 values over 140 rows a day that bias
    alone, not the data, would make "other" differ between days.
    """
    days = [current, *reference]
    seen = list(dict.fromkeys(v for d in days for v in d.values))
    keep = [v for v in seen if all(v in d.values or d.complete for d in days)]
    complete = all(d.complete for d in days)
    if not complete:
        # A rare value is in a day's top only on days it occurred at all: kept, it would be
        # counted >= 1 on those days and as it fell on a complete day. Only values the
        # smallest day expects MIN_EXPECTED_ROWS times (pooled share) are kept: those are
        # in every top whatever the day drew. The rest joins "other", left out below.
        smallest = min(d.rows for d in days)
        pooled = _buckets(days, keep)
        keep = [v for v, share in zip(keep, pooled, strict=False) if share * smallest >= MIN_EXPECTED_ROWS]
    shares, reference_shares = _buckets([current], keep), _buckets(reference, keep)
    labels = [*(("value", v) for v in keep), ("other", None), ("null", None)]
    if complete:
        return Buckets(labels, shares, reference_shares, 1.0, 1.0)
    compared, reference_compared = 1.0 - shares[-2], 1.0 - reference_shares[-2]

    def without_other(x: list[float], held: float) -> list[float]:
        kept = [*x[:-2], x[-1]]
        return [v / held for v in kept] if held > 0 else kept

    return Buckets(
        [*labels[:-2], labels[-1]],
        without_other(shares, compared),
        without_other(reference_shares, reference_compared),
        compared,
        reference_compared,
    )


def category_jsd(current: CategoryDay, reference: Sequence[CategoryDay]) -> float:
    """JSD of `current` against the pooled `reference` days, over `category_buckets`."""
    b = category_buckets(current, reference)
    return jensen_shannon_distance(b.shares, b.reference_shares)


# ------------------------------------------------------------------ noise: what chance gives


def noise_seed(*inputs: Any) -> int:
    """A bootstrap's seed from its inputs: the same statistics draw the same samples."""
    payload = json.dumps(inputs, separators=(",", ":"), default=str)
    return int.from_bytes(hashlib.sha256(payload.encode()).digest()[:8], "big")


def distance_noise(
    metric: str,
    shares: Sequence[float],
    reference_shares: Sequence[float],
    rows: int,
    reference_rows: int,
    level: float,
    seed: int,
) -> tuple[float, float]:
    """(median, `level` quantile) of the metric between the day and the window under no change.

    A permutation null: if nothing changed, the day's rows are `rows` drawn at random
    from the day's and the window's rows pooled. `BOOTSTRAP_DRAWS` such splits of the
    pooled bucket counts (multivariate hypergeometric) are scored as the real buckets
    are. This is exact for sparse buckets, where the chi-squared approximation of PSI and
    JSD is not (87 values over 140 rows: most buckets hold one or two rows), and unlike a
    draw from the window's shares alone it keeps the values the window did not happen to
    see. A numeric day's bin shares come from interpolated quantiles, smoother than
    counts, so the bound is on the safe side there.
    """
    import numpy as np  # the worker's; not at import time (the DAG processor imports this module)

    pooled = np.rint(
        np.clip(rows * np.asarray(shares) + reference_rows * np.asarray(reference_shares), 0.0, None)
    ).astype(np.int64)
    total = int(pooled.sum())
    day_rows = min(total - 1, max(1, round(total * rows / (rows + reference_rows))))
    if total < 2:
        return 0.0, 0.0
    rng = np.random.Generator(np.random.PCG64(seed))
    drawn = rng.multivariate_hypergeometric(pooled, day_rows, size=BOOTSTRAP_DRAWS)
    day = drawn / day_rows
    window = (pooled - drawn) / (total - day_rows)
    if metric == "psi":
        a, e = np.maximum(day, EPSILON), np.maximum(window, EPSILON)
        values = ((a - e) * np.log(a / e)).sum(axis=1)
    else:
        mean = (day + window) / 2
        with np.errstate(divide="ignore", invalid="ignore"):
            kl_day = np.where(day > 0, day * np.log2(day / mean), 0.0).sum(axis=1)
            kl_window = np.where(window > 0, window * np.log2(window / mean), 0.0).sum(axis=1)
        values = np.sqrt(np.clip(0.5 * kl_day + 0.5 * kl_window, 0.0, 1.0))
    median = np.quantile(values, 0.5, method="inverted_cdf")
    bound = np.quantile(values, level, method="higher")
    return float(median), float(bound)


def pooled_moments(columns: Sequence[Mapping[str, Any]]) -> tuple[int, float | None, float | None]:
    """(finite values, mean, sample standard deviation) of numeric columns pooled, exactly.

    The days' counts, means and standard deviations merge as Chan's parallel variance
    does: within-day squares plus each day's offset from the pooled mean.
    """
    days = []
    for c in columns:
        n = c["count"] - c.get("nan", 0)
        if n > 0 and c.get("mean") is not None:
            days.append((n, float(c["mean"]), float(c.get("stddev") or 0.0)))
    total = sum(n for n, _, _ in days)
    if not total:
        return 0, None, None
    mean = sum(n * mu for n, mu, _ in days) / total
    if total < 2:
        return total, mean, None
    squares = sum((n - 1) * sd * sd + n * (mu - mean) ** 2 for n, mu, sd in days)
    return total, mean, math.sqrt(squares / (total - 1))


def mean_shift(
    current: Mapping[str, Any], reference: Sequence[Mapping[str, Any]], params: DriftParams
) -> dict[str, Any] | None:
    """The day's mean against the window's, in the window's standard deviations (Cohen's d).

    PSI on ten bins needs hundreds of rows to see half a standard deviation; the mean
    sees it in a hundred and forty. Under no change the shift is about normal with
    standard error sqrt(1/n + 1/m) (n, m the finite values): that is its `noise`, and
    its bound is the two-sided `alpha`/2 quantile of that normal, or `min_effect` when
    larger. None where a side has no finite values or the window has no spread.
    """
    n, mean, _ = pooled_moments([current])
    m, reference_mean, sd = pooled_moments(reference)
    if not n or not m or mean is None or reference_mean is None or not sd:
        return None
    noise = math.sqrt(1 / n + 1 / m)
    z = statistics.NormalDist().inv_cdf(1 - params.alpha / 4)
    return {
        "measure": "mean",
        "value": (mean - reference_mean) / sd,
        "noise": noise,
        "threshold": max(params.min_effect, z * noise),
    }


def share_shift(
    labels: Sequence[tuple[str, Any]],
    shares: Sequence[float],
    reference_shares: Sequence[float],
    rows: int,
    reference_rows: int,
    params: DriftParams,
) -> dict[str, Any] | None:
    """The bucket whose share moved most, as Cohen's h = 2 asin(sqrt p) - 2 asin(sqrt q).

    JSD over 87 values at 140 rows a day is mostly noise, so one value's share doubling
    is lost in it; each bucket's own share is not. The arcsine makes the noise the same
    for every share: under no change h is about normal with standard error sqrt(1/n +
    1/m). Only buckets expected to hold at least `MIN_EXPECTED_ROWS` rows on the smaller
    side are tested (chosen from the pooled shares, so the choice does not favour a
    change), and the bound is Bonferroni's over them: the two-sided `alpha`/2 quantile
    for the largest of k, or `min_effect` when larger. None when no bucket qualifies.
    """
    total = rows + reference_rows
    smaller = min(rows, reference_rows)
    tested = [
        i
        for i, (a, e) in enumerate(zip(shares, reference_shares, strict=True))
        if smaller * (rows * a + reference_rows * e) / total >= MIN_EXPECTED_ROWS
    ]
    if not tested or not rows or not reference_rows:
        return None

    def h(i: int) -> float:
        a, e = min(max(shares[i], 0.0), 1.0), min(max(reference_shares[i], 0.0), 1.0)
        return 2 * math.asin(math.sqrt(a)) - 2 * math.asin(math.sqrt(e))

    moved = max(tested, key=lambda i: abs(h(i)))  # the first of equals: bucket order
    bucket, value = labels[moved]
    noise = math.sqrt(1 / rows + 1 / reference_rows)
    z = statistics.NormalDist().inv_cdf(1 - params.alpha / (4 * len(tested)))
    return {
        "measure": "share",
        "value": h(moved),
        "noise": noise,
        "threshold": max(params.min_effect, z * noise),
        "bucket": bucket,
        "of": value,
        "tested": len(tested),
    }


# ------------------------------------------------------------------------------- reports


def merge_stats(docs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One day's stats docs (validate, then preprocess) as one: the first doc's columns win.

    `preprocess` adds the reference tables' columns; a column both describe keeps the
    validate view (the raw values, before imputation).
    """
    if not docs:
        raise ValueError("merge_stats needs at least one stats document")
    columns: dict[str, Any] = {}
    for doc in docs:
        for name, column in doc["columns"].items():
            columns.setdefault(name, column)
    first = docs[0]
    return {
        "format_version": first["format_version"],
        "partition": first["partition"],
        "rows": first["rows"],
        "columns": columns,
    }


def _column_rows(column: Mapping[str, Any]) -> int:
    return column["count"] + column["nulls"]


def feature_drift(
    name: str,
    current: Mapping[str, Any],
    reference: Sequence[Mapping[str, Any]],
    params: DriftParams,
    *,
    ignore: bool = False,
) -> dict[str, Any]:
    """One feature's result: its distance and its largest shift, each beside its noise.

    A reference day counts when it has the column, of the same kind, with rows. The
    distance (PSI or JSD) drifts above `threshold`: the larger of the knob's threshold and
    `noise_bound`, what sampling alone exceeds with probability `alpha`/2 at these rows
    (`distance_noise`); `noise` is that null's median, what an unchanged feature shows.
    The shift (`mean_shift` or `share_shift`) has its own noise and threshold; either
    one over its threshold is drift. Not judged, with a `note`: fewer reference days
    than `min_reference_days` (`no_reference`), fewer rows than `min_rows` on either
    side (`too_few_rows`), a column marked `drift: ignore` (`ignored`). The values are
    recorded whenever there is a reference day.
    """
    kind = current["kind"]
    metric = METRICS[kind]
    same = [c for c in reference if c.get("kind") == kind and _column_rows(c) > 0]
    rows, reference_rows = _column_rows(current), sum(_column_rows(c) for c in same)
    result: dict[str, Any] = {
        "kind": kind,
        "metric": metric,
        "value": None,
        "noise": None,
        "noise_bound": None,
        "threshold": params.threshold(kind),
        "shift": None,
        "status": "no_reference",
        "reference_days": len(same),
        "rows": rows,
        "reference_rows": reference_rows,
    }
    if rows == 0:
        result["note"] = "the current partition has no rows"
        return result
    if same:
        where = f"columns.{name}."
        # The rows the compared buckets hold: the sample sizes of the noise.
        compared, reference_compared = rows, reference_rows
        if metric == "psi":
            shares, reference_shares = numeric_bins(
                numeric_day(current, where), [numeric_day(c, where) for c in same], params.bins
            )
            result["value"] = psi(shares, reference_shares)
            result["shift"] = mean_shift(current, same, params)
        else:
            b = category_buckets(category_day(current), [category_day(c) for c in same])
            shares, reference_shares = b.shares, b.reference_shares
            compared, reference_compared = (
                round(rows * b.compared),
                round(reference_rows * b.reference_compared),
            )
            result["value"] = jensen_shannon_distance(shares, reference_shares)
            result["shift"] = share_shift(
                b.labels, shares, reference_shares, compared, reference_compared, params
            )
            if b.compared < 1 or b.reference_compared < 1:
                result["other_left_out"] = {"day": 1 - b.compared, "reference": 1 - b.reference_compared}
        seed = noise_seed(name, metric, compared, reference_compared, shares, reference_shares)
        result["noise"], result["noise_bound"] = distance_noise(
            metric, shares, reference_shares, compared, reference_compared, 1 - params.alpha / 2, seed
        )
        result["threshold"] = max(params.threshold(kind), result["noise_bound"])
    if len(same) < params.min_reference_days:
        result["note"] = (
            f"{len(same)} earlier day(s) have this column; min_reference_days is {params.min_reference_days}"
        )
        return result
    if min(rows, reference_rows) < params.min_rows:
        result["status"] = "too_few_rows"
        result["note"] = (
            f"{rows} row(s) on the day and {reference_rows} in the earlier days; "
            f"min_rows is {params.min_rows}"
        )
        return result
    if ignore:
        result["status"] = "ignored"
        result["note"] = "marked `drift: ignore` in the spec: recorded, never drift"
        return result
    result["status"] = "drift" if drift_reasons(name, result) else "ok"
    return result


def drift_reasons(name: str, feature: Mapping[str, Any]) -> list[str]:
    """What is over its threshold: `distance psi=0.412 > threshold 0.3`, a shift likewise."""
    reasons = []
    if feature["value"] is not None and feature["value"] > feature["threshold"]:
        reasons.append(
            f"{name} {feature['metric']}={feature['value']:.3f} > threshold {feature['threshold']:.3g}"
        )
    shift = feature.get("shift")
    if shift and abs(shift["value"]) > shift["threshold"]:
        reasons.append(f"{name} {_shift_words(shift)} > threshold {shift['threshold']:.3g}")
    return reasons


def _shift_words(shift: Mapping[str, Any]) -> str:
    """`mean shift +0.52 sd` or `share of 'UA' h=+0.31` (other values / nulls by name)."""
    if shift["measure"] == "mean":
        return f"mean shift {shift['value']:+.3f} sd"
    of = {"other": "other values", "null": "nulls"}.get(shift["bucket"], repr(shift["of"]))
    return f"share of {of} h={shift['value']:+.3f}"


def drift_report(
    current: Mapping[str, Any],
    reference: Sequence[Mapping[str, Any]],
    params: Mapping[str, Any] | DriftParams | None = None,
    *,
    columns: Sequence[str] | None = None,
    ignore: Sequence[str] = (),
) -> dict[str, Any]:
    """Compare one day's stats doc with earlier days' (oldest first); never raises on drift.

    :param current: the run's day (`merge_stats` of its validate and preprocess docs).
    :param reference: the window's earlier days that exist, excluding the current day.
    :param params: `stages.check_drift` (`DriftParams` fields); unknown keys are refused.
    :param columns: the columns to judge, in order (default: every column of `current`
        whose kind has a metric). A named column missing from `current` is an error.
    :param ignore: columns recorded but never judged (the spec's `drift: ignore`).
    :returns: the drift report (`lakeprep_contracts/schemas/drift.schema.json`).
    """
    p = params if isinstance(params, DriftParams) else DriftParams.from_mapping(params)
    if columns is None:
        names = [n for n, c in current["columns"].items() if c["kind"] in METRICS]
    else:
        missing = [n for n in columns if n not in current["columns"]]
        if missing:
            raise KeyError(
                f"{current['partition']}: no statistics for column(s) {missing}; "
                f"the stats have {sorted(current['columns'])}"
            )
        names = list(columns)
    features = {
        name: feature_drift(
            name,
            current["columns"][name],
            [doc["columns"][name] for doc in reference if name in doc["columns"]],
            p,
            ignore=name in ignore,
        )
        for name in names
    }
    drifting = [n for n, f in features.items() if f["status"] == "drift"]
    if drifting:
        status = "drift"
    elif any(f["status"] == "ok" for f in features.values()):
        status = "ok"
    else:
        status = "no_reference"
    return {
        "format_version": FORMAT_VERSION,
        "partition": current["partition"],
        "reference_partitions": [doc["partition"] for doc in reference],
        "params": dataclasses.asdict(p),
        "features": features,
        "drifting": drifting,
        "status": status,
    }


def enforce(report: Mapping[str, Any]) -> None:
    """Raise `DriftError` when the report's action is `stop` and some feature drifts."""
    if report["params"]["action"] == "stop" and report["drifting"]:
        raise DriftError(report)


def check_drift(
    current: Mapping[str, Any],
    reference: Sequence[Mapping[str, Any]],
    params: Mapping[str, Any] | DriftParams | None = None,
    *,
    columns: Sequence[str] | None = None,
    ignore: Sequence[str] = (),
) -> dict[str, Any]:
    """`drift_report`, then `enforce`: returns the report, or raises `DriftError` on a stop."""
    report = drift_report(current, reference, params, columns=columns, ignore=ignore)
    enforce(report)
    return report


def describe(name: str, feature: Mapping[str, Any]) -> str:
    """One log line: `distance psi=0.031 (noise 0.012, threshold 0.25), mean shift ... ok`."""
    if feature["value"] is None:
        line = f"{name} {feature['metric']}=n/a (threshold {feature['threshold']:.3g})"
    else:
        noise = "" if feature.get("noise") is None else f"noise {feature['noise']:.3f}, "
        line = (
            f"{name} {feature['metric']}={feature['value']:.3f} ({noise}threshold {feature['threshold']:.3g})"
        )
    shift = feature.get("shift")
    if shift:
        line += f", {_shift_words(shift)} (noise {shift['noise']:.3f}, threshold {shift['threshold']:.3g})"
    line += f" {feature['status']}"
    if feature["status"] == "no_reference":
        line += f" ({feature['reference_days']} reference day(s))"
    elif feature.get("note"):
        line += f" ({feature['note']})"
    return line
