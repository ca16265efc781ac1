"""Per-partition statistics: what one day's data looks like, as one small JSON document.

`validate` writes it as `_stats.json` (lakeprep_contracts.layout.STATS) inside each
partition it commits, over the rows that passed, and `check_drift` compares days with
it. The format is `contracts/lakeprep_contracts/schemas/stats.schema.json`, version 1:

    {"format_version": 1, "partition": "<uri>", "rows": 900, "columns": {
        "<numeric>": {"kind": "numeric", "count", "nulls", "nan", "distinct_estimate",
                      "min", "max", "mean", "stddev", "quantiles": {"probabilities", "values"}},
        "<categorical>": {"kind": "categorical", "count", "nulls", "distinct_estimate",
                          "top": [{"value", "count"}], "top_k", "other_count"},
        "<text>": {"kind": "text", "count", "nulls", "distinct_estimate", "tokens":
                   {"total", "mean_per_row", "max_per_row"}, "length": {"min", "max", "mean"},
                   "top", "top_k", "other_count"}}}

- `count` is the non-null values of the column (NaN included), `nulls` the others.
- numeric: `nan` counts the non-finite values (NaN, +-Infinity); min, max, mean, stddev
  (sample) and the quantiles (`percentile_approx`, accuracy 10000) are over the finite
  values only, so one NaN never turns a day's statistics into NaN. No NaN or Infinity is
  ever written: a statistic that does not exist (no finite values, one value for the
  stddev) is null.
- categorical: values as strings; `top` the `top_k` most frequent (count descending, then
  value, so ties do not depend on partitioning); `other_count` the non-null rows whose
  value is not in `top`.
- text: tokens exactly as preprocess makes them (Spark ML `RegexTokenizer` with
  lakeprep_contracts.text.TOKENIZER: lower case, split on `[^\\p{L}\\p{N}]+`, empty tokens
  dropped), here as the same Spark SQL functions; `distinct_estimate` counts distinct
  tokens, `top` the most frequent tokens, `other_count` the tokens not in `top`;
  `tokens.mean_per_row` and `length` (characters) are over the non-null values.

Two passes over the (cached) frame: one aggregate for every scalar statistic of every
column, and one grouping of all (column, value) pairs for all the top lists together.

Weighted: with `weight`, each row of the frame stands for `weight` rows of the partition
(a reference table's rows with the number of the partition's rows that joined each,
`preprocess`): every count is a sum of weights, the mean and the standard deviation are
weighted, the quantiles are the exact weighted ones (the value of rank `ceil(p * n)`,
which is what `percentile_approx` returns while it still holds every value) and the top
lists count weights. The document is the one the expanded rows would give, from a table
of one row per distinct joined key instead of one per row: a third pass, over that small
table, orders the values for the quantiles and sums the squared deviations from the mean.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from lakeprep_contracts.records import FEATURE_ROLES
from lakeprep_contracts.text import TOKENIZER

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

FORMAT_VERSION = 1
PROBABILITIES = (0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
TOP_K = 50
# percentile_approx's default accuracy: relative rank error 1/10000.
QUANTILE_ACCURACY = 10000

_PAIR = "array<struct<column:string,value:string>>"


def _col(name: str) -> Column:
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def tokens(text: Column) -> Column:
    """`array<string>` tokens of a string column, as `RegexTokenizer(gaps=True)` makes them.

    RegexTokenizer lower-cases, splits on the pattern and keeps tokens of at least
    `minTokenLength` characters; `split` + `filter` are the same steps as SQL functions,
    so statistics need no ML pipeline and no UDF. Null text gives null.
    """
    from pyspark.sql import functions as F

    lowered = F.lower(text) if TOKENIZER["lowercase"] else text
    min_length = TOKENIZER["min_token_length"]
    return F.filter(F.split(lowered, TOKENIZER["pattern"]), lambda t: F.length(t) >= min_length)


def _finite(value: Any) -> Any:
    """JSON has no NaN or Infinity: a non-finite float becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _as_float(value: Any) -> float | None:
    return None if value is None else _finite(float(value))


def _as_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _numeric(name: str) -> tuple[Column, Column]:
    """(the column as double, the same where finite else null): what numeric statistics read."""
    from pyspark.sql import functions as F

    value = _col(name).cast("double")
    return value, F.when(~(F.isnan(value) | (F.abs(value) == F.lit(float("inf")))), value)


