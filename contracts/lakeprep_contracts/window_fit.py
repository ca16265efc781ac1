"""The window's fit: `transform.json` from the window's merged per-day statistics.

Everything learned from data is learned here, once per run, from the statistics of the
window's sampled days' **train** split (`lakeprep_contracts.day_statistics`): no row is
read again, and no Spark job runs. Plain Python over small documents, so it runs in the
Spark driver of `fit_transform`, an Airflow task or the trainer's process alike.

Exact where the op is exact (docs/TRANSFORM.md): mean fills, standard and minmax
scaling, vocabularies, the variance threshold, the univariate tests and PCA's
covariance come from exact sums and counts, so a fit of merged days equals the fit of
the union of their rows. Quantiles (median fills, clipping bounds, robust scaling) come
from the days' pooled quantile grids, within about 1 / `day_statistics.GRID` in rank of
the union's; so do the moments of a clipped column (the grid values, clipped).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from lakeprep_contracts import labels, layout
from lakeprep_contracts.day_statistics import SplitStatistics, profile_of, quantile, weighted_items
from lakeprep_contracts.moments import Moments, to_float
from lakeprep_contracts.text import SUBWORD, TOKENIZER

FORMAT_VERSION = 1
HASH = {"function": "xxhash64", "seed": 42, "input": "utf-8"}
SELECTOR_MODES = ("numTopFeatures", "percentile", "fpr", "fdr", "fwe")
LABEL_TYPES = ("categorical", "continuous")
# What UnivariateFeatureSelector.fit uses when selectionThreshold is not set.
SELECTOR_DEFAULT_THRESHOLDS = {"numTopFeatures": 50, "percentile": 0.1, "fpr": 0.05, "fdr": 0.05, "fwe": 0.05}
# PCA's covariance comes from per-day exact sums of every pair of numerics' products (five
# terms a pair, each a value per row in the day's one moments job): with 64 inputs that is
# already 10,080 values a row, so more are refused (docs/TRANSFORM.md).
PCA_MAX_COLUMNS = 64
# ml.stat.ChiSquareTest.maxCategories: the test fails on a feature with more distinct values.
CHI_SQUARED_MAX_CATEGORIES = 10000
# A PCA input with at least this share of zeros is sparse; centring makes it dense.
SPARSE_ZERO_SHARE = 0.5


@dataclasses.dataclass(frozen=True)
class FitParams:
    dataset: str
    logical_date: str
    run_id: str
    id_column: str
    label_column: str
    label_classes: list[int]
    numeric: list[dict[str, Any]]
    categorical: list[dict[str, Any]]
    text: list[dict[str, Any]]
    contract: dict[str, Any]
    # The stage's knobs arrive too; per-column settings above already resolve them.
    numeric_scaling: str
    numeric_impute: str
    clip_quantiles: list[float] | None
    categorical_encoding: str
    categorical_min_frequency: int
    categorical_max_vocab: int
    categorical_buckets: int
    text_encoding: str
    text_min_frequency: int
    text_vocab_size: int
    text_max_tokens: int
    # Window-wide selection and projection (docs/TRANSFORM.md, "Selection and PCA").
    min_variance: float | None = 1e-6
    selector_mode: str | None = None
    selector_threshold: float | None = None
    selector_label_type: str = "categorical"
    pca_components: int | None = None
    pca_variance: float | None = None
    # Named classes in id order (lakeprep_contracts.labels): the transform's `label.names`,
    # the id -> class map serving prints; None for integer classes.
    label_names: list[Any] | None = None
    # `continuous` (lakeprep_contracts.labels): `label_classes` are the value's quantile bins,
    # and the transform's `label.target` standardises the rows' `target`.
    label_type: str = "classes"

    def __post_init__(self) -> None:
        if self.label_type not in ("classes", labels.CONTINUOUS):
            raise ValueError(f"label_type {self.label_type!r} must be 'classes' or {labels.CONTINUOUS!r}")
        if self.label_type == labels.CONTINUOUS and self.label_names is not None:
            raise ValueError(f"label_names {self.label_names!r} name classes; a continuous label has none")
        if self.label_names is not None and len(self.label_names) != len(self.label_classes):
            raise ValueError(
                f"label_names {self.label_names!r} must name each of label_classes {self.label_classes!r}"
            )
        for col in self.numeric:
            q = col.get("clip_quantiles")
            if q is not None and not (0 <= q[0] < q[1] <= 1):
                raise ValueError(
                    f"numeric {col['name']!r}: clip_quantiles {q!r} must be [low, high] "
                    "with 0 <= low < high <= 1"
                )
        if self.min_variance is not None and not self.min_variance >= 0:
            raise ValueError(f"min_variance {self.min_variance!r} must be >= 0 (or null: off)")
        if self.selector_mode is not None and self.selector_mode not in SELECTOR_MODES:
            raise ValueError(
                f"selector_mode {self.selector_mode!r} must be one of {list(SELECTOR_MODES)} or null"
            )
        if self.selector_mode is not None and self.selector_threshold is not None:
            check_selector_threshold(self.selector_mode, self.selector_threshold)
        if self.selector_label_type not in LABEL_TYPES:
            raise ValueError(
                f"selector_label_type {self.selector_label_type!r} must be one of {list(LABEL_TYPES)}"
            )
        continuous = self.label_type == labels.CONTINUOUS
        if continuous and self.selector_mode is not None and self.selector_label_type != "continuous":
            raise ValueError(
                f"selector_label_type {self.selector_label_type!r} with label_type {labels.CONTINUOUS!r}: "
                "the univariate tests of a continuous label are F-regression against its value; "
                "set selector_label_type 'continuous'"
            )
        if self.pca_components is not None and self.pca_variance is not None:
            raise ValueError(
                f"pca_components {self.pca_components!r} and pca_variance {self.pca_variance!r} are "
                "exclusive: set a number of components or a share of explained variance"
            )
        if self.pca_variance is not None and not 0 < self.pca_variance <= 1:
            raise ValueError(f"pca_variance {self.pca_variance!r} must be in (0, 1]")
        if self.pca_components is not None:
            names = [c["name"] for c in self.numeric]
            if self.pca_components < 1 or self.pca_components > len(names):
                raise ValueError(
                    f"pca_components {self.pca_components!r} must be in [1, {len(names)}]: "
                    f"there are {len(names)} numeric features {names}"
                )
        clipped = [c["name"] for c in self.numeric if c.get("clip_quantiles")]
        if clipped and (self.selector_mode is not None or self.pca):
            knob = "selector_mode" if self.selector_mode is not None else "pca"
            raise ValueError(
                f"{knob} with clipped numerics {clipped}: the window's fit merges per-day statistics, "
                "which hold the class moments and cross products of the unclipped values; the clipped "
                "ones depend on bounds known only after the merge. Turn clip_quantiles off for these "
                f"columns or {knob} off (docs/TRANSFORM.md)"
            )
        # Every declared numeric is profiled for PCA (selection runs after the days' statistics).
        if self.pca:
            check_pca_size(len(self.numeric))

    @property
    def pca(self) -> bool:
        return self.pca_components is not None or self.pca_variance is not None


def check_selector_threshold(mode: str, threshold: float) -> None:
    """UnivariateFeatureSelector's own rule, checked before any data is read."""
    if mode == "numTopFeatures":
        if not (threshold >= 1 and float(threshold).is_integer()):
            raise ValueError(
                f"selector_threshold {threshold!r} must be a whole number >= 1 for numTopFeatures"
            )
    elif not 0 <= threshold <= 1:
        raise ValueError(f"selector_threshold {threshold!r} must be in [0, 1] for {mode}")


