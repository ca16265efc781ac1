from __future__ import annotations

import json
import math
import random
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

import pytest
from pyspark.testing import assertDataFrameEqual

from lakeprep_jobs import exact, lake_io, sample
from lakeprep_jobs.sample import SampleParams

SCHEMA = "id string, label int, num__x double"
SPLITS = {"train": 0.8, "validation": 0.1, "test": 0.1}
ALL_TRAIN = {"train": 1.0, "validation": 0.0, "test": 0.0}


def rows(n0: int, n1: int, n2: int = 0, prefix: str = "f") -> list[tuple]:
    """`n0` rows of class 0, then `n1` of class 1, then `n2` of class 2, ids `<prefix><i>`."""
    return rows_of({0: n0, 1: n1, 2: n2}, prefix)


def rows_of(sizes: dict[int, int], prefix: str = "f") -> list[tuple]:
    """`sizes[c]` rows of each class c, ids `<prefix><i>`."""
    labels = [c for c, n in sizes.items() for _ in range(n)]
    return [(f"{prefix}{i}", lbl, float(i % 13)) for i, lbl in enumerate(labels)]


def within_binomial(observed: int, n: int, p: float, sds: float = 4.0) -> bool:
    """|observed - n p| within `sds` binomial standard deviations (false alarm < 1e-4)."""
    return abs(observed - n * p) <= sds * math.sqrt(n * p * (1 - p))


def sampled(df, p: SampleParams, **kw):
    """What `run` writes: the split, then the exact sample per stratum and split (its calls)."""
    split = sample.assign_split(df, p, **kw)
    return exact.apply_sample(split, sample.sample_plan(split, p, **kw))


def counts_by(df, *cols: str) -> dict[tuple, int]:
    return {tuple(r[c] for c in cols): int(r["count"]) for r in df.groupBy(*cols).count().collect()}


# ------------------------------------------------------------------ rounding and apportioning


def test_round_half_up_rounds_halves_up_on_the_decimal_written():
    assert [exact.round_half_up(0.5, n) for n in (1, 5, 7, 37, 41)] == [1, 3, 4, 19, 21]
    assert exact.round_half_up(0.3, 37) == 11  # 11.1 rounds down
    assert exact.round_half_up(0.15, 10) == 2  # the float 0.15 * 10 is 1.4999999999999998
    assert exact.round_half_up(0.0, 5) == 0
    assert exact.round_half_up(1.0, 5) == 5


def test_largest_remainder_sums_to_n_and_breaks_ties_to_the_earlier_share():
    assert exact.largest_remainder([0.8, 0.1, 0.1], 37) == [29, 4, 4]
    assert exact.largest_remainder([0.8, 0.1, 0.1], 1) == [1, 0, 0]
    assert exact.largest_remainder([0.6, 0.2, 0.2], 13) == [8, 3, 2]
    assert exact.largest_remainder([0.5, 0.5], 3) == [2, 1]
    assert exact.largest_remainder([1, 0, 0], 5) == [5, 0, 0]
    assert exact.largest_remainder([3, 1], 0) == [0, 0]
    with pytest.raises(ValueError, match="positive sum"):
        exact.largest_remainder([0, 0], 3)


# ------------------------------------------------------------------ exact volume per stratum


@pytest.mark.parametrize("bucket_bits", [2, exact.DEFAULT_BUCKET_BITS])
def test_each_class_keeps_exactly_floor_of_fraction_times_n_plus_a_half(spark, bucket_bits):
    # Skewed: 2000 rows, 41, 37, 7, 5, a single row, and a class with no rows at all.
    df = spark.createDataFrame(rows_of({0: 2000, 1: 41, 2: 37, 3: 7, 4: 5, 5: 1, 6: 0}), SCHEMA)
    p = SampleParams(
        label_classes=[0, 1, 2, 3, 4, 5, 6],
        fraction=0.5,
        class_fractions={"0": 0.3, "2": 0.3},
        seed=7,
        splits=ALL_TRAIN,
    )

    out = sampled(df, p, bucket_bits=bucket_bits)

    assert sample.class_counts(out, "label") == {
        "0": 600,  # 0.3 of 2000
        "1": 21,  # 0.5 of 41 = 20.5: round() would give 20
        "2": 11,  # 0.3 of 37 = 11.1
        "3": 4,  # 0.5 of 7 = 3.5
        "4": 3,  # 0.5 of 5 = 2.5: round() would give 2
        "5": 1,  # 0.5 of 1 = 0.5: round() would give 0
    }
    assert out.columns == ["id", "label", "num__x", "split"]


