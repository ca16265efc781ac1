"""The order feed that `tests/data/broken/` is written for: its contract and its files.

An order feed with the exporter's headers (`Order ID,Amount (USD),Kind,Placed At,Note,
Delayed`) and the null tokens `NA`, `null`, `-`; the label is derived from `Delayed`.
`validate_params` is validate's params for it (the JSON a spec's validate stage gets,
and `contract.validate` in a model's transform.json, which serving reads).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parent / "broken"
HEADER = b"Order ID,Amount (USD),Kind,Placed At,Note,Delayed\n"
# Latin-1 in a text column and a stray 0xff in a number: neither is UTF-8.
INVALID_UTF8 = (
    HEADER
    + b"i1,5,book,2013-01-01T05:00:00Z,caf\xe9 latin-1,0\n"
    + b"i2,5\xff,book,2013-01-01T05:00:00Z,,0\n"
    + b"i3,5,book,2013-01-01T05:00:00Z,caf\xc3\xa9 utf-8,1\n"
)


def validate_params(**overrides: Any) -> dict[str, Any]:
    """validate's params for the feed, with `overrides` (e.g. `format="json"`)."""
    params: dict[str, Any] = dict(
        format="csv",
        options={"header": "true"},
        null_tokens=["NA", "null", "-"],
        columns=[
            {"name": "order_id", "raw_name": "Order ID", "type": "string", "nullable": False},
            {"name": "amount", "raw_name": "Amount (USD)", "type": "double"},
            {"name": "kind", "raw_name": "Kind", "type": "string", "nullable": False},
            {"name": "placed_at", "raw_name": "Placed At", "type": "timestamp"},
            {"name": "note", "raw_name": "Note", "type": "string"},
            {"name": "delayed", "raw_name": "Delayed", "type": "int"},
        ],
        derived=[{"name": "label", "expr": "delayed"}],
        id_column="order_id",
        label_column="label",
        label_classes=[0, 1],
        stats_kinds={"amount": "numeric", "kind": "categorical", "note": "text"},
        max_quarantine_share=1.0,
    )
    params.update(overrides)
    return params


def corpus(name: str) -> bytes:
    return (CORPUS / name).read_bytes()
