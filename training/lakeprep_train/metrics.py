"""Evaluation metrics in numpy: accuracy, ROC AUC and the majority-class baseline.

scikit-learn is not a dependency of the trainer, so AUC is the Mann-Whitney U
statistic computed from ranks, with tied scores given their average rank (the same
definition as ``sklearn.metrics.roc_auc_score``).
"""

from __future__ import annotations

from collections.abc import Sequence

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


def majority_baseline(labels: np.ndarray, classes: Sequence[int]) -> dict[str, object]:
    """The accuracy of always predicting the most frequent class of ``labels`` (class indices)."""
    counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=len(classes))
    majority = int(np.argmax(counts))
    total = int(counts.sum())
    return {
        "majority_class": classes[majority],
        "accuracy": float(counts[majority] / total) if total else None,
    }
