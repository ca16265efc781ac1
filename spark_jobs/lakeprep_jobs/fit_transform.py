"""Fit the run's one transform on the train split of its window.

    spark-submit --py-files lakeprep_jobs.zip lakeprep_jobs/fit_transform.py \
        --input <lake>/sample/flights/dt=2013-01-01 ... --input <lake>/sample/flights/dt=2013-01-03 \
        --output <lake>/fit_transform/flights/dt=2013-01-03 --params '{...}'

Everything learned from data is learned here, once per run, from the rows of the
window's sampled days whose `split` is `train` (validation and test rows never enter a
statistic), and written as `transform.json` (docs/TRANSFORM.md) plus a Spark
`PipelineModel` built from it. `export_shards` then applies it unchanged to every split.

Passes over the cached train rows: one aggregate for imputation fills and clipping
quantiles, one for the scaling statistics of the imputed and clipped values, and one
grouped count for all vocabularies together (categorical values and text tokens as
`(feature, value)` pairs, ranked per feature in Spark so only the kept entries reach the
driver). Vocabulary order is count descending, then value: ties never depend on
partitioning. Spark ML's StringIndexer/CountVectorizer are not used because neither
has both a frequency cutoff and a size cap with a defined tie order.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lakeprep_contracts import layout
from lakeprep_contracts.text import TOKENIZER
from lakeprep_jobs import common
from lakeprep_jobs.transform import pipeline_model

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FORMAT_VERSION = 1
HASH = {"function": "xxhash64", "seed": 42, "input": "utf-8"}
# percentile_approx accuracy: relative rank error 1/accuracy (Spark's default is 10000).
QUANTILE_ACCURACY = 10000


@dataclasses.dataclass(frozen=True)
class FitParams:
    dataset: str
    logical_date: str
    run_id: str
    id_column: str
    label_column: str
    label_classes: list[int]
    numeric: list[dict[str, Any]]
    categorical: list[dict[str, Any]]
    text: list[dict[str, Any]]
    contract: dict[str, Any]
    # The stage's knobs arrive too; per-column settings above already resolve them.
    numeric_scaling: str
    numeric_impute: str
    clip_quantiles: list[float] | None
    categorical_encoding: str
    categorical_min_frequency: int
    categorical_max_vocab: int
    categorical_buckets: int
    text_encoding: str
    text_min_frequency: int
    text_vocab_size: int
    text_max_tokens: int

    def __post_init__(self) -> None:
        for col in self.numeric:
            q = col.get("clip_quantiles")
            if q is not None and not (0 <= q[0] < q[1] <= 1):
                raise ValueError(
                    f"numeric {col['name']!r}: clip_quantiles {q!r} must be [low, high] "
                    "with 0 <= low < high <= 1"
                )


class FitError(ValueError):
    """A statistic cannot be fitted (no values, not finite); names the column."""


def _finite(value: Any, what: str) -> float:
    if value is None or not math.isfinite(float(value)):
        raise FitError(f"{what} is {value!r} on the window's train split; it must be a finite number")
    return float(value)


def fit_numeric(
    train: DataFrame, columns: list[dict[str, Any]], rows: int
) -> tuple[list[dict], list[dict], list[str]]:
    """(numeric entries of transform.json, dropped features, constant columns).

    Two aggregates over `train`.
    """
    from pyspark.sql import functions as F

    if not columns:
        return [], [], []

    def value(c: str):
        return F.nanvl(F.col(c).cast("double"), F.lit(None).cast("double"))

    first = []
    for col in columns:
        c = col["name"]
        first.append(F.count(value(c)).alias(f"n__{c}"))
        first.append(F.mean(value(c)).alias(f"mean__{c}"))
        probs = [0.5, *(col["clip_quantiles"] or [])]
        first.append(F.percentile_approx(value(c), probs, QUANTILE_ACCURACY).alias(f"q__{c}"))
    stats = train.agg(*first).collect()[0].asDict()

    fitted, dropped, constant = [], [], []
    prepared = []  # (col, fill, clip) of the columns that have values
    for col in columns:
        c = col["name"]
        if not stats[f"n__{c}"]:
            dropped.append({"name": c, "reason": f"no values on the window's train split ({rows} rows)"})
            continue
        q = stats[f"q__{c}"]
        fill = _finite(stats[f"mean__{c}"] if col["impute"] == "mean" else q[0], f"{col['impute']} of {c}")
        clip = None
        if col["clip_quantiles"]:
            lower = _finite(q[1], f"quantile {col['clip_quantiles'][0]} of {c}")
            upper = _finite(q[2], f"quantile {col['clip_quantiles'][1]} of {c}")
            clip = {"lower": lower, "upper": upper, "quantiles": list(col["clip_quantiles"])}
        prepared.append((col, fill, clip))

    def imputed(c: str, fill: float, clip: dict | None):
        x = F.coalesce(value(c), F.lit(fill))
        if clip:
            x = F.least(F.greatest(x, F.lit(clip["lower"])), F.lit(clip["upper"]))
        return x

    second = []
    for col, fill, clip in prepared:
        c, x = col["name"], imputed(col["name"], fill, clip)
        if col["scaling"] == "standard":
            second += [F.mean(x).alias(f"center__{c}"), F.stddev_samp(x).alias(f"spread__{c}")]
        elif col["scaling"] == "minmax":
            second += [F.min(x).alias(f"center__{c}"), (F.max(x) - F.min(x)).alias(f"spread__{c}")]
        elif col["scaling"] == "robust":
            q = F.percentile_approx(x, [0.25, 0.5, 0.75], QUANTILE_ACCURACY)
            second += [q[1].alias(f"center__{c}"), (q[2] - q[0]).alias(f"spread__{c}")]
    scaled = train.agg(*second).collect()[0].asDict() if second else {}

    for col, fill, clip in prepared:
        c = col["name"]
        if col["scaling"] == "none":
            center, scale = 0.0, 1.0
        else:
            center = _finite(scaled[f"center__{c}"], f"{col['scaling']} center of {c}")
            spread = scaled[f"spread__{c}"]
            # A constant column (or one train row) has no spread: centre it, do not divide by 0.
            if spread is not None and math.isfinite(spread) and spread > 0:
                scale = float(spread)
            else:
                scale = 1.0
                constant.append(c)
        fitted.append(
            {
                "name": c,
                "output": layout.encoded_name("numeric", c),
                "impute": col["impute"],
                "fill": fill,
                "clip": clip,
                "scaling": col["scaling"],
                "center": center,
                "scale": scale,
            }
        )
    return fitted, dropped, constant


def fit_vocabularies(
    train: DataFrame, categorical: list[dict[str, Any]], text: list[dict[str, Any]]
) -> dict[str, tuple[list[str], list[int], int]]:
    """Per vocab-encoded feature: (values, counts, values below min_frequency or beyond the cap).

    One grouped count over `(feature, value)` pairs of every such feature.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    wanted = [c for c in categorical if c["encoding"] == "vocab"] + [
        t for t in text if t["encoding"] == "vocab"
    ]
    if not wanted:
        return {}
    text_names = {t["name"] for t in text}
    pairs = None
    for col in wanted:
        c = col["name"]
        values = F.col(c) if c in text_names else F.array(F.col(c))
        part = train.select(F.lit(c).alias("feature"), F.explode(values).alias("value")).filter(
            F.col("value").isNotNull()
        )
        pairs = part if pairs is None else pairs.unionByName(part)
    counts = pairs.groupBy("feature", "value").count()
    # Ids 0 and 1 are reserved (missing/padding, unseen): a text vocabulary of
    # `vocab_size` ids holds vocab_size - 2 tokens.
    caps = F.create_map(*[x for c in wanted for x in (F.lit(c["name"]), F.lit(_capacity(c, text_names)))])
    floors = F.create_map(*[x for c in wanted for x in (F.lit(c["name"]), F.lit(c["min_frequency"]))])
    ranked = counts.withColumn(
        "rank", F.row_number().over(Window.partitionBy("feature").orderBy(F.desc("count"), F.asc("value")))
    ).withColumn(
        "kept", (F.col("count") >= floors[F.col("feature")]) & (F.col("rank") <= caps[F.col("feature")])
    )
    out: dict[str, tuple[list[str], list[int], int]] = {c["name"]: ([], [], 0) for c in wanted}
    rare = {
        r["feature"]: int(r["n"])
        for r in ranked.filter(~F.col("kept")).groupBy("feature").agg(F.count("*").alias("n")).collect()
    }
    for row in ranked.filter("kept").orderBy("feature", "rank").collect():
        values, cnts, _ = out[row["feature"]]
        values.append(row["value"])
        cnts.append(int(row["count"]))
    ranked.unpersist()
    return {name: (v, n, rare.get(name, 0)) for name, (v, n, _) in out.items()}


