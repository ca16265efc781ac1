"""How much of a day's text its tokenizer file cuts: rows and tokens past `max_tokens`, per split.

A text of `encoding: tokenizer` becomes exactly `max_tokens` subword ids where the rows
are read (`lakeprep_contracts.encode`), long after the day's stages ran; the sample stage
counts here what that cut will drop, so the day's report (and the run summary) says it:

    "text_truncation": {"doc": {"max_tokens": 48, "tokenizer": "<uri>", "sha256": "...",
                                "splits": {"train": {"rows": 55, "rows_truncated": 30,
                                                     "tokens_cut": 2411}, ...}}}

The count is the encoder's own (`encode.truncation`: the tokenizer's truncation, special
tokens not counted), run on the executors over Arrow batches (`mapInArrow`): tokenizing
is Rust (`tokenizers`' `encode_batch`), once per distinct text of a batch; a Spark SQL
function cannot apply a tokenizer.json. Its cost per core: benchmarks/subword.py.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lakeprep_contracts import layout
from lakeprep_jobs.transform import quoted

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from lakeprep_jobs.lake import Lake


def entry(name: str, content: str, max_tokens: int) -> dict[str, Any]:
    """The transform-entry fields ``encode.truncation`` reads, for a file's text."""
    return {
        "name": name,
        "max_tokens": max_tokens,
        "padding_id": 0,
        "tokenizer_file": {"file": name, "content": content},
    }


def count_batches(batches: Iterator[pa.RecordBatch], spec: Mapping[str, Any]) -> Iterator[pa.RecordBatch]:
    """Per batch of (split, text): one row per split with its rows, rows cut and tokens cut."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from lakeprep_contracts import encode

    for batch in batches:
        splits = batch.column(0)
        for split in pc.unique(splits).to_pylist():
            texts = batch.column(1).filter(pc.equal(splits, split))
            counts = encode.truncation(texts, spec)
            yield pa.RecordBatch.from_pydict(
                {
                    "split": [split],
                    "rows": [len(texts)],
                    "rows_truncated": [counts["rows_truncated"]],
                    "tokens_cut": [counts["tokens_cut"]],
                }
            )


def by_split(rows: DataFrame, name: str, content: str, max_tokens: int) -> dict[str, dict[str, int]]:
    """``{split: {rows, rows_truncated, tokens_cut}}`` of text column ``name``, every split a key."""
    from pyspark.sql import functions as F

    spec = entry(name, content, max_tokens)
    schema = "split string, rows long, rows_truncated long, tokens_cut long"
    counted = (
        rows.select(F.col(layout.SPLIT), F.col(quoted(name)).cast("string"))
        .mapInArrow(lambda batches: count_batches(batches, spec), schema)
        .groupBy("split")
        .agg(*(F.sum(c).alias(c) for c in ("rows", "rows_truncated", "tokens_cut")))
        .collect()
    )
    out = {s: {"rows": 0, "rows_truncated": 0, "tokens_cut": 0} for s in layout.SPLITS}
    for r in counted:
        out[r["split"]] = {c: int(r[c]) for c in ("rows", "rows_truncated", "tokens_cut")}
    return out


def day_truncation(lake: Lake, rows: DataFrame, texts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The report's ``text_truncation`` for the day's sampled ``rows``; ``texts``: the sample
    params' ``subword_texts`` (name, tokenizer URI, max_tokens).

    :raises TransformError: (a refusal) no tokenizer file at a text's URI, or not one.
    """
    from lakeprep_contracts import encode

    out = {}
    for text in texts:
        uri = text["tokenizer"]
        if not lake.exists(uri):
            raise encode.TransformError(
                f"text {text['name']!r}: no tokenizer file at {uri} (columns[].transform.tokenizer): "
                "put the model's tokenizer.json there or fix the URI"
            )
        data = lake.read_bytes(uri)
        facts = encode.tokenizer_facts(data, f"text {text['name']!r}: {uri}")  # refused on the driver
        out[text["name"]] = {
            "max_tokens": text["max_tokens"],
            "tokenizer": uri,
            "sha256": facts["sha256"],
            "splits": by_split(rows, text["name"], data.decode("utf-8"), text["max_tokens"]),
        }
    return out
