"""Balancing and augmentation of the train split (lakeprep_jobs.balance), and what the export makes of it."""

from __future__ import annotations

import collections
import dataclasses
import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from lakeprep_contracts import documents, knobs
from lakeprep_jobs import balance, export_shards, fit_transform
from lakeprep_jobs.balance import BalanceParams
from tests.spark_jobs.window_data import DAY_3, export_params, fit_params, land_day

ENCODED = "id string, label int, num__a double, num__b double, cat__c int, txt__t array<int>, split string"
TRANSFORM = {
    "numeric": [{"output": "num__a"}, {"output": "num__b"}],
    "categorical": [{"output": "cat__c"}],
    "text": [{"output": "txt__t", "max_tokens": 4}],
}


def encoded_rows(n: int, positive_every: int = 8) -> list[tuple]:
    """Encoded train rows, class 1 every `positive_every`-th row: skewed towards class 0."""
    return [
        (
            f"r{i:03d}",
            int(i % positive_every == 0),
            float(i % 17) - 8.0,
            float((i * 7) % 11) / 3.0,
            2 + i % 5,
            [2 + i % 9, 3 + i % 4, 5, 0] if i % 3 else [4, 0, 0, 0],
            "train",
        )
        for i in range(n)
    ]


def frame(spark, rows: list[tuple], partitions: int = 2):
    return spark.createDataFrame(rows, ENCODED).repartition(partitions)


def counts_of(rows: list[tuple]) -> dict[str, int]:
    out = collections.Counter(str(r[1]) for r in rows)
    return {"0": out["0"], "1": out["1"]}


def by_id(rows) -> dict[str, dict]:
    return {r["id"]: r.asDict() for r in rows}


# ------------------------------------------------------------------------ knobs and arithmetic


def test_params_are_the_declared_knobs_with_the_same_defaults():
    assert dataclasses.asdict(BalanceParams()) == knobs.defaults("balance")


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"strategy": "smote"}, "balance strategy 'smote' must be one of"),
        ({"augment": "mixup"}, "balance augment 'mixup' must be one of"),
        ({"target_ratio": 0}, r"target_ratio 0 must be in \(0, 1\]"),
        ({"target_ratio": 1.5}, r"target_ratio 1.5 must be in \(0, 1\]"),
        ({"smote_candidates": 1}, "smote_candidates 1 must be >= 2"),
        ({"token_dropout": 1.0}, r"token_dropout 1.0 must be in \(0, 1\)"),
    ],
)
def test_bad_params_are_refused_naming_the_knob(kw, message):
    with pytest.raises(ValueError, match=message):
        BalanceParams(**kw)


def test_export_params_take_the_balance_section_and_refuse_unknown_keys():
    p = export_params("file:///t.json", balance={"strategy": "undersample", "target_ratio": 0.5})
    assert p.balance == BalanceParams(strategy="undersample", target_ratio=0.5)
    with pytest.raises(TypeError, match="balance: .*'ratio'"):
        export_params("file:///t.json", balance={"ratio": 0.5})


@pytest.mark.parametrize(
    ("strategy", "ratio", "counts", "targets"),
    [
        ("undersample", 1.0, {"0": 90, "1": 10}, {"0": 10, "1": 10}),
        ("undersample", 0.5, {"0": 90, "1": 10}, {"0": 20, "1": 10}),
        ("undersample", 0.7, {"0": 90, "1": 10}, {"0": 14, "1": 10}),  # 10/14 >= 0.7, 10/15 is not
        ("undersample", 0.5, {"0": 15, "1": 10}, {"0": 15, "1": 10}),  # already within the ratio
        ("undersample", 1.0, {"0": 50, "1": 7, "2": 20}, {"0": 7, "1": 7, "2": 7}),
        ("oversample", 1.0, {"0": 90, "1": 10}, {"0": 90, "1": 90}),
        ("oversample", 0.7, {"0": 100, "1": 10}, {"0": 100, "1": 70}),  # 0.7 * 100 is not 71
        ("oversample", 0.5, {"0": 50, "1": 7, "2": 30}, {"0": 50, "1": 25, "2": 30}),
        ("oversample", 1.0, {"0": 9, "1": 0}, {"0": 9, "1": 0}),  # nothing to repeat
        ("undersample", 1.0, {"0": 9, "1": 0}, {"0": 9, "1": 0}),  # one class: nothing to balance
        ("reweight", 1.0, {"0": 90, "1": 10}, {"0": 90, "1": 10}),
        ("none", 1.0, {"0": 90, "1": 10}, {"0": 90, "1": 10}),
    ],
)
def test_class_targets(strategy, ratio, counts, targets):
    p = BalanceParams(strategy=strategy, target_ratio=ratio)
    assert balance.class_targets(counts, p) == targets


