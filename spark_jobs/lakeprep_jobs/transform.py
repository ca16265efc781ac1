"""Apply a fitted `transform.json` in Spark: the document, rendered as Spark SQL.

One function turns the document into SQL expressions (`transform_exprs`); the export
applies them with `selectExpr`, and the saved Spark `PipelineModel` is a
`SQLTransformer` over the very same expressions, so the two Spark paths cannot
disagree, and the numpy path (`lakeprep_train.transform`) implements the same
semantics from the same document (docs/TRANSFORM.md; the parity test holds them equal).

Fitted values enter the SQL as `CAST('<repr>' AS DOUBLE)`: a bare `0.1` is a DECIMAL
literal in Spark SQL, which would change the arithmetic. Vocabularies become a literal
map (`map_from_arrays`), folded to a constant once per query by Spark's optimizer.

Features that selection dropped are simply not in the document's outputs. A principal
component is SQL arithmetic over the scaled inputs, `((x1 - m1) * w1) + ((x2 - m2) * w2)
+ ...` summed left to right (the numpy path sums in the same order), so the saved
`PipelineModel` stays one `SQLTransformer`; Spark's `PCAModel.transform` would not centre
(docs/TRANSFORM.md). Each component repeats its inputs' expressions; Spark's
subexpression elimination evaluates each once per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lakeprep_contracts import layout

if TYPE_CHECKING:
    from pyspark.ml import PipelineModel
    from pyspark.sql import DataFrame


def sql_string(value: str) -> str:
    """A Spark SQL string literal (backslash escapes are on by default in Spark's parser)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_double(value: float) -> str:
    return f"CAST('{float(value)!r}' AS DOUBLE)"


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _vocab_lookup(vocabulary: Sequence[str], key: str) -> str:
    """Id of `key` in the vocabulary (position + 2), or 1 (unseen)."""
    if not vocabulary:
        return "1"
    keys = ", ".join(sql_string(v) for v in vocabulary)
    ids = ", ".join(str(i + 2) for i in range(len(vocabulary)))
    return f"COALESCE(element_at(map_from_arrays(array({keys}), array({ids})), {key}), 1)"


def _hash_id(key: str, buckets: int) -> str:
    return f"CAST(pmod(xxhash64({key}), {buckets - 1}) + 1 AS INT)"


def numeric_expr(entry: dict[str, Any]) -> str:
    x = f"nanvl(CAST({quoted(entry['name'])} AS DOUBLE), CAST(NULL AS DOUBLE))"
    x = f"COALESCE({x}, {sql_double(entry['fill'])})"
    clip = entry.get("clip")
    if clip:
        x = f"LEAST(GREATEST({x}, {sql_double(clip['lower'])}), {sql_double(clip['upper'])})"
    return f"CAST(({x} - {sql_double(entry['center'])}) / {sql_double(entry['scale'])} AS DOUBLE)"


def pca_expr(pca: dict[str, Any], component: int) -> str:
    """Principal component `component` (1-based): the centred scaled inputs times its weights."""
    weights = pca["components"][component - 1]
    terms = [
        f"(({numeric_expr(e)} - {sql_double(m)}) * {sql_double(w)})"
        for e, m, w in zip(pca["inputs"], pca["mean"], weights, strict=True)
    ]
    return f"CAST({' + '.join(terms)} AS DOUBLE)"


def numeric_output_expr(entry: dict[str, Any], doc: dict[str, Any]) -> str:
    """A numeric output: a scaled column, or a principal component of `doc["pca"]`."""
    if "pca_component" in entry:
        if not doc.get("pca"):
            raise ValueError(
                f"numeric output {entry['output']!r} is a PCA component but the document has no pca"
            )
        return pca_expr(doc["pca"], entry["pca_component"])
    return numeric_expr(entry)


def categorical_expr(entry: dict[str, Any]) -> str:
    col = quoted(entry["name"])
    if entry["encoding"] == "vocab":
        known = _vocab_lookup(entry["vocabulary"], col)
    else:
        known = _hash_id(col, entry["buckets"])
    return f"CAST(CASE WHEN {col} IS NULL THEN 0 ELSE {known} END AS INT)"


def text_expr(entry: dict[str, Any]) -> str:
    tokens = f"COALESCE({quoted(entry['name'])}, CAST(array() AS ARRAY<STRING>))"
    if entry["encoding"] == "vocab":
        ids = f"transform({tokens}, t -> CAST({_vocab_lookup(entry['vocabulary'], 't')} AS INT))"
    else:
        ids = f"transform({tokens}, t -> {_hash_id('t', entry['buckets'])})"
    n = int(entry["max_tokens"])
    return f"slice(concat({ids}, array_repeat(CAST(0 AS INT), {n})), 1, {n})"


def transform_exprs(doc: dict[str, Any]) -> list[str]:
    """`<sql> AS <output>` per feature, in the document's order (numeric, categorical, text)."""
    exprs = [f"{numeric_output_expr(e, doc)} AS {quoted(e['output'])}" for e in doc["numeric"]]
    exprs += [f"{categorical_expr(e)} AS {quoted(e['output'])}" for e in doc["categorical"]]
    exprs += [f"{text_expr(e)} AS {quoted(e['output'])}" for e in doc["text"]]
    return exprs


def encoded_columns(doc: dict[str, Any]) -> list[str]:
    return [e["output"] for role in ("numeric", "categorical", "text") for e in doc[role]]


PASS_THROUGH = (layout.ID, layout.LABEL, layout.SPLIT, "is_synthetic")


def apply_transform(df: DataFrame, doc: dict[str, Any], keep: Sequence[str] = ()) -> DataFrame:
    """Pure: the prepared rows (id, label, split when present, and the columns in `keep`)
    with the encoded features."""
    passed = [quoted(c) for c in (*PASS_THROUGH, *keep) if c in df.columns]
    return df.selectExpr(*passed, *transform_exprs(doc))


def pipeline_model(doc: dict[str, Any]) -> PipelineModel:
    """The same transform as a Spark ML `PipelineModel` (save/load, batch scoring in Spark).

    `SELECT *` keeps every input column (id, label, split, ...) beside the encoded ones.
    """
    from pyspark.ml import PipelineModel
    from pyspark.ml.feature import SQLTransformer

    statement = f"SELECT *, {', '.join(transform_exprs(doc))} FROM __THIS__"
    return PipelineModel(stages=[SQLTransformer(statement=statement)])