def _scalar_plan(kinds: dict[str, str], weighted: bool) -> tuple[list[Column], list[Column]]:
    """(per-row helper columns, aggregates) for every column's scalar statistics.

    Helpers are named `c<i>__<what>` by the column's position, so any column name (the
    contract allows only `[a-z][a-z0-9_]*`, derived columns too) is safe in an alias. The
    helper `_w` is each row's weight (1 without weights): counts are sums of it. Weighted,
    a numeric column's mean comes from `fsum` / `fcount` and its spread from a later pass
    (`_weighted_spread`), since Spark's `stddev_samp` and `percentile_approx` take no weights.
    """
    from pyspark.sql import functions as F

    w = F.col("_w")

    def weight_of(value: Column) -> Column:
        return F.coalesce(F.sum(F.when(value.isNotNull(), w)), F.lit(0))

    helpers: list[Column] = []
    aggs: list[Column] = [F.coalesce(F.sum(w), F.lit(0)).alias("rows")]
    for i, (name, kind) in enumerate(kinds.items()):
        key = f"c{i}"
        if kind == "numeric":
            value, finite = _numeric(name)
            helpers += [value.alias(f"{key}__value"), finite.alias(f"{key}__finite")]
            v, f = F.col(f"{key}__value"), F.col(f"{key}__finite")
            aggs += [
                weight_of(v).alias(f"{key}__count"),
                weight_of(F.when(v.isNotNull() & f.isNull(), 1)).alias(f"{key}__nan"),
                F.approx_count_distinct(v).alias(f"{key}__distinct"),
                F.min(f).alias(f"{key}__min"),
                F.max(f).alias(f"{key}__max"),
            ]
            if weighted:
                aggs += [F.sum(f * w).alias(f"{key}__fsum"), weight_of(f).alias(f"{key}__fcount")]
            else:
                aggs += [
                    F.avg(f).alias(f"{key}__mean"),
                    F.stddev_samp(f).alias(f"{key}__stddev"),
                    F.percentile_approx(f, list(PROBABILITIES), QUANTILE_ACCURACY).alias(f"{key}__quantiles"),
                ]
        elif kind == "categorical":
            helpers.append(_col(name).cast("string").alias(f"{key}__value"))
            v = F.col(f"{key}__value")
            aggs += [
                weight_of(v).alias(f"{key}__count"),
                F.approx_count_distinct(v).alias(f"{key}__distinct"),
            ]
        elif kind == "text":
            text = _col(name).cast("string")
            helpers += [
                text.alias(f"{key}__value"),
                F.when(text.isNotNull(), F.size(tokens(text))).alias(f"{key}__tokens"),
                F.length(text).alias(f"{key}__length"),
            ]
            v, n, length = (F.col(f"{key}__{x}") for x in ("value", "tokens", "length"))
            aggs += [
                weight_of(v).alias(f"{key}__count"),
                F.sum(n * w).alias(f"{key}__tokens_total"),
                F.max(n).alias(f"{key}__tokens_max"),
                F.min(length).alias(f"{key}__length_min"),
                F.max(length).alias(f"{key}__length_max"),
                F.sum(length * w).alias(f"{key}__length_sum"),
            ]
        else:
            raise ValueError(
                f"column {name!r} has statistics kind {kind!r}; expected one of {list(FEATURE_ROLES)}"
            )
    return helpers, aggs


def quantile_rank(probability: float, n: int) -> int:
    """The rank (1-based) of the value `percentile_approx` returns for `probability` of `n`
    values while its summary holds every value: `ceil(p * n)`, at least 1 (the minimum)."""
    return max(1, math.ceil(probability * n))


