"""Exact per-stratum selection at scale: keep exactly k rows, or cut a stratum into exact shares.

Every row gets an order value, a 64-bit hash of its key columns and a seed; within its
stratum a row's rank is its place in (order, key columns) ascending, so ties of the hash
are broken by the key. Then

- `exact_sample(df, strata, keep, ...)` keeps, per stratum, the rows of rank < k, where k
  comes from `keep` (a fraction, counts per stratum, or a function of the sizes);
- `exact_split(df, strata, shares, ...)` gives, per stratum, the first `c_0` rows the
  first share's name, the next `c_1` the second's and so on, with `c_i` the
  largest-remainder apportionment of `n` (the counts sum to `n`).

Both are the same operation, a cut of each stratum's order at given ranks: `plan_cuts`
(the planning pass) and `apply_cuts` (the selection) are public for callers that want the
sizes (reports) or the plan of one DataFrame applied to it later. The result depends only
on the rows and the seed: not on partitioning, executor count or row order.

How it scales (no task ever holds a whole stratum; no Window over a stratum's rows):

1. **Planning, one pass over the input**: a histogram per stratum of the order value's
   top `bucket_bits` bits (B = 2^bucket_bits buckets, 65,536 by default), a `groupBy`
   count with map-side partial aggregation (at most strata x B small rows are shuffled).
   The histogram is cached; two small jobs over it follow, not over the input: the
   stratum sizes (one row per stratum to the driver, which turns them into cut ranks),
   and, with a running sum over each stratum's buckets (a window over at most B
   histogram rows), the bucket that holds each cut and how many of its rows fall before
   the cut (one row per stratum and cut to the driver).
2. **Selection, one more pass** (lazy: it runs when the result is computed): rows whose
   bucket holds no cut get their segment from a comparison against the plan (a broadcast
   join, no shuffle); only the rows of the cut buckets, about n / B per stratum and cut,
   are shuffled into a window partitioned by (stratum, bucket) and ranked by
   (order, key). The two branches are a union, so the input is read twice in this pass
   (cache it first when that is expensive).

So a call reads its input three times and shuffles at most strata x B histogram rows
plus the cut buckets' rows, about 1/B of a stratum per cut (1.5 x 10^-5 at the default
B). The plan's cut ranks, hence the counts, are known before the selection runs.

Rounding: `round_half_up(share, n) = floor(share * n + 1/2)`, computed on the decimal
value of `share` as written (Python's `round` rounds half to even: `round(2.5) == 2`, and
`0.15 * 10` is `1.4999999999999998` in binary floating point; here 0.5 of 5 is 3 and
0.15 of 10 is 2). `apportion` shares a total among parts with given quotas: every
part gets its quota's floor, and the rows left over go one each to the largest remainders,
ties in a given order, so each count is within one row of its quota;
`largest_remainder` is that with quotas in proportion to shares, ties to the earlier
share.

The key columns should identify a row (`id` after preprocess): rows with equal keys and
equal hashes tie, and which of them is taken is then up to Spark (the counts stay exact).
Nulls in a stratum column form their own stratum.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

StratumKey = tuple[Any, ...]
# What `exact_sample` keeps per stratum: a fraction of every stratum (round_half_up), exact
# counts by stratum key (capped at the stratum's size; strata not named are kept whole),
# or a function from every stratum's size to the counts (strata it leaves out: kept whole).
Keep = float | Mapping[StratumKey, int] | Callable[[Mapping[StratumKey, int]], Mapping[StratumKey, int]]

DEFAULT_BUCKET_BITS = 16
_UNIT_BITS = 30  # the unit hash's resolution (lakeprep_jobs.sample.unit_hash)
_P = "_exact_"  # prefix of the helper columns
_ALL = f"{_P}all"  # the one stratum of `strata=[]`


def as_decimal(x: float | int | Fraction) -> Fraction:
    """`x` as the decimal it was written as: `0.15` is 3/20, not the binary float near it."""
    if isinstance(x, Fraction | int):
        return Fraction(x)
    return Fraction(repr(float(x)))


def round_half_up(share: float | int | Fraction, n: int) -> int:
    """`floor(share * n + 1/2)` with `share` taken as the decimal it was written as."""
    return math.floor(as_decimal(share) * n + Fraction(1, 2))


def apportion(
    quotas: Sequence[float | int | Fraction], total: int, ties: Sequence[Any] | None = None
) -> list[int]:
    """Counts summing to `total`, each its quota's floor or one more.

    Every count starts at the floor of its quota (taken as the decimal written); the
    `total - sum(floors)` rows left over go one each to the largest remainders (quota less
    floor), ties to the smaller `ties` value (default: the earlier quota). `total` must lie
    between the floors' sum and that sum plus the number of quotas with a remainder, so no
    count is a whole row or more from its quota; otherwise ValueError.
    """
    exact = [as_decimal(q) for q in quotas]
    if any(q < 0 for q in exact):
        raise ValueError(f"quotas {list(quotas)!r} must be >= 0")
    order_of = list(ties) if ties is not None else list(range(len(exact)))
    if len(order_of) != len(exact):
        raise ValueError(f"{len(order_of)} tie values for {len(exact)} quotas")
    counts = [math.floor(q) for q in exact]
    fractional = [i for i, q in enumerate(exact) if q != counts[i]]
    left = total - sum(counts)
    if not 0 <= left <= len(fractional):
        raise ValueError(
            f"a total of {total} cannot be shared over quotas {[str(q) for q in exact]} within one "
            f"row of each: it must be in {sum(counts)}..{sum(counts) + len(fractional)}"
        )
    fractional.sort(key=lambda i: (-(exact[i] - counts[i]), order_of[i], i))
    for i in fractional[:left]:
        counts[i] += 1
    return counts


def largest_remainder(shares: Sequence[float | int | Fraction], n: int) -> list[int]:
    """Counts summing to `n` in proportion to `shares` (which must sum to a positive value).

    Each count is the floor of its quota `n * share / sum(shares)`; the rows left over go
    one each to the largest remainders, ties to the earlier share (`apportion`).
    """
    exact = [as_decimal(s) for s in shares]
    total = sum(exact)
    if total <= 0 or any(s < 0 for s in exact):
        raise ValueError(f"shares {list(shares)!r} must be >= 0 with a positive sum")
    return apportion([n * s / total for s in exact], n)


def hash_order(key_cols: Sequence[str], seed: int | str) -> Column:
    """The order value: xxhash64 of the key columns and the seed, bits rotated.

    The rotation puts the low 30 bits first, so rows come in the order of
    `pmod(xxhash64(key..., seed), 2^30)`, the unit hash lakeprep's threshold rules use
    (`sample.unit_hash`), then of the remaining bits: an exact cut at rank k takes the
    rows a threshold rule would take, with the threshold moved to hit k. The sign bit is
    flipped so that signed comparison (Spark's) is the unsigned order.
    """
    from pyspark.sql import functions as F

    u = F.xxhash64(*[F.col(c) for c in key_cols], F.lit(seed))
    rotated = F.shiftleft(u, 64 - _UNIT_BITS).bitwiseOR(F.shiftrightunsigned(u, _UNIT_BITS))
    return rotated.bitwiseXOR(F.lit(-(1 << 63)))


@dataclasses.dataclass(frozen=True)
class Cut:
    """Where one cut of one stratum falls: in `bucket`, after `take` of its rows in rank
    order. `take` is None when the cut falls after the whole bucket (no ranking needed);
    bucket -1 (take None) is a cut before every row."""

    bucket: int
    take: int | None


@dataclasses.dataclass(frozen=True)
class CutPlan:
    """The outcome of the planning pass: per stratum, its size, its cut ranks and cuts."""

    strata: tuple[str, ...]
    key_cols: tuple[str, ...]
    seed: int | str
    bucket_bits: int
    sizes: dict[StratumKey, int]  # rows per stratum, every stratum present in the input
    ranks: dict[StratumKey, tuple[int, ...]]  # rows before each cut, non-decreasing, <= size
    cuts: dict[StratumKey, tuple[Cut, ...]]

    def segment_sizes(self, stratum: StratumKey) -> list[int]:
        """Rows per segment (between consecutive cuts) of one stratum: what the selection
        will give, exactly."""
        bounds = [0, *self.ranks[stratum], self.sizes[stratum]]
        return [b - a for a, b in zip(bounds, bounds[1:], strict=False)]


def _check_columns(df: DataFrame, strata: Sequence[str], key_cols: Sequence[str]) -> None:
    for what, names in (("strata", strata), ("key columns", key_cols)):
        missing = [c for c in names if c not in df.columns]
        if missing:
            raise ValueError(f"{what} {missing} are not columns of the DataFrame {df.columns}")
    clash = [c for c in df.columns if c.startswith(_P) and c != _ALL]
    if clash:
        raise ValueError(f"columns {clash} clash with the helper prefix {_P!r}")


def _bucket(order: Column, bucket_bits: int) -> Column:
    """The order value's top bits, as 0 .. 2^bits - 1, in the order of the value."""
    from pyspark.sql import functions as F

    return F.shiftright(order, 64 - bucket_bits) + F.lit(1 << (bucket_bits - 1))


def _under(key: StratumKey, one: Mapping[StratumKey, Any]) -> dict[StratumKey, Any]:
    """The entry of a one-stratum mapping (if any) under `key`."""
    out = {}
    for value in one.values():
        out[key] = value
    return out


def _key(row: Any, strata: Sequence[str]) -> StratumKey:
    return tuple(row[c] for c in strata)


def _strata_frame(df: DataFrame, strata: Sequence[str], rows: list[tuple], extra: list[str]) -> DataFrame:
    """A small DataFrame of stratum keys (with the input's own column types) plus `extra`
    long columns, its stratum columns renamed `_exact_s<i>` for a null-safe join."""
    from pyspark.sql import types as T

    fields = [T.StructField(f"{_P}s{i}", df.schema[c].dataType, True) for i, c in enumerate(strata)]
    fields += [T.StructField(name, T.LongType(), True) for name in extra]
    return df.sparkSession.createDataFrame(rows, T.StructType(fields))


def _join_on_strata(df: DataFrame, small: DataFrame, strata: Sequence[str]) -> DataFrame:
    from pyspark.sql import functions as F

    cond = [F.col(c).eqNullSafe(F.col(f"{_P}s{i}")) for i, c in enumerate(strata)]
    joined = df.join(F.broadcast(small), on=cond, how="inner")
    return joined.drop(*[f"{_P}s{i}" for i in range(len(strata))])


def plan_cuts(
    df: DataFrame,
    strata: Sequence[str],
    ranks_for: Callable[[Mapping[StratumKey, int]], Mapping[StratumKey, Sequence[int]]],
    *,
    key_cols: Sequence[str] = ("id",),
    seed: int | str = 0,
    bucket_bits: int = DEFAULT_BUCKET_BITS,
) -> CutPlan:
    """The planning pass: stratum sizes, then where each stratum's cuts fall.

    `ranks_for(sizes)` gets every stratum's size and returns, per stratum, the same number
    of cut ranks (rows before each cut; clamped to [0, size] and made non-decreasing).
    Strata it leaves out get cuts at their size (everything in the first segment); keys
    of strata the input does not hold are ignored.
    """
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not strata:  # one stratum: a constant column stands for it, keys are ()
        plan = plan_cuts(
            df.withColumn(_ALL, F.lit(True)),
            [_ALL],
            lambda sizes: _under((True,), ranks_for(_under((), sizes))),
            key_cols=key_cols,
            seed=seed,
            bucket_bits=bucket_bits,
        )
        return dataclasses.replace(
            plan,
            strata=(),
            sizes=_under((), plan.sizes),
            ranks=_under((), plan.ranks),
            cuts=_under((), plan.cuts),
        )
    strata = tuple(strata)
    key_cols = tuple(key_cols)
    if not 1 <= bucket_bits <= 30:
        raise ValueError(f"bucket_bits {bucket_bits!r} must be in 1..30")
    if not key_cols:
        raise ValueError("key_cols must name at least one column (the row's id)")
    _check_columns(df, strata, key_cols)

    bucket = _bucket(hash_order(key_cols, seed), bucket_bits).alias(f"{_P}bucket")
    hist = (
        df.select(*[F.col(c) for c in strata], bucket)
        .groupBy(*strata, f"{_P}bucket")
        .agg(F.count(F.lit(1)).alias(f"{_P}n"))
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        sizes = {
            _key(r, strata): int(r[f"{_P}n"])
            for r in hist.groupBy(*strata).agg(F.sum(f"{_P}n").alias(f"{_P}n")).collect()
        }
        wanted = ranks_for(dict(sizes))
        widths = {len(v) for v in wanted.values()}
        if len(widths) > 1:
            raise ValueError(f"ranks_for gave strata different numbers of cuts: {sorted(widths)}")
        width = widths.pop() if widths else 1
        ranks: dict[StratumKey, tuple[int, ...]] = {}
        for key, n in sizes.items():
            given = wanted.get(key, (n,) * width)
            clamped, low = [], 0
            for r in given:
                low = max(low, min(max(int(r), 0), n))
                clamped.append(low)
            ranks[key] = tuple(clamped)

        # Cuts at 0 or at the stratum's size need no histogram look-up.
        cuts: dict[StratumKey, list[Cut | None]] = {
            key: [Cut(-1, None) if r == 0 else None for r in ranks[key]] for key in sizes
        }
        inner = [(*key, *ranks[key]) for key in sizes if any(c is None for c in cuts[key])]
        if inner:
            rank_cols = [f"{_P}r{i}" for i in range(width)]
            table = _strata_frame(df, strata, inner, rank_cols)
            running = (
                Window.partitionBy(*strata)
                .orderBy(f"{_P}bucket")
                .rowsBetween(Window.unboundedPreceding, Window.currentRow)
            )
            cum = hist.withColumn(f"{_P}upto", F.sum(f"{_P}n").over(running))
            cum = _join_on_strata(cum, table, strata)
            before = F.col(f"{_P}upto") - F.col(f"{_P}n")
            hits = [
                (before < F.col(f"{_P}r{i}")) & (F.col(f"{_P}r{i}") <= F.col(f"{_P}upto"))
                for i in range(width)
            ]
            hit_any = hits[0]
            for h in hits[1:]:
                hit_any = hit_any | h
            for r in cum.filter(hit_any).collect():
                key = _key(r, strata)
                upto, n_b = int(r[f"{_P}upto"]), int(r[f"{_P}n"])
                for i, rank in enumerate(ranks[key]):
                    if rank > 0 and upto - n_b < rank <= upto:
                        take = rank - (upto - n_b)
                        cuts[key][i] = Cut(int(r[f"{_P}bucket"]), None if take == n_b else take)
    finally:
        hist.unpersist()
    missing = [key for key, cs in cuts.items() if any(c is None for c in cs)]
    if missing:
        # The histogram and the sizes come from one cached aggregation: this cannot happen
        # unless the input changed between the jobs (a non-deterministic source).
        raise RuntimeError(f"no histogram bucket holds the cuts of strata {missing[:5]}")
    return CutPlan(
        strata=strata,
        key_cols=key_cols,
        seed=seed,
        bucket_bits=bucket_bits,
        sizes=sizes,
        ranks=ranks,
        cuts={key: tuple(c for c in cs if c is not None) for key, cs in cuts.items()},
    )


def apply_cuts(df: DataFrame, plan: CutPlan, segment: str) -> DataFrame:
    """The selection: `df` (the DataFrame the plan was made on) plus an int column
    `segment`, the number of the stratum's cuts the row's rank is at or past (0 before the
    first cut, 1 between the first and the second, ...). Lazy."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not plan.cuts:  # an empty input
        return df.withColumn(segment, F.lit(0))
    if not plan.strata:
        one = dataclasses.replace(plan, strata=(_ALL,), cuts=_under((True,), plan.cuts))
        return apply_cuts(df.withColumn(_ALL, F.lit(True)), one, segment).drop(_ALL)
    strata = plan.strata
    width = len(next(iter(plan.cuts.values())))
    rows = [(*key, *[v for c in cs for v in (c.bucket, c.take)]) for key, cs in plan.cuts.items()]
    extra = [f"{_P}{kind}{i}" for i in range(width) for kind in ("cb", "take")]
    table = _strata_frame(df, strata, rows, extra)

    out_cols = [*df.columns, segment]
    order = hash_order(plan.key_cols, plan.seed)
    joined = _join_on_strata(
        df.withColumn(f"{_P}order", order).withColumn(
            f"{_P}bucket", _bucket(F.col(f"{_P}order"), plan.bucket_bits)
        ),
        table,
        strata,
    )
    b = F.col(f"{_P}bucket")
    cb = [F.col(f"{_P}cb{i}") for i in range(width)]
    take = [F.col(f"{_P}take{i}") for i in range(width)]
    ranked_here = [(b == cb[i]) & take[i].isNotNull() for i in range(width)]
    needs_rank = ranked_here[0]
    for r in ranked_here[1:]:
        needs_rank = needs_rank | r

    def segment_of(rank: Column | None) -> Column:
        total = F.lit(0)
        for i in range(width):
            past = b > cb[i]
            if rank is not None:
                past = past | (ranked_here[i] & (rank > take[i]))
            total = total + past.cast("int")
        return total

    plain = joined.filter(~needs_rank).withColumn(segment, segment_of(None))
    # Only the cut buckets' rows (about n / B per stratum and cut) enter the window; its
    # partitions are (stratum, bucket), never a whole stratum.
    by_bucket = Window.partitionBy(*strata, f"{_P}bucket").orderBy(
        F.col(f"{_P}order"), *[F.col(c) for c in plan.key_cols]
    )
    edge = (
        joined.filter(needs_rank)
        .withColumn(f"{_P}rank", F.row_number().over(by_bucket))
        .withColumn(segment, segment_of(F.col(f"{_P}rank")))
    )
    return plain.select(*out_cols).unionByName(edge.select(*out_cols))


def _resolve_keep(keep: Keep) -> Callable[[Mapping[StratumKey, int]], Mapping[StratumKey, Sequence[int]]]:
    if isinstance(keep, bool):
        raise TypeError(f"keep {keep!r}: give a fraction, counts per stratum or a function")
    if isinstance(keep, int | float):
        if not 0 <= keep <= 1:
            raise ValueError(f"keep fraction {keep!r} must be in [0, 1]")
        return lambda sizes: {k: (round_half_up(keep, n),) for k, n in sizes.items()}
    if isinstance(keep, Mapping):
        counts = dict(keep)
        return lambda sizes: {k: (counts.get(k, n),) for k, n in sizes.items()}
    if callable(keep):
        return lambda sizes: {k: (v,) for k, v in keep(sizes).items()}
    raise TypeError(f"keep {keep!r}: give a fraction, counts per stratum or a function")


def plan_sample(
    df: DataFrame,
    strata: Sequence[str],
    keep: Keep,
    *,
    key_cols: Sequence[str] = ("id",),
    seed: int | str = 0,
    bucket_bits: int = DEFAULT_BUCKET_BITS,
) -> CutPlan:
    """The planning pass of `exact_sample`; `plan.ranks[s][0]` is what stratum s keeps."""
    return plan_cuts(df, strata, _resolve_keep(keep), key_cols=key_cols, seed=seed, bucket_bits=bucket_bits)


def apply_sample(df: DataFrame, plan: CutPlan) -> DataFrame:
    """The selection of `exact_sample`: the rows before each stratum's cut. Lazy."""
    from pyspark.sql import functions as F

    seg = f"{_P}segment"
    return apply_cuts(df, plan, seg).filter(F.col(seg) == 0).drop(seg)


def exact_sample(
    df: DataFrame,
    strata: Sequence[str],
    keep: Keep,
    *,
    key_cols: Sequence[str] = ("id",),
    seed: int | str = 0,
    bucket_bits: int = DEFAULT_BUCKET_BITS,
) -> DataFrame:
    """Exactly k rows of every stratum: the k first in (hash(key, seed), key) order.

    :param strata: columns whose value combinations are the strata (`[]`: one stratum).
    :param keep: a fraction f (every stratum of n rows keeps `round_half_up(f, n)`), a
        mapping from stratum key (a tuple of the strata values, in `strata` order) to a
        count (capped at the size; strata not named are kept whole), or a function that
        gets every stratum's size and returns such a mapping (e.g. to undersample to the
        smallest stratum: `lambda sizes: dict.fromkeys(sizes, min(sizes.values()))`).
    :param key_cols: the columns that identify a row; hashed for the order, and the
        tie-break.
    :param seed: mixed into the hash: another seed, another sample.
    :param bucket_bits: histogram resolution (2^bits buckets); results do not depend on
        it, only the size of the ranked boundary buckets does.

    Runs the planning jobs now (see the module docstring) and returns a lazy DataFrame
    with `df`'s columns. For a report of sizes and counts, call `plan_sample` and
    `apply_sample` instead: the plan holds both.
    """
    plan = plan_sample(df, strata, keep, key_cols=key_cols, seed=seed, bucket_bits=bucket_bits)
    return apply_sample(df, plan)


def plan_split(
    df: DataFrame,
    strata: Sequence[str],
    shares: Sequence[float],
    *,
    key_cols: Sequence[str] = ("id",),
    seed: int | str = 0,
    bucket_bits: int = DEFAULT_BUCKET_BITS,
) -> CutPlan:
    """The planning pass of `exact_split`: cuts at the running sums of the
    largest-remainder counts of each stratum."""

    def ranks_for(sizes: Mapping[StratumKey, int]) -> dict[StratumKey, list[int]]:
        out = {}
        for key, n in sizes.items():
            counts = largest_remainder(shares, n)
            out[key] = [sum(counts[: i + 1]) for i in range(len(counts) - 1)]
        return out

    if len(shares) < 2:
        raise ValueError(f"shares {list(shares)!r}: a split needs at least two shares")
    return plan_cuts(df, strata, ranks_for, key_cols=key_cols, seed=seed, bucket_bits=bucket_bits)


def exact_split(
    df: DataFrame,
    strata: Sequence[str],
    shares: Mapping[str, float],
    column: str,
    *,
    key_cols: Sequence[str] = ("id",),
    seed: int | str = 0,
    bucket_bits: int = DEFAULT_BUCKET_BITS,
) -> DataFrame:
    """`df` plus `column`: the name of each row's share, with exact shares per stratum.

    Per stratum of n rows, the counts are `largest_remainder(shares, n)` (they sum to n);
    in (hash(key, seed), key) order the first rows get the first name (in the mapping's
    order), the next the second, and so on. Lazy after the planning jobs.
    """
    names = list(shares)
    plan = plan_split(
        df, strata, [shares[s] for s in names], key_cols=key_cols, seed=seed, bucket_bits=bucket_bits
    )
    return with_names(apply_cuts(df, plan, column), column, names)


def with_names(df: DataFrame, column: str, names: Sequence[str]) -> DataFrame:
    """Replace the int segment in `column` by `names[segment]`."""
    from pyspark.sql import functions as F

    named = F.lit(names[-1])
    for i in reversed(range(len(names) - 1)):
        named = F.when(F.col(column) == i, F.lit(names[i])).otherwise(named)
    return df.withColumn(column, named)


# number_in_order: rows per part (a window partition) it aims at when it knows the sizes.
ROWS_PER_PART = 1 << 16
_MAX_PART_BITS = 16
_DEFAULT_PART_BITS = 10


def part_bits_for(rows: int) -> int:
    """How many of the key's top bits split a group of `rows` rows into parts of about
    `ROWS_PER_PART` rows (0: one part), at most 2^16 parts."""
    parts = max(1, math.ceil(rows / ROWS_PER_PART))
    return min(_MAX_PART_BITS, (parts - 1).bit_length())


def number_in_order(
    df: DataFrame,
    key: Column,
    ties: Sequence[Column],
    out: str,
    group: Column | None = None,
    *,
    part_bits: int | None = None,
) -> DataFrame:
    """Pure but for one small planning job: `out`, the dense 0-based position of each row in
    (`key`, `ties`) order, restarting at 0 for each value of `group`; no one-task window,
    no sort that samples, nothing materialised.

    `key` is a long, ideally a hash (`xxhash64(id)`): its top `part_bits` bits cut each
    group into parts, contiguous ranges of the order (2^bits of them, about
    `ROWS_PER_PART` rows each unless given). One aggregation counts the rows per (group,
    part) and brings those counts to the driver (at most groups x 2^bits small rows): a
    part's first index is the rows of its group in the parts before it. Then a window
    partitioned by (group, part), ordered by (key, ties), numbers the rows of each part
    from there: one shuffle, which hashes whole parts to tasks, so no task holds more than
    its parts. Both passes see the same rows the same way (no sampled range boundaries,
    as a global sort's), so the result is the same however often it is recomputed, and
    does not depend on partitioning as long as (key, ties) has no ties.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    g, k, part, start = f"{_P}g", f"{_P}k", f"{_P}part", f"{_P}start"
    clash = [c for c in df.columns if c in (g, k, part, start, out)]
    if clash:
        raise ValueError(f"columns {clash} clash with number_in_order's own")
    staged = df.withColumn(g, group if group is not None else F.lit(0)).withColumn(k, key.cast("long"))
    bits = part_bits
    if bits is None:
        bits = _DEFAULT_PART_BITS
    if not 0 <= bits <= _MAX_PART_BITS:
        raise ValueError(f"part_bits {bits!r} must be in 0..{_MAX_PART_BITS}")
    staged = staged.withColumn(part, _bucket(F.col(k), bits) if bits else F.lit(0).cast("long"))
    counts = sorted(
        ((r[g], int(r[part]), int(r["count"])) for r in staged.groupBy(g, part).count().collect()),
        key=lambda r: (r[0] is None, str(r[0]), r[1]),
    )
    starts, before = [], {}
    for value, number, n in counts:
        starts.append((value, number, before.get(value, 0)))
        before[value] = before.get(value, 0) + n
    schema = T.StructType(
        [
            T.StructField(g, staged.schema[g].dataType, True),
            T.StructField(part, T.LongType(), False),
            T.StructField(start, T.LongType(), False),
        ]
    )
    table = df.sparkSession.createDataFrame(starts, schema)
    joined = staged.join(F.broadcast(table), staged[g].eqNullSafe(table[g]) & (staged[part] == table[part]))
    joined = joined.drop(table[g]).drop(table[part])
    in_part = Window.partitionBy(g, part).orderBy(F.col(k), *ties)
    index = F.col(start) + F.row_number().over(in_part) - 1
    return joined.withColumn(out, index.cast("long")).drop(g, k, part, start)
