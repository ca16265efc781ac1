from __future__ import annotations

import numpy as np
import pytest

from lakeprep_train.metrics import (
    average_ranks,
    balanced_accuracy,
    macro_auc,
    majority_baseline,
    roc_auc,
    training_majority,
)


def test_auc_without_ties():
    # Pairs (pos, neg): (0.35, 0.1) yes, (0.35, 0.4) no, (0.8, 0.1) yes, (0.8, 0.4) yes -> 3/4.
    assert roc_auc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == pytest.approx(0.75)


def test_auc_counts_ties_as_half():
    # Positives {0.5, 0.9}, negatives {0.5, 0.2}: 0.5 + 1 + 1 + 1 = 3.5 of 4 pairs.
    assert roc_auc(np.array([0.5, 0.5, 0.2, 0.9]), np.array([1, 0, 0, 1])) == pytest.approx(0.875)


def test_auc_all_tied_is_one_half():
    assert roc_auc(np.zeros(6), np.array([1, 0, 1, 0, 0, 0])) == pytest.approx(0.5)


def test_auc_is_undefined_with_one_class():
    assert roc_auc(np.array([0.1, 0.7]), np.array([1, 1])) is None


def test_average_ranks_share_ties():
    assert average_ranks(np.array([3.0, 1.0, 3.0, 2.0, 3.0])).tolist() == [4.0, 1.0, 4.0, 2.0, 4.0]


def test_macro_auc_averages_one_vs_rest():
    probabilities = np.array([[0.8, 0.1, 0.1], [0.2, 0.7, 0.1], [0.1, 0.2, 0.7], [0.6, 0.3, 0.1]])
    assert macro_auc(probabilities, np.array([0, 1, 2, 0])) == pytest.approx(1.0)


def test_majority_baseline_names_the_class_value():
    baseline = majority_baseline(np.array([1, 1, 0, 1]), classes=(7, 9))
    assert baseline == {
        "majority_class": 9,
        "source": "evaluated split",
        "accuracy": 0.75,
        "balanced_accuracy": 0.5,
        "auc": 0.5,
    }


def test_majority_baseline_predicts_the_training_majority_on_the_evaluated_split():
    # Training: class 7 is the majority (as sampled). The evaluated split is mostly 9s, so
    # the honest baseline scores 0.25, not the 0.75 of the split's own majority.
    majority = training_majority({"7": 60, "9": 40}, classes=(7, 9))
    assert majority == 7
    baseline = majority_baseline(np.array([1, 1, 0, 1]), classes=(7, 9), majority_class=majority)
    assert baseline["majority_class"] == 7 and baseline["source"] == "train"
    assert baseline["accuracy"] == 0.25 and baseline["balanced_accuracy"] == 0.5


def test_training_majority_breaks_ties_by_class_order():
    assert training_majority({"1": 5, "0": 5}, classes=(0, 1)) == 0
    assert training_majority({"2": 1}, classes=(0, 1, 2)) == 2


def test_balanced_accuracy_is_the_mean_recall_of_the_classes_present():
    labels = np.array([0, 0, 0, 0, 1, 1])
    assert balanced_accuracy(np.array([0, 0, 0, 0, 0, 0]), labels, 2) == 0.5  # a constant
    assert balanced_accuracy(np.array([0, 0, 0, 1, 1, 0]), labels, 2) == pytest.approx((3 / 4 + 1 / 2) / 2)
    assert balanced_accuracy(np.array([2, 2]), np.array([2, 2]), 3) == 1.0  # classes 0, 1 absent
    assert balanced_accuracy(np.array([], dtype=int), np.array([], dtype=int), 2) is None
