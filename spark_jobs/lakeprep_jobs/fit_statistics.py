"""A day's mergeable fit statistics: everything the window's fit needs, without its rows.

The `sample` stage writes them once per day, beside the day's rows, as
`_fit_statistics.json` (`lakeprep_contracts.layout.FIT_STATISTICS`); the window's fit
then merges the days' documents (`lakeprep_contracts.day_statistics`,
`lakeprep_contracts.window_fit`) instead of reading the window's rows again. Per split and class:

- the rows;
- per numeric feature, its exact moments (`exact_sums`: count, zeros, exact sum and sum
  of squares as fractions, min, max; NaN counts as missing, as the transform says),
  which add exactly across days, and, on the train split, its quantile grid: the values
  at ranks 0, 1/G, ..., 1 (`percentile_approx`, G = `day_statistics.GRID`), from which the
  window's median fills, clipping bounds and robust scaling are merged. Not a KLL sketch
  (Spark's `kll_sketch_agg_double`): its random compaction gave a different sketch on
  every run of the same day (measured: 3 runs, 3 sketches), and reruns must be
  byte-identical;
- per categorical feature, the count of each value (vocab encoding) or of each hashed
  id (hash encoding; the id needs only the bucket count), per class: the vocabularies
  and the chi-squared contingency tables of the window follow by adding;
- per vocab-encoded text feature, the count of each token; per text whose tokenizer is
  trained on the window (`tokenizer_model`), the count of each word of its kept text
  (lower-cased, split as RegexTokenizer splits: `lakeprep_contracts.text.TOKENIZER`);
- with a continuous label (`target` in the profile), the exact moments of its value (the
  rows' `target`), from which the window's fit standardises the target; with univariate
  selection too (`target_products`), for each numeric the exact sum of its products with
  the target where it is present, and of the target where it is missing: F-regression's
  sum of products of the imputed feature and the target follows exactly for any fill;
- with PCA (`cross_products`), for each pair of numerics the exact sum of their
  products where both are present, and of each where the other is missing: the
  covariance of the imputed features follows exactly for any fill.

Three Spark jobs over the day's sampled rows, whatever the number of features: the
moments (one `groupBy`), the quantile grids (one aggregate), the counts (one `groupBy`).
"""

from __future__ import annotations

from itertools import combinations
from typing import TYPE_CHECKING, Any

from lakeprep_contracts import labels, layout
from lakeprep_contracts.day_statistics import (
    FORMAT_VERSION,
    GRID,
    QUANTILE_ACCURACY,
    ROWS,
    TARGET,
    counts_tokens,
    cross_key,
    target_cross_keys,
)
from lakeprep_contracts.text import TOKENIZER
from lakeprep_jobs.exact_sums import exact_moments_by
from lakeprep_jobs.transform import quoted

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# Veltkamp's splitter for doubles: 2**27 + 1.
_SPLITTER = 134217729.0


def _value(name: str) -> Column:
    """A numeric feature as the transform reads it: double, NaN as missing (null)."""
    from pyspark.sql import functions as F

    return F.nanvl(F.col(quoted(name)).cast("double"), F.lit(None).cast("double"))


def hashed_id(value: Column, buckets: int) -> Column:
    """A hashed categorical's id, ``1 + pmod(xxhash64(value), buckets - 1)``: Spark's own
    function, which ``lakeprep_contracts.encode.hashed_ids`` mirrors (tests/training/test_transform.py)."""
    from pyspark.sql import functions as F

    return (F.pmod(F.xxhash64(value), F.lit(buckets - 1)) + 1).cast("int")


def _halves(x: Column) -> tuple[Column, Column]:
    """Veltkamp's split: x = hi + lo exactly, each with at most 26 significant bits."""
    from pyspark.sql import functions as F

    c = F.lit(_SPLITTER) * x
    hi = c - (c - x)
    return hi, x - hi


