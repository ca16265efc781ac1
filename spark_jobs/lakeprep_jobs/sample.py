"""Exact stratified sample: a train/validation/test split first, then exact counts per stratum and split.

    spark-submit --py-files lakeprep_jobs.zip lakeprep_jobs/sample.py \
        --input <lake>/preprocess/flights/dt=2013-01-01 \
        --output <lake>/sample/flights/dt=2013-01-01 \
        --params '{"fraction": 1.0, "class_fractions": {"0": 0.5}, "seed": 7, "splits": {...}, ...}'

A stratum is a value of the label (default) or a combination of the `strata` columns
(`["label", "origin"]`). Two steps, in this order:

1. **Split.** By default the split is a threshold on a seed-independent hash of the id
   (`unit_hash(id)` < 0.8: train, ...), so a row keeps its split across reruns, days and
   backfills whatever else the partition holds; shares are binomial around the targets.
   With `stratify_splits`, each stratum of n rows gets exactly the largest-remainder
   counts of `splits` (they sum to n): in the order of the same hash, the first rows are
   train, the next validation, the rest test. The trade-off: exact shares per stratum
   depend on the day's partition (a rerun over other rows can move the rows near a cut
   to a neighbouring split), while the threshold depends on the id alone. Both use one
   hash, so the two modes disagree only near the cuts.
2. **Volume.** Each stratum of n rows keeps exactly `round_half_up(f, n) =
   floor(f * n + 1/2)` rows (f from `class_fractions` for its class, else `fraction`;
   Python's `round` would round 2.5 to 2), or, for a class in `class_counts`, the class
   keeps exactly min(count, rows of the class) rows per day. That total is shared among
   the stratum's (or the class's) split cells by largest remainder on their quotas (f *
   rows of the cell, or count * rows of the cell / rows of the class): each cell keeps its
   quota's floor or one row more, less than one row from its quota, ties in the order of
   a hash of the seed, the cell and the sizes of the cells sharing the total (so no split
   is rounded up or down every day). Not each cell rounded on its own: the halves would
   add up (8 of a 14-row class split 11/2/1 at 0.5, 57 %). The rows kept are the
   first of the cell in the order of hash(id, seed): the same input and seed give the
   same sample whatever the partitioning, the executor count or the row order. A cell's
   samples at two fractions are nested (both are the first rows of the cell's order); a
   larger fraction keeps a superset, except where a cell's share of the rounding moved
   to another cell (one row at most), and always with one cell per stratum.

Both exact steps are `lakeprep_jobs.exact` (a histogram pass, then a selection that
ranks only the rows of the cut buckets; the module docstring counts the passes). The
report adds `strata`: rows before and after sampling per stratum and split. Both come
from the plan, which knows them exactly before the selection runs (a cell keeps exactly
its planned rows); the rows written, from the Parquet footers, are checked against the
plan's total before the partition is committed. Only strata without the label need one
more aggregation, for the counts per class.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from lakeprep_contracts import layout
from lakeprep_jobs import day_shards, exact, lake_io, parquet_io, stage_entry
from lakeprep_jobs.fit_statistics import split_statistics

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

SPLITS = layout.SPLITS  # ("train", "validation", "test"): the cut order of stratified splits
_UNIT = 1 << 30  # hash buckets per unit interval
_SPLIT_SALT = "lakeprep-split"  # the split hash's "seed": never the sampling seed


@dataclasses.dataclass(frozen=True)
class SampleParams:
    label_classes: list[int]
    fraction: float = 1.0
    class_fractions: dict[str, float] = dataclasses.field(default_factory=dict)
    class_counts: dict[str, int] = dataclasses.field(default_factory=dict)
    seed: int = 0
    splits: dict[str, float] = dataclasses.field(
        default_factory=lambda: {"train": 0.8, "validation": 0.1, "test": 0.1}
    )
    stratify_splits: bool = False
    strata: list[str] | None = None  # columns of the prepared rows; None: the label
    # What the day's `_fit_statistics.json` profiles (`lakeprep_contracts.window_fit.profile`,
    # from the spec's features); None: no statistics (a sample run on its own).
    fit_profile: dict[str, Any] | None = None
    # The day's shards (lakeprep_jobs.day_shards): each class's rows in the order of the
    # balance hash of `stages.balance.seed`, at most `rows_per_file` rows a file.
    balance_seed: int = 0
    rows_per_file: int = 500_000
    row_group_rows: int = day_shards.ROW_GROUP_ROWS
    # Texts of `encoding: tokenizer` ({name, tokenizer: URI, max_tokens}): the report counts
    # per split what their tokenizer file cuts at max_tokens (lakeprep_jobs.subword_truncation).
    subword_texts: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if not 0 < self.fraction <= 1:
            raise ValueError(f"sample fraction {self.fraction!r} must be in (0, 1]")
        for label, f in self.class_fractions.items():
            if not 0 <= f <= 1:
                raise ValueError(f"sample fraction {f!r} for class {label!r} must be in [0, 1]")
            if int(label) not in self.label_classes:
                raise ValueError(f"class_fractions names class {label!r}, not in {self.label_classes}")
        for label, n in self.class_counts.items():
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"sample count {n!r} for class {label!r} must be an integer >= 0")
            if int(label) not in self.label_classes:
                raise ValueError(f"class_counts names class {label!r}, not in {self.label_classes}")
        both = sorted(set(self.class_fractions) & set(self.class_counts))
        if both:
            raise ValueError(f"classes {both} are in both class_fractions and class_counts; give one")
        if set(self.splits) != set(SPLITS) or abs(sum(self.splits.values()) - 1) > 1e-9:
            raise ValueError(f"splits {self.splits!r} must give train, validation, test summing to 1")
        if self.strata is not None:
            if not self.strata or len(set(self.strata)) != len(self.strata):
                raise ValueError(f"strata {self.strata!r} must be a non-empty list of distinct columns")
            reserved = [c for c in self.strata if c in (layout.ID, layout.SPLIT)]
            if reserved:
                raise ValueError(f"strata {self.strata!r} cannot name {reserved} (the id, the split)")
        if (self.class_fractions or self.class_counts) and layout.LABEL not in self.strata_columns:
            raise ValueError(
                f"class_fractions and class_counts apply per class: strata {self.strata!r} "
                f"must include {layout.LABEL!r}"
            )

    @property
    def strata_columns(self) -> tuple[str, ...]:
        return tuple(self.strata) if self.strata is not None else (layout.LABEL,)

    def fraction_for(self, label: int | None) -> float:
        return float(self.class_fractions.get(str(label), self.fraction))


def unit_hash(*cols: Column) -> Column:
    """A deterministic value in [0, 1) from the given columns (xxhash64)."""
    from pyspark.sql import functions as F

    return F.pmod(F.xxhash64(*cols), F.lit(_UNIT)) / F.lit(float(_UNIT))


def assign_split(
    df: DataFrame, p: SampleParams, *, bucket_bits: int = exact.DEFAULT_BUCKET_BITS
) -> DataFrame:
    """Pure: `split`, from a seed-independent hash of the id (threshold or exact per stratum).

    With `stratify_splits` this runs the planning jobs of `exact.exact_split` now.
    """
    from pyspark.sql import functions as F

    if p.stratify_splits:
        shares = {s: p.splits[s] for s in SPLITS}
        return exact.exact_split(
            df,
            p.strata_columns,
            shares,
            layout.SPLIT,
            key_cols=[layout.ID],
            seed=_SPLIT_SALT,
            bucket_bits=bucket_bits,
        )
    u = unit_hash(F.col(layout.ID), F.lit(_SPLIT_SALT))
    train_end = p.splits["train"]
    val_end = train_end + p.splits["validation"]
    split = F.when(u < train_end, "train").when(u < val_end, "validation").otherwise("test")
    return df.withColumn(layout.SPLIT, split)


def _cell_order(key: exact.StratumKey) -> tuple:
    """Sort key of a (strata..., split) cell: strata values (nulls last), then the split order."""
    *values, split = key
    return (*((v is None, 0 if v is None else v) for v in values), SPLITS.index(split))


def _tie_order(p: SampleParams, cell: exact.StratumKey, group: Sequence[int]) -> bytes:
    """Where a cell stands among cells of equal remainder: a hash of the seed, the cell
    (stratum and split) and the sizes of every cell its total is shared among.

    Not the split order: with fraction 0.5 every odd cell ties, and a fixed order would
    round the same split of a class down on every such day (the small validation and test
    cells of a small class most of all). The sizes make the winner change from day to day,
    with no split favoured; the hash makes it the same on every rerun of the same rows.
    """
    *stratum, split = cell
    name = stratum_name(p.strata_columns, tuple(stratum))
    text = "\x1f".join([str(p.seed), name, str(split), *map(str, group)])
    return hashlib.sha256(text.encode()).digest()


def cell_counts(
    p: SampleParams, cells: Sequence[str]
) -> Callable[[Mapping[exact.StratumKey, int]], dict[exact.StratumKey, int]]:
    """Rows to keep per (strata..., split) cell, from every cell's size.

    A stratum of n rows whose class has a fraction f keeps exactly `round_half_up(f, n)`;
    a class in `class_counts` keeps exactly min(count, its rows), over all its strata.
    Either total is shared among the cells by largest remainder (`exact.apportion`): a
    cell of c rows gets floor(q) or floor(q) + 1 of its quota q (f * c, or count * c /
    rows of the class), ties in the order of `_tie_order`.
    """
    label_at = cells.index(layout.LABEL) if layout.LABEL in cells else None

    def counts(sizes: Mapping[exact.StratumKey, int]) -> dict[exact.StratumKey, int]:
        groups: dict[tuple[Any, ...], list[exact.StratumKey]] = {}
        for key in sizes:
            label = str(key[label_at]) if label_at is not None else None
            group = ("class", label) if label in p.class_counts else ("stratum", *key[:-1])
            groups.setdefault(group, []).append(key)
        out: dict[exact.StratumKey, int] = {}
        for group, keys in groups.items():
            keys.sort(key=_cell_order)
            rows = sum(sizes[k] for k in keys)
            if group[0] == "class":
                want = min(p.class_counts[group[1]], rows)
                quotas = [Fraction(want * sizes[k], rows) for k in keys]
            else:
                f = exact.as_decimal(p.fraction_for(keys[0][label_at] if label_at is not None else None))
                want = exact.round_half_up(f, rows)
                quotas = [f * sizes[k] for k in keys]
            ties = [_tie_order(p, k, [sizes[c] for c in keys]) for k in keys]
            out.update(zip(keys, exact.apportion(quotas, want, ties), strict=True))
        return out

    return counts


def sample_plan(
    df: DataFrame, p: SampleParams, *, bucket_bits: int = exact.DEFAULT_BUCKET_BITS
) -> exact.CutPlan:
    """The planning pass of the volume sample over rows that carry `split` (its cells are
    (strata..., split); `plan.sizes` and `plan.ranks[cell][0]` are rows before and after)."""
    if layout.SPLIT not in df.columns:
        raise ValueError(
            f"the sample is per split: {df.columns} has no {layout.SPLIT!r} (assign_split first)"
        )
    cells = (*p.strata_columns, layout.SPLIT)
    return exact.plan_sample(
        df, cells, cell_counts(p, cells), key_cols=[layout.ID], seed=p.seed, bucket_bits=bucket_bits
    )


def stratum_name(strata: Sequence[str], key: exact.StratumKey) -> str:
    """A stratum's key in the report: `"1"` for the label alone, `"label=1,origin=JFK"` for several."""

    def text(v: Any) -> str:
        return "null" if v is None else str(v)

    if len(strata) == 1:
        return text(key[0])
    return ",".join(f"{c}={text(v)}" for c, v in zip(strata, key, strict=True))