def test_class_weights_are_one_unless_reweight():
    for strategy in ("none", "undersample", "oversample"):
        assert balance.class_weights({"0": 90, "1": 10}, BalanceParams(strategy=strategy)) == {
            "0": 1.0,
            "1": 1.0,
        }


def test_reweight_weights_are_balanced_at_ratio_one_and_partial_below():
    counts = {"0": 90, "1": 10}
    # target_ratio 1: scikit-learn's balanced weights n / (k * n_c).
    assert balance.class_weights(counts, BalanceParams(strategy="reweight")) == {
        "0": round(100 / 180, 6),
        "1": 100 / 20,
    }
    # target_ratio 0.5: class 1 counts as 45 rows; the mean weight per row stays 1.
    half = balance.class_weights(counts, BalanceParams(strategy="reweight", target_ratio=0.5))
    assert half["1"] * 10 / (half["0"] * 90) == pytest.approx(0.5, abs=1e-5)
    assert half["0"] * 90 + half["1"] * 10 == pytest.approx(100, abs=1e-3)
    # An absent class gets 1.0 (it never reaches the loss); every weight stays positive.
    assert balance.class_weights({"0": 5, "1": 0}, BalanceParams(strategy="reweight")) == {"0": 1.0, "1": 1.0}


# ------------------------------------------------------------------------- under/oversampling


def test_undersample_keeps_exact_counts_chosen_by_the_seed(spark):
    rows = encoded_rows(200)  # 25 of class 1, 175 of class 0
    counts = counts_of(rows)
    p = BalanceParams(strategy="undersample", target_ratio=0.5, seed=3)
    out = balance.balance_train(frame(spark, rows), counts, TRANSFORM, p).collect()

    assert collections.Counter(r["label"] for r in out) == {0: 50, 1: 25}
    assert len({r["id"] for r in out}) == 75 and not any(r["is_synthetic"] for r in out)
    real = {r[0]: r for r in rows}
    assert all(tuple(r.asDict()[k] for k in ("id", "label", "num__a")) == real[r["id"]][:3] for r in out)

    other = balance.balance_train(frame(spark, rows), counts, TRANSFORM, dataclasses.replace(p, seed=4))
    kept = {r["id"] for r in out if r["label"] == 0}
    kept_other = {r["id"] for r in other.collect() if r["label"] == 0}
    assert len(kept_other) == 50 and kept_other != kept


def test_oversample_repeats_rows_to_exact_counts(spark):
    rows = encoded_rows(200)
    p = BalanceParams(strategy="oversample", seed=3)
    out = balance.balance_train(frame(spark, rows), counts_of(rows), TRANSFORM, p).collect()

    assert collections.Counter(r["label"] for r in out) == {0: 175, 1: 175}
    repeats = collections.Counter(r["id"] for r in out if r["label"] == 1)
    # 175 = 25 * 7: every minority row exactly 7 times; majority rows once.
    assert len(repeats) == 25 and set(repeats.values()) == {7}
    assert set(collections.Counter(r["id"] for r in out if r["label"] == 0).values()) == {1}

    p = BalanceParams(strategy="oversample", target_ratio=0.6, seed=3)  # ceil(0.6 * 175) = 105 = 25 * 4 + 5
    out = balance.balance_train(frame(spark, rows), counts_of(rows), TRANSFORM, p).collect()
    repeats = collections.Counter(r["id"] for r in out if r["label"] == 1)
    assert sum(repeats.values()) == 105 and sorted(collections.Counter(repeats.values()).items()) == [
        (4, 20),
        (5, 5),
    ]


