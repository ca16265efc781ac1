"""Evaluate a model on every row of one split: loss, accuracy, AUC and the baseline.

The baseline always predicts the training split's majority class as sampled (the
manifest's `splits.train.class_counts_natural`, before balancing), scored on the
evaluated split: validation and test keep the real class distribution, so a model must
beat what knowing only the training prior would give.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from lakeprep_train.dataset import split_batches
from lakeprep_train.metrics import balanced_accuracy, macro_auc, majority_baseline, roc_auc, training_majority

if TYPE_CHECKING:
    from lakeprep_train.manifest import Manifest


def class_probabilities(logits: torch.Tensor) -> np.ndarray:
    """``[B, n_classes]`` probabilities in ``label.classes`` order, from the model's logits.

    Two classes have one logit (positive = classes[1]): ``[1 - sigmoid, sigmoid]``.
    ``lakeprep_train.predict`` uses this too, so serving and evaluation cannot differ.
    """
    logits = logits.detach().float().cpu()
    if logits.dim() == 1:
        positive = torch.sigmoid(logits.double())
        return torch.stack([1 - positive, positive], dim=1).numpy()
    return torch.softmax(logits.double(), dim=1).numpy()


def evaluate_split(
    model: torch.nn.Module, manifest: Manifest, split: str, device: torch.device, *, per_row: bool = False
) -> dict[str, Any]:
    """Metrics over all shards of ``split``, read by this one process.

    ``loss`` is the unweighted mean cross-entropy, comparable across runs whatever the
    class weights. A split exported with ``remainder: "pad"`` repeats rows to even out
    the ranks; each row id is counted once here, so ``rows`` is the distinct rows.
    With ``per_row``, ``outputs`` maps each row id to its class probabilities
    (:func:`class_probabilities`): what ``predict`` must give for the same rows.
    """
    padded = manifest.split(split).plan.remainder == "pad"
    seen: set[str] = set()
    logits_parts: list[torch.Tensor] = []
    label_parts: list[np.ndarray] = []
    id_parts: list[np.ndarray] = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for batch in split_batches(manifest, split, with_ids=padded or per_row):
                if padded:
                    keep = np.zeros(len(batch), dtype=bool)
                    for i, row_id in enumerate(batch.ids):
                        if row_id not in seen:
                            seen.add(row_id)
                            keep[i] = True
                    index = torch.from_numpy(np.flatnonzero(keep))
                    batch.numeric, batch.categorical = batch.numeric[index], batch.categorical[index]
                    batch.text, batch.label = batch.text[index], batch.label[index]
                    batch.ids = batch.ids[keep]
                    if not len(batch):
                        continue
                if per_row:
                    id_parts.append(batch.ids)
                batch = batch.to(device, non_blocking=True)
                logits_parts.append(model(batch.numeric, batch.categorical, batch.text).float().cpu())
                label_parts.append(batch.label.cpu().numpy())
    finally:
        model.train(was_training)
    if not logits_parts:
        raise ValueError(f"{manifest.location}: splits.{split} has no rows to evaluate")
    logits = torch.cat(logits_parts)
    labels = np.concatenate(label_parts)
    target = torch.from_numpy(labels)
    if logits.dim() == 1:
        loss = F.binary_cross_entropy_with_logits(logits, target.float())
        predicted = (logits > 0).long().numpy()
        auc = roc_auc(logits.numpy(), labels == 1)
    else:
        loss = F.cross_entropy(logits, target)
        predicted = logits.argmax(dim=1).numpy()
        auc = macro_auc(torch.softmax(logits, dim=1).numpy(), labels)
    classes = manifest.label.classes
    majority = training_majority(manifest.split("train").natural_class_counts, classes)
    result = {
        "loss": float(loss),
        "accuracy": float((predicted == labels).mean()),
        "balanced_accuracy": balanced_accuracy(predicted, labels, len(classes)),
        "auc": auc,
        "rows": int(len(labels)),
        "baseline": majority_baseline(labels, classes, majority_class=majority),
    }
    if per_row:
        probabilities = class_probabilities(logits)
        ids = np.concatenate(id_parts)
        result["outputs"] = {str(i): p.tolist() for i, p in zip(ids, probabilities, strict=True)}
    return result
