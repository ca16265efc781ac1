"""Class balancing and augmentation of the train split, on the encoded features, in Spark.

The encoded export (`stages.export_shards.shards: encoded`) calls
`balance_train` on the window's **train split only**, after the fitted transform and
before sharding (a prepared export chooses the same counts by arithmetic,
`lakeprep_jobs.window_manifest`, and the loader makes the synthetic rows as it reads,
`lakeprep_train.augment`); validation and test are written as sampled, so
they keep the real class distribution and every metric on them is honest. The knobs are
the spec's `stages.balance` (`lakeprep_contracts.knobs`):

- `strategy`: `none`; `undersample` (every class above `smallest / target_ratio` rows is
  cut to that many); `oversample` (every class below `target_ratio * largest` rows is
  repeated up to that many); `reweight` (no row changes: the manifest's `class_weights`
  make the loss count each class as if it had been oversampled to the target ratio).
  Counts are exact. Which rows go or repeat is decided by their rank within the class in
  the order of `xxhash64(id, seed)`, so the same rows are chosen whatever the
  partitioning, the executor count or the row order.
- `augment`: `none`; `smote` (interpolate the fitted numerics towards a same-class
  neighbour, categoricals and text from the base row); `jitter` (Gaussian noise of
  `jitter_sigma` on the fitted numerics); `text` (drop each token with probability
  `token_dropout`). Every row of the balanced split makes `synthetic_per_row` synthetic
  rows (smote: none for a row alone in its candidate group), marked `is_synthetic`, with
  the id `<id>#syn<k>`. Every random draw is a hash of (id, seed, k, ...), so a seed
  gives the same rows on any cluster.

SMOTE's neighbours come from a bounded candidate set so the cost stays linear: the rows
of each class are ranked by `xxhash64(id, seed, "lakeprep-smote")` and dealt into
`ceil(rows / smote_candidates)` groups round-robin (at most `smote_candidates` rows each);
a row's neighbours are the other rows of its group, nearest first (Euclidean distance
on the fitted numerics, ties by id), and its k-th synthetic row uses the
`(k mod group size - 1)`-th nearest.

Everything here is a pure DataFrame function; `export_shards` reads, counts and writes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from lakeprep_contracts import layout
from lakeprep_jobs.sample import unit_hash  # the unit hash every lakeprep threshold uses

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

STRATEGIES = ("none", "undersample", "oversample", "reweight")
AUGMENTS = ("none", "smote", "jitter", "text")
COPY = "_copy"  # 0 = the row itself, k = its k-th repeat (oversample); dropped before writing
# Float slack for ratios such as 0.7 * 100 = 70.00000000000001 (whole rows are meant).
_EPS = 1e-9


@dataclasses.dataclass(frozen=True)
class BalanceParams:
    """The spec's `stages.balance` (defaults as declared in `lakeprep_contracts.knobs`)."""

    strategy: str = "none"
    target_ratio: float = 1.0
    seed: int = 0
    augment: str = "none"
    synthetic_per_row: int = 1
    jitter_sigma: float = 0.1
    token_dropout: float = 0.1
    smote_candidates: int = 16

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"balance strategy {self.strategy!r} must be one of {list(STRATEGIES)}")
        if self.augment not in AUGMENTS:
            raise ValueError(f"balance augment {self.augment!r} must be one of {list(AUGMENTS)}")
        if not 0 < self.target_ratio <= 1:
            raise ValueError(f"balance target_ratio {self.target_ratio!r} must be in (0, 1]")
        if self.synthetic_per_row < 1:
            raise ValueError(f"balance synthetic_per_row {self.synthetic_per_row!r} must be >= 1")
        if self.jitter_sigma <= 0:
            raise ValueError(f"balance jitter_sigma {self.jitter_sigma!r} must be > 0")
        if not 0 < self.token_dropout < 1:
            raise ValueError(f"balance token_dropout {self.token_dropout!r} must be in (0, 1)")
        if self.smote_candidates < 2:
            raise ValueError(f"balance smote_candidates {self.smote_candidates!r} must be >= 2")