def planned_counts(plan: exact.CutPlan) -> dict[exact.StratumKey, int]:
    """Rows the selection keeps per (strata..., split) cell: the plan's first segment."""
    return {cell: plan.segment_sizes(cell)[0] for cell in plan.sizes}


def by_class(
    p: SampleParams, plan: exact.CutPlan, kept: Mapping[exact.StratumKey, int]
) -> tuple[dict[str, int], dict[tuple[str, str], int]] | None:
    """(rows per class before, rows per (split, class) after) from the plan's cells, or None
    when the label is not a stratum (the cells do not say a row's class)."""
    if layout.LABEL not in p.strata_columns:
        return None
    label_at = p.strata_columns.index(layout.LABEL)
    before: dict[str, int] = {}
    after: dict[tuple[str, str], int] = {}
    for cell, n in plan.sizes.items():
        label, split = str(cell[label_at]), str(cell[-1])
        before[label] = before.get(label, 0) + n
        after[(split, label)] = after.get((split, label), 0) + kept[cell]
    return before, after


def split_class_counts(written: DataFrame) -> dict[tuple[str, str], int]:
    """Rows per (split, class) of the written sample, from one small aggregation."""
    counts = written.groupBy(layout.SPLIT, layout.LABEL).count().collect()
    return {(str(r[layout.SPLIT]), str(r[layout.LABEL])): int(r["count"]) for r in counts}


