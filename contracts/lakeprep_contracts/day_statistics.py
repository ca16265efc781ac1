"""The per-day fit statistics (`_fit_statistics.json`): their names, and their merge.

Written once per day by the `sample` stage (`lakeprep_jobs.fit_statistics` says what
they hold and how Spark computes them); read and merged here, in plain Python, by the
window's fit (`lakeprep_contracts.window_fit`). Merging is adding: exact moments add
exactly (fractions), counts add, and the days' quantile grids pool into weighted values
(each of a day's GRID + 1 grid values stands for rows / (GRID + 1) of its rows). So the
merged statistics of a window's days are those of the union of their rows for every
exact quantity, whatever the order or grouping of the days; a quantile is within about
1 / GRID in rank of the union's (docs/TRANSFORM.md).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from lakeprep_contracts.moments import EMPTY, Moments

FORMAT_VERSION = 1
ROWS = "__rows__"  # the row count rides along with the numerics' moments (a constant 1.0)
# A continuous label's value (the prepared rows' `target`, lakeprep_contracts.labels) rides
# along too, when the profile asks for it: the window's fit standardises the target with it.
TARGET = "__target__"
# The quantile grid: a day's train values at ranks i / GRID. A merged quantile is off by at
# most about 1 / GRID in rank (0.1 %), plus percentile_approx's 1 / QUANTILE_ACCURACY.
GRID = 1000
QUANTILE_ACCURACY = 100000
CROSS_PARTS = ("product", "error", "alone", "neither")


def cross_key(part: str, a: str, b: str) -> str:
    """The moments name of one cross term of numerics `a` and `b` (PCA's covariance), or of
    a numeric and a continuous label's `TARGET` (F-regression's sum of products)."""
    if part not in CROSS_PARTS:
        raise ValueError(f"cross part {part!r} must be one of {CROSS_PARTS}")
    return f"__{part}__{json.dumps([a, b])}"


def target_cross_keys(name: str) -> tuple[str, str, str]:
    """The moments names of numeric `name` with the target: the product where `name` is
    present and its rounding error (Dekker's two parts, exact together), and the target
    where `name` is missing (the target is never missing: validate quarantines that)."""
    return (
        cross_key("product", name, TARGET),
        cross_key("error", name, TARGET),
        cross_key("alone", TARGET, name),
    )


def profile_of(
    numeric: Sequence[Mapping[str, Any]],
    categorical: Sequence[Mapping[str, Any]],
    text: Sequence[Mapping[str, Any]],
    *,
    cross_products: bool,
    target: bool = False,
    target_products: bool = False,
) -> dict[str, Any]:
    """What a day profiles, from the fit's per-feature settings (`column_transforms`);
    `target`: the moments of a continuous label's value too, `target_products`: each
    numeric's products with it (F-regression). Each key only when asked, so a profile of
    classes is the one it always was."""
    return {
        "numeric": [c["name"] for c in numeric],
        "categorical": [
            {
                "name": c["name"],
                "encoding": c["encoding"],
                **({"buckets": c["buckets"]} if c["encoding"] == "hash" else {}),
            }
            for c in categorical
        ],
        "text": [
            {
                "name": t["name"],
                "encoding": t["encoding"],
                # A tokenizer trained on the window learns from the days' word counts.
                **({"tokenizer_model": t["tokenizer_model"]} if t.get("tokenizer_model") else {}),
            }
            for t in text
        ],
        "cross_products": bool(cross_products),
        **({"target": True} if target else {}),
        **({"target_products": True} if target_products else {}),
    }


def counts_tokens(text: Mapping[str, Any]) -> bool:
    """Whether a day counts a text feature's tokens: a fitted vocabulary's, or the words a
    tokenizer trained on the window learns from (`lakeprep_contracts.subword_training`)."""
    return text["encoding"] == "vocab" or bool(text.get("tokenizer_model"))


class StatisticsError(ValueError):
    """Days whose statistics cannot be merged for this fit; names the days and the fix."""


@dataclass
class NumericStatistics:
    by_class: dict[str, Moments]
    # (values counted that day, that day's quantile grid) of each day with values (train only)
    grids: list[tuple[int, list[float]]] = field(default_factory=list)

    @property
    def overall(self) -> Moments:
        total = EMPTY
        for m in self.by_class.values():
            total = total.merged(m)
        return total


@dataclass
class SplitStatistics:
    """One split of the window, merged over its days."""

    rows_per_class: dict[str, int]
    numeric: dict[str, NumericStatistics]
    categorical: dict[str, dict[str, Counter]]  # feature -> class -> value (or hashed id) -> count
    text: dict[str, Counter]  # feature -> token -> count
    cross: dict[str, Moments] = field(default_factory=dict)  # cross_key(...) -> moments
    target: Moments | None = None  # a continuous label's value, when the profile has it
    partitions: list[str] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(self.rows_per_class.values())


def check_profiles(docs: Sequence[tuple[str, Mapping[str, Any]]], wanted: Mapping[str, Any]) -> None:
    """Every day must have profiled what this fit needs; else name the days and the fix."""
    stale = []
    for where, doc in docs:
        if doc.get("format_version") != FORMAT_VERSION:
            stale.append(f"{where} (format_version {doc.get('format_version')!r}, expected {FORMAT_VERSION})")
            continue
        have = doc["profile"]
        missing = [n for n in wanted["numeric"] if n not in have["numeric"]]
        missing += [
            c["name"] for c in wanted["categorical"] if c not in have["categorical"]
        ]  # same name, encoding and buckets
        missing += [t["name"] for t in wanted["text"] if t not in have["text"]]
        if wanted["cross_products"] and not have["cross_products"]:
            missing.append("the numerics' cross products (PCA)")
        if wanted.get("target") and not have.get("target"):
            missing.append("the continuous label's target")
        if wanted.get("target_products") and not have.get("target_products"):
            missing.append("the numerics' products with the continuous label's target (F-regression)")
        if missing:
            stale.append(f"{where} (lacks {', '.join(missing)})")
    if stale:
        raise StatisticsError(
            "the fit needs statistics these sampled days did not record, written before the "
            f"spec asked for them: {'; '.join(stale)}. Rerun `sample` for those days (clear and "
            "rerun their tasks, or a backfill with --reprocess-behavior completed)"
        )


def merge(
    docs: Iterable[tuple[str, Mapping[str, Any]]], split: str, profile: Mapping[str, Any]
) -> SplitStatistics:
    """The days' statistics of `split`, merged, restricted to what `profile` names.

    `docs` are (partition, document) pairs, oldest first; the partitions are recorded.
    """
    docs = list(docs)
    check_profiles(docs, profile)
    names = list(profile["numeric"])
    out = SplitStatistics(
        rows_per_class={},
        numeric={n: NumericStatistics({}) for n in names},
        categorical={c["name"]: {} for c in profile["categorical"]},
        text={t["name"]: Counter() for t in profile["text"] if counts_tokens(t)},
        partitions=[where for where, _ in docs],
    )
    cross_names = sorted(set(_cross_names(names))) if profile["cross_products"] else []
    if profile.get("target_products"):
        cross_names += [key for n in names for key in target_cross_keys(n)]
    if profile.get("target"):
        out.target = EMPTY
    for _, doc in docs:
        day = doc["splits"][split]
        for label, n in day["rows"].items():
            out.rows_per_class[label] = out.rows_per_class.get(label, 0) + int(n)
        for label, moments in day["moments"].items():
            for n in names:
                if n in moments:
                    stats = out.numeric[n]
                    stats.by_class[label] = stats.by_class.get(label, EMPTY).merged(
                        Moments.from_json(moments[n])
                    )
            for key in cross_names:
                if key in moments:
                    out.cross[key] = out.cross.get(key, EMPTY).merged(Moments.from_json(moments[key]))
            if out.target is not None and TARGET in moments:
                out.target = out.target.merged(Moments.from_json(moments[TARGET]))
        for n in names:
            grid = day["quantile_grids"].get(n)
            if grid:
                counted = sum(int(m[n]["count"]) for m in day["moments"].values() if n in m)
                out.numeric[n].grids.append((counted, grid))
        for name, per_class in out.categorical.items():
            for label, pairs in day["categorical"][name].items():
                counter = per_class.setdefault(label, Counter())
                for value, count in pairs:
                    counter[value] += int(count)
        for name, counter in out.text.items():
            for token, count in day["text"][name]:
                counter[token] += int(count)
    return out


def _cross_names(names: Sequence[str]) -> Iterable[str]:
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            yield cross_key("product", a, b)
            yield cross_key("error", a, b)
            yield cross_key("alone", a, b)
            yield cross_key("alone", b, a)
            yield cross_key("neither", a, b)


def cross_sum(stats: SplitStatistics, a: str, b: str, fill_a: float, fill_b: float) -> Fraction:
    """The exact sum over the split's rows of imputed(a) * imputed(b), `a` before `b` in
    the profile's order: the products where both are present, plus each one's values
    where the other is missing times the other's fill, plus the fills' product where
    both are missing."""
    product = stats.cross[cross_key("product", a, b)].total + stats.cross[cross_key("error", a, b)].total
    fa, fb = Fraction(fill_a), Fraction(fill_b)
    return (
        product
        + fb * stats.cross[cross_key("alone", a, b)].total
        + fa * stats.cross[cross_key("alone", b, a)].total
        + fa * fb * stats.cross[cross_key("neither", a, b)].count
    )


def target_cross_sum(stats: SplitStatistics, name: str, fill: float) -> Fraction:
    """The exact sum over the split's rows of imputed(name) * target: the products where
    `name` is present, plus its fill times the target where it is missing."""
    product, error, alone = (stats.cross[key] for key in target_cross_keys(name))
    return product.total + error.total + Fraction(fill) * alone.total


def weighted_items(numeric: NumericStatistics) -> list[tuple[float, Fraction]]:
    """The days' grid values, each weighted by the rows it stands for, sorted by value:
    a day of n values gives each of its GRID + 1 grid values the weight n / (GRID + 1)."""
    items = []
    for counted, grid in numeric.grids:
        weight = Fraction(counted, len(grid))
        items += [(float(v), weight) for v in grid]
    return sorted(items)


def quantile(
    items: Sequence[tuple[float, int]], q: float, *, extra: tuple[float, int] | None = None
) -> float | None:
    """The smallest value whose inclusive rank reaches q of the total weight (what Spark's
    `percentile_approx` returns where it is exact); `extra` adds a point mass (the fills
    of the missing values)."""
    points = list(items)
    if extra is not None and extra[1] > 0:
        points = sorted([*points, extra])
    total = sum(w for _, w in points)
    if not total:
        return None
    target = q * total
    seen = 0
    for value, weight in points:
        seen += weight
        if seen >= target:
            return value
    return points[-1][0]