# ------------------------------------------------------------------ counts and weights


def class_targets(counts: dict[str, int], p: BalanceParams) -> dict[str, int]:
    """Pure arithmetic: rows per class after balancing (`counts`: class -> train rows).

    A class with no rows stays empty (there is nothing to repeat); with fewer than two
    classes present nothing is balanced.
    """
    present = {c: n for c, n in counts.items() if n}
    if p.strategy not in ("undersample", "oversample") or len(present) < 2:
        return dict(counts)
    if p.strategy == "undersample":
        smallest = min(present.values())
        cap = max(smallest, math.floor(smallest / p.target_ratio + _EPS))
        return {c: min(n, cap) for c, n in counts.items()}
    largest = max(present.values())
    floor = max(1, math.ceil(p.target_ratio * largest - _EPS))
    return {c: max(n, floor) if n else 0 for c, n in counts.items()}


def class_weights(counts: dict[str, int], p: BalanceParams) -> dict[str, float]:
    """The manifest's `class_weights`: 1.0 per class unless the strategy is `reweight`.

    `reweight` weighs class c by `max(n_c, target_ratio * n_max) / n_c`, scaled so the
    mean weight per row is 1; with `target_ratio` 1 that is scikit-learn's
    `class_weight='balanced'`, `n / (classes present * n_c)`. A class with no training
    rows contributes nothing to the loss; it gets 1.0 so every weight is positive.
    """
    if p.strategy != "reweight":
        return dict.fromkeys(counts, 1.0)
    present = {c: n for c, n in counts.items() if n}
    if not present:
        return dict.fromkeys(counts, 1.0)
    largest = max(present.values())
    target = {c: max(float(n), p.target_ratio * largest) for c, n in present.items()}
    scale = sum(present.values()) / sum(target.values())
    return {c: round(target[c] / n * scale, 6) if n else 1.0 for c, n in counts.items()}


# ---------------------------------------------------------------------- row selection


def _per_class(values: dict[str, Any], default: Any) -> Column:
    """`values[label]` as a column (a handful of classes: a CASE expression)."""
    from pyspark.sql import functions as F

    out = F.lit(default)
    for c, v in values.items():
        out = F.when(F.col(layout.LABEL) == int(c), F.lit(v)).otherwise(out)
    return out


def rank_within_class(df: DataFrame, counts: dict[str, int], key: Column) -> DataFrame:
    """Pure: `_rank`, the 0-based position of each row within its class in (key, id) order.

    `counts` are the rows per class of `df` (they size the parts each class is numbered
    in). Numbered without a window over a whole class (which would put a class in one
    task): `exact.number_in_order`, restarting at each class. The ids must be unique
    within `df`.
    """
    from pyspark.sql import functions as F

    from lakeprep_jobs import exact

    bits = exact.part_bits_for(max(counts.values(), default=0))
    return exact.number_in_order(df, key, [F.col(layout.ID)], "_rank", F.col(layout.LABEL), part_bits=bits)