def _capacity(col: dict[str, Any], text_names: set[str]) -> int:
    if col["name"] in text_names:
        return max(0, int(col["vocab_size"]) - 2)
    return int(col["max_vocab"])


def categorical_entries(cols: list[dict[str, Any]], vocabs: dict) -> list[dict[str, Any]]:
    out = []
    for col in cols:
        entry: dict[str, Any] = {
            "name": col["name"],
            "output": layout.encoded_name("categorical", col["name"]),
            "encoding": col["encoding"],
            "missing_id": 0,
        }
        if col["encoding"] == "vocab":
            values, counts, rare = vocabs[col["name"]]
            entry |= {
                "unseen_id": 1,
                "vocabulary": values,
                "counts": counts,
                "min_frequency": col["min_frequency"],
                "max_size": col["max_vocab"],
                "rare_values": rare,
                "cardinality": len(values) + 2,
            }
        else:
            entry |= {"buckets": col["buckets"], "cardinality": col["buckets"]}
        out.append(entry)
    return out


def text_entries(cols: list[dict[str, Any]], vocabs: dict) -> list[dict[str, Any]]:
    out = []
    for col in cols:
        entry: dict[str, Any] = {
            "name": col["name"],
            "output": layout.encoded_name("text", col["name"]),
            "encoding": col["encoding"],
            "tokenizer": dict(TOKENIZER),
            "max_tokens": col["max_tokens"],
            "padding_id": 0,
        }
        if col["encoding"] == "vocab":
            values, counts, _ = vocabs[col["name"]]
            entry |= {
                "unseen_id": 1,
                "vocabulary": values,
                "counts": counts,
                "min_frequency": col["min_frequency"],
                "max_size": col["vocab_size"],
                "cardinality": len(values) + 2,
            }
        else:
            entry |= {"buckets": col["vocab_size"], "cardinality": col["vocab_size"]}
        out.append(entry)
    return out


