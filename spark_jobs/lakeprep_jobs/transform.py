"""Apply a fitted `transform.json` in Spark: the one encoder, over Arrow record batches.

`lakeprep_contracts.encode` is the only implementation of a fitted transform; the
export runs it on the executors with `DataFrame.mapInArrow`, batch by batch, exactly
as serving and `predict` run it in one process. So the features a model trained on
and the features it is served cannot differ by implementation, and there is no second
copy (Spark SQL, a Spark ML `PipelineModel`) to keep in step.

The same function serves anyone who wants final features materialised in Spark (batch
scoring on the cluster, a consumer that is not lakeprep's trainer):

    from lakeprep_jobs.transform import apply_transform
    features = apply_transform(prepared_rows, json.loads(transform_text))

The executors need numpy, pyarrow and xxhash (requirements.txt).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from lakeprep_contracts import layout

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType

PASS_THROUGH = (layout.ID, layout.LABEL, layout.SPLIT, layout.SYNTHETIC)


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _spark_type(role: str) -> DataType:
    from pyspark.sql.types import ArrayType, FloatType, IntegerType

    types = {"numeric": FloatType(), "categorical": IntegerType(), "text": ArrayType(IntegerType(), False)}
    return types[role]


def apply_transform(df: DataFrame, doc: dict[str, Any], keep: Sequence[str] = ()) -> DataFrame:
    """Pure: the prepared rows (id, label, split when present, and the columns in `keep`)
    with the encoded features: float numerics, int ids, array<int> token ids (the shard
    types, docs/MANIFEST.md)."""
    from pyspark.sql.types import StructField, StructType

    from lakeprep_contracts import encode

    passed = [c for c in (*PASS_THROUGH, *keep) if c in df.columns]
    needed = [c for c in encode.input_columns(doc) if c not in passed]
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise ValueError(f"the transform reads columns {missing} that the rows lack (columns: {df.columns})")
    fields = [df.schema[c] for c in passed]
    fields += [
        StructField(spec["output"], _spark_type(role), role == "text")
        for role in encode.ROLES
        for spec in doc[role]
    ]

    def encode_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from lakeprep_contracts.encode import encode_batches as encoded

        return encoded(batches, doc, passed)

    columns = [df[quoted(c)] for c in (*passed, *needed)]  # backquoted: names may hold dots
    return df.select(*columns).mapInArrow(encode_batches, StructType(fields))