def check_pca_size(columns: int) -> None:
    if columns > PCA_MAX_COLUMNS:
        raise ValueError(
            f"PCA over {columns} numerics: the per-day statistics hold the exact sums of every pair's "
            f"products (five terms a pair, each a value per row), so more than {PCA_MAX_COLUMNS} "
            "inputs are refused; declare fewer numerics (a PCA input is any numeric the spec declares) "
            "or turn PCA off"
        )


class FitError(ValueError):
    """A statistic cannot be fitted (no values, not finite); names the column."""


def profile(p: FitParams) -> dict[str, Any]:
    """What each day must profile for this fit (`sample`'s `fit_profile` param)."""
    continuous = p.label_type == labels.CONTINUOUS
    return profile_of(
        p.numeric,
        p.categorical,
        p.text,
        cross_products=p.pca,
        target=continuous,
        target_products=continuous and p.selector_mode is not None,
    )


def fit_target(stats: SplitStatistics, column: str) -> dict[str, Any]:
    """A continuous label's standardisation, `(value - mean) / std` the trainer regresses:
    the exact mean and sample standard deviation (n - 1) of the train rows' `target`,
    merged from the days' moments (so those of the union of their rows).

    :raises FitError: no target moments, or a target without spread on the train split.
    """
    target = stats.target
    if target is None or not target.count:
        raise FitError(
            f"label {column!r} is continuous but the window's train split has no target values "
            f"({stats.rows} rows); rerun `sample` for its days"
        )
    mean = _finite(target.mean, f"the mean of label {column!r}")
    variance = target.variance
    std = 0.0 if variance is None else math.sqrt(_finite(variance, f"the variance of label {column!r}"))
    if not std > 0:
        raise FitError(
            f"label {column!r} is continuous but takes one value ({mean!r}) on the window's "
            f"{target.count} train rows: there is nothing to regress; widen window.days or the sample"
        )
    return {"column": labels.TARGET, "rows": target.count, "mean": mean, "std": std}