def test_every_split_of_every_class_is_sampled_exactly(spark):
    df = spark.createDataFrame(rows(1000, 37, 10), SCHEMA)
    p = SampleParams(
        label_classes=[0, 1, 2], fraction=0.5, class_fractions={"2": 1.0}, stratify_splits=True, splits=SPLITS
    )

    out = counts_by(sampled(df, p, bucket_bits=3), "label", "split")

    # Splits first (exact: 800/100/100, 29/4/4, 8/1/1), then half of each cell, rounded up at .5.
    assert out == {
        (0, "train"): 400,
        (0, "validation"): 50,
        (0, "test"): 50,
        (1, "train"): 15,
        (1, "validation"): 2,
        (1, "test"): 2,
        (2, "train"): 8,
        (2, "validation"): 1,
        (2, "test"): 1,
    }


def half_up(f: float, n: int) -> int:
    """f * n rounded half up in decimal arithmetic (the test's own rounding, not exact's)."""
    return int((Decimal(str(f)) * n).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def test_a_class_keeps_half_up_of_its_rows_not_of_each_split_cell(spark):
    # 14 rows of class 1 split exactly 11/2/1: each cell rounded half up kept 6 + 1 + 1 = 8
    # (57 %); the class keeps 7 (0.5 of 14), shared by largest remainder (5.5, 1, 0.5).
    df = spark.createDataFrame(rows(1000, 14), SCHEMA)
    p = SampleParams(label_classes=[0, 1], fraction=0.5, stratify_splits=True, splits=SPLITS, seed=3)

    out = counts_by(sampled(df, p, bucket_bits=2), "label", "split")

    assert sum(n for (label, _), n in out.items() if label == 1) == 7
    # Validation keeps its 1; the tied half rows of train and test: one of them rounds up.
    assert out[(1, "validation")] == 1
    assert (out[(1, "train")], out.get((1, "test"), 0)) in {(6, 0), (5, 1)}
    assert (out[(0, "train")], out[(0, "validation")], out[(0, "test")]) == (400, 50, 50)


@pytest.mark.parametrize("seed", [0, 7])
def test_every_stratum_keeps_exactly_half_up_of_f_n_over_many_sizes_and_shares(seed):
    cells = ("label", "split")
    draw = random.Random(seed)
    fractions = [0.5, 0.25, 0.75, 0.1, 0.15, 0.3, 1 / 3, 0.05, 0.0, 1.0]
    shares = [
        SPLITS,
        {"train": 0.6, "validation": 0.2, "test": 0.2},
        {"train": 0.5, "validation": 0.5, "test": 0.0},
    ]
    ties = 0
    for case in range(400):
        f = {str(c): draw.choice(fractions) for c in (0, 1, 2)}
        p = SampleParams(label_classes=[0, 1, 2], class_fractions=f, seed=seed, splits=shares[case % 3])
        sizes = {}
        for label in (0, 1, 2):
            n = draw.choice([1, 2, 3, 5, 7, 14, 15, 41, draw.randrange(1, 5000)])
            by_split = exact.largest_remainder([p.splits[s] for s in sample.SPLITS], n)
            if case % 2:  # or any cut: cells of the hash split are not in proportion
                cut = sorted(draw.randrange(0, n + 1) for _ in range(2))
                by_split = [cut[0], cut[1] - cut[0], n - cut[1]]
            sizes.update({(label, s): k for s, k in zip(sample.SPLITS, by_split, strict=True) if k})
        shuffled = list(sizes.items())
        draw.shuffle(shuffled)

        kept = sample.cell_counts(p, cells)(sizes)

        assert sample.cell_counts(p, cells)(dict(shuffled)) == kept  # not the cells' order
        for label in (0, 1, 2):
            n = sum(k for (lbl, _), k in sizes.items() if lbl == label)
            total = sum(k for (lbl, _), k in kept.items() if lbl == label)
            assert total == half_up(f[str(label)], n), (f, sizes)
        for (label, split), k in kept.items():
            quota = Fraction(str(f[str(label)])) * sizes[(label, split)]
            assert abs(k - quota) < 1 and 0 <= k <= sizes[(label, split)], (f, label, split, sizes)
            ties += quota.denominator == 2
    assert ties > 100  # halves, the cells the tie rule decides, were among them


def test_tied_cells_are_not_always_decided_for_the_same_split():
    # Every odd cell ties at 0.5; a fixed split order would always round the same split up.
    p = SampleParams(label_classes=[0, 1], fraction=0.5)
    count = sample.cell_counts(p, ("label", "split"))
    rounded_up = {s: 0 for s in sample.SPLITS}
    for n in range(200):
        sizes = {(1, "train"): 2 * n + 1, (1, "validation"): 1, (1, "test"): 1}  # 3 halves, 2 up
        kept = count(sizes)
        assert sum(kept.values()) == n + 2
        for (_, split), k in kept.items():
            rounded_up[split] += k * 2 > sizes[(1, split)]
    assert sum(rounded_up.values()) == 400
    assert all(100 < up < 170 for up in rounded_up.values()), rounded_up


def test_class_counts_are_exact_per_day_capped_and_shared_among_the_splits_by_size(spark):
    df = spark.createDataFrame(rows(2000, 7, 30), SCHEMA)
    p = SampleParams(
        label_classes=[0, 1, 2],
        fraction=0.5,
        class_counts={"0": 101, "1": 10},
        stratify_splits=True,
        splits=SPLITS,
    )

    out = counts_by(sampled(df, p, bucket_bits=2), "label", "split")

    assert out == {
        # 101 of 2000 over splits of 1600/200/200: 80.8/10.1/10.1, the leftover row to train.
        (0, "train"): 81,
        (0, "validation"): 10,
        (0, "test"): 10,
        # 10 asked of 7 rows (split 5/1/1): all kept.
        (1, "train"): 5,
        (1, "validation"): 1,
        (1, "test"): 1,
        # No count: 0.5 of the class's 30 rows, 15, over cells of 24/3/3 (12, 1.5, 1.5):
        # the tied half row goes to validation by the tie hash.
        (2, "train"): 12,
        (2, "validation"): 2,
        (2, "test"): 1,
    }


def test_sample_does_not_depend_on_partitioning_or_row_order(spark):
    data = rows(600, 300, 5)
    shuffled = list(data)
    random.Random(11).shuffle(shuffled)
    p = SampleParams(
        label_classes=[0, 1, 2], class_fractions={"0": 0.4, "1": 0.7}, seed=5, stratify_splits=True
    )

    one = sampled(spark.createDataFrame(data, SCHEMA).repartition(1), p, bucket_bits=2)
    seven = sampled(spark.createDataFrame(shuffled, SCHEMA).repartition(7), p, bucket_bits=2)

    kept = one.collect()
    assert len(kept) == 240 + 210 + 5
    assertDataFrameEqual(seven, kept)


def test_a_different_seed_gives_a_different_sample_of_the_same_size(spark):
    df = spark.createDataFrame(rows(500, 0), SCHEMA)

    def ids(seed: int) -> set[str]:
        p = SampleParams(label_classes=[0], fraction=0.5, seed=seed, splits=ALL_TRAIN)
        return {r["id"] for r in sampled(df, p).collect()}

    a, b = ids(1), ids(2)
    assert len(a) == len(b) == 250
    assert a != b


def test_a_larger_fraction_keeps_a_superset(spark):
    df = spark.createDataFrame(rows(300, 50), SCHEMA)

    def ids(fraction: float) -> set[str]:
        p = SampleParams(label_classes=[0, 1], fraction=fraction, seed=3, splits=ALL_TRAIN)
        return {r["id"] for r in sampled(df, p, bucket_bits=1).collect()}

    small, large = ids(0.2), ids(0.6)
    assert (len(small), len(large)) == (70, 210)
    assert small < large


# ------------------------------------------------------------------ splits


def test_split_of_an_id_ignores_the_seed_and_other_rows(spark):
    early = spark.createDataFrame(rows(1500, 500, prefix="f"), SCHEMA)  # ids f0..f1999
    # Overlapping data: f1000..f2999, another order, other rows around them.
    later = spark.createDataFrame(list(reversed(rows(3000, 0, prefix="f")[1000:])), SCHEMA).repartition(5)

    first = {
        r["id"]: r["split"]
        for r in sample.assign_split(
            early, SampleParams(label_classes=[0, 1], seed=1, splits=SPLITS)
        ).collect()
    }
    second = {
        r["id"]: r["split"]
        for r in sample.assign_split(
            later, SampleParams(label_classes=[0, 1], seed=99, splits=SPLITS)
        ).collect()
    }

    overlap = set(first) & set(second)
    assert len(overlap) == 1000
    assert {k: first[k] for k in overlap} == {k: second[k] for k in overlap}
    for split, share in SPLITS.items():
        n = sum(1 for s in first.values() if s == split)
        assert within_binomial(n, 2000, share), (split, n)


def test_split_shares_follow_the_params(spark):
    df = spark.createDataFrame(rows(2000, 0), SCHEMA)
    p = SampleParams(label_classes=[0], splits={"train": 0.5, "validation": 0.5, "test": 0.0})
    counts = sample.class_counts(sample.assign_split(df, p), "split")
    assert "test" not in counts
    assert within_binomial(counts["train"], 2000, 0.5), counts


@pytest.mark.parametrize("bucket_bits", [1, exact.DEFAULT_BUCKET_BITS])
def test_stratified_split_shares_are_exact_per_stratum(spark, bucket_bits):
    df = spark.createDataFrame(rows_of({0: 100, 1: 37, 2: 10, 3: 1}), SCHEMA)
    p = SampleParams(label_classes=[0, 1, 2, 3], stratify_splits=True, splits=SPLITS)

    out = counts_by(sample.assign_split(df, p, bucket_bits=bucket_bits), "label", "split")

    assert out == {
        (0, "train"): 80,
        (0, "validation"): 10,
        (0, "test"): 10,
        (1, "train"): 29,  # 29.6, 3.7, 3.7: the two leftover rows to the larger remainders
        (1, "validation"): 4,
        (1, "test"): 4,
        (2, "train"): 8,
        (2, "validation"): 1,
        (2, "test"): 1,
        (3, "train"): 1,  # one row: to the largest remainder, train's
    }


def test_stratified_split_agrees_with_the_hash_split_except_near_the_cuts(spark):
    df = spark.createDataFrame(rows(2000, 0), SCHEMA)
    by_hash = {
        r["id"]: r["split"] for r in sample.assign_split(df, SampleParams(label_classes=[0])).collect()
    }
    exact_p = SampleParams(label_classes=[0], stratify_splits=True)
    by_rank = {r["id"]: r["split"] for r in sample.assign_split(df, exact_p).collect()}

    assert sample.class_counts(sample.assign_split(df, exact_p), "split") == {
        "train": 1600,
        "validation": 200,
        "test": 200,
    }
    # Both order rows by the same id hash: only rows between a threshold and its exact cut
    # move, at most 4 binomial standard deviations per cut (72 + 54 of 2000).
    moved = sum(1 for k in by_hash if by_hash[k] != by_rank[k])
    assert moved <= 126, moved


def test_several_strata_columns_are_exact_per_combination(spark):
    schema = "id string, label int, origin string"
    cells = {(0, "JFK"): 50, (0, "LGA"): 13, (1, "JFK"): 9, (1, "EWR"): 1, (0, None): 4}
    data = [(f"r-{lbl}-{o}-{i}", lbl, o) for (lbl, o), n in cells.items() for i in range(n)]
    df = spark.createDataFrame(data, schema)
    p = SampleParams(
        label_classes=[0, 1],
        fraction=0.5,
        strata=["label", "origin"],
        stratify_splits=True,
        splits={"train": 0.6, "validation": 0.2, "test": 0.2},
    )

    split = sample.assign_split(df, p, bucket_bits=2)
    out = exact.apply_sample(split, sample.sample_plan(split, p, bucket_bits=2))

    assert counts_by(split, "label", "origin", "split") == {
        (0, "JFK", "train"): 30,
        (0, "JFK", "validation"): 10,
        (0, "JFK", "test"): 10,
        (0, "LGA", "train"): 8,  # 7.8, 2.6, 2.6: leftovers to train, then validation (tie)
        (0, "LGA", "validation"): 3,
        (0, "LGA", "test"): 2,
        (1, "JFK", "train"): 5,  # 5.4, 1.8, 1.8
        (1, "JFK", "validation"): 2,
        (1, "JFK", "test"): 2,
        (1, "EWR", "train"): 1,
        (0, None, "train"): 2,  # a null origin is a stratum of its own: 2.4, 0.8, 0.8
        (0, None, "validation"): 1,
        (0, None, "test"): 1,
    }
    assert counts_by(out, "label", "origin", "split") == {
        (0, "JFK", "train"): 15,
        (0, "JFK", "validation"): 5,
        (0, "JFK", "test"): 5,
        (0, "LGA", "train"): 4,  # 13 rows keep 7 (6.5): 4, 1.5, 1 -> the half row to validation
        (0, "LGA", "validation"): 2,
        (0, "LGA", "test"): 1,
        (1, "JFK", "train"): 3,  # 9 rows keep 5 (4.5): 2.5, 1, 1
        (1, "JFK", "validation"): 1,
        (1, "JFK", "test"): 1,
        (1, "EWR", "train"): 1,  # 0.5 of 1 row
        (0, None, "train"): 1,  # 4 rows keep 2: 1, 0.5, 0.5, the tie to test by the tie hash
        (0, None, "test"): 1,
    }


# ------------------------------------------------------------------ lakeprep_jobs.exact


def test_boundary_buckets_are_ranked_exactly_when_many_rows_share_a_bucket(spark):
    # Two buckets (bucket_bits=1) for 1000 rows: each cut falls inside a bucket of ~250
    # rows, several cuts in one bucket, so the ranking of the boundary rows decides.
    df = spark.createDataFrame([(f"r{i}", i % 2) for i in range(1000)], "id string, g int")
    ks = (0, 1, 2, 137, 199, 200, 201, 499, 500)

    def segments(bucket_bits: int) -> tuple[exact.CutPlan, dict[str, int]]:
        plan = exact.plan_cuts(
            df, ["g"], lambda sizes: dict.fromkeys(sizes, ks), seed=4, bucket_bits=bucket_bits
        )
        out = exact.apply_cuts(df, plan, "segment")
        return plan, {r["id"]: r["segment"] for r in out.collect()}

    coarse_plan, coarse = segments(1)
    assert coarse_plan.sizes == {(0,): 500, (1,): 500}
    ranked = [cut for cuts in coarse_plan.cuts.values() for cut in cuts if cut.take is not None]
    assert len(ranked) == 14  # 7 cuts per stratum inside a bucket: the boundary logic ran
    # Rows before cut i are the rows of segments < i+1: exactly ks[i] per stratum.
    per_segment = counts_by(spark.createDataFrame(list(coarse.items()), "id string, segment int"), "segment")
    # A row of rank r (from 0) is past the cuts at or below r: rank 0 in segment 1, ranks
    # 2..136 in segment 3, 201..498 in 7, nothing past the cut at 500.
    assert {seg: n for (seg,), n in per_segment.items()} == {
        1: 2,
        2: 2,
        3: 2 * 135,
        4: 2 * 62,
        5: 2,
        6: 2,
        7: 2 * 298,
        8: 2,
    }
    # The histogram's resolution never changes the result.
    assert segments(16)[1] == coarse
    # The sample API is the first segment.
    first = {
        r["id"]
        for r in exact.exact_sample(df, ["g"], {(0,): 200, (1,): 200}, seed=4, bucket_bits=1).collect()
    }
    assert first == {i for i, seg in coarse.items() if seg <= 5}


def test_exact_sample_takes_a_fraction_counts_or_a_function_of_the_sizes(spark):
    df = spark.createDataFrame([(f"r{i}", 0 if i < 90 else 1) for i in range(100)], "id string, g int")

    assert counts_by(exact.exact_sample(df, ["g"], 0.5), "g") == {(0,): 45, (1,): 5}
    # Counts are capped at the stratum's size; strata not named are kept whole.
    assert counts_by(exact.exact_sample(df, ["g"], {(1,): 50}), "g") == {(0,): 90, (1,): 10}
    assert counts_by(exact.exact_sample(df, ["g"], {(0,): 3}), "g") == {(0,): 3, (1,): 10}
    # Undersample to the smallest stratum, in one call.
    smallest = exact.exact_sample(df, ["g"], lambda sizes: dict.fromkeys(sizes, min(sizes.values())))
    assert counts_by(smallest, "g") == {(0,): 10, (1,): 10}
    # No strata: the whole frame is one.
    assert exact.exact_sample(df, [], {(): 17}, bucket_bits=1).count() == 17
    with pytest.raises(ValueError, match=r"keep fraction 10 must be in \[0, 1\]"):
        exact.exact_sample(df, ["g"], 10)
    with pytest.raises(ValueError, match=r"strata \['nope'\] are not columns"):
        exact.exact_sample(df, ["nope"], 0.5)


def test_exact_split_over_no_strata_and_an_empty_frame(spark):
    df = spark.createDataFrame([(f"r{i}",) for i in range(11)], "id string")
    halves = exact.exact_split(df, [], {"a": 0.5, "b": 0.5}, "half", bucket_bits=1)
    assert counts_by(halves, "half") == {("a",): 6, ("b",): 5}

    empty = spark.createDataFrame([], "id string, g int")
    assert exact.exact_sample(empty, ["g"], 0.5).count() == 0
    assert exact.exact_split(empty, ["g"], {"a": 0.5, "b": 0.5}, "half").columns == ["id", "g", "half"]


# ------------------------------------------------------------------ params


def test_bad_fraction_is_refused_naming_the_class():
    with pytest.raises(ValueError, match=r"sample fraction 1.5 for class '1' must be in \[0, 1\]"):
        SampleParams(label_classes=[0, 1], class_fractions={"1": 1.5})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"class_counts": {"1": -1}}, r"sample count -1 for class '1' must be an integer >= 0"),
        ({"class_counts": {"7": 3}}, r"class_counts names class '7'"),
        ({"class_counts": {"1": 3}, "class_fractions": {"1": 0.5}}, r"classes \['1'\] are in both"),
        ({"strata": ["origin"], "class_counts": {"1": 3}}, r"must include 'label'"),
        ({"strata": ["label", "id"]}, r"cannot name \['id'\]"),
        ({"strata": []}, r"non-empty list of distinct columns"),
    ],
)
def test_bad_sample_params_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SampleParams(label_classes=[0, 1], **kwargs)