def strata_report(
    p: SampleParams, plan: exact.CutPlan, kept: Mapping[exact.StratumKey, int]
) -> dict[str, dict[str, dict[str, int]]]:
    """`{"<stratum>": {"train": {"before": n, "after": k}, ...}}`, every split of every
    stratum the input holds."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for cell in sorted(plan.sizes, key=_cell_order):
        *stratum, split = cell
        by_split = out.setdefault(stratum_name(p.strata_columns, tuple(stratum)), {})
        for s in SPLITS:
            by_split.setdefault(s, {"before": 0, "after": 0})
        by_split[split] = {"before": plan.sizes[cell], "after": kept[cell]}
    return out


def class_counts(df: DataFrame, label: str) -> dict[str, int]:
    """Rows per label value, as a JSON-friendly dict (one small aggregation)."""
    return {str(r[0]): int(r[1]) for r in df.groupBy(label).count().collect()}


def run(spark: SparkSession, inputs: list[str], output: str, p: SampleParams) -> dict[str, Any]:
    from pyspark import StorageLevel

    df = parquet_io.read_complete(spark, inputs)
    split = assign_split(df, p)
    if p.stratify_splits:  # planned and ranked: compute it once for the sample's three reads
        split = split.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        plan = sample_plan(split, p)
        kept = planned_counts(plan)
        rows_in, rows_out = sum(plan.sizes.values()), sum(kept.values())
        with lake_io.PartitionCommit(spark, output) as staging:
            sampled = exact.apply_sample(split, plan)
            counted = by_class(p, plan, kept)
            if counted is None:
                before = class_counts(df, layout.LABEL)
                after = split_class_counts(sampled)
            else:
                before, after = counted
            day_shards.write(
                spark,
                sampled,
                staging,
                {(s, int(c)): n for (s, c), n in after.items()},
                seed=p.balance_seed,
                rows_per_file=p.rows_per_file,
                row_group_rows=p.row_group_rows,
            )
            written = parquet_io.parquet_rows(spark, staging)
            if written != rows_out:
                raise RuntimeError(
                    f"sample of {', '.join(inputs)}: wrote {written} rows, the plan keeps {rows_out} "
                    f"of {rows_in}"
                )
            report = {
                "stage": "sample",
                "inputs": inputs,
                "rows_in": rows_in,
                "rows_out": rows_out,
                "rows_quarantined": 0,
                "rows_sampled_out": rows_in - rows_out,
                "seed": p.seed,
                "class_fractions": {str(c): p.fraction_for(c) for c in p.label_classes},
                "class_counts": dict(p.class_counts),
                "stratify_splits": p.stratify_splits,
                "strata_columns": list(p.strata_columns),
                "class_counts_before": before,
                "class_counts_after": {
                    str(c): sum(n for (_, lbl), n in after.items() if lbl == str(c)) for c in p.label_classes
                },
                "splits": {s: {str(c): after.get((s, str(c)), 0) for c in p.label_classes} for s in SPLITS},
                "strata": strata_report(p, plan, kept),
            }
            if p.fit_profile is not None:
                # The window's fit merges these instead of reading the day again (fit_statistics.py).
                rows = spark.read.schema(sampled.schema).parquet(staging)
                statistics = split_statistics(rows, p.fit_profile, p.label_classes)
                lake_io.write_text(
                    spark,
                    layout.join(staging, layout.FIT_STATISTICS),
                    json.dumps(statistics, sort_keys=True, separators=(",", ":"), allow_nan=False),
                )
            if p.subword_texts:
                from lakeprep_jobs.lake import SparkLake
                from lakeprep_jobs.subword_truncation import day_truncation

                rows = spark.read.schema(sampled.schema).parquet(staging)
                report["text_truncation"] = day_truncation(SparkLake(spark), rows, p.subword_texts)
            lake_io.write_report(spark, staging, report)
    finally:
        if p.stratify_splits:
            split.unpersist()
    return report


STAGE = stage_entry.Stage("sample", __doc__.splitlines()[0], SampleParams, run)


def main(argv: Sequence[str] | None = None) -> None:
    stage_entry.stage_main(argv, STAGE)


if __name__ == "__main__":
    main()
