"""Fit the run's one transform on the train split of its window.

    spark-submit --py-files lakeprep_jobs.zip lakeprep_jobs/fit_transform.py \
        --input <lake>/sample/flights/dt=2013-01-01 ... --input <lake>/sample/flights/dt=2013-01-03 \
        --output <lake>/fit_transform/flights/dt=2013-01-03 --params '{...}'

Everything learned from data is learned here, once per run, from the rows of the
window's sampled days whose `split` is `train` (validation and test rows never enter a
statistic), and written as `transform.json` (docs/TRANSFORM.md) plus a Spark
`PipelineModel` built from it. `export_shards` then applies it unchanged to every split.

Passes over the train rows (each reads its columns from the Parquet): the exact counts
and means of the raw values (imputation fills), an aggregate for the quantiles (median
fills, clipping), the exact means and standard deviations of the imputed and clipped
values (`standard` scaling) and an aggregate for `minmax`/`robust`, and one grouped count for all vocabularies
together (categorical values and text tokens as `(feature, value)` pairs, ranked per
feature in Spark so only the kept entries reach the driver). Vocabulary order is count
descending, then value: ties never depend on partitioning. Spark ML's
StringIndexer/CountVectorizer are not used because neither has both a frequency cutoff
and a size cap with a defined tie order.

Then selection and PCA (docs/TRANSFORM.md, "Selection and PCA"), on the train rows
encoded by the document's own SQL, cached once: an exact summary pass (mean, variance,
min, max, non-zeros), `VarianceThresholdSelector`'s rule on that variance, per feature
type the selector's test (for the scores) and `UnivariateFeatureSelector` (for the
decision), and `PCA`. Each is skipped when its knob is off; with the defaults only the
variance threshold runs.

Means, variances and standard deviations are exact sums rounded once
(`exact_sums.py`), so the document does not change in its last bits when the same rows
arrive in another order (a backfill's parallel runs, a rerun). Not so yet: the
quantiles (`percentile_approx` merges per-partition sketches, which is exact only while
a column has fewer than about 5,000 values), the univariate tests' statistics and PCA's components (Spark ML
adds doubles in arrival order) can differ in their last bits (docs/MANIFEST.md).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lakeprep_contracts import layout
from lakeprep_contracts.text import TOKENIZER
from lakeprep_jobs import common
from lakeprep_jobs.exact_sums import exact_moments
from lakeprep_jobs.transform import pipeline_model

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FORMAT_VERSION = 1
HASH = {"function": "xxhash64", "seed": 42, "input": "utf-8"}
# percentile_approx accuracy: relative rank error 1/accuracy (Spark's default is 10000).
QUANTILE_ACCURACY = 10000
SELECTOR_MODES = ("numTopFeatures", "percentile", "fpr", "fdr", "fwe")
LABEL_TYPES = ("categorical", "continuous")
# What UnivariateFeatureSelector.fit uses when selectionThreshold is not set.
SELECTOR_DEFAULT_THRESHOLDS = {"numTopFeatures": 50, "percentile": 0.1, "fpr": 0.05, "fdr": 0.05, "fwe": 0.05}
# PCA's covariance is RowMatrix.computeCovariance: a dense n x n matrix on the driver, refused
# above 65535 columns (checkNumColumns), with a memory warning above 10000.
PCA_MAX_COLUMNS = 65535
PCA_WARN_COLUMNS = 10000
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

    def __post_init__(self) -> None:
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
        # Refused before Spark starts when no selector can bring the count under the limit.
        if self.pca and self.selector_mode is None:
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
            f"PCA over {columns} numerics: Spark's PCA builds a dense {columns} x {columns} covariance "
            f"(RowMatrix) and refuses more than {PCA_MAX_COLUMNS} columns; select fewer numerics "
            "first (selector_mode) or turn PCA off"
        )


class FitError(ValueError):
    """A statistic cannot be fitted (no values, not finite); names the column."""


def _finite(value: Any, what: str) -> float:
    if value is None or not math.isfinite(float(value)):
        raise FitError(f"{what} is {value!r} on the window's train split; it must be a finite number")
    return float(value)


def fit_numeric(
    train: DataFrame, columns: list[dict[str, Any]], rows: int
) -> tuple[list[dict], list[dict], list[str]]:
    """(numeric entries of transform.json, dropped features, constant columns).

    One aggregate over `train` (`rows` rows) for the counts and means, one for the
    quantiles where a column uses them, and one more for the scaling of clipped columns
    (standard scaling of an unclipped one follows from the first: `Moments.filled`).
    """
    from pyspark.sql import functions as F

    if not columns:
        return [], [], []

    def value(c: str):
        return F.nanvl(F.col(c).cast("double"), F.lit(None).cast("double"))

    # Counts and means exact (the same bits whatever the row order: exact_sums.py);
    # the quantiles in a second job, only for the columns that use them.
    raw = exact_moments(train, {col["name"]: value(col["name"]) for col in columns})
    first = [
        F.percentile_approx(value(c), [0.5, *(col["clip_quantiles"] or [])], QUANTILE_ACCURACY).alias(c)
        for col in columns
        if (c := col["name"]) and (col["impute"] != "mean" or col["clip_quantiles"])
    ]
    quantiles = train.agg(*first).collect()[0].asDict() if first else {}

    fitted, dropped, constant = [], [], []
    prepared = []  # (col, fill, clip) of the columns that have values
    for col in columns:
        c = col["name"]
        if not raw[c].count:
            dropped.append({"name": c, "reason": f"no values on the window's train split ({rows} rows)"})
            continue
        q = quantiles.get(c)
        fill = _finite(raw[c].mean if col["impute"] == "mean" else q[0], f"{col['impute']} of {c}")
        clip = None
        if col["clip_quantiles"]:
            lower = _finite(q[1], f"quantile {col['clip_quantiles'][0]} of {c}")
            upper = _finite(q[2], f"quantile {col['clip_quantiles'][1]} of {c}")
            clip = {"lower": lower, "upper": upper, "quantiles": list(col["clip_quantiles"])}
        prepared.append((col, fill, clip))

    def imputed(c: str, fill: float, clip: dict | None):
        x = F.coalesce(value(c), F.lit(fill))
        if clip:
            x = F.least(F.greatest(x, F.lit(clip["lower"])), F.lit(clip["upper"]))
        return x

    second, standard = [], {}
    scaled: dict[str, Any] = {}
    for col, fill, clip in prepared:
        c, x = col["name"], imputed(col["name"], fill, clip)
        if col["scaling"] == "standard" and not clip:
            # The imputed column's moments follow from the raw ones (exact sums): no pass.
            m = raw[c].filled(rows, fill)
            scaled[f"center__{c}"], scaled[f"spread__{c}"] = m.mean, m.stddev
        elif col["scaling"] == "standard":
            standard[c] = x
        elif col["scaling"] == "minmax":
            second += [F.min(x).alias(f"center__{c}"), (F.max(x) - F.min(x)).alias(f"spread__{c}")]
        elif col["scaling"] == "robust":
            q = F.percentile_approx(x, [0.25, 0.5, 0.75], QUANTILE_ACCURACY)
            second += [q[1].alias(f"center__{c}"), (q[2] - q[0]).alias(f"spread__{c}")]
    scaled.update(train.agg(*second).collect()[0].asDict() if second else {})
    for c, m in exact_moments(train, standard).items():
        scaled[f"center__{c}"], scaled[f"spread__{c}"] = m.mean, m.stddev

    for col, fill, clip in prepared:
        c = col["name"]
        if col["scaling"] == "none":
            center, scale = 0.0, 1.0
        else:
            center = _finite(scaled[f"center__{c}"], f"{col['scaling']} center of {c}")
            spread = scaled[f"spread__{c}"]
            # A constant column (or one train row) has no spread: centre it, do not divide by 0.
            if spread is not None and math.isfinite(spread) and spread > 0:
                scale = float(spread)
            else:
                scale = 1.0
                constant.append(c)
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
    return fitted, dropped, constant


def fit_vocabularies(
    train: DataFrame, categorical: list[dict[str, Any]], text: list[dict[str, Any]]
) -> dict[str, tuple[list[str], list[int], int]]:
    """Per vocab-encoded feature: (values, counts, values below min_frequency or beyond the cap).

    One grouped count over `(feature, value)` pairs of every such feature.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    wanted = [c for c in categorical if c["encoding"] == "vocab"] + [
        t for t in text if t["encoding"] == "vocab"
    ]
    if not wanted:
        return {}
    text_names = {t["name"] for t in text}
    pairs = None
    for col in wanted:
        c = col["name"]
        values = F.col(c) if c in text_names else F.array(F.col(c))
        part = train.select(F.lit(c).alias("feature"), F.explode(values).alias("value")).filter(
            F.col("value").isNotNull()
        )
        pairs = part if pairs is None else pairs.unionByName(part)
    counts = pairs.groupBy("feature", "value").count()
    # Ids 0 and 1 are reserved (missing/padding, unseen): a text vocabulary of
    # `vocab_size` ids holds vocab_size - 2 tokens.
    caps = F.create_map(*[x for c in wanted for x in (F.lit(c["name"]), F.lit(_capacity(c, text_names)))])
    floors = F.create_map(*[x for c in wanted for x in (F.lit(c["name"]), F.lit(c["min_frequency"]))])
    ranked = counts.withColumn(
        "rank", F.row_number().over(Window.partitionBy("feature").orderBy(F.desc("count"), F.asc("value")))
    ).withColumn(
        "kept", (F.col("count") >= floors[F.col("feature")]) & (F.col("rank") <= caps[F.col("feature")])
    )
    # One row per feature, one job: its distinct values and the kept ones in rank order.
    per_feature = ranked.groupBy("feature").agg(
        F.count(F.lit(1)).alias("distinct"),
        F.sort_array(
            F.collect_list(F.when(F.col("kept"), F.struct("rank", "value", F.col("count").alias("n"))))
        ).alias("kept"),
    )
    out: dict[str, tuple[list[str], list[int], int]] = {c["name"]: ([], [], 0) for c in wanted}
    for row in per_feature.collect():
        kept = row["kept"]
        out[row["feature"]] = (
            [k["value"] for k in kept],
            [int(k["n"]) for k in kept],
            int(row["distinct"]) - len(kept),
        )
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