# ------------------------------------------------------------------ the stage


def land(spark, tmp_path, data) -> str:
    part = f"file://{tmp_path}/preprocess/dt=2013-01-01"
    spark.createDataFrame(data, SCHEMA).repartition(3).write.parquet(part)
    return part


def test_run_end_to_end_report_matches_the_output(spark, tmp_path):
    src = land(spark, tmp_path, rows(1200, 300, 40))
    out_dir = tmp_path / "sample" / "dt=2013-01-01"
    p = SampleParams(
        label_classes=[0, 1, 2],
        class_fractions={"0": 0.5, "2": 0.0},
        seed=7,
        splits=SPLITS,
        stratify_splits=True,
    )
    report = sample.run(spark, [src], f"file://{out_dir}", p)

    out = spark.read.parquet(f"file://{out_dir}")
    assert out.columns == ["id", "label", "num__x", "split"]
    by_split_class = counts_by(out, "split", "label")

    assert report["strata"] == {
        "0": {
            "train": {"before": 960, "after": 480},
            "validation": {"before": 120, "after": 60},
            "test": {"before": 120, "after": 60},
        },
        "1": {
            "train": {"before": 240, "after": 240},
            "validation": {"before": 30, "after": 30},
            "test": {"before": 30, "after": 30},
        },
        "2": {
            "train": {"before": 32, "after": 0},
            "validation": {"before": 4, "after": 0},
            "test": {"before": 4, "after": 0},
        },
    }
    assert report["class_counts_before"] == {"0": 1200, "1": 300, "2": 40}
    assert report["class_counts_after"] == {"0": 600, "1": 300, "2": 0}
    assert sample.class_counts(out, "label") == {"0": 600, "1": 300}
    assert report["splits"] == {
        s: {str(c): by_split_class.get((s, c), 0) for c in (0, 1, 2)} for s in ("train", "validation", "test")
    }
    assert report["splits"]["train"] == {"0": 480, "1": 240, "2": 0}
    assert report["rows_in"] == 1540
    assert report["rows_out"] == out.count() == 900
    assert report["rows_sampled_out"] == 640
    assert json.loads((out_dir / lake_io.REPORT_NAME).read_text()) == report