def fit(
    train: DataFrame, p: FitParams, *, rows: int, partitions: list[str]
) -> tuple[dict[str, Any], list[str]]:
    """Pure given the train rows: (the transform document, constant numeric columns)."""
    numeric, dropped, constant = fit_numeric(train, p.numeric, rows)
    vocabs = fit_vocabularies(train, p.categorical, p.text)
    return {
        "format_version": FORMAT_VERSION,
        "dataset": p.dataset,
        "logical_date": p.logical_date,
        "run_id": p.run_id,
        "fitted_on": {"split": "train", "rows": rows, "partitions": partitions},
        "contract": p.contract,
        "id": {"column": p.id_column, "output": layout.ID},
        "label": {"column": p.label_column, "output": layout.LABEL, "classes": p.label_classes},
        "numeric": numeric,
        "categorical": categorical_entries(p.categorical, vocabs),
        "text": text_entries(p.text, vocabs),
        "dropped": dropped,
        "hash": dict(HASH),
    }, constant


def check_document(doc: dict[str, Any], where: str) -> None:
    """The writer checks what every reader will check (the JSON Schema)."""
    from lakeprep_contracts import documents

    documents.require("transform", doc, where)


def run(spark: SparkSession, inputs: list[str], output: str, p: FitParams) -> dict[str, Any]:
    from pyspark.sql import functions as F

    window = spark.read.parquet(*inputs)
    train = window.filter(F.col(layout.SPLIT) == "train").cache()
    counts = {r[0]: int(r[1]) for r in window.groupBy(layout.SPLIT).count().collect()}
    rows = counts.get("train", 0)
    if rows == 0:
        raise FitError(
            f"window {inputs[0]} .. {inputs[-1]}: no train rows to fit the transform on "
            f"(rows per split {counts}); widen window.days or the sample fractions"
        )
    doc, constant = fit(train, p, rows=rows, partitions=list(inputs))
    train.unpersist()
    check_document(doc, f"{output}/{layout.TRANSFORM}")
    text = json.dumps(doc, indent=2, sort_keys=True, allow_nan=False)
    report = {
        "stage": "fit_transform",
        "inputs": inputs,
        "rows_in": sum(counts.values()),
        "rows_out": sum(counts.values()),
        "rows_quarantined": 0,
        "fitted_on_rows": rows,
        "rows_per_split": counts,
        "dropped": doc["dropped"],
        "vocabulary_sizes": {
            e["name"]: len(e.get("vocabulary", [])) for e in doc["categorical"] + doc["text"]
        },
        # Kept (centred, scale 1) but worth a look: feature selection can drop them.
        "constant_numerics": constant,
    }
    with common.PartitionCommit(spark, output) as staging:
        common.write_text(spark, layout.join(staging, layout.TRANSFORM), text)
        pipeline_model(doc).write().overwrite().save(layout.join(staging, layout.SPARK_MODEL_DIR))
        common.write_report(spark, staging, report)
        common.write_success(spark, staging)
    return report


def main(argv: Sequence[str] | None = None) -> None:
    common.stage_main(argv, __doc__.splitlines()[0], FitParams, run)


if __name__ == "__main__":
    main()