@pytest.mark.parametrize(
    "p",
    [
        BalanceParams(strategy="undersample", target_ratio=0.5, seed=5),
        BalanceParams(strategy="oversample", target_ratio=0.6, augment="smote", synthetic_per_row=2, seed=5),
        BalanceParams(augment="jitter", jitter_sigma=0.3, seed=5),
        BalanceParams(augment="text", token_dropout=0.4, seed=5),
    ],
    ids=["undersample", "oversample+smote", "jitter", "text"],
)
def test_the_result_does_not_depend_on_partitioning(spark, p):
    rows = encoded_rows(120)
    counts = counts_of(rows)
    one = balance.balance_train(frame(spark, rows, 1), counts, TRANSFORM, p).collect()
    many = balance.balance_train(frame(spark, list(reversed(rows)), 7), counts, TRANSFORM, p).collect()
    assert len(one) > 0
    assert sorted(map(tuple, one), key=str) == sorted(map(tuple, many), key=str)


# ------------------------------------------------------------------------------ augmentation


def on_segment(point: dict, base: dict, other: dict, names: list[str]) -> bool:
    """`point = base + lam * (other - base)` with one lam in [0, 1] for every numeric."""
    lams = set()
    for c in names:
        span = other[c] - base[c]
        if abs(span) < 1e-12:
            if abs(point[c] - base[c]) > 1e-9:
                return False
            continue
        lam = (point[c] - base[c]) / span
        if not -1e-9 <= lam <= 1 + 1e-9:
            return False
        lams.add(round(lam, 6))
    return len(lams) <= 1


def test_smote_rows_interpolate_between_same_class_neighbours(spark):
    rows = encoded_rows(96)  # 12 of class 1, 84 of class 0
    p = BalanceParams(augment="smote", synthetic_per_row=3, smote_candidates=5, seed=11)
    out = balance.balance_train(frame(spark, rows), counts_of(rows), TRANSFORM, p).collect()
    real = by_id(r for r in out if not r["is_synthetic"])
    synthetic = [r.asDict() for r in out if r["is_synthetic"]]

    assert set(real) == {r[0] for r in rows}
    per_base = collections.Counter(s["id"].split("#syn")[0] for s in synthetic)
    assert set(per_base) <= set(real) and max(per_base.values()) <= 3  # bounded per real row
    # Groups of at most 5 candidates, at least 2 for these counts: every row has a neighbour.
    assert len(synthetic) == 3 * 96
    assert {s["id"] for s in synthetic} == {f"{b}#syn{k}" for b in real for k in range(3)}
    names = ["num__a", "num__b"]
    for s in synthetic:
        base = real[s["id"].split("#syn")[0]]
        assert (s["label"], s["cat__c"], s["txt__t"], s["split"]) == (
            base["label"],
            base["cat__c"],
            base["txt__t"],
            base["split"],
        )
        partners = [r for r in real.values() if r["label"] == base["label"] and r["id"] != base["id"]]
        assert any(on_segment(s, base, r, names) for r in partners), s


def test_smote_candidates_are_bounded_and_nearest_first(spark):
    rows = encoded_rows(64)
    counts = counts_of(rows)
    p = BalanceParams(augment="smote", smote_candidates=4, seed=2)
    balanced = balance.rebalance(frame(spark, rows), counts, p)
    neighbours = balance._smote_neighbours(balanced, counts, ["num__a", "num__b"], p).collect()
    assert len(neighbours) == 64
    for r in neighbours:
        assert 1 <= len(r["_nbrs"]) <= 3  # the other rows of a group of at most 4
        distances = [n["distance"] for n in r["_nbrs"]]
        assert distances == sorted(distances)

    # One group per class (candidates >= class size): the first synthetic row of each row
    # uses its nearest same-class row.
    p = BalanceParams(augment="smote", smote_candidates=64, seed=2)
    out = balance.balance_train(frame(spark, rows), counts, TRANSFORM, p).collect()
    real = by_id(r for r in out if not r["is_synthetic"])
    names = ["num__a", "num__b"]
    for s in (r.asDict() for r in out if r["is_synthetic"]):
        base = real[s["id"].removesuffix("#syn0")]
        others = [r for r in real.values() if r["label"] == base["label"] and r["id"] != base["id"]]
        distance = {r["id"]: sum((r[c] - base[c]) ** 2 for c in names) for r in others}
        nearest = [r for r in others if distance[r["id"]] <= min(distance.values()) + 1e-9]
        assert any(on_segment(s, base, r, names) for r in nearest), (s, nearest)


