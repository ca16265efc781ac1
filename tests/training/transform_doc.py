"""Small hand-written transform.json documents (valid against the schema) for the serving tests."""

from __future__ import annotations

import copy
from typing import Any

TOKENIZER = {"pattern": r"[^\p{L}\p{N}]+", "lowercase": True, "min_token_length": 1}
HASH = {"function": "xxhash64", "seed": 42, "input": "utf-8"}

VALIDATE = {
    "format": "csv",
    "options": {"header": "true"},
    "columns": [
        {"name": "year", "type": "int", "nullable": False},
        {"name": "month", "type": "int", "nullable": False},
        {"name": "day", "type": "int", "nullable": False},
        {"name": "carrier", "type": "string", "nullable": False},
        {"name": "flight", "type": "int", "nullable": False},
        {"name": "distance", "type": "double"},
        {"name": "arr_delay", "type": "double"},
        {"name": "tailnum", "type": "string"},
        {"name": "time_hour", "type": "timestamp"},
        {"name": "note", "type": "string"},
    ],
    "derived": [
        {
            "name": "flight_id",
            "expr": "concat_ws('-', year, lpad(month, 2, '0'), lpad(day, 2, '0'), carrier, flight)",
        },
        {"name": "delayed", "expr": "CAST(arr_delay > 15 AS INT)"},
        {"name": "day_of_week", "expr": "dayofweek(time_hour)"},
    ],
    "id_column": "flight_id",
    "label_column": "delayed",
    "label_classes": [0, 1],
    "null_tokens": ["NA"],
    "time_zone": "America/New_York",
    "max_quarantine_share": 0.1,
    "allow_empty": False,
}

PREPROCESS = {
    "id_column": "flight_id",
    "label_column": "delayed",
    "numeric": ["distance", "seats"],
    "categorical": ["carrier", "day_of_week"],
    "text": ["plane_model", "note"],
    "tokenizer": TOKENIZER,
    "deduplicate": True,
    "text_max_length": 1000,
    "references": [
        {
            "name": "planes",
            "uri": "file:///lake/reference/planes",
            "format": "csv",
            "options": {"header": "true"},
            "join_keys": ["tailnum"],
            "columns": [
                {"name": "seats", "expr": "CAST(seats AS DOUBLE)"},
                {"name": "plane_model", "expr": "concat_ws(' ', manufacturer, model)"},
            ],
        }
    ],
}


def numeric(name: str, **fields: Any) -> dict[str, Any]:
    entry = {
        "name": name,
        "output": f"num__{name}",
        "impute": "mean",
        "fill": 0.0,
        "clip": None,
        "scaling": "none",
        "center": 0.0,
        "scale": 1.0,
    }
    return {**entry, **fields}


def vocab(name: str, values: list[str], role: str = "categorical", **fields: Any) -> dict[str, Any]:
    entry = {
        "name": name,
        "output": f"{'cat' if role == 'categorical' else 'txt'}__{name}",
        "encoding": "vocab",
        "unseen_id": 1,
        "vocabulary": values,
        "counts": sorted(range(1, len(values) + 1), reverse=True),
        "min_frequency": 1,
        "max_size": 1000,
        "cardinality": len(values) + 2,
    }
    if role == "categorical":
        entry["missing_id"] = 0
    else:
        entry.update(tokenizer=TOKENIZER, max_tokens=4, padding_id=0)
    return {**entry, **fields}


def hashed(name: str, buckets: int, role: str = "categorical", **fields: Any) -> dict[str, Any]:
    entry = {
        "name": name,
        "output": f"{'cat' if role == 'categorical' else 'txt'}__{name}",
        "encoding": "hash",
        "buckets": buckets,
        "cardinality": buckets,
    }
    if role == "categorical":
        entry["missing_id"] = 0
    else:
        entry.update(tokenizer=TOKENIZER, max_tokens=4, padding_id=0)
    return {**entry, **fields}


def make_doc(
    *,
    numerics: list[dict[str, Any]] | None = None,
    categoricals: list[dict[str, Any]] | None = None,
    texts: list[dict[str, Any]] | None = None,
    validate: dict[str, Any] | None = None,
    preprocess: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A flights-like transform: contract, derived id/label/day_of_week, a planes reference."""
    return {
        "format_version": 1,
        "dataset": "toy_flights",
        "logical_date": "2013-01-03",
        "run_id": "manual__2013-01-03T00:00:00+00:00",
        "fitted_on": {"split": "train", "rows": 100, "partitions": ["dt=2013-01-01", "dt=2013-01-02"]},
        "contract": {
            "validate": copy.deepcopy(validate if validate is not None else VALIDATE),
            "preprocess": copy.deepcopy(preprocess if preprocess is not None else PREPROCESS),
        },
        "id": {"column": "flight_id", "output": "id"},
        "label": {"column": "delayed", "output": "label", "classes": [0, 1]},
        "numeric": numerics
        if numerics is not None
        else [
            numeric(
                "distance",
                impute="median",
                fill=1000.0,
                clip={"lower": 100.0, "upper": 2000.0, "quantiles": [0.01, 0.99]},
                scaling="standard",
                center=900.0,
                scale=400.0,
            ),
            numeric("seats", fill=150.0, scaling="minmax", center=10.0, scale=300.0),
        ],
        "categorical": categoricals
        if categoricals is not None
        else [vocab("carrier", ["UA", "B6", "EV"]), hashed("day_of_week", 16)],
        "text": texts
        if texts is not None
        else [
            hashed("plane_model", 64, role="text"),
            vocab("note", ["late", "storm"], role="text", max_tokens=3),
        ],
        "dropped": [{"name": "num__precip", "reason": "variance <= 1e-06"}],
        "hash": dict(HASH),
    }
