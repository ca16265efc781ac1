"""Read-time augmentation (lakeprep_train.augment): jitter and token dropout of synthetic rows."""

from __future__ import annotations

import numpy as np
import pytest

from lakeprep_train.augment import Augmentation, drop_tokens


def block(rows: int) -> dict[str, np.ndarray]:
    text = np.zeros((rows, 1, 5), dtype=np.int32)
    text[:, 0, :4] = np.arange(1, 5)  # four tokens, then padding
    return {
        "numeric": np.arange(rows * 2, dtype=np.float32).reshape(rows, 2),
        "categorical": np.ones((rows, 1), dtype=np.int32),
        "text": text,
        "label": np.zeros(rows, dtype=np.int64),
    }


def test_dropped_tokens_close_up_and_padding_stays_padding():
    text = np.array([[[5, 6, 7, 8, 0]]], dtype=np.int32)
    survives = np.array([[[True, False, True, False, True]]])
    assert drop_tokens(text, survives).tolist() == [[[5, 7, 0, 0, 0]]]
    assert drop_tokens(text, np.ones_like(survives)).tolist() == text.tolist()


def test_jitter_is_fresh_each_epoch_and_the_same_for_a_row_however_it_is_read():
    one = Augmentation("jitter", seed=3, epoch=0, jitter_sigma=0.5)
    whole = one.apply(block(10), 1, "f.parquet", 0, 0, 10)
    assert whole["numeric"].dtype == np.float32
    noise = whole["numeric"] - block(10)["numeric"]
    assert 0.1 < float(np.std(noise)) < 1.5 and np.all(noise != 0)
    # Rows 4..6 read alone (another rank's cut of the group) get the same draws.
    part = one.apply(block(3), 1, "f.parquet", 0, 4, 10)
    assert np.allclose(part["numeric"] - block(3)["numeric"], noise[4:7], atol=1e-6)
    assert np.array_equal(one.apply(block(10), 1, "f.parquet", 0, 0, 10)["numeric"], whole["numeric"])
    later = Augmentation("jitter", seed=3, epoch=1, jitter_sigma=0.5).apply(
        block(10), 1, "f.parquet", 0, 0, 10
    )
    assert not np.array_equal(later["numeric"], whole["numeric"])
    second_copy = one.apply(block(10), 2, "f.parquet", 0, 0, 10)
    assert not np.array_equal(second_copy["numeric"], whole["numeric"])
    assert np.array_equal(whole["categorical"], block(10)["categorical"])


@pytest.mark.parametrize("dropout", [0.0, 0.3, 0.9])
def test_token_dropout_drops_about_its_share(dropout):
    out = Augmentation("text", seed=1, epoch=0, token_dropout=dropout).apply(block(2000), 1, "g", 0, 0, 2000)
    kept = (out["text"] != 0).sum() / (2000 * 4)
    assert abs(kept - (1 - dropout)) < 0.03
    assert np.array_equal(out["numeric"], block(2000)["numeric"])


def test_a_manifest_without_a_read_time_augmentation_gives_none():
    assert Augmentation.of({"augment": "none"}, seed=0, epoch=0) is None
    assert Augmentation.of(None, seed=0, epoch=0) is None
    assert Augmentation.of({"augment": "smote", "smote_candidates": 8}, seed=0, epoch=0).smote_candidates == 8
    made = Augmentation.of({"augment": "text", "token_dropout": 0.2}, seed=4, epoch=2)
    assert (made.method, made.token_dropout, made.epoch) == ("text", 0.2, 2)


def test_smote_interpolates_within_a_class_towards_a_neighbour_of_its_group():
    from lakeprep_train.augment import smote

    rng = np.random.default_rng(0)
    numeric = np.concatenate([rng.normal(0, 1, (40, 2)), rng.normal(100, 1, (40, 2))]).astype(np.float32)
    labels = np.repeat([0, 1], 40)
    out = smote(numeric, labels, 1, 8, np.random.default_rng(5))
    assert out.dtype == np.float32 and out.shape == numeric.shape
    # Never towards the other class: class 0 stays near 0, class 1 near 100.
    assert np.abs(out[:40]).max() < 10 and np.abs(out[40:] - 100).max() < 10
    assert (np.abs(out - numeric).sum(axis=1) > 0).sum() >= 75
    again = smote(numeric, labels, 1, 8, np.random.default_rng(5))
    assert np.array_equal(out, again)
    second = smote(numeric, labels, 2, 8, np.random.default_rng(5))
    assert not np.array_equal(second, out)  # the next copy takes the next-nearest neighbour
    alone = smote(numeric[:1], labels[:1], 1, 8, np.random.default_rng(5))
    assert np.array_equal(alone, numeric[:1])  # no neighbour: the row as it is