def test_oversampled_repeats_get_their_own_synthetic_ids(spark):
    rows = encoded_rows(40)  # 5 of class 1, 35 of class 0
    p = BalanceParams(strategy="oversample", augment="jitter", synthetic_per_row=2, seed=1)
    out = balance.balance_train(frame(spark, rows), counts_of(rows), TRANSFORM, p).collect()
    synthetic = [r for r in out if r["is_synthetic"]]
    assert len(synthetic) == 2 * 70 and len({r["id"] for r in synthetic}) == 140
    # A minority row repeated 7 times makes 7 * 2 synthetic rows, k = 0..13.
    assert sorted(int(r["id"].split("#syn")[1]) for r in synthetic if r["id"].startswith("r000#")) == list(
        range(14)
    )


def test_jitter_is_gaussian_with_sigma_and_deterministic_for_a_seed(spark):
    rows = encoded_rows(400)
    counts = counts_of(rows)
    p = BalanceParams(augment="jitter", jitter_sigma=0.5, synthetic_per_row=5, seed=9)
    first = balance.balance_train(frame(spark, rows), counts, TRANSFORM, p).collect()
    again = balance.balance_train(frame(spark, rows, 5), counts, TRANSFORM, p).collect()
    other = balance.balance_train(
        frame(spark, rows), counts, TRANSFORM, dataclasses.replace(p, seed=10)
    ).collect()

    real = {r[0]: r for r in rows}
    noise = [s["num__a"] - real[s["id"].split("#syn")[0]][2] for s in first if s["is_synthetic"]]
    assert len(noise) == 2000
    mean = sum(noise) / len(noise)
    std = math.sqrt(sum((x - mean) ** 2 for x in noise) / len(noise))
    assert abs(mean) < 0.05 and std == pytest.approx(0.5, rel=0.08)
    for s in (r for r in first if r["is_synthetic"]):
        assert (s["cat__c"], s["txt__t"]) == tuple(real[s["id"].split("#syn")[0]][4:6])
    assert by_id(first) == by_id(again)
    assert by_id(first) != by_id(other)


def test_token_dropout_keeps_a_padded_subsequence_and_is_deterministic(spark):
    rows = encoded_rows(300)
    counts = counts_of(rows)
    p = BalanceParams(augment="text", token_dropout=0.3, synthetic_per_row=2, seed=4)
    first = balance.balance_train(frame(spark, rows), counts, TRANSFORM, p).collect()
    again = balance.balance_train(frame(spark, rows, 3), counts, TRANSFORM, p).collect()
    assert by_id(first) == by_id(again)

    real = {r[0]: r for r in rows}
    kept = total = 0
    for s in (r for r in first if r["is_synthetic"]):
        base = real[s["id"].split("#syn")[0]]
        tokens = [t for t in base[5] if t]
        out = s["txt__t"]
        assert len(out) == 4 and (s["num__a"], s["cat__c"]) == (base[2], base[4])
        survivors = [t for t in out if t]
        assert out == survivors + [0] * (4 - len(survivors))  # padding stays at the end
        it = iter(tokens)
        assert all(t in it for t in survivors)  # a subsequence, order kept
        kept += len(survivors)
        total += len(tokens)
    assert kept / total == pytest.approx(0.7, abs=0.05)


