"""Evaluation metrics in numpy: accuracy, balanced accuracy, ROC AUC and the majority-class
baseline; MAE, RMSE and R² against the train mean for a continuous label.

The baseline is the honest one: always predicting the **training** split's majority class
(as sampled, before balancing), scored on the evaluated split. Taking the majority of the
evaluated split itself would peek at its labels; taking it from a re-balanced train split
would pick an arbitrary class.

scikit-learn is not a dependency of the trainer, so AUC is the Mann-Whitney U
statistic computed from ranks, with tied scores given their average rank (the same
definition as ``sklearn.metrics.roc_auc_score``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def average_ranks(scores: np.ndarray) -> np.ndarray:
    """1-based ranks of ``scores``; tied scores share the mean of their ranks."""
    scores = np.asarray(scores, dtype=np.float64)
    order = np.argsort(scores, kind="mergesort")
    ordered = scores[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(scores)]
    # Ranks starts+1 .. ends average to (starts + 1 + ends) / 2.
    ranks = np.empty(len(scores), dtype=np.float64)
    ranks[order] = np.repeat((starts + 1 + ends) / 2.0, ends - starts)
    return ranks


def roc_auc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """Probability that a random positive scores above a random negative (ties count 1/2).

    :param scores: one score per row, higher meaning more likely positive.
    :param positive: truthy for the positive rows.
    :returns: the AUC, or None when one of the two classes is absent (it is undefined).
    """
    scores = np.asarray(scores, dtype=np.float64)
    positive = np.asarray(positive, dtype=bool)
    if scores.shape != positive.shape:
        raise ValueError(f"scores {scores.shape} and labels {positive.shape} differ in shape")
    if not np.isfinite(scores).all():
        raise ValueError("scores hold NaN or infinity; the model diverged")
    n_pos = int(positive.sum())
    n_neg = len(positive) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    rank_sum = float(average_ranks(scores)[positive].sum())
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def macro_auc(probabilities: np.ndarray, labels: np.ndarray) -> float | None:
    """One-vs-rest AUC averaged over the classes present with both outcomes."""
    aucs = [roc_auc(probabilities[:, k], labels == k) for k in range(probabilities.shape[1])]
    defined = [a for a in aucs if a is not None]
    return float(np.mean(defined)) if defined else None


def balanced_accuracy(predicted: np.ndarray, labels: np.ndarray, n_classes: int) -> float | None:
    """Mean recall over the classes present in ``labels`` (class indices); None without rows.

    A constant prediction scores ``1 / classes present`` whatever the class balance, so it
    shows whether a model learned anything on imbalanced data, where accuracy need not.
    """
    predicted = np.asarray(predicted, dtype=np.int64)
    labels = np.asarray(labels, dtype=np.int64)
    recalls = [float((predicted[labels == k] == k).mean()) for k in range(n_classes) if (labels == k).any()]
    return float(np.mean(recalls)) if recalls else None


def training_majority(class_counts: Mapping[str, int], classes: Sequence[int]) -> int:
    """The most frequent class value of ``class_counts`` (keys: class values as strings).

    Ties go to the class listed first in ``classes``, so the choice is stable.
    """
    counts = [int(class_counts.get(str(c), 0)) for c in classes]
    return classes[int(np.argmax(counts))]


def majority_baseline(
    labels: np.ndarray, classes: Sequence[int], majority_class: int | None = None
) -> dict[str, object]:
    """Metrics of always predicting ``majority_class`` on ``labels`` (class indices).

    :param majority_class: the class value to predict, the training majority
        (:func:`training_majority`); without it, the most frequent class of ``labels``
        themselves (``source`` says which).
    :returns: ``majority_class``, ``source`` (``train`` or ``evaluated split``),
        ``accuracy``, ``balanced_accuracy`` and ``auc`` (a constant score: 0.5 when both
        outcomes occur) of that constant prediction.
    """
    labels = np.asarray(labels, dtype=np.int64)
    if majority_class is None:
        counts = np.bincount(labels, minlength=len(classes))
        index, source = int(np.argmax(counts)), "evaluated split"
    else:
        index, source = list(classes).index(majority_class), "train"
    predicted = np.full(len(labels), index, dtype=np.int64)
    constant = np.zeros(len(labels))
    if len(classes) == 2:
        auc = roc_auc(constant, labels == 1)
    else:
        auc = macro_auc(np.zeros((len(labels), len(classes))), labels)
    return {
        "majority_class": classes[index],
        "source": source,
        "accuracy": float((labels == index).mean()) if len(labels) else None,
        "balanced_accuracy": balanced_accuracy(predicted, labels, len(classes)),
        "auc": auc,
    }


def regression_metrics(predicted: np.ndarray, values: np.ndarray, train_mean: float) -> dict[str, Any]:
    """A continuous label's metrics on the label's scale: MAE, RMSE and R² of `predicted`
    against `values`, and the same for the honest baseline, always predicting the
    **training** split's mean (the transform's `label.target.mean`). R² is
    ``1 - SSE / SS_tot`` around the evaluated split's own mean (scikit-learn's
    ``r2_score``); None when the split's values do not vary."""
    predicted = np.asarray(predicted, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)

    def scores(guess: np.ndarray) -> dict[str, float | None]:
        error = guess - values
        spread = float(((values - values.mean()) ** 2).sum())
        sse = float((error**2).sum())
        return {
            "mae": float(np.abs(error).mean()),
            "rmse": float(np.sqrt((error**2).mean())),
            "r2": 1.0 - sse / spread if spread > 0 else None,
        }

    baseline = np.full_like(values, train_mean)
    return {
        **scores(predicted),
        "baseline": {"predict": "train mean", "mean": train_mean, **scores(baseline)},
    }
