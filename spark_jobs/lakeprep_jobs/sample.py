"""Stratified sample by class and a stable train/validation/test split.

    spark-submit --py-files lakeprep_jobs.zip lakeprep_jobs/sample.py \
        --input <lake>/preprocess/flights/dt=2013-01-01 \
        --output <lake>/sample/flights/dt=2013-01-01 \
        --params '{"fraction": 1.0, "class_fractions": {"0": 0.5}, "seed": 7, "splits": {...}, ...}'

A row is kept when a hash of (id, seed) mapped to [0, 1) falls below its class's fraction,
so the same input and seed give the same sample whatever the partitioning, the executor
count or the row order (Spark's `sampleBy` depends on partitioning). Counts per class are
binomial around `fraction * n` (exact per-stratum counts are the next step).
The split comes from a second hash of the id alone (not the seed), so a row keeps its
split across reruns, days and backfills. Output adds a `split` column.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lakeprep_jobs import common

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

SPLITS = ("train", "validation", "test")
_UNIT = 1 << 30  # hash buckets per unit interval


@dataclasses.dataclass(frozen=True)
class SampleParams:
    label_classes: list[int]
    fraction: float = 1.0
    class_fractions: dict[str, float] = dataclasses.field(default_factory=dict)
    seed: int = 0
    splits: dict[str, float] = dataclasses.field(
        default_factory=lambda: {"train": 0.8, "validation": 0.1, "test": 0.1}
    )

    def __post_init__(self) -> None:
        if not 0 < self.fraction <= 1:
            raise ValueError(f"sample fraction {self.fraction!r} must be in (0, 1]")
        for label, f in self.class_fractions.items():
            if not 0 <= f <= 1:
                raise ValueError(f"sample fraction {f!r} for class {label!r} must be in [0, 1]")
            if int(label) not in self.label_classes:
                raise ValueError(f"class_fractions names class {label!r}, not in {self.label_classes}")
        if set(self.splits) != set(SPLITS) or abs(sum(self.splits.values()) - 1) > 1e-9:
            raise ValueError(f"splits {self.splits!r} must give train, validation, test summing to 1")

    def fraction_for(self, label: int) -> float:
        return float(self.class_fractions.get(str(label), self.fraction))


def unit_hash(*cols: Column) -> Column:
    """A deterministic value in [0, 1) from the given columns (xxhash64)."""
    from pyspark.sql import functions as F

    return F.pmod(F.xxhash64(*cols), F.lit(_UNIT)) / F.lit(float(_UNIT))


def stratified_sample(df: DataFrame, p: SampleParams) -> DataFrame:
    """Pure: keep each row with its class's probability, decided by hash(id, seed)."""
    from pyspark.sql import functions as F

    threshold = F.lit(p.fraction)
    for label in p.label_classes:
        threshold = F.when(F.col("label") == label, F.lit(p.fraction_for(label))).otherwise(threshold)
    return df.filter(unit_hash(F.col("id"), F.lit(p.seed)) < threshold)


def assign_split(df: DataFrame, p: SampleParams) -> DataFrame:
    """Pure: `split` from a seed-independent hash of the id."""
    from pyspark.sql import functions as F

    u = unit_hash(F.col("id"), F.lit("lakeprep-split"))
    train_end = p.splits["train"]
    val_end = train_end + p.splits["validation"]
    split = F.when(u < train_end, "train").when(u < val_end, "validation").otherwise("test")
    return df.withColumn("split", split)


def run(spark: SparkSession, inputs: list[str], output: str, p: SampleParams) -> dict[str, Any]:
    df = spark.read.parquet(*inputs)
    sampled = assign_split(stratified_sample(df, p), p)
    before = common.class_counts(df, "label")
    with common.PartitionCommit(spark, output) as staging:
        common.write_parquet(sampled, staging)
        written = spark.read.parquet(staging)
        after = {
            (r["split"], str(r["label"])): int(r["count"])
            for r in written.groupBy("split", "label").count().collect()
        }
        rows_in = sum(before.values())
        rows_out = sum(after.values())
        report = {
            "stage": "sample",
            "inputs": inputs,
            "rows_in": rows_in,
            "rows_out": rows_out,
            "rows_quarantined": 0,
            "rows_sampled_out": rows_in - rows_out,
            "seed": p.seed,
            "class_fractions": {str(c): p.fraction_for(c) for c in p.label_classes},
            "class_counts_before": before,
            "class_counts_after": {
                str(c): sum(n for (_, lbl), n in after.items() if lbl == str(c)) for c in p.label_classes
            },
            "splits": {s: {str(c): after.get((s, str(c)), 0) for c in p.label_classes} for s in SPLITS},
        }
        common.write_report(spark, staging, report)
    return report


def main(argv: Sequence[str] | None = None) -> None:
    common.stage_main(argv, __doc__.splitlines()[0], SampleParams, run)


if __name__ == "__main__":
    main()