def rebalance(train: DataFrame, counts: dict[str, int], p: BalanceParams) -> DataFrame:
    """Pure: the train rows after under- or oversampling to `class_targets`, exact counts.

    Adds `_copy`: 0 for a row itself, k for its k-th repeat. The rows of each class are
    ordered by `xxhash64(id, seed)` (`lakeprep_jobs.exact`, which never ranks a whole
    class in one task): `undersample` keeps the first `target` rows of each class;
    `oversample` repeats every row of class c `target // n_c - 1` times and the first
    `target % n_c` rows once more.
    """
    from pyspark.sql import functions as F

    from lakeprep_jobs import exact

    targets = class_targets(counts, p)
    if targets == counts:
        return train.withColumn(COPY, F.lit(0))
    seed = f"lakeprep-balance-{p.seed}"
    present = {c: n for c, n in counts.items() if n}
    if p.strategy == "undersample":
        kept = exact.exact_sample(
            train, [layout.LABEL], {(int(c),): targets[c] for c in present}, key_cols=[layout.ID], seed=seed
        )
        return kept.withColumn(COPY, F.lit(0))
    whole = {c: targets[c] // n for c, n in present.items()}
    extra = {(int(c),): targets[c] % n for c, n in present.items()}
    plan = exact.plan_sample(train, [layout.LABEL], extra, key_cols=[layout.ID], seed=seed)
    # Segment 0: among the first `target % n_c` rows of the class, which get one repeat more.
    marked = exact.apply_cuts(train, plan, "_first")
    copies = _per_class(whole, 1) + F.when(F.col("_first") == 0, 1).otherwise(0)
    return marked.withColumn(COPY, F.explode(F.sequence(F.lit(0), copies - 1))).drop("_first")


# ------------------------------------------------------------------------ augmentation


def _gaussian(*cols: Column) -> Column:
    """A standard normal draw from a hash of `cols` (Box-Muller on two unit hashes)."""
    from pyspark.sql import functions as F

    u1 = F.lit(1.0) - unit_hash(*cols, F.lit("u1"))  # (0, 1]: log is finite
    u2 = unit_hash(*cols, F.lit("u2"))
    return F.sqrt(F.lit(-2.0) * F.log(u1)) * F.cos(F.lit(2 * math.pi) * u2)


def _numeric_names(transform: dict[str, Any]) -> list[str]:
    return [e["output"] for e in transform["numeric"]]


def _smote_neighbours(balanced: DataFrame, distinct: dict[str, int], numeric: list[str], p: BalanceParams):
    """Pure: per balanced row (id, _copy), its group's other rows, nearest first (`_nbrs`)."""
    from pyspark.sql import functions as F

    candidates = balanced.filter(F.col(COPY) == 0).select(layout.ID, layout.LABEL, *numeric)
    key = F.xxhash64(F.col(layout.ID), F.lit(p.seed), F.lit("lakeprep-smote"))
    groups = {c: max(1, math.ceil(n / p.smote_candidates)) for c, n in distinct.items()}
    grouped = rank_within_class(candidates, distinct, key).withColumn(
        "_group", F.pmod(F.col("_rank"), _per_class(groups, 1))
    )
    base = balanced.select(layout.ID, layout.LABEL, COPY, *numeric).join(
        grouped.select(layout.ID, layout.LABEL, "_group"), [layout.ID, layout.LABEL]
    )
    other = grouped.select(
        F.col(layout.ID).alias("_nb_id"),
        layout.LABEL,
        "_group",
        *[F.col(c).alias(f"_nb_{i}") for i, c in enumerate(numeric)],
    )
    distance = sum(((F.col(c) - F.col(f"_nb_{i}")) ** 2 for i, c in enumerate(numeric)), F.lit(0.0))
    neighbour = F.struct(
        distance.alias("distance"),
        F.col("_nb_id").alias("id"),
        *[F.col(f"_nb_{i}").alias(c) for i, c in enumerate(numeric)],
    )
    return (
        base.join(other, [layout.LABEL, "_group"])
        .filter(F.col("_nb_id") != F.col(layout.ID))
        .groupBy(layout.ID, COPY)
        # Structs compare field by field: by distance, then by id, whatever the input order.
        .agg(F.array_sort(F.collect_list(neighbour)).alias("_nbrs"))
    )


def synthetic_rows(
    balanced: DataFrame, transform: dict[str, Any], distinct: dict[str, int], p: BalanceParams
) -> DataFrame:
    """Pure: `synthetic_per_row` new rows per balanced row, columns as `balanced` (no `_copy`).

    `distinct` are the rows per class of `balanced` counting each repeat once (the SMOTE
    candidates). The k-th synthetic row of a row, `k = _copy * synthetic_per_row + j`,
    has the id `<id>#syn<k>`, unique even for the repeats of an oversampled row.
    """
    from pyspark.sql import functions as F

    n = p.synthetic_per_row
    numeric = _numeric_names(transform)
    text = {e["output"]: int(e["max_tokens"]) for e in transform["text"]}
    needs = {"smote": numeric, "jitter": numeric, "text": text}[p.augment]
    if not needs:
        role = "text" if p.augment == "text" else "numeric"
        raise ValueError(f"balance augment {p.augment!r} needs {role} features; the transform has none")
    columns = [c for c in balanced.columns if c != COPY]
    rows = balanced
    if p.augment == "smote":
        rows = rows.join(_smote_neighbours(balanced, distinct, numeric, p), [layout.ID, COPY])
    rows = rows.withColumn("_j", F.explode(F.sequence(F.lit(0), F.lit(n - 1)))).withColumn(
        "_k", (F.col(COPY) * n + F.col("_j")).cast("long")
    )
    draw = (F.col(layout.ID), F.lit(p.seed), F.col("_k"))
    values: dict[str, Column] = {}
    if p.augment == "smote":
        nb = F.element_at("_nbrs", (F.col("_j") % F.size("_nbrs")).cast("int") + 1)
        lam = unit_hash(*draw, F.lit("lakeprep-smote-lambda"))
        values = {c: F.col(c) + lam * (nb.getField(c) - F.col(c)) for c in numeric}
    elif p.augment == "jitter":
        values = {c: F.col(c) + F.lit(p.jitter_sigma) * _gaussian(*draw, F.lit(c)) for c in numeric}
    else:
        for c, length in text.items():
            kept = F.filter(c, _token_kept(draw, c, p.token_dropout))
            values[c] = F.slice(F.concat(kept, F.array_repeat(F.lit(0), length)), 1, length)
    values[layout.ID] = F.concat(F.col(layout.ID), F.lit("#syn"), F.col("_k").cast("string"))
    return rows.select(*[values[c].alias(c) if c in values else F.col(c) for c in columns])


def _token_kept(draw: tuple[Column, ...], column: str, dropout: float):
    """The `filter` predicate of `text` augmentation: a real token (not padding) survives
    unless the hash of (row, k, column, position) falls below `dropout`."""
    from pyspark.sql import functions as F

    def kept(token: Column, position: Column) -> Column:
        return (token != 0) & (unit_hash(*draw, F.lit(column), position) >= F.lit(dropout))

    return kept


def balance_train(
    train: DataFrame, counts: dict[str, int], transform: dict[str, Any], p: BalanceParams
) -> DataFrame:
    """Pure: the balanced and augmented train split, with `is_synthetic`.

    `train` holds the encoded train rows of the window and `counts` their rows per class
    (label values as strings). The result has `train`'s columns plus `is_synthetic`.
    """
    from pyspark.sql import functions as F

    train = train.drop(layout.SYNTHETIC)
    balanced = rebalance(train, counts, p)
    real = balanced.drop(COPY).withColumn(layout.SYNTHETIC, F.lit(False))
    if p.augment == "none":
        return real
    targets = class_targets(counts, p)
    distinct = {c: min(n, targets[c]) for c, n in counts.items()}
    synthetic = synthetic_rows(balanced, transform, distinct, p).withColumn(layout.SYNTHETIC, F.lit(True))
    return real.unionByName(synthetic)


def check_synthetic_ids(train: DataFrame, real: DataFrame) -> None:
    """Fail if a synthetic id of `train` equals an id of `real` (the window's rows, every split).

    Only a real id that already ends in `#syn<k>` can collide; refused rather than written.
    """
    from pyspark.sql import functions as F

    synthetic = train.filter(F.col(layout.SYNTHETIC)).select(layout.ID)
    clash = synthetic.join(real.select(layout.ID), layout.ID, "left_semi").limit(3).collect()
    if clash:
        raise ValueError(
            f"synthetic ids {[r[0] for r in clash]} are also real ids; real ids must not end "
            "in '#syn<k>' when augmentation is on (stages.balance.augment)"
        )