def test_augmentation_needs_the_features_it_changes(spark):
    rows = encoded_rows(20)
    no_numeric = {**TRANSFORM, "numeric": []}
    with pytest.raises(ValueError, match="augment 'smote' needs numeric features"):
        balance.balance_train(frame(spark, rows), counts_of(rows), no_numeric, BalanceParams(augment="smote"))
    with pytest.raises(ValueError, match="augment 'text' needs text features"):
        balance.balance_train(
            frame(spark, rows), counts_of(rows), {**TRANSFORM, "text": []}, BalanceParams(augment="text")
        )


def test_a_synthetic_id_that_is_also_a_real_id_is_refused(spark):
    rows = encoded_rows(20)
    rows[5] = ("r001#syn0", *rows[5][1:])  # a real id shaped like r001's first synthetic id
    train = balance.balance_train(
        frame(spark, rows), counts_of(rows), TRANSFORM, BalanceParams(augment="jitter")
    )
    with pytest.raises(ValueError, match=r"synthetic ids \['r001#syn0'\] are also real ids"):
        balance.check_synthetic_ids(train, frame(spark, rows))


# ------------------------------------------------------------------------------- the export


def test_the_export_refuses_a_synthetic_row_outside_train(spark):
    rows = encoded_rows(10)
    train = balance.balance_train(
        frame(spark, rows), counts_of(rows), TRANSFORM, BalanceParams(augment="jitter")
    )
    validation = (
        frame(spark, rows).withColumn("split", F.lit("validation")).withColumn("is_synthetic", F.lit(False))
    )
    honest = export_shards.count_window(train.unionByName(validation), TRANSFORM)
    export_shards.check_honest_evaluation(honest, "x")  # synthetic rows in train are fine
    assert sum(n for (split, _, synthetic), n in honest.rows.items() if split == "train" and synthetic) == 10
    leaked_rows = train.filter("is_synthetic").withColumn("split", F.lit("test"))
    leaked = export_shards.count_window(train.unionByName(validation).unionByName(leaked_rows), TRANSFORM)
    with pytest.raises(
        RuntimeError, match=r"synthetic rows in \{'test': 10\}; augmentation is for the train"
    ):
        export_shards.check_honest_evaluation(leaked, "x")


def skewed_day(day: str, n: int) -> list[tuple]:
    """Sampled rows (spec names), class 1 the minority; split by position (3/5 train, 1/5 each other)."""
    splits = ["train", "train", "train", "validation", "test"]
    return [
        (
            f"{day}-{i}",
            int(i % 10 == 1 or i % 20 in (3, 4)),  # train 1 in 6, validation and test 1 in 4
            float(i % 13),
            "abc"[i % 3],
            ["w", f"t{i % 4}"],
            splits[i % 5],
        )
        for i in range(n)
    ]


def export_window(spark, root: Path, **balance_knobs) -> tuple[Path, dict, list[str]]:
    inputs = [
        land_day(spark, root, "2013-01-02", skewed_day("2013-01-02", 60)),
        land_day(spark, root, DAY_3, skewed_day(DAY_3, 50)),
    ]
    fitted = root / "fit_transform" / f"dt={DAY_3}"
    fit_transform.run(spark, inputs, f"file://{fitted}", fit_params())
    out = root / "export_shards" / f"dt={DAY_3}"
    export_shards.run(
        spark,
        inputs,
        f"file://{out}",
        export_params(f"file://{fitted}/transform.json", world_size=1, balance=balance_knobs),
    )
    return out, json.loads((out / "manifest.json").read_text()), inputs


def shard_table(out: Path, manifest: dict, split: str) -> list[dict]:
    return [
        row for s in manifest["splits"][split]["shards"] for row in pq.read_table(out / s["path"]).to_pylist()
    ]