def test_run_reports_each_stratum_and_split_of_the_hash_split(spark, tmp_path):
    src = land(spark, tmp_path, rows(500, 60))
    out_dir = tmp_path / "sample" / "dt=2013-01-01"
    p = SampleParams(label_classes=[0, 1], fraction=0.25, seed=3)

    report = sample.run(spark, [src], f"file://{out_dir}", p)

    written = counts_by(spark.read.parquet(f"file://{out_dir}"), "label", "split")
    for label, by_split in report["strata"].items():
        for split, cell in by_split.items():
            assert cell["after"] == written.get((int(label), split), 0)
            assert abs(cell["after"] - cell["before"] * 0.25) < 1
    assert report["class_counts_after"] == {"0": 125, "1": 15}  # 0.25 of 500 and of 60
    assert sum(c["before"] for by in report["strata"].values() for c in by.values()) == 560


def test_run_on_an_empty_partition_writes_an_empty_sample(spark, tmp_path):
    src = land(spark, tmp_path, [])
    out = f"file://{tmp_path}/sample/dt=2013-01-01"
    p = SampleParams(label_classes=[0, 1], fraction=0.5, stratify_splits=True)

    report = sample.run(spark, [src], out, p)

    assert spark.read.parquet(out).columns == ["id", "label", "num__x", "split"]
    assert (report["rows_in"], report["rows_out"], report["strata"]) == (0, 0, {})
    assert report["class_counts_after"] == {"0": 0, "1": 0}