def _finite(value: Any, what: str) -> float:
    if value is None or not math.isfinite(float(value)):
        raise FitError(f"{what} is {value!r} on the window's train split; it must be a finite number")
    return float(value)


@dataclasses.dataclass(frozen=True)
class Imputed:
    """Exact sums of one numeric after imputation (and clipping) over the train rows."""

    rows: int
    total: Fraction
    squares: Fraction
    minimum: float
    maximum: float
    zeros: int

    @property
    def mean(self) -> Fraction:
        return self.total / self.rows

    @property
    def variance(self) -> Fraction | None:
        """The sample variance (n - 1), exact; None below 2 rows."""
        if self.rows < 2:
            return None
        n = self.rows
        return max(Fraction(0), (n * self.squares - self.total * self.total) / (n * (n - 1)))


def imputed(raw: Moments, items: list, rows: int, fill: float, clip: dict | None) -> Imputed:
    """The column with its missing values filled and, if `clip`, clipped. Unclipped, the
    sums are the raw ones plus the fills (exact); clipped, the grids' weighted values
    (`day_statistics.weighted_items`) clipped."""
    missing = rows - raw.count
    if clip is None:
        m = raw.filled(rows, fill)
        return Imputed(rows, m.total, m.squares, m.minimum, m.maximum, m.zeros)
    lower, upper = clip["lower"], clip["upper"]

    def clipped(v: float) -> float:
        return min(max(v, lower), upper)

    points = [(clipped(v), w) for v, w in items]
    if missing:
        points.append((clipped(fill), missing))
    # The grids' weights add up to `raw.count`, the fills' to the missing: `rows` in all.
    total = sum((Fraction(v) * w for v, w in points), Fraction(0))
    squares = sum((Fraction(v) * Fraction(v) * w for v, w in points), Fraction(0))
    zeros = sum(w for v, w in points if v == 0)
    values = [v for v, _ in points]
    return Imputed(rows, total, squares, min(values), max(values), int(zeros))


