"""Drop near-constant features; optionally project numerics onto principal components.

    spark-submit --py-files lakeprep_jobs.zip lakeprep_jobs/select_features.py \
        --input <lake>/preprocess/flights/dt=2013-01-01 \
        --output <lake>/select_features/flights/dt=2013-01-01 \
        --params '{"min_variance": 1e-6, "pca_components": null}'

- Numerics (`num__*`): `pyspark.ml` VarianceThresholdSelector over the assembled vector
  keeps columns whose sample variance exceeds `min_variance`.
- Categoricals (`cat__*`) with a single distinct id and text (`txt__*`) that is all padding
  carry no information and are dropped too.
- With `pca_components: k`, the kept numerics are replaced by `num__pc1..k` from
  `pyspark.ml` PCA; the explained variance per component is recorded.
The decision and its numbers go into `_lakeprep_report.json` (`kept`, `dropped`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lakeprep_jobs import common

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclasses.dataclass(frozen=True)
class SelectParams:
    min_variance: float = 1e-6
    pca_components: int | None = None

    def __post_init__(self) -> None:
        if self.min_variance < 0:
            raise ValueError(f"min_variance {self.min_variance!r} must be >= 0")
        if self.pca_components is not None and self.pca_components < 1:
            raise ValueError(f"pca_components {self.pca_components!r} must be a positive integer or null")


def feature_columns(df: DataFrame, prefix: str) -> list[str]:
    return [c for c in df.columns if c.startswith(prefix)]


def numeric_keep(df: DataFrame, numeric: list[str], min_variance: float) -> list[str]:
    """Numeric columns whose variance exceeds the threshold (VarianceThresholdSelector)."""
    from pyspark.ml.feature import VarianceThresholdSelector, VectorAssembler

    if not numeric:
        return []
    vec = VectorAssembler(inputCols=numeric, outputCol="_vec", handleInvalid="keep").transform(df)
    model = VarianceThresholdSelector(
        featuresCol="_vec", outputCol="_sel", varianceThreshold=min_variance
    ).fit(vec)
    return [numeric[i] for i in sorted(model.selectedFeatures)]


def informative_other(df: DataFrame, categorical: list[str], text: list[str]) -> dict[str, bool]:
    """One aggregation: does each categorical have >1 id, each text any non-padding id?"""
    from pyspark.sql import functions as F

    if not categorical and not text:
        return {}
    aggs = [(F.countDistinct(c) > 1).alias(c) for c in categorical]
    aggs += [F.max(F.array_max(F.col(c)) > 0).alias(c) for c in text]
    row = df.agg(*aggs).collect()[0].asDict()
    return {k: bool(v) for k, v in row.items()}


def project_pca(df: DataFrame, numeric: list[str], k: int) -> tuple[DataFrame, list[float]]:
    """Pure given the data: replace `numeric` by `num__pc1..k`; return explained variance."""
    from pyspark.ml.feature import PCA, VectorAssembler
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    if k > len(numeric):
        raise ValueError(f"pca_components {k} exceeds the {len(numeric)} numeric features kept")
    vec = VectorAssembler(inputCols=numeric, outputCol="_vec", handleInvalid="keep").transform(df)
    model = PCA(k=k, inputCol="_vec", outputCol="_pca").fit(vec)
    out = model.transform(vec).withColumn("_pca_arr", vector_to_array("_pca"))
    for i in range(k):
        out = out.withColumn(f"num__pc{i + 1}", F.col("_pca_arr")[i])
    out = out.drop("_vec", "_pca", "_pca_arr", *numeric)
    return out, [float(v) for v in model.explainedVariance.toArray()]


def run(spark: SparkSession, inputs: list[str], output: str, p: SelectParams) -> dict[str, Any]:
    df = spark.read.parquet(*inputs)
    numeric = feature_columns(df, "num__")
    categorical = feature_columns(df, "cat__")
    text = feature_columns(df, "txt__")

    kept_numeric = numeric_keep(df, numeric, p.min_variance)
    informative = informative_other(df, categorical, text)
    dropped = {c: f"variance <= {p.min_variance}" for c in numeric if c not in kept_numeric}
    dropped |= {c: "single category" for c in categorical if not informative[c]}
    dropped |= {c: "no tokens" for c in text if not informative[c]}
    if len(dropped) == len(numeric) + len(categorical) + len(text):
        raise ValueError(f"partition {', '.join(inputs)}: every feature would be dropped: {dropped}")

    selected = df.drop(*dropped)
    explained: list[float] = []
    if p.pca_components is not None:
        selected, explained = project_pca(selected, kept_numeric, p.pca_components)

    rows = df.count()
    report = {
        "stage": "select_features",
        "inputs": inputs,
        "rows_in": rows,
        "rows_out": rows,
        "rows_quarantined": 0,
        "kept": [c for c in selected.columns if c.split("__")[0] in ("num", "cat", "txt")],
        "dropped": dropped,
        "pca_explained_variance": explained,
    }
    with common.PartitionCommit(spark, output) as staging:
        common.write_parquet(selected, staging)
        common.write_report(spark, staging, report)
    return report


def main(argv: Sequence[str] | None = None) -> None:
    common.stage_main(argv, __doc__.splitlines()[0], SelectParams, run)


if __name__ == "__main__":
    main()