def test_export_balances_and_augments_train_only(spark, tmp_path):
    out, manifest, inputs = export_window(
        spark,
        tmp_path,
        strategy="undersample",
        target_ratio=0.5,
        augment="smote",
        synthetic_per_row=2,
        seed=3,
    )
    sampled = [r.asDict() for r in spark.read.parquet(*inputs).collect()]
    natural = {
        s: {c: sum(1 for r in sampled if r["split"] == s and str(r["label"]) == c) for c in ("0", "1")}
        for s in ("train", "validation", "test")
    }

    # Validation and test: exactly the sampled rows, none synthetic.
    for split in ("validation", "test"):
        rows = shard_table(out, manifest, split)
        assert sorted((r["id"], r["label"]) for r in rows) == sorted(
            (r["id"], r["label"]) for r in sampled if r["split"] == split
        )
        assert not any(r["is_synthetic"] for r in rows)
        assert manifest["splits"][split]["class_counts"] == natural[split]

    # Train: undersampled to exact counts, then two synthetic rows per real row at most.
    train = manifest["splits"]["train"]
    assert train["class_counts_natural"] == natural["train"]
    minority = min(natural["train"].values())
    rows = shard_table(out, manifest, "train")
    real = [r for r in rows if not r["is_synthetic"]]
    synthetic = [r for r in rows if r["is_synthetic"]]
    assert collections.Counter(str(r["label"]) for r in real) == {"0": 2 * minority, "1": minority}
    per_base = collections.Counter(r["id"].split("#syn")[0] for r in synthetic)
    assert set(per_base) <= {r["id"] for r in real} and max(per_base.values()) <= 2
    assert {r["id"] for r in synthetic}.isdisjoint(r["id"] for r in sampled)
    assert train["rows_available"] == len(rows) == len(real) + len(synthetic)
    assert manifest["balance"]["synthetic_rows"] == len(synthetic)
    assert manifest["class_weights"] == {"0": 1.0, "1": 1.0}

    sampling = json.loads((out / "sampling.json").read_text())
    documents.require("sampling", sampling, "sampling.json")
    steps = {s["step"]: s for s in sampling["steps"]}
    assert steps["sample"]["splits"] == natural
    assert steps["balance"]["splits"]["train"] == {"0": 2 * minority, "1": minority}
    assert steps["balance"]["splits"]["validation"] == natural["validation"]
    assert steps["augment"]["splits"]["train"] == train["class_counts"]
    assert sum(sampling["synthetic"]["train"].values()) == len(synthetic)
    assert sampling["synthetic"]["test"] == {"0": 0, "1": 0}
    assert len(synthetic) == 2 * (len(real) - sampling["rows_without_neighbour"])


def test_reweight_weights_reach_the_trainers_loss(spark, tmp_path, monkeypatch):
    import torch

    from lakeprep_train import loop
    from lakeprep_train import train as trainer
    from lakeprep_train.manifest import load_manifest

    out, manifest, _ = export_window(spark, tmp_path, strategy="reweight")
    counts = manifest["splits"]["train"]["class_counts"]
    assert counts == manifest["splits"]["train"]["class_counts_natural"]  # no row changed
    n = sum(counts.values())
    assert manifest["class_weights"] == {c: round(n / (2 * k), 6) for c, k in counts.items()}

    seen = []
    real_loss = loop.training_loss

    def spy(logits, labels, class_weight, target=None):
        seen.append(class_weight)
        return real_loss(logits, labels, class_weight, target)

    monkeypatch.setattr(loop, "training_loss", spy)
    loaded = load_manifest(str(out / "manifest.json"))
    args = trainer.parse_args(
        [
            "--manifest",
            str(out / "manifest.json"),
            "--output",
            str(tmp_path / "model"),
            "--epochs",
            "1",
            "--prefetch",
            "0",
        ]
    )
    trainer.fit(loaded, args, trainer.DistributedEnv(0, 1, 0), torch.device("cpu"))
    assert seen, "the trainer never computed a loss"
    expected = [manifest["class_weights"][str(c)] for c in manifest["label"]["classes"]]
    assert all(w is not None and w.tolist() == pytest.approx(expected) for w in seen)

    # And the weights change the loss: a minority-class mistake costs more.
    logits, labels = torch.tensor([2.0, -2.0]), torch.tensor([1, 1])
    weighted = real_loss(logits, labels, torch.tensor(expected))
    plain = real_loss(logits, labels, None)
    assert float(weighted) == pytest.approx(float(plain) * expected[1], rel=1e-6)
    metrics = json.loads((tmp_path / "model" / "metrics.json").read_text())
    assert metrics["baseline"]["source"] == "train"