def _product_parts(a: Column, b: Column) -> tuple[Column, Column]:
    """(p, e) with p + e = a * b exactly (Dekker's two-product without FMA): p the rounded
    product, e its rounding error. Exact unless a product overflows or its error
    underflows (values beyond about 1e150 or below 1e-150 in magnitude)."""
    p = a * b
    ah, al = _halves(a)
    bh, bl = _halves(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def numeric_values(df: DataFrame, profile: dict[str, Any]) -> dict[str, Column]:
    """The expressions whose exact moments the statistics record, by name."""
    from pyspark.sql import functions as F

    values = {ROWS: F.lit(1.0)}
    values |= {name: _value(name) for name in profile["numeric"]}
    if profile.get("target"):
        # A continuous label's value: preprocess wrote it finite (validate quarantined the rest).
        values[TARGET] = F.col(labels.TARGET).cast("double")
    if profile.get("target_products"):
        y = F.col(labels.TARGET).cast("double")
        for name in profile["numeric"]:
            x = _value(name)
            p, e = _product_parts(x, y)
            product, error, alone = target_cross_keys(name)
            values[product] = F.when(x.isNotNull(), p)
            values[error] = F.when(x.isNotNull(), e)
            values[alone] = F.when(x.isNull(), y)
    if profile.get("cross_products"):
        for a, b in combinations(profile["numeric"], 2):
            x, y = _value(a), _value(b)
            both = x.isNotNull() & y.isNotNull()
            p, e = _product_parts(x, y)
            values[cross_key("product", a, b)] = F.when(both, p)
            values[cross_key("error", a, b)] = F.when(both, e)
            values[cross_key("alone", a, b)] = F.when(x.isNotNull() & y.isNull(), x)
            values[cross_key("alone", b, a)] = F.when(y.isNotNull() & x.isNull(), y)
            values[cross_key("neither", a, b)] = F.when(x.isNull() & y.isNull(), F.lit(1.0))
    return values


def _quantile_grids(df: DataFrame, names: list[str]) -> dict[str, list[float] | None]:
    """{numeric: its train values at ranks i / GRID, i = 0..GRID} in one aggregate (None
    where the train split has no value). `percentile_approx` returns values of the
    column; exact while a column has fewer than about QUANTILE_ACCURACY / 2 values."""
    from pyspark.sql import functions as F

    if not names:
        return {}
    ranks = [i / GRID for i in range(GRID + 1)]
    row = (
        df.where(F.col(layout.SPLIT) == "train")
        .agg(
            *[
                F.percentile_approx(_value(n), ranks, QUANTILE_ACCURACY).alias(f"q{i}")
                for i, n in enumerate(names)
            ]
        )
        .first()
    )
    return {
        n: (None if row[f"q{i}"] is None else [float(v) for v in row[f"q{i}"]]) for i, n in enumerate(names)
    }


def _counts(df: DataFrame, profile: dict[str, Any]) -> list[Any]:
    """(split, label, kind, feature, value, count) rows: categorical values or hashed ids
    per class, vocab tokens per split (label null)."""
    from pyspark.sql import functions as F

    parts = []
    for col in profile["categorical"]:
        name = col["name"]
        if col["encoding"] == "vocab":
            value = F.col(quoted(name)).cast("string")
        else:
            value = hashed_id(F.col(quoted(name)).cast("string"), col["buckets"]).cast("string")
        parts.append(
            df.select(
                layout.SPLIT,
                F.col(layout.LABEL).cast("string").alias("label"),
                F.lit("categorical").alias("kind"),
                F.lit(name).alias("feature"),
                value.alias("value"),
            ).where(F.col(quoted(name)).isNotNull())
        )
    for col in profile["text"]:
        if not counts_tokens(col):
            continue
        tokens = F.col(quoted(col["name"]))
        if col["encoding"] != "vocab":  # a kept text (a string): its words, as RegexTokenizer splits
            tokens = F.split(F.lower(tokens), TOKENIZER["pattern"])
        parts.append(
            df.select(
                layout.SPLIT,
                F.lit(None).cast("string").alias("label"),
                F.lit("text").alias("kind"),
                F.lit(col["name"]).alias("feature"),
                F.explode(tokens).alias("value"),
            ).where(F.col("value").isNotNull() & (F.col("value") != ""))
        )
    if not parts:
        return []
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    return union.groupBy(layout.SPLIT, "label", "kind", "feature", "value").count().collect()


def split_statistics(df: DataFrame, profile: dict[str, Any], classes: list[Any]) -> dict[str, Any]:
    """Pure given the rows: the statistics document of `df` (sampled rows with `split`
    and `label`), every split and class present as a key (empty where no row is)."""
    moments = exact_moments_by(df, numeric_values(df, profile), (layout.SPLIT, layout.LABEL))
    grids = _quantile_grids(df, list(profile["numeric"]))
    counts = _counts(df, profile)
    labels = [str(c) for c in classes]
    splits: dict[str, Any] = {}
    for split in layout.SPLITS:
        by_class = {c: _class_moments(moments, split, c) for c in labels}
        splits[split] = {
            "rows": {c: by_class[c].pop(ROWS) for c in labels},
            "moments": by_class,
            "quantile_grids": grids if split == "train" else {},
            "categorical": {col["name"]: {c: [] for c in labels} for col in profile["categorical"]},
            "text": {col["name"]: [] for col in profile["text"] if counts_tokens(col)},
        }
    for r in counts:
        split = splits[r[layout.SPLIT]]
        pair = [r["value"], int(r["count"])]
        if r["kind"] == "categorical":
            split["categorical"][r["feature"]][r["label"]].append(pair)
        else:
            split["text"][r["feature"]].append(pair)
    for split in splits.values():
        for per_class in split["categorical"].values():
            for pairs in per_class.values():
                pairs.sort()
        for pairs in split["text"].values():
            pairs.sort()
    return {
        "format_version": FORMAT_VERSION,
        "label_classes": labels,
        "profile": dict(profile),
        "splits": splits,
    }


def _class_moments(moments: dict[tuple, dict], split: str, label: str) -> dict[str, Any]:
    """{name: moments JSON} of one (split, class); the row count as an int under ROWS."""
    found = next((m for (s, lbl), m in moments.items() if s == split and str(lbl) == label), None)
    if found is None:
        return {ROWS: 0}
    out: dict[str, Any] = {name: m.to_json() for name, m in found.items() if name != ROWS}
    out[ROWS] = found[ROWS].count
    return out