def text_entries(cols: list[dict[str, Any]], vocabs: dict) -> list[dict[str, Any]]:
    out = []
    for col in cols:
        entry: dict[str, Any] = {
            "name": col["name"],
            "output": layout.encoded_name("text", col["name"]),
            "encoding": col["encoding"],
            "tokenizer": dict(TOKENIZER),
            "max_tokens": col["max_tokens"],
            "padding_id": 0,
        }
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


# ------------------------------------------------------------------ selection and PCA

TEST_NAMES = {
    "variance": "variance",
    "chi_squared": "chi-squared",
    "anova_f": "ANOVA F",
    "f_regression": "F-regression",
}
# (feature type, label type) -> the test UnivariateFeatureSelector runs, and its Scala object.
UNIVARIATE_TESTS = {
    ("continuous", "categorical"): ("anova_f", "ANOVATest"),
    ("continuous", "continuous"): ("f_regression", "FValueTest"),
    ("categorical", "categorical"): ("chi_squared", "ChiSquareTest"),
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


def _warn(warnings: list[str], message: str) -> None:
    common.log.warning("fit_transform: %s", message)
    warnings.append(message)


def encoded_train(train: DataFrame, numeric: list[dict], categorical: list[dict]) -> DataFrame:
    """The train rows as the fitted transform encodes them: what selection and PCA see.

    The very SQL `export_shards` applies (`lakeprep_jobs.transform`), so a score is the
    score of the feature the model gets. Columns are positional (`n0..`, `c0..`, label as
    double): any spec column name is then safe for `VectorAssembler`.
    """
    from lakeprep_jobs.transform import categorical_expr, numeric_expr, quoted

    exprs = [f"CAST({quoted(layout.LABEL)} AS DOUBLE) AS label"]
    exprs += [f"{numeric_expr(e)} AS n{i}" for i, e in enumerate(numeric)]
    exprs += [f"CAST({categorical_expr(e)} AS DOUBLE) AS c{i}" for i, e in enumerate(categorical)]
    return train.selectExpr(*exprs)


def _assembled(df: DataFrame, columns: list[str], out: str = "features") -> DataFrame:
    from pyspark.ml.feature import VectorAssembler

    return VectorAssembler(inputCols=columns, outputCol=out).transform(df)


def numeric_summary(encoded: DataFrame, count: int) -> dict[str, list[float]]:
    """Per encoded numeric `n0..n<count-1>`: mean, sample variance, min, max, non-zeros.

    `Summarizer`'s metrics, exact (one pass, exact_sums.py): the variance a threshold is
    compared with, and the mean PCA centres by, do not change with the row order.
    """
    from pyspark.sql import functions as F

    moments = exact_moments(encoded, {f"n{i}": F.col(f"n{i}") for i in range(count)})
    ordered = [moments[f"n{i}"] for i in range(count)]
    return {
        "mean": [m.mean for m in ordered],
        "variance": [0.0 if m.variance is None else m.variance for m in ordered],
        "min": [m.minimum for m in ordered],
        "max": [m.maximum for m in ordered],
        "numNonZeros": [float(m.non_zeros) for m in ordered],
    }


def variance_threshold(
    numeric: list[dict], summary: dict[str, list[float]], threshold: float
) -> tuple[dict[str, Any], list[int]]:
    """`VarianceThresholdSelector`'s rule over the encoded numerics: (the section, kept positions).

    A feature is kept when its sample variance is above the threshold, as Spark's
    selector keeps it; the variance is the summary's exact one, so the choice and the
    score reported are the same number and do not change with the row order.
    """
    kept = [i for i, variance in enumerate(summary["variance"]) if variance > threshold]
    scores = []
    for i, entry in enumerate(numeric):
        variance = summary["variance"][i]
        reason = None
        if i not in kept:
            reason = f"variance {variance:.6g} <= min_variance {threshold:g}"
            if summary["min"][i] == summary["max"][i]:
                reason += " (constant on the window's train split)"
        scores.append(_score(entry, "variance", variance, None, None, i in kept, reason))
    section = {"method": "VarianceThresholdSelector", "threshold": float(threshold), "scores": scores}
    return section, kept


def selection_test(test_object: str, df: DataFrame, features: str, label: str) -> dict[int, tuple]:
    """featureIndex -> (p-value, degrees of freedom, statistic) of the test the selector runs.

    `pyspark.ml.stat` wraps only `ChiSquareTest`; `ANOVATest` and `FValueTest` are called
    the way that wrapper calls its Scala object (same arguments, flattened result).
    UnivariateFeatureSelectorModel keeps only the chosen indices, so the scores come from here.
    """
    from pyspark.ml.common import _java2py, _py2java

    sc = df.sparkSession.sparkContext
    scala = getattr(sc._jvm, f"org.apache.spark.ml.stat.{test_object}")
    result = _java2py(sc, scala.test(*[_py2java(sc, a) for a in (df, features, label, True)]))
    statistic = "statistic" if test_object == "ChiSquareTest" else "fValue"
    return {
        int(r["featureIndex"]): (r["pValue"], r["degreesOfFreedom"], r[statistic]) for r in result.collect()
    }


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
    encoded: DataFrame, p: FitParams, numeric: list[tuple[int, dict]], categorical: list[dict]
) -> tuple[dict[str, Any], set[str], list[str]]:
    """`UnivariateFeatureSelector` per feature type: (the section, kept outputs, warnings).

    One selector per feature type, because Spark's selector takes one `featureType`: the
    numerics (continuous) against the label, and the categorical ids (categorical). The
    mode applies within each: `numTopFeatures` keeps that many of each type, `fdr`/`fwe`
    correct over the features of the same test. Text is not tested (token lists are not
    one value per row) and always kept.
    """
    from pyspark.ml.feature import UnivariateFeatureSelector
    from pyspark.sql import functions as F

    mode, label_type = p.selector_mode, p.selector_label_type
    threshold = float(
        p.selector_threshold if p.selector_threshold is not None else SELECTOR_DEFAULT_THRESHOLDS[mode]
    )
    warnings: list[str] = []
    scores: list[dict] = []
    kept: set[str] = set()
    families = [("continuous", [(f"n{i}", e) for i, e in numeric])]
    if label_type == "categorical":
        # ChiSquareTest fails on a feature with more distinct values than it indexes.
        wide = [(i, e) for i, e in enumerate(categorical) if e["cardinality"] > CHI_SQUARED_MAX_CATEGORIES]
        counts = (
            encoded.agg(*[F.countDistinct(f"c{i}").alias(f"c{i}") for i, _ in wide]).first().asDict()
            if wide
            else {}
        )
        testable = []
        for i, e in enumerate(categorical):
            distinct = counts.get(f"c{i}", 0)
            if distinct > CHI_SQUARED_MAX_CATEGORIES:
                reason = (
                    f"not tested: {distinct} distinct ids on the train split, more than the "
                    f"chi-squared test's {CHI_SQUARED_MAX_CATEGORIES}; kept"
                )
                _warn(warnings, f"categorical {e['name']!r}: {reason}")
                scores.append(_score(e, None, None, None, None, True, reason))
                kept.add(e["output"])
            else:
                testable.append((f"c{i}", e))
        families.append(("categorical", testable))
    else:
        for e in categorical:
            reason = "not tested: Spark has no test of a categorical feature against a continuous label; kept"
            scores.append(_score(e, None, None, None, None, True, reason))
            kept.add(e["output"])
    tested = 0
    for feature_type, features in families:
        if not features:
            continue
        test, scala = UNIVARIATE_TESTS[(feature_type, label_type)]
        vectors = _assembled(encoded, [c for c, _ in features])
        results = selection_test(scala, vectors, "features", "label")
        selector = (
            UnivariateFeatureSelector(featuresCol="features", labelCol="label", selectionMode=mode)
            .setFeatureType(feature_type)
            .setLabelType(label_type)
            .setSelectionThreshold(threshold)
        )
        chosen = {int(i) for i in selector.fit(vectors).selectedFeatures}
        tested += len(features)
        for j, (_, entry) in enumerate(features):
            p_value, dof, statistic = results[j]
            reason = None
            if j not in chosen:
                reason = _univariate_reason(test, _number(p_value), mode, threshold, len(features))
            else:
                kept.add(entry["output"])
            scores.append(_score(entry, test, statistic, p_value, dof, j in chosen, reason))
    tested_scores = [s for s in scores if s["test"]]
    if tested and not any(s["kept"] for s in tested_scores):
        listed = "; ".join(
            f"{s['name']} ({TEST_NAMES[s['test']]} statistic {s['statistic']!r}, p-value {s['p_value']!r})"
            for s in tested_scores
        )
        raise FitError(
            f"selector_mode {mode} with threshold {threshold:g} keeps none of the {tested} features it "
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


def fit_pca(
    encoded: DataFrame,
    p: FitParams,
    numeric: list[tuple[int, dict]],
    summary: dict[str, list[float]],
    *,
    rows: int,
    dropped: list[dict[str, str]],
) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """`pyspark.ml.feature.PCA` of the kept encoded numerics: (the section, outputs, warnings).

    Spark's PCA finds the components of the covariance (it centres while fitting) but its
    `transform` multiplies the raw vector, uncentred. The document records the train mean
    and both appliers subtract it, so a component has mean 0 on the train split whatever
    the scaling (with `standard` scaling the mean is already ~0 and this changes nothing).
    With `pca_variance`, PCA is fitted with k = all inputs and the smallest k whose
    explained variance reaches the share is kept (the leading k columns of that fit are
    the k-component fit).
    """
    from pyspark.ml.feature import PCA

    warnings: list[str] = []
    names = [e["name"] for _, e in numeric]
    n = len(numeric)
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
    if n > PCA_WARN_COLUMNS:
        megabytes = n * n * 8 / 1e6
        _warn(warnings, f"PCA over {n} numerics: the covariance alone takes {megabytes:.0f} MB on the driver")
    sparse = []
    for i, entry in numeric:
        zeros = 1.0 - summary["numNonZeros"][i] / rows
        if zeros >= SPARSE_ZERO_SHARE and summary["mean"][i] != 0.0:
            sparse.append(f"{entry['output']} ({zeros:.0%} zeros, mean {summary['mean'][i]:.6g})")
    if sparse:
        _warn(
            warnings,
            "PCA inputs " + ", ".join(sparse) + " are sparse on the train split; centring them by "
            "the recorded mean makes every projected row dense",
        )
    vectors = _assembled(encoded, [f"n{i}" for i, _ in numeric], "pca_inputs")
    k_fit = n if p.pca_variance is not None else int(p.pca_components)
    model = PCA(k=k_fit, inputCol="pca_inputs").fit(vectors)
    pc = model.pc.toArray()  # n x k_fit; column j is component j, by descending variance
    explained = [float(v) for v in model.explainedVariance.toArray()]
    k = k_fit
    if p.pca_variance is not None:
        total, k = 0.0, n
        for j, share in enumerate(explained):
            total += share
            if total >= p.pca_variance - 1e-12:
                k = j + 1
                break
    components = [
        [_finite(pc[i, j], f"PCA component {j + 1} weight of {names[i]}") for i in range(n)] for j in range(k)
    ]
    outputs = [layout.encoded_name("numeric", f"pc{j + 1}") for j in range(k)]
    section = {
        "method": "PCA",
        "k": k,
        "variance_target": p.pca_variance,
        "inputs": [e for _, e in numeric],
        "mean": [_finite(summary["mean"][i], f"train mean of {e['output']}") for i, e in numeric],
        "components": components,
        "explained_variance": [min(1.0, max(0.0, v)) for v in explained[:k]],
        "outputs": outputs,
    }
    entries = [{"name": f"pc{j + 1}", "output": outputs[j], "pca_component": j + 1} for j in range(k)]
    return section, entries, warnings


def select_and_project(
    train: DataFrame,
    p: FitParams,
    numeric: list[dict],
    categorical: list[dict],
    text: list[dict],
    *,
    rows: int,
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
    # Categorical ids are only needed by the univariate tests.
    encoded = encoded_train(train, numeric, categorical if univariate_on else []).cache()
    try:
        summary = numeric_summary(encoded, len(numeric)) if numeric else {}
        selection: dict[str, Any] = {"variance_threshold": None, "univariate": None}
        warnings: list[str] = []
        positions = list(range(len(numeric)))
        if variance_on:
            selection["variance_threshold"], positions = variance_threshold(numeric, summary, p.min_variance)
        kept_outputs = {numeric[i]["output"] for i in positions} | {e["output"] for e in categorical}
        if univariate_on:
            selection["univariate"], kept_outputs, found = univariate_selection(
                encoded, p, [(i, numeric[i]) for i in positions], categorical
            )
            warnings += found
        dropped = []
        for section in (selection["variance_threshold"], selection["univariate"]):
            for score in section["scores"] if section else []:
                if not score["kept"]:
                    dropped.append({"name": score["name"], "reason": score["reason"]})
        kept_numeric = [(i, numeric[i]) for i in positions if numeric[i]["output"] in kept_outputs]
        kept_categorical = [e for e in categorical if e["output"] in kept_outputs]
        if (numeric or categorical or text) and not (kept_numeric or kept_categorical or text):
            listed = "; ".join(f"{d['name']}: {d['reason']}" for d in dropped)
            raise FitError(f"selection leaves no features on the window's train split ({listed})")
        pca = None
        outputs = [e for _, e in kept_numeric]
        if p.pca:
            pca, outputs, found = fit_pca(encoded, p, kept_numeric, summary, rows=rows, dropped=dropped)
            warnings += found
        chosen = selection if (variance_on or univariate_on) else None
        return Selected(outputs, kept_categorical, dropped, chosen, pca, warnings)
    finally:
        encoded.unpersist()


def fit(
    train: DataFrame, p: FitParams, *, rows: int, partitions: list[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Pure given the train rows: (the transform document, notes for the report).

    The notes: `constant_numerics` (no spread on the train split) and `warnings` (what
    selection and PCA found worth a look, also logged).
    """
    numeric, dropped, constant = fit_numeric(train, p.numeric, rows)
    vocabs = fit_vocabularies(train, p.categorical, p.text)
    categorical = categorical_entries(p.categorical, vocabs)
    text = text_entries(p.text, vocabs)
    chosen = select_and_project(train, p, numeric, categorical, text, rows=rows)
    return {
        "format_version": FORMAT_VERSION,
        "dataset": p.dataset,
        "logical_date": p.logical_date,
        "run_id": p.run_id,
        "fitted_on": {"split": "train", "rows": rows, "partitions": partitions},
        "contract": p.contract,
        "id": {"column": p.id_column, "output": layout.ID},
        "label": {"column": p.label_column, "output": layout.LABEL, "classes": p.label_classes},
        "numeric": chosen.numeric,
        "categorical": chosen.categorical,
        "text": text,
        "dropped": dropped + chosen.dropped,
        "selection": chosen.selection,
        "pca": chosen.pca,
        "hash": dict(HASH),
    }, {"constant_numerics": constant, "warnings": chosen.warnings}


def check_document(doc: dict[str, Any], where: str) -> None:
    """The writer checks what every reader will check (the JSON Schema)."""
    from lakeprep_contracts import documents

    documents.require("transform", doc, where)


def run(spark: SparkSession, inputs: list[str], output: str, p: FitParams) -> dict[str, Any]:
    from pyspark.sql import functions as F

    window = common.read_complete(spark, inputs)
    # Not cached: each of the fit's few passes reads only the columns it needs from the
    # Parquet, which costs less than building an in-memory cache of every column (ids
    # included) for them (benchmarks/RESULTS.md).
    train = window.filter(F.col(layout.SPLIT) == "train")
    counts = {r[0]: int(r[1]) for r in window.groupBy(layout.SPLIT).count().collect()}
    rows = counts.get("train", 0)
    if rows == 0:
        raise FitError(
            f"window {inputs[0]} .. {inputs[-1]}: no train rows to fit the transform on "
            f"(rows per split {counts}); widen window.days or the sample fractions"
        )
    doc, notes = fit(train, p, rows=rows, partitions=list(inputs))
    check_document(doc, f"{output}/{layout.TRANSFORM}")
    text = json.dumps(doc, indent=2, sort_keys=True, allow_nan=False)
    report = {
        "stage": "fit_transform",
        "inputs": inputs,
        "rows_in": sum(counts.values()),
        "rows_out": sum(counts.values()),
        "rows_quarantined": 0,
        "fitted_on_rows": rows,
        "rows_per_split": counts,
        "dropped": doc["dropped"],
        "vocabulary_sizes": {
            e["name"]: len(e["vocabulary"]) for e in doc["categorical"] + doc["text"] if "vocabulary" in e
        },
        # Centred with scale 1; the variance threshold (min_variance) drops them.
        "constant_numerics": notes["constant_numerics"],
        "selected": {
            "numeric": [e["output"] for e in doc["numeric"]],
            "categorical": [e["output"] for e in doc["categorical"]],
        },
        "pca": None
        if doc["pca"] is None
        else {"k": doc["pca"]["k"], "explained_variance": sum(doc["pca"]["explained_variance"])},
        "warnings": notes["warnings"],
    }
    with common.PartitionCommit(spark, output) as staging:
        common.write_text(spark, layout.join(staging, layout.TRANSFORM), text)
        pipeline_model(doc).write().overwrite().save(layout.join(staging, layout.SPARK_MODEL_DIR))
        common.write_report(spark, staging, report)
        common.write_success(spark, staging)
    return report


STAGE = common.Stage("fit_transform", __doc__.splitlines()[0], FitParams, run)


def main(argv: Sequence[str] | None = None) -> None:
    common.stage_main(argv, STAGE)


if __name__ == "__main__":
    main()