def fit_numeric(
    stats: SplitStatistics, columns: list[dict[str, Any]], rows: int
) -> tuple[list[dict], list[dict], list[str], dict[str, Imputed]]:
    """(numeric entries of transform.json, dropped features, constant columns, the
    imputed sums of each fitted column by name)."""
    fitted, dropped, constant, sums = [], [], [], {}
    for col in columns:
        c = col["name"]
        numeric = stats.numeric[c]
        raw = numeric.overall
        if not raw.count:
            dropped.append({"name": c, "reason": f"no values on the window's train split ({rows} rows)"})
            continue
        quantiles = col["impute"] != "mean" or col["clip_quantiles"] or col["scaling"] == "robust"
        items = weighted_items(numeric) if quantiles else []
        fill = _finite(
            raw.mean if col["impute"] == "mean" else quantile(items, 0.5), f"{col['impute']} of {c}"
        )
        clip = None
        if col["clip_quantiles"]:
            low, high = col["clip_quantiles"]
            lower = _finite(quantile(items, low), f"quantile {low} of {c}")
            upper = _finite(quantile(items, high), f"quantile {high} of {c}")
            clip = {"lower": lower, "upper": upper, "quantiles": list(col["clip_quantiles"])}
        x = imputed(raw, items, rows, fill, clip)
        if col["scaling"] == "none":
            center, spread = 0.0, 1.0
        elif col["scaling"] == "standard":
            variance = x.variance
            center = to_float(x.mean)
            spread = None if variance is None else math.sqrt(to_float(variance))
        elif col["scaling"] == "minmax":
            center, spread = x.minimum, x.maximum - x.minimum
        else:  # robust: quantiles of the imputed column; clipping is monotone
            missing = (fill, rows - raw.count)
            q1, q2, q3 = (quantile(items, q, extra=missing) for q in (0.25, 0.5, 0.75))
            if clip:
                q1, q2, q3 = (min(max(q, clip["lower"]), clip["upper"]) for q in (q1, q2, q3))
            center, spread = q2, q3 - q1
        center = _finite(center, f"{col['scaling']} center of {c}")
        if col["scaling"] == "none":
            scale = 1.0
        elif spread is not None and math.isfinite(spread) and spread > 0:
            scale = float(spread)
        else:
            # A constant column (or one train row) has no spread: centre it, do not divide by 0.
            scale = 1.0
            constant.append(c)
        sums[c] = x
        fitted.append(
            {
                "name": c,
                "output": layout.encoded_name("numeric", c),
                "impute": col["impute"],
                "fill": fill,
                "clip": clip,
                "scaling": col["scaling"],
                "center": center,
                "scale": scale,
            }
        )
    return fitted, dropped, constant, sums


def fit_vocabularies(
    stats: SplitStatistics, categorical: list[dict[str, Any]], text: list[dict[str, Any]]
) -> dict[str, tuple[list[str], list[int], int]]:
    """Per vocab-encoded feature: (values, counts, values below min_frequency or beyond
    the cap), ordered by count descending, then value (ties never depend on the days)."""
    out = {}
    text_names = {t["name"] for t in text}
    for col in [c for c in categorical if c["encoding"] == "vocab"] + [
        t for t in text if t["encoding"] == "vocab"
    ]:
        name = col["name"]
        if name in text_names:
            counts = stats.text[name]
        else:
            counts = Counter()
            for per_class in stats.categorical[name].values():
                counts.update(per_class)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        cap = _capacity(col, text_names)
        kept = [(v, n) for v, n in ranked if n >= col["min_frequency"]][:cap]
        out[name] = ([v for v, _ in kept], [int(n) for _, n in kept], len(ranked) - len(kept))
    return out


def _capacity(col: dict[str, Any], text_names: set[str]) -> int:
    if col["name"] in text_names:
        return max(0, int(col["vocab_size"]) - 2)
    return int(col["max_vocab"])


def categorical_entries(cols: list[dict[str, Any]], vocabs: dict) -> list[dict[str, Any]]:
    out = []
    for col in cols:
        entry: dict[str, Any] = {
            "name": col["name"],
            "output": layout.encoded_name("categorical", col["name"]),
            "encoding": col["encoding"],
            "missing_id": 0,
        }
        if col["encoding"] == "vocab":
            values, counts, rare = vocabs[col["name"]]
            entry |= {
                "unseen_id": 1,
                "vocabulary": values,
                "counts": counts,
                "min_frequency": col["min_frequency"],
                "max_size": col["max_vocab"],
                "rare_values": rare,
                "cardinality": len(values) + 2,
            }
        else:
            entry |= {"buckets": col["buckets"], "cardinality": col["buckets"]}
        out.append(entry)
    return out