def test_run_twice_gives_the_same_partition(spark, tmp_path):
    src = land(spark, tmp_path, rows(300, 100))
    out = f"file://{tmp_path}/sample/dt=2013-01-01"
    p = SampleParams(label_classes=[0, 1], class_fractions={"0": 0.5}, seed=7, stratify_splits=True)
    first_report = sample.run(spark, [src], out, p)
    first = spark.read.parquet(out).collect()

    second_report = sample.run(spark, [src], out, p)

    assert second_report == first_report
    assert len(first) == 250
    assertDataFrameEqual(spark.read.parquet(out), first)
    assert not list((tmp_path / "sample" / "_staging").iterdir())


def test_a_small_day_runs_few_spark_jobs(spark, tmp_path):
    """Passes are not re-added: the two planning passes of `exact` (split, then sample), the
    write and the sha256 of the day's shards; the counts before and after come from the
    plan, the rows written from the Parquet footers, the input's schema from its footer."""
    from tests.spark_jobs.job_count import spark_jobs

    src = land(spark, tmp_path, rows(300, 100))
    p = SampleParams(label_classes=[0, 1], class_fractions={"0": 0.5}, seed=7, stratify_splits=True)
    report, jobs = spark_jobs(spark, lambda: sample.run(spark, [src], f"file://{tmp_path}/out", p))
    assert report["rows_out"] == 250
    assert len(jobs) <= 22, "\n".join(jobs)