def _weighted_spread(
    df: DataFrame, kinds: dict[str, str], weight: Column, scalars: dict[str, Any]
) -> dict[int, dict[str, Any]]:
    """Column position -> {"stddev", "quantiles"} of each weighted numeric column, in one job.

    The finite values of all numeric columns stacked, their weights summed per distinct
    value, a running sum of the weights in value order per column; the quantile of rank
    `r` is the smallest value whose running sum reaches `r`, and the deviations from the
    column's weighted mean (from the scalar pass) and their squares are summed beside.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    numeric = [i for i, kind in enumerate(kinds.values()) if kind == "numeric"]
    counts = [int(scalars[f"c{i}__fcount"]) for i in numeric]
    if not any(counts):
        return {}
    means = [float(scalars[f"c{i}__fsum"]) / n if n else 0.0 for i, n in zip(numeric, counts, strict=True)]
    names = list(kinds)
    entries = [
        F.struct(F.lit(slot).alias("slot"), _numeric(names[i])[1].alias("v"), weight.alias("w"))
        for slot, i in enumerate(numeric)
    ]
    stacked = df.select(F.explode(F.array(*entries)).alias("e")).select("e.*").where(F.col("v").isNotNull())
    grouped = stacked.groupBy("slot", "v").agg(F.sum("w").alias("n"))
    in_order = Window.partitionBy("slot").orderBy("v")
    in_order = in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    ranked = grouped.withColumn("running", F.sum("n").over(in_order))

    def per_slot(values: list[float | int]) -> Column:
        return F.get(F.array(*[F.lit(x) for x in values]), F.col("slot"))

    v, n = F.col("v"), F.col("n")
    picks = [
        F.min(F.when(F.col("running") >= per_slot([quantile_rank(p, c) for c in counts]), v)).alias(f"q{j}")
        for j, p in enumerate(PROBABILITIES)
    ]
    deviation = v - per_slot(means)
    rows = (
        ranked.groupBy("slot")
        .agg(*picks, F.sum(n * deviation).alias("shift"), F.sum(n * deviation * deviation).alias("squares"))
        .collect()
    )
    out: dict[int, dict[str, Any]] = {}
    for row in rows:
        slot = int(row["slot"])
        count = counts[slot]
        # Deviations from the rounded mean, corrected by their own sum (the shifted-data
        # formula): as exact as the deviations, whatever the values' offset from zero.
        squares = max(0.0, row["squares"] - row["shift"] * row["shift"] / count)
        out[numeric[slot]] = {
            "stddev": math.sqrt(squares / (count - 1)) if count > 1 else None,
            "quantiles": [row[f"q{j}"] for j in range(len(PROBABILITIES))],
        }
    return out


def _pair(column: str) -> Any:
    """A token -> (column, token) struct builder for `transform` (one per column, no loop closure)."""
    from pyspark.sql import functions as F

    return lambda token: F.struct(F.lit(column).alias("column"), token.alias("value"))


def _value_pairs(kinds: dict[str, str]) -> Column | None:
    """Every row's (column, value) pairs: its categorical values and text tokens, one array."""
    from pyspark.sql import functions as F

    arrays = []
    for name, kind in kinds.items():
        if kind == "categorical":
            value = _col(name).cast("string")
            arrays.append(F.when(value.isNotNull(), F.array(_pair(name)(value))))
        elif kind == "text":
            arrays.append(F.transform(tokens(_col(name).cast("string")), _pair(name)))
    if not arrays:
        return None
    # concat of arrays is null when any input is: a null value contributes an empty array.
    return F.concat(*[F.coalesce(a, F.array().cast(_PAIR)) for a in arrays])


