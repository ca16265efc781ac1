"""Clean, join reference tables, normalize numerics, encode categoricals, tokenize text.

    spark-submit --py-files lakeprep_jobs.zip lakeprep_jobs/preprocess.py \
        --input <lake>/validate/flights/dt=2013-01-01 \
        --output <lake>/preprocess/flights/dt=2013-01-01 --params '{...}'

Output columns, the contract every later stage and the trainer rely on:
`id`, `label`, `num__<name>` (double, imputed then standardized), `cat__<name>` (int id,
0 = missing), `txt__<name>` (array<int> of exactly `text_max_tokens` ids, 0 = padding).

- Reference tables are de-duplicated on their join keys and broadcast-joined (left), so a
  join can never add or lose rows; unmatched rows are counted per table.
- Numerics: `pyspark.ml` Imputer (mean/median) then StandardScaler, fitted on this
  partition; the fitted PipelineModel is saved under `_model/` and its values in
  `_transform.json`, so the exact transform can be re-applied at serving time.
- Categoricals and text tokens are hashed (xxhash64) into fixed id ranges. Hashing needs
  no fitted vocabulary, so the same value gets the same id on every day of a training
  window and at serving time; collisions are the price, kept small by the bucket counts.
- Everything is Spark SQL functions and `pyspark.ml` built-ins: no Python UDFs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lakeprep_jobs import common

if TYPE_CHECKING:
    from pyspark.ml import PipelineModel
    from pyspark.sql import DataFrame, SparkSession


@dataclasses.dataclass(frozen=True)
class PreprocessParams:
    id_column: str
    label_column: str
    numeric: list[str]
    categorical: list[str]
    text: list[str]
    references: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    numeric_null_policy: str = "mean"
    categorical_buckets: int = 1024
    text_vocab_size: int = 4096
    text_max_tokens: int = 16

    def __post_init__(self) -> None:
        if self.numeric_null_policy not in ("mean", "median"):
            raise ValueError(f"numeric_null_policy {self.numeric_null_policy!r} must be mean or median")
        if self.categorical_buckets < 2 or self.text_vocab_size < 2 or self.text_max_tokens < 1:
            raise ValueError("categorical_buckets and text_vocab_size must be >= 2, text_max_tokens >= 1")


def read_reference(spark: SparkSession, ref: dict[str, Any]) -> DataFrame:
    reader = spark.read.options(**ref.get("options", {}))
    return getattr(reader, ref["format"])(ref["uri"])


def join_references(df: DataFrame, refs: list[tuple[dict[str, Any], DataFrame]]) -> DataFrame:
    """Pure: left-join each reference on its keys (cast to the main table's types).

    Each reference contributes its declared columns plus `_matched__<name>`, true where a
    reference row was found.
    """
    from pyspark.sql import functions as F

    for ref, table in refs:
        keys = ref["join_keys"]
        dtypes = dict(df.dtypes)
        right = table.select(
            # try_cast: an unparseable key in a reference table means "no match" (counted in
            # the report), not a failed day (Spark 4's ANSI cast would raise).
            *[F.col(k).try_cast(dtypes[k]).alias(k) for k in keys],
            *[F.expr(c["expr"]).alias(c["name"]) for c in ref["columns"]],
        ).dropDuplicates(keys)
        right = right.withColumn(f"_matched__{ref['name']}", F.lit(True))
        df = df.join(F.broadcast(right), on=keys, how="left")
    return df


def categorical_ids(df: DataFrame, columns: Sequence[str], buckets: int) -> DataFrame:
    """Pure: `cat__<c>` = 1 + xxhash64(value) mod (buckets - 1); 0 for null."""
    from pyspark.sql import functions as F

    for c in columns:
        h = F.pmod(F.xxhash64(F.col(c).cast("string")), F.lit(buckets - 1)) + 1
        df = df.withColumn(f"cat__{c}", F.when(F.col(c).isNull(), 0).otherwise(h).cast("int"))
    return df


def text_ids(df: DataFrame, columns: Sequence[str], vocab: int, max_tokens: int) -> DataFrame:
    """Pure: tokenize (RegexTokenizer, lower case) and hash tokens to fixed-length id arrays."""
    from pyspark.ml.feature import RegexTokenizer
    from pyspark.sql import functions as F

    for c in columns:
        tmp_in, tmp_tok = f"_text__{c}", f"_tokens__{c}"
        df = df.withColumn(tmp_in, F.coalesce(F.col(c).cast("string"), F.lit("")))
        df = RegexTokenizer(
            inputCol=tmp_in, outputCol=tmp_tok, pattern=r"[^\p{L}\p{N}]+", toLowercase=True
        ).transform(df)
        ids = F.transform(F.col(tmp_tok), lambda t: (F.pmod(F.xxhash64(t), F.lit(vocab - 1)) + 1).cast("int"))
        padded = F.slice(F.concat(ids, F.array_repeat(F.lit(0), max_tokens)), 1, max_tokens)
        df = (
            df.withColumn(f"_ntok__{c}", F.size(F.col(tmp_tok)))
            .withColumn(f"txt__{c}", padded)
            .drop(tmp_in, tmp_tok)
        )
    return df


def fit_numeric(df: DataFrame, columns: Sequence[str], strategy: str) -> PipelineModel:
    """Fit Imputer -> VectorAssembler -> StandardScaler on the numeric columns."""
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import Imputer, SQLTransformer, StandardScaler, VectorAssembler

    # Imputer casts its output back to the input type, so an integer column would get the
    # fill truncated (mean 2.33 applied as 2) while `_transform.json` records 2.33: impute doubles.
    doubles = [f"_dbl__{c}" for c in columns]
    as_double = ", ".join(f"CAST(`{c}` AS DOUBLE) AS `{d}`" for c, d in zip(columns, doubles, strict=True))
    imputed = [f"_imp__{c}" for c in columns]
    stages = [
        SQLTransformer(statement=f"SELECT *, {as_double} FROM __THIS__"),
        Imputer(inputCols=doubles, outputCols=imputed, strategy=strategy),
        VectorAssembler(inputCols=imputed, outputCol="_num_vec", handleInvalid="keep"),
        StandardScaler(inputCol="_num_vec", outputCol="_num_scaled", withMean=True, withStd=True),
    ]
    return Pipeline(stages=stages).fit(df)


def apply_numeric(df: DataFrame, model: PipelineModel, columns: Sequence[str]) -> DataFrame:
    """Pure given a fitted model: `num__<c>` doubles from the scaled vector."""
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    out = model.transform(df).withColumn("_num_arr", vector_to_array("_num_scaled"))
    for i, c in enumerate(columns):
        out = out.withColumn(f"num__{c}", F.col("_num_arr")[i])
    temporary = [f"_{t}__{c}" for t in ("dbl", "imp") for c in columns]
    return out.drop("_num_vec", "_num_scaled", "_num_arr", *temporary)


def numeric_state(model: PipelineModel, columns: Sequence[str]) -> dict[str, dict[str, float]]:
    """The fitted values, portable: what `_transform.json` records per numeric column."""
    _, imputer, _, scaler = model.stages
    fill = {k.removeprefix("_dbl__"): v for k, v in imputer.surrogateDF.collect()[0].asDict().items()}
    mean, std = scaler.mean.toArray(), scaler.std.toArray()
    return {
        c: {"fill": float(fill[c]), "mean": float(mean[i]), "std": float(std[i])}
        for i, c in enumerate(columns)
    }


def feature_frame(df: DataFrame, p: PreprocessParams) -> DataFrame:
    """Pure: rename id/label and keep only the encoded feature columns."""
    from pyspark.sql import functions as F

    cols = [
        F.col(p.id_column).cast("string").alias("id"),
        F.col(p.label_column).cast("int").alias("label"),
        *[F.col(f"num__{c}") for c in p.numeric],
        *[F.col(f"cat__{c}") for c in p.categorical],
        *[F.col(f"txt__{c}") for c in p.text],
    ]
    return df.select(*cols)


def run(spark: SparkSession, inputs: list[str], output: str, p: PreprocessParams) -> dict[str, Any]:
    from pyspark.sql import functions as F

    validated = spark.read.parquet(*inputs)
    refs = [(ref, read_reference(spark, ref)) for ref in p.references]
    joined = join_references(validated, refs)
    joined = categorical_ids(joined, p.categorical, p.categorical_buckets)
    joined = text_ids(joined, p.text, p.text_vocab_size, p.text_max_tokens)
    # Cached: the numeric fit (two passes), the accounting aggregate and the write.
    joined = joined.cache()

    aggs = [F.count(F.lit(1)).alias("rows")]
    aggs += [F.count(f"_matched__{r['name']}").alias(f"matched__{r['name']}") for r in p.references]
    aggs += [
        F.sum((F.col(f"_ntok__{c}") > p.text_max_tokens).cast("int")).alias(f"truncated__{c}") for c in p.text
    ]
    # NaN counts as missing too: an all-NaN column cannot be imputed either.
    aggs += [
        F.count(F.nanvl(F.col(c).cast("double"), F.lit(None).cast("double"))).alias(f"present__{c}")
        for c in p.numeric
    ]
    stats = joined.agg(*aggs).collect()[0].asDict()
    rows = int(stats["rows"])
    usable = [c for c in p.numeric if stats[f"present__{c}"] > 0]
    if len(usable) < len(p.numeric):
        # An all-null numeric column cannot be imputed; it carries no signal today.
        empty = sorted(set(p.numeric) - set(usable))
        raise ValueError(f"partition {', '.join(inputs)}: numeric column(s) {empty} are entirely null")

    model = fit_numeric(joined, p.numeric, p.numeric_null_policy) if p.numeric else None
    encoded = apply_numeric(joined, model, p.numeric) if model else joined
    features = feature_frame(encoded, p)

    transform = {
        "format_version": 1,
        "numeric": numeric_state(model, p.numeric) if model else {},
        "numeric_null_policy": p.numeric_null_policy,
        "categorical": {"columns": p.categorical, "buckets": p.categorical_buckets, "hash": "xxhash64"},
        "text": {
            "columns": p.text,
            "vocab_size": p.text_vocab_size,
            "max_tokens": p.text_max_tokens,
            "tokenizer": r"[^\p{L}\p{N}]+ (lower case)",
        },
    }
    report = {
        "stage": "preprocess",
        "inputs": inputs,
        "rows_in": rows,
        "rows_out": rows,
        "rows_quarantined": 0,
        "reference_unmatched": {r["name"]: rows - int(stats[f"matched__{r['name']}"]) for r in p.references},
        "text_truncated": {c: int(stats[f"truncated__{c}"] or 0) for c in p.text},
    }
    with common.PartitionCommit(spark, output) as staging:
        common.write_parquet(features, staging)
        written = spark.read.parquet(staging).count()
        if written != rows:
            raise RuntimeError(f"partition {output}: wrote {written} rows, expected {rows}")
        if model is not None:
            model.write().overwrite().save(f"{staging}/_model")
        common.write_text(
            spark, f"{staging}/_transform.json", json.dumps(transform, indent=2, sort_keys=True)
        )
        common.write_report(spark, staging, report)
    joined.unpersist()
    return report


def main(argv: Sequence[str] | None = None) -> None:
    common.stage_main(argv, __doc__.splitlines()[0], PreprocessParams, run)


if __name__ == "__main__":
    main()