def test_strata_without_the_label_count_classes_from_the_written_rows(spark, tmp_path):
    src = land(spark, tmp_path, rows(300, 100))
    out = f"file://{tmp_path}/out"
    p = SampleParams(label_classes=[0, 1], fraction=0.5, seed=7, strata=["num__x"])

    report = sample.run(spark, [src], out, p)

    written = spark.read.parquet(out)
    assert report["class_counts_before"] == {"0": 300, "1": 100}
    assert report["class_counts_after"] == sample.class_counts(written, "label")
    by_split_class = counts_by(written, "split", "label")
    assert report["splits"] == {
        s: {str(c): by_split_class.get((s, c), 0) for c in (0, 1)} for s in ("train", "validation", "test")
    }
    assert report["rows_out"] == written.count() == sum(report["class_counts_after"].values())


def test_the_day_is_written_once_as_shards_of_one_split_and_class_in_balance_hash_order(spark, tmp_path):
    """sample's files are the shards training reads (lakeprep_jobs.day_shards): one split and
    class per file, each class's files consecutive ranges of the balance hash order, listed
    with rows and sha256 in _shards.json; a rerun writes the same bytes."""
    import hashlib
    import json

    import pyarrow.parquet as pq

    from lakeprep_jobs import day_shards

    src = land(spark, tmp_path, rows(300, 100))
    out = tmp_path / "sample" / "dt=2013-01-01"
    p = SampleParams(label_classes=[0, 1], fraction=0.5, seed=7, balance_seed=3, rows_per_file=40)
    report = sample.run(spark, [src], f"file://{out}", p)
    doc = json.loads((out / day_shards.SHARDS).read_text())
    assert (out / "_SUCCESS").exists()  # complete: the window's stages read it
    assert doc["order"]["seed"] == 3 and doc["rows_per_file"] == 40
    listed = {f["path"] for files in doc["splits"].values() for c in files.values() for f in c}
    assert listed == {f.name for f in out.glob("part-*.parquet")}
    order = {
        r["id"]: (r["u"], r["id"])
        for r in spark.read.parquet(f"file://{out}")
        .select("id", day_shards.order_key(3).alias("u"))
        .collect()
    }
    for split, by_class in doc["splits"].items():
        for label, files in by_class.items():
            assert report["splits"][split][label] == sum(f["rows"] for f in files)
            assert [f["path"] for f in files] == sorted(f["path"] for f in files)
            keys = []
            for f in files:
                table = pq.read_table(out / f["path"])
                assert table.num_rows == f["rows"] and f["rows"] > 0
                assert set(table.column("split").to_pylist()) == {split}
                assert set(table.column("label").to_pylist()) == {int(label)}
                data = (out / f["path"]).read_bytes()
                assert (len(data), hashlib.sha256(data).hexdigest()) == (f["bytes"], f["sha256"])
                keys += [order[i] for i in table.column("id").to_pylist()]
            assert keys == sorted(keys), (split, label)  # the class's files in one order
    assert max(len(files) for by_class in doc["splits"].values() for files in by_class.values()) > 1
    before = {f.name: f.read_bytes() for f in out.glob("part-*.parquet")}
    sample.run(spark, [src], f"file://{out}", p)
    assert {f.name: f.read_bytes() for f in out.glob("part-*.parquet")} == before
    assert json.loads((out / day_shards.SHARDS).read_text()) == doc