def _top_values(
    df: DataFrame, kinds: dict[str, str], top_k: int, weight: Column
) -> dict[str, dict[str, Any]]:
    """column -> {"top": [...], "distinct": n}: one grouping of all (column, value) pairs.

    The ranking and the distinct count run over the grouped counts (one row per distinct
    value), not over the data; only the `top_k` rows per column reach the driver. A pair
    counts its row's `weight`.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    pairs = _value_pairs(kinds)
    out: dict[str, dict[str, Any]] = {
        name: {"top": [], "distinct": 0} for name, kind in kinds.items() if kind in ("categorical", "text")
    }
    if pairs is None:
        return out
    exploded = df.select(F.explode(pairs).alias("p"), weight.alias("_w")).select("p.column", "p.value", "_w")
    counts = exploded.groupBy("column", "value").agg(F.sum("_w").alias("count"))
    by_column = Window.partitionBy("column")
    ranked = counts.select(
        "column",
        "value",
        "count",
        F.row_number().over(by_column.orderBy(F.desc("count"), F.asc("value"))).alias("rank"),
        F.count(F.lit(1)).over(by_column).alias("distinct"),
    ).filter(F.col("rank") <= top_k)
    for row in sorted(ranked.collect(), key=lambda r: (r["column"], r["rank"])):
        entry = out[row["column"]]
        entry["top"].append({"value": row["value"], "count": int(row["count"])})
        entry["distinct"] = int(row["distinct"])
    return out


def partition_stats(
    df: DataFrame,
    kinds: dict[str, str],
    *,
    top_k: int = TOP_K,
    weight: str | None = None,
    rows: int | None = None,
) -> dict[str, Any]:
    """`{"rows": n, "columns": {...}}` of `df` (see the module docstring), in two passes.

    Pure: reads nothing and writes nothing; the caller caches `df` when it is reused.
    `kinds` maps column -> "numeric" | "categorical" | "text", in the order the document
    lists them. `weight` names a column of positive row counts: each row stands for that
    many rows of the partition (a third pass, over `df`, for the weighted spread). `rows`
    is the partition's row count where the weights do not sum to it: a frame that stacks
    tables of different columns (one per reference), each weighing the partition's rows,
    where a column's own table alone holds its values and the others hold nulls.
    """
    from pyspark.sql import functions as F

    if top_k < 1:
        raise ValueError(f"top_k {top_k!r} must be >= 1")
    missing = [c for c in kinds if c not in df.columns]
    if missing:
        raise ValueError(f"statistics asked for column(s) {missing} not in the data {df.columns}")
    if weight is not None and weight not in df.columns:
        raise ValueError(f"statistics weighted by {weight!r}, which is not a column of the data {df.columns}")
    w = F.lit(1) if weight is None else _col(weight).cast("long")
    helpers, aggs = _scalar_plan(kinds, weighted=weight is not None)
    scalars = df.select(w.alias("_w"), *helpers).agg(*aggs).collect()[0].asDict()
    spread = _weighted_spread(df, kinds, w, scalars) if weight is not None else {}
    top = _top_values(df, kinds, top_k, w)
    rows = int(scalars["rows"]) if rows is None else rows
    columns: dict[str, dict[str, Any]] = {}
    for i, (name, kind) in enumerate(kinds.items()):
        s = {k.split("__", 1)[1]: v for k, v in scalars.items() if k.startswith(f"c{i}__")}
        count = int(s["count"])
        if kind == "numeric":
            if weight is not None:
                fcount = int(s["fcount"])
                s["mean"] = float(s["fsum"]) / fcount if fcount else None
                s.update(spread.get(i, {"stddev": None, "quantiles": None}))
            quantiles = s["quantiles"]
            columns[name] = {
                "kind": kind,
                "count": count,
                "nulls": rows - count,
                "nan": int(s["nan"]),
                "distinct_estimate": int(s["distinct"]),
                "min": _as_float(s["min"]),
                "max": _as_float(s["max"]),
                "mean": _as_float(s["mean"]),
                "stddev": _as_float(s["stddev"]),
                "quantiles": {
                    "probabilities": list(PROBABILITIES),
                    "values": [_as_float(q) for q in quantiles] if quantiles else [None] * len(PROBABILITIES),
                },
            }
        elif kind == "categorical":
            listed = top[name]["top"]
            columns[name] = {
                "kind": kind,
                "count": count,
                "nulls": rows - count,
                "distinct_estimate": int(s["distinct"]),
                "top": listed,
                "top_k": top_k,
                "other_count": count - sum(t["count"] for t in listed),
            }
        else:
            listed = top[name]["top"]
            total = int(s["tokens_total"] or 0)
            columns[name] = {
                "kind": kind,
                "count": count,
                "nulls": rows - count,
                "distinct_estimate": top[name]["distinct"],
                "tokens": {
                    "total": total,
                    "mean_per_row": total / count if count else None,
                    "max_per_row": _as_int(s["tokens_max"]),
                },
                "length": {
                    "min": _as_int(s["length_min"]),
                    "max": _as_int(s["length_max"]),
                    "mean": int(s["length_sum"]) / count if count else None,
                },
                "top": listed,
                "top_k": top_k,
                "other_count": total - sum(t["count"] for t in listed),
            }
    return {"rows": rows, "columns": columns}


def stats_document(partition: str, stats: dict[str, Any]) -> dict[str, Any]:
    """The `_stats.json` document of one partition, checked against its schema."""
    from lakeprep_contracts import documents

    doc = {"format_version": FORMAT_VERSION, "partition": partition, **stats}
    documents.require("stats", doc, partition)
    return doc


def to_json(doc: dict[str, Any]) -> str:
    """Strict JSON (`allow_nan=False`): a NaN that slipped through fails here, not in a reader."""
    import json

    return json.dumps(doc, indent=2, allow_nan=False)
