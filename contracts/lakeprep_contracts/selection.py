"""Feature selection and PCA of the window's fit, from the merged train statistics.

The same decisions Spark ML's selectors make (`VarianceThresholdSelector`,
`UnivariateFeatureSelector` with its ANOVA F, F-regression and chi-squared tests, `PCA`),
computed from exact sums instead of rows (docs/TRANSFORM.md, "Selection and PCA"):

- an encoded numeric is `z = (x - center) / scale` of the imputed column x, so its mean
  and variance follow from x's exact sums; ANOVA F and F-regression are invariant under
  that map, so they use x's per-class sums directly; against a continuous label,
  F-regression uses the target's exact moments and the exact sum of x * target
  (`day_statistics.target_cross_sum`);
- the chi-squared table of a categorical counts its encoded ids per class: each day's
  value (or hashed id) counts per class, mapped through the fitted vocabulary;
- PCA's covariance of the encoded inputs comes from the exact sums of the pairs'
  products (`day_statistics.cross_sum`), rounded once; its eigenvectors from numpy.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from lakeprep_contracts import labels, layout
from lakeprep_contracts.day_statistics import SplitStatistics, cross_sum, target_cross_keys, target_cross_sum
from lakeprep_contracts.moments import to_float
from lakeprep_contracts.window_fit import (
    CHI_SQUARED_MAX_CATEGORIES,
    SELECTOR_DEFAULT_THRESHOLDS,
    SPARSE_ZERO_SHARE,
    FitError,
    FitParams,
    Imputed,
    _finite,
    check_pca_size,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

TEST_NAMES = {
    "variance": "variance",
    "chi_squared": "chi-squared",
    "anova_f": "ANOVA F",
    "f_regression": "F-regression",
}


@dataclasses.dataclass
class Selected:
    """What selection and PCA leave of the fitted features, and what they record."""

    numeric: list[dict[str, Any]]
    categorical: list[dict[str, Any]]
    dropped: list[dict[str, str]]
    selection: dict[str, Any] | None
    pca: dict[str, Any] | None
    warnings: list[str]


def _number(value: Any) -> float | None:
    """A test result as JSON: NaN (a test undefined for a constant feature) is null."""
    return float(value) if value is not None and math.isfinite(float(value)) else None


def _score(entry: dict, test: str | None, statistic: Any, p_value: Any, dof: Any, kept: bool, reason) -> dict:
    return {
        "name": entry["name"],
        "output": entry["output"],
        "test": test,
        "statistic": _number(statistic),
        "p_value": _number(p_value),
        "degrees_of_freedom": None if dof is None else int(dof),
        "kept": kept,
        "reason": reason,
    }


@dataclasses.dataclass(frozen=True)
class Encoded:
    """An encoded numeric's train summary: `Summarizer`'s metrics, from exact sums."""

    mean: float
    variance: float
    constant: bool
    zeros: int


def encoded_summary(entry: dict[str, Any], x: Imputed) -> Encoded:
    center, scale = Fraction(entry["center"]), Fraction(entry["scale"])
    variance = x.variance
    # z = 0 exactly where x equals the centre: known from x's zeros when the centre is 0
    # (minmax from 0, robust or none around 0: the sparse inputs the warning is for).
    return Encoded(
        mean=to_float((x.mean - center) / scale),
        variance=0.0 if variance is None else to_float(variance / (scale * scale)),
        constant=x.minimum == x.maximum,
        zeros=x.zeros if entry["center"] == 0 else 0,
    )


def variance_threshold(
    numeric: list[dict], summary: list[Encoded], threshold: float
) -> tuple[dict[str, Any], list[int]]:
    """`VarianceThresholdSelector`'s rule: keep an encoded numeric whose sample variance is
    above the threshold. (the section, kept positions)"""
    kept = [i for i, s in enumerate(summary) if s.variance > threshold]
    scores = []
    for i, entry in enumerate(numeric):
        reason = None
        if i not in kept:
            reason = f"variance {summary[i].variance:.6g} <= min_variance {threshold:g}"
            if summary[i].constant:
                reason += " (constant on the window's train split)"
        scores.append(_score(entry, "variance", summary[i].variance, None, None, i in kept, reason))
    return {"method": "VarianceThresholdSelector", "threshold": float(threshold), "scores": scores}, kept


# ------------------------------------------------------------------ the univariate tests


def _class_sums(stats: SplitStatistics, entry: dict[str, Any]) -> dict[str, tuple[int, Fraction, Fraction]]:
    """Per class present: (rows, sum, sum of squares) of the imputed numeric."""
    fill = Fraction(entry["fill"])
    out = {}
    for label, rows in stats.rows_per_class.items():
        if not rows:
            continue
        m = stats.numeric[entry["name"]].by_class.get(label)
        count = m.count if m else 0
        total = (m.total if m else 0) + fill * (rows - count)
        squares = (m.squares if m else 0) + fill * fill * (rows - count)
        out[label] = (rows, Fraction(total), Fraction(squares))
    return out


def anova_f(stats: SplitStatistics, entry: dict[str, Any]) -> tuple[float, float, int]:
    """(F, p-value, degrees of freedom) of Spark's ANOVATest: between-class over
    within-class mean squares; its degrees of freedom are (k - 1) + (n - k)."""
    from scipy.stats import f as f_dist

    sums = _class_sums(stats, entry)
    n = sum(r for r, _, _ in sums.values())
    k = len(sums)
    total = sum(s for _, s, _ in sums.values())
    between = sum(s * s / r for r, s, _ in sums.values())
    ssb = between - total * total / n
    ssw = sum(q for _, _, q in sums.values()) - between
    dfb, dfw = k - 1, n - k
    if dfb <= 0 or dfw <= 0 or ssw == 0:
        statistic = math.nan if ssb == 0 or dfb <= 0 or dfw <= 0 else math.inf
    else:
        statistic = to_float((ssb / dfb) / (ssw / dfw))
    p = math.nan if math.isnan(statistic) else float(f_dist.sf(statistic, max(dfb, 1), max(dfw, 1)))
    return statistic, p, dfb + dfw


def f_regression(stats: SplitStatistics, entry: dict[str, Any]) -> tuple[float, float, int]:
    """(F, p-value, degrees of freedom n - 2) of Spark's FValueTest: the squared
    correlation with the label (the class value as a number)."""
    sums = _class_sums(stats, entry)
    sy = sum(Fraction(label) * r for label, (r, _, _) in sums.items())
    syy = sum(Fraction(label) ** 2 * r for label, (r, _, _) in sums.items())
    sxy = sum(Fraction(label) * s for label, (_, s, _) in sums.items())
    return _f_value(sums, sy, syy, sxy)


def f_regression_target(stats: SplitStatistics, entry: dict[str, Any]) -> tuple[float, float, int]:
    """`f_regression` against a continuous label's value (the rows' `target`), from its exact
    moments and the exact sum of the imputed feature times it."""
    target = stats.target
    if target is None or any(key not in stats.cross for key in target_cross_keys(entry["name"])):
        raise FitError(
            f"numeric {entry['name']!r}: F-regression against the continuous label needs the days' "
            "target moments and products; rerun `sample` for the window's days"
        )
    sxy = target_cross_sum(stats, entry["name"], entry["fill"])
    return _f_value(_class_sums(stats, entry), target.total, target.squares, sxy)


def _f_value(
    sums: dict[str, tuple[int, Fraction, Fraction]], sy: Fraction, syy: Fraction, sxy: Fraction
) -> tuple[float, float, int]:
    """F = r² / (1 - r²) * (n - 2) of the feature's per-class sums and the label's sums."""
    from scipy.stats import f as f_dist

    n = sum(r for r, _, _ in sums.values())
    sx = sum(s for _, s, _ in sums.values())
    sxx = sum(q for _, _, q in sums.values())
    dof = n - 2
    vx, vy = n * sxx - sx * sx, n * syy - sy * sy
    if dof <= 0 or vx == 0 or vy == 0:
        return math.nan, math.nan, dof
    r2 = (n * sxy - sx * sy) ** 2 / (vx * vy)
    if r2 >= 1:
        return math.inf, 0.0, dof
    statistic = to_float(r2 / (1 - r2) * dof)
    return statistic, float(f_dist.sf(statistic, 1, dof)), dof


def contingency(stats: SplitStatistics, entry: dict[str, Any]) -> dict[int, Counter]:
    """Encoded id -> class -> rows of a categorical on the train split (0: missing)."""
    index = {v: i + 2 for i, v in enumerate(entry.get("vocabulary", []))}
    table: dict[int, Counter] = {}
    for label, rows in stats.rows_per_class.items():
        if not rows:
            continue
        counts = stats.categorical[entry["name"]].get(label, Counter())
        for value, n in counts.items():
            cell = index.get(value, 1) if entry["encoding"] == "vocab" else int(value)
            table.setdefault(cell, Counter())[label] += n
        present = sum(counts.values())
        if rows - present:
            table.setdefault(0, Counter())[label] += rows - present
    return table


def chi_squared(table: dict[int, Counter]) -> tuple[float, float, int]:
    """(statistic, p-value, degrees of freedom) of Pearson's test as Spark's ChiSquareTest
    runs it: over the ids and classes present; one of either is independent (0, 1.0)."""
    from scipy.stats import chi2

    labels = sorted({label for row in table.values() for label in row})
    dof = (len(table) - 1) * (len(labels) - 1)
    if dof == 0:
        return 0.0, 1.0, 0
    n = sum(sum(row.values()) for row in table.values())
    column = {label: sum(row[label] for row in table.values()) for label in labels}
    statistic = Fraction(0)
    for row in table.values():
        across = sum(row.values())
        for label in labels:
            expected = Fraction(across * column[label], n)
            statistic += (row[label] - expected) ** 2 / expected
    value = to_float(statistic)
    return value, float(chi2.sf(value, dof)), dof


def chosen_indices(p_values: Sequence[float], mode: str, threshold: float) -> set[int]:
    """`UnivariateFeatureSelector`'s choice from the p-values (its
    `selectIndicesFromPValues`): ordered by p-value then index, NaN last."""
    n = len(p_values)
    order = sorted(range(n), key=lambda i: (math.isnan(p_values[i]), p_values[i], i))
    if mode == "numTopFeatures":
        return set(order[: int(threshold)])
    if mode == "percentile":
        return set(order[: int(n * threshold)])
    if mode == "fpr":
        return {i for i in range(n) if p_values[i] < threshold}
    if mode == "fdr":  # Benjamini-Hochberg
        last = -1
        for rank, i in enumerate(order):
            if p_values[i] <= threshold / n * (rank + 1):
                last = rank
        return set(order[: last + 1])
    return {i for i in range(n) if p_values[i] < threshold / n}  # fwe


def _univariate_reason(test: str, p_value: float | None, mode: str, threshold: float, tested: int) -> str:
    if p_value is None:
        return f"{TEST_NAMES[test]} test undefined (the feature is constant on the window's train split)"
    what = f"{TEST_NAMES[test]} p-value {p_value:.3g}"
    if mode == "numTopFeatures":
        return f"{what} is not among the {int(threshold)} lowest of {tested} (numTopFeatures)"
    if mode == "percentile":
        keep = int(tested * threshold)
        return f"{what} is not among the lowest {threshold:g} of {tested} (percentile: {keep})"
    if mode == "fpr":
        return f"{what} is not below fpr {threshold:g}"
    if mode == "fdr":
        return f"{what} fails the Benjamini-Hochberg false discovery rate {threshold:g} over {tested}"
    return f"{what} is not below fwe {threshold:g} / {tested} features"


def univariate_selection(
    stats: SplitStatistics, p: FitParams, numeric: list[dict], categorical: list[dict]
) -> tuple[dict[str, Any], set[str], list[str]]:
    """The univariate tests per feature type: (the section, kept outputs, warnings).

    One choice per feature type, as Spark's selector takes one `featureType`: the
    numerics (continuous) against the label, and the categorical ids (categorical). The
    mode applies within each; text is not tested (token lists) and always kept.
    """
    mode, label_type = p.selector_mode, p.selector_label_type
    threshold = float(
        p.selector_threshold if p.selector_threshold is not None else SELECTOR_DEFAULT_THRESHOLDS[mode]
    )
    warnings: list[str] = []
    scores: list[dict] = []
    kept: set[str] = set()
    if label_type == "categorical":
        numeric_test = ("anova_f", anova_f)
    elif p.label_type == labels.CONTINUOUS:  # against the value itself, not its bins
        numeric_test = ("f_regression", f_regression_target)
    else:
        numeric_test = ("f_regression", f_regression)
    families = [(numeric_test[0], [(e, numeric_test[1](stats, e)) for e in numeric])]
    if label_type == "categorical":
        tested = []
        for e in categorical:
            table = contingency(stats, e)
            if len(table) > CHI_SQUARED_MAX_CATEGORIES:
                reason = (
                    f"not tested: {len(table)} distinct ids on the train split, more than the "
                    f"chi-squared test's {CHI_SQUARED_MAX_CATEGORIES}; kept"
                )
                warnings.append(f"categorical {e['name']!r}: {reason}")
                scores.append(_score(e, None, None, None, None, True, reason))
                kept.add(e["output"])
            else:
                tested.append((e, chi_squared(table)))
        families.append(("chi_squared", tested))
    else:
        for e in categorical:
            reason = "not tested: Spark has no test of a categorical feature against a continuous label; kept"
            scores.append(_score(e, None, None, None, None, True, reason))
            kept.add(e["output"])
    count = 0
    for test, results in families:
        if not results:
            continue
        chosen = chosen_indices([r[1] for _, r in results], mode, threshold)
        count += len(results)
        for j, (entry, (statistic, p_value, dof)) in enumerate(results):
            reason = None
            if j in chosen:
                kept.add(entry["output"])
            else:
                reason = _univariate_reason(test, _number(p_value), mode, threshold, len(results))
            scores.append(_score(entry, test, statistic, p_value, dof, j in chosen, reason))
    tested_scores = [s for s in scores if s["test"]]
    if count and not any(s["kept"] for s in tested_scores):
        listed = "; ".join(
            f"{s['name']} ({TEST_NAMES[s['test']]} statistic {s['statistic']!r}, p-value {s['p_value']!r})"
            for s in tested_scores
        )
        raise FitError(
            f"selector_mode {mode} with threshold {threshold:g} keeps none of the {count} features it "
            f"tested on the window's train split: {listed}; raise selector_threshold or set "
            "selector_mode null"
        )
    section = {
        "method": "UnivariateFeatureSelector",
        "mode": mode,
        "threshold": threshold,
        "label_type": label_type,
        "scores": scores,
    }
    return section, kept, warnings


# ------------------------------------------------------------------ PCA


def covariance(
    stats: SplitStatistics, entries: list[dict], sums: dict[str, Imputed], order: list[str]
) -> list[list[float]]:
    """The sample covariance of the encoded inputs, each entry exact and rounded once."""
    n = stats.rows
    position = {name: i for i, name in enumerate(order)}
    out = [[0.0] * len(entries) for _ in entries]
    for i, a in enumerate(entries):
        for j in range(i, len(entries)):
            b = entries[j]
            xa, xb = sums[a["name"]], sums[b["name"]]
            if i == j:
                products = xa.squares
            else:
                first, second = (a, b) if position[a["name"]] < position[b["name"]] else (b, a)
                products = cross_sum(stats, first["name"], second["name"], first["fill"], second["fill"])
            cov = (products - xa.total * xb.total / n) / (n - 1)
            out[i][j] = out[j][i] = to_float(cov / (Fraction(a["scale"]) * Fraction(b["scale"])))
    return out


def fit_pca(
    stats: SplitStatistics,
    p: FitParams,
    numeric: list[dict],
    summary: list[Encoded],
    sums: dict[str, Imputed],
    *,
    dropped: list[dict[str, str]],
) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """PCA of the kept encoded numerics: (the section, outputs, warnings).

    The components are the covariance's eigenvectors by descending eigenvalue (numpy's
    `eigh`), each signed so that its largest weight is positive (an eigenvector's sign
    is arbitrary; this makes it a function of the data). Applied centred: the document
    records the train mean and every applier subtracts it. With `pca_variance`, the
    smallest k whose explained variance reaches the share.
    """
    import numpy as np

    warnings: list[str] = []
    names = [e["name"] for e in numeric]
    n = len(numeric)
    rows = stats.rows
    if n == 0:
        left = "; ".join(f"{d['name']}: {d['reason']}" for d in dropped) or "the spec declares none"
        raise FitError(f"PCA has no numeric inputs on the window's train split ({left})")
    try:
        check_pca_size(n)
    except ValueError as err:
        raise FitError(str(err)) from err
    if p.pca_components is not None and p.pca_components > n:
        gone = "; ".join(f"{d['name']}: {d['reason']}" for d in dropped) or "none"
        raise FitError(
            f"pca_components {p.pca_components} is more than the {n} numerics left after selection "
            f"{names} (dropped: {gone})"
        )
    if rows < 2:
        raise FitError(f"PCA needs at least 2 train rows for a covariance; the train split has {rows}")
    sparse = []
    for i, entry in enumerate(numeric):
        zeros = summary[i].zeros / rows
        if zeros >= SPARSE_ZERO_SHARE and summary[i].mean != 0.0:
            sparse.append(f"{entry['output']} ({zeros:.0%} zeros, mean {summary[i].mean:.6g})")
    if sparse:
        warnings.append(
            "PCA inputs " + ", ".join(sparse) + " are sparse on the train split; centring them by "
            "the recorded mean makes every projected row dense"
        )
    cov = np.array(covariance(stats, numeric, sums, [c["name"] for c in p.numeric]))
    values, vectors = np.linalg.eigh(cov)
    order = np.argsort(-values, kind="stable")
    values = np.clip(values[order], 0.0, None)
    vectors = vectors[:, order]
    for j in range(n):
        pivot = int(np.argmax(np.abs(vectors[:, j])))
        if vectors[pivot, j] < 0:
            vectors[:, j] = -vectors[:, j]
    total = float(values.sum())
    explained = [float(v / total) if total > 0 else 0.0 for v in values]
    k = n if p.pca_variance is not None else int(p.pca_components)
    if p.pca_variance is not None:
        running = 0.0
        for j, share in enumerate(explained):
            running += share
            if running >= p.pca_variance - 1e-12:
                k = j + 1
                break
    components = [
        [_finite(vectors[i, j], f"PCA component {j + 1} weight of {names[i]}") for i in range(n)]
        for j in range(k)
    ]
    outputs = [layout.encoded_name("numeric", f"pc{j + 1}") for j in range(k)]
    section = {
        "method": "PCA",
        "k": k,
        "variance_target": p.pca_variance,
        "inputs": numeric,
        "mean": [
            _finite(s.mean, f"train mean of {e['output']}") for s, e in zip(summary, numeric, strict=True)
        ],
        "components": components,
        "explained_variance": [min(1.0, max(0.0, v)) for v in explained[:k]],
        "outputs": outputs,
    }
    entries = [{"name": f"pc{j + 1}", "output": outputs[j], "pca_component": j + 1} for j in range(k)]
    return section, entries, warnings


def select_and_project(
    stats: SplitStatistics,
    p: FitParams,
    numeric: list[dict],
    categorical: list[dict],
    text: list[dict],
    sums: dict[str, Imputed],
) -> Selected:
    """Selection, then PCA, on the encoded train features (after imputation and scaling).

    Order: the variance threshold over the numerics, the univariate tests over what is
    left and the categoricals, PCA over the numerics kept. Dropped features leave the
    document's outputs and are listed in `dropped` with the reason.
    """
    variance_on = p.min_variance is not None and bool(numeric)
    univariate_on = p.selector_mode is not None and bool(numeric or categorical)
    if not (variance_on or univariate_on or p.pca):
        return Selected(numeric, categorical, [], None, None, [])
    summary = [encoded_summary(e, sums[e["name"]]) for e in numeric]
    selection: dict[str, Any] = {"variance_threshold": None, "univariate": None}
    warnings: list[str] = []
    positions = list(range(len(numeric)))
    if variance_on:
        selection["variance_threshold"], positions = variance_threshold(numeric, summary, p.min_variance)
    kept_outputs = {numeric[i]["output"] for i in positions} | {e["output"] for e in categorical}
    if univariate_on:
        selection["univariate"], kept_outputs, found = univariate_selection(
            stats, p, [numeric[i] for i in positions], categorical
        )
        warnings += found
    dropped = []
    for section in (selection["variance_threshold"], selection["univariate"]):
        for score in section["scores"] if section else []:
            if not score["kept"]:
                dropped.append({"name": score["name"], "reason": score["reason"]})
    kept = [i for i in positions if numeric[i]["output"] in kept_outputs]
    kept_categorical = [e for e in categorical if e["output"] in kept_outputs]
    if (numeric or categorical or text) and not (kept or kept_categorical or text):
        listed = "; ".join(f"{d['name']}: {d['reason']}" for d in dropped)
        raise FitError(f"selection leaves no features on the window's train split ({listed})")
    pca = None
    outputs = [numeric[i] for i in kept]
    if p.pca:
        pca, outputs, found = fit_pca(
            stats, p, [numeric[i] for i in kept], [summary[i] for i in kept], sums, dropped=dropped
        )
        warnings += found
    chosen = selection if (variance_on or univariate_on) else None
    return Selected(outputs, kept_categorical, dropped, chosen, pca, warnings)