def tokenizer_file_name(column: str) -> str:
    """The name a text feature's tokenizer file has beside ``transform.json``."""
    return f"tokenizer__{column}.json"


def text_entries(
    cols: list[dict[str, Any]], vocabs: dict, tokenizers: Mapping[str, Mapping[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The document's text entries; ``tokenizers``: per ``encoding: tokenizer`` feature, its
    file's facts (``lakeprep_contracts.encode.tokenizer_facts``)."""
    out = []
    for col in cols:
        entry: dict[str, Any] = {
            "name": col["name"],
            "output": layout.encoded_name("text", col["name"]),
            "encoding": col["encoding"],
            "max_tokens": col["max_tokens"],
            "padding_id": 0,
        }
        if col["encoding"] == SUBWORD:
            facts = (tokenizers or {}).get(col["name"])
            if facts is None:
                raise FitError(f"text {col['name']!r}: encoding tokenizer, its tokenizer file not read")
            entry |= {
                "tokenizer_file": {
                    "file": tokenizer_file_name(col["name"]),
                    "sha256": facts["sha256"],
                    "vocab_size": facts["vocab_size"],
                },
                "cardinality": facts["vocab_size"],
            }
            out.append(entry)
            continue
        entry["tokenizer"] = dict(TOKENIZER)
        if col["encoding"] == "vocab":
            values, counts, _ = vocabs[col["name"]]
            entry |= {
                "unseen_id": 1,
                "vocabulary": values,
                "counts": counts,
                "min_frequency": col["min_frequency"],
                "max_size": col["vocab_size"],
                "cardinality": len(values) + 2,
            }
        else:
            entry |= {"buckets": col["vocab_size"], "cardinality": col["vocab_size"]}
        out.append(entry)
    return out


def fit(
    stats: SplitStatistics, p: FitParams, tokenizers: Mapping[str, Mapping[str, Any]] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the transform document, notes for the report) from the train split's statistics.

    The notes: `constant_numerics` (no spread on the train split) and `warnings` (what
    selection and PCA found worth a look).
    """
    from lakeprep_contracts import selection

    rows = stats.rows
    if rows == 0:
        raise FitError(
            f"window {', '.join(stats.partitions) or '(no days)'}: no train rows to fit the transform on; "
            "widen window.days or the sample fractions"
        )
    numeric, dropped, constant, sums = fit_numeric(stats, p.numeric, rows)
    vocabs = fit_vocabularies(stats, p.categorical, p.text)
    categorical = categorical_entries(p.categorical, vocabs)
    text = text_entries(p.text, vocabs, tokenizers)
    chosen = selection.select_and_project(stats, p, numeric, categorical, text, sums)
    return {
        "format_version": FORMAT_VERSION,
        "dataset": p.dataset,
        "logical_date": p.logical_date,
        "run_id": p.run_id,
        "fitted_on": {"split": "train", "rows": rows, "partitions": list(stats.partitions)},
        "contract": p.contract,
        "id": {"column": p.id_column, "output": layout.ID},
        "label": {
            "column": p.label_column,
            "output": layout.LABEL,
            "classes": p.label_classes,
            **({"names": p.label_names} if p.label_names is not None else {}),
            **(
                {"type": labels.CONTINUOUS, "target": fit_target(stats, p.label_column)}
                if p.label_type == labels.CONTINUOUS
                else {}
            ),
        },
        "numeric": chosen.numeric,
        "categorical": chosen.categorical,
        "text": text,
        "dropped": dropped + chosen.dropped,
        "selection": chosen.selection,
        "pca": chosen.pca,
        "hash": dict(HASH),
    }, {"constant_numerics": constant, "warnings": chosen.warnings}
