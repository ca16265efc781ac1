"""Synthetic `_stats.json` documents (stats.schema.json) for the drift tests.

Numeric columns are normal (or uniform, or constant) distributions described by their
quantiles at the probabilities validate uses; categorical and text columns by their top
values and the rest.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter

PROBABILITIES = [0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0]


def normal(mu: float = 0.0, sigma: float = 1.0, *, count: int = 1000, nulls: int = 0) -> dict:
    """A numeric column's stats for N(mu, sigma); min/max at the 0.05% / 99.95% quantiles."""
    dist = statistics.NormalDist(mu, sigma)
    values = [dist.inv_cdf(min(max(p, 0.0005), 0.9995)) for p in PROBABILITIES]
    return {
        "kind": "numeric",
        "count": count,
        "nulls": nulls,
        "nan": 0,
        "distinct_estimate": count,
        "min": values[0],
        "max": values[-1],
        "mean": mu,
        "stddev": sigma,
        "quantiles": {"probabilities": PROBABILITIES, "values": values},
    }


def uniform(low: float, high: float, *, count: int = 1000) -> dict:
    column = normal(count=count)
    column["quantiles"]["values"] = [low + p * (high - low) for p in PROBABILITIES]
    column.update(min=low, max=high)
    return column


def constant(value: float, *, count: int = 1000) -> dict:
    column = normal(count=count)
    column["quantiles"]["values"] = [value] * len(PROBABILITIES)
    column.update(min=value, max=value, mean=value, stddev=0.0, distinct_estimate=1)
    return column


def categorical(counts: dict[str, int], *, other: int = 0, nulls: int = 0) -> dict:
    return {
        "kind": "categorical",
        "count": sum(counts.values()) + other,
        "nulls": nulls,
        "distinct_estimate": len(counts),
        "top": [{"value": v, "count": n} for v, n in counts.items()],
        "top_k": 50,
        "other_count": other,
    }


def text(tokens: dict[str, int], *, rows: int = 100, nulls: int = 0, other: int = 0) -> dict:
    total = sum(tokens.values()) + other
    return {
        "kind": "text",
        "count": rows,
        "nulls": nulls,
        "distinct_estimate": len(tokens),
        "tokens": {"total": total, "mean_per_row": total / rows, "max_per_row": 7},
        "length": {"min": 0, "max": 41, "mean": 17.2},
        "top": [{"value": v, "count": n} for v, n in tokens.items()],
        "top_k": 50,
        "other_count": other,
    }


def day(ds: str, **columns: dict) -> dict:
    rows = max((c["count"] + c["nulls"] for c in columns.values()), default=0)
    return {
        "format_version": 1,
        "partition": f"file:///lake/validate/flights/dt={ds}",
        "rows": rows,
        "columns": columns,
    }


# ------------------------------------------------------- statistics of generated rows
# What validate's writer (lakeprep_jobs.stats.partition_stats) records for the same rows,
# without Spark: exact quantiles of rank ceil(p * n) (percentile_approx while it holds every
# value), the sample standard deviation, the top 50 values by count then value.


def numeric_of(values: list[float | None]) -> dict:
    """A numeric column's stats of `values` (None is null)."""
    finite = sorted(v for v in values if v is not None)
    n = len(finite)
    mean = sum(finite) / n if n else None
    stddev = statistics.stdev(finite) if n > 1 else None
    quantiles = [finite[max(1, math.ceil(p * n)) - 1] if n else None for p in PROBABILITIES]
    return {
        "kind": "numeric",
        "count": n,
        "nulls": len(values) - n,
        "nan": 0,
        "distinct_estimate": len(set(finite)),
        "min": finite[0] if n else None,
        "max": finite[-1] if n else None,
        "mean": mean,
        "stddev": stddev,
        "quantiles": {"probabilities": PROBABILITIES, "values": quantiles},
    }


def categorical_of(values: list[str | None], top_k: int = 50) -> dict:
    """A categorical column's stats of `values` (None is null)."""
    counts = Counter(v for v in values if v is not None)
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top_k]
    count = sum(counts.values())
    return {
        "kind": "categorical",
        "count": count,
        "nulls": len(values) - count,
        "distinct_estimate": len(counts),
        "top": [{"value": v, "count": n} for v, n in top],
        "top_k": top_k,
        "other_count": count - sum(n for _, n in top),
    }
