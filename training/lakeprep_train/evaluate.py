"""Evaluate a model on every row of one split: loss, accuracy, AUC and the baseline.

The baseline always predicts the training split's majority class as sampled (the
manifest's `splits.train.class_counts_natural`, before balancing), scored on the
evaluated split: validation and test keep the real class distribution, so a model must
beat what knowing only the training prior would give.

On several ranks every rank evaluates, at the same time, a share of the split planned as
the loader plans training (``lakeprep_train.dataset.plan_rank``): contiguous chunks, the
same number of rows and batches on every rank. Rank 0 evaluating alone while the others
waited at a barrier made a validation pass longer than the process group's timeout fire
the watchdog on the waiting ranks (the hang reported against other loaders:
huggingface/datasets#7854, pytorch/torchrec#1014, pytorch/pytorch#141069). Each row is
evaluated exactly once:

- the split is planned as ``remainder: "pad"`` whatever its training remainder, so a
  ``"drop"`` plan's tail (fewer rows than ranks) is in some rank's chunk, not lost;
- the rows a padded plan repeats are the positions past the split's ``N`` rows, at the
  end of the last chunks: they are cut off after the gather, never scored;
- a split exported with ``remainder: "pad"`` holds repeats of its own (same ``id``):
  each id is scored once, at its first position in manifest order.

The ranks then all-gather their model outputs and labels (equal shapes, from the equal
plan) and every rank computes the metrics from the whole split in manifest order, as one
process would: the numbers are the same on every rank and equal a single-process
evaluation. The outputs are gathered rather than sums all-reduced because AUC is a rank
statistic, which no sum of per-rank parts gives exactly.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from lakeprep_contracts import labels as label_kinds
from lakeprep_train.dataset import RankBatches
from lakeprep_train.metrics import (
    balanced_accuracy,
    macro_auc,
    majority_baseline,
    regression_metrics,
    roc_auc,
    training_majority,
)

if TYPE_CHECKING:
    from lakeprep_train.manifest import Manifest

# Batches read ahead while the model scores one; evaluation is forward only, so short.
EVALUATION_PREFETCH = 2


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


def target_values(logits: torch.Tensor, target: Mapping[str, Any]) -> np.ndarray:
    """A regression's ``[B]`` outputs as values on the label's scale (float64): the model
    regresses ``(value - mean) / std`` (the transform's ``label.target``), so
    ``output * std + mean``. ``lakeprep_train.predict`` uses this too."""
    return logits.detach().double().cpu().numpy() * target["std"] + target["mean"]


def read_padded(manifest: Manifest, split: str) -> Manifest:
    """``manifest`` with ``split`` planned as ``remainder: "pad"``: every row in some rank's chunk.

    Training may drop a remainder of fewer rows than ranks (a step must not wait on a rank
    with fewer batches); evaluation must not: padded, the plan keeps equal batches on
    every rank and covers all ``N`` rows, the repeats being the positions past ``N``.
    """
    chosen = manifest.split(split)
    if chosen.plan.remainder == "pad":
        return manifest
    padded = dataclasses.replace(chosen, plan=dataclasses.replace(chosen.plan, remainder="pad"))
    return dataclasses.replace(manifest, splits={**manifest.splits, split: padded})


def evaluate_split(
    model: torch.nn.Module,
    manifest: Manifest,
    split: str,
    device: torch.device,
    *,
    rank: int = 0,
    world_size: int = 1,
    per_row: bool = False,
) -> dict[str, Any]:
    """Metrics over all shards of ``split``, the same on every rank of ``world_size``.

    A collective when ``world_size`` > 1: every rank of the default process group calls
    it with its ``rank`` and the same model weights. ``loss`` is the unweighted mean
    cross-entropy, comparable across runs whatever the class weights; ``rows`` counts
    each row id once (a split exported with ``remainder: "pad"`` repeats rows). With
    ``per_row``, ``outputs`` maps each row id to its class probabilities
    (:func:`class_probabilities`), or a regression's to its predicted value
    (:func:`target_values`): what ``predict`` must give for the same rows.

    :raises ValueError: on every rank alike, before any collective, when the split has no rows.
    """
    chosen = manifest.split(split)
    n = sum(shard.rows for shard in chosen.shards)
    if n == 0:
        raise ValueError(f"{manifest.location}: splits.{split} has no rows to evaluate")
    exported_padded = chosen.plan.remainder == "pad"
    with_ids = exported_padded or per_row
    # plan_rank gives every rank at least one row: a split smaller than the group is read
    # by its first n ranks, the others add rows of filler past position n (cut off below).
    readers = min(world_size, n)
    rows_per_rank = math.ceil(n / readers)
    if rank < readers:
        logits, labels, ids = _score_chunk(
            model, read_padded(manifest, split), split, device, rank, readers, with_ids
        )
    else:
        logits = torch.zeros((rows_per_rank, *_logit_shape(manifest)), dtype=torch.float32)
        labels = torch.zeros(rows_per_rank, dtype=torch.float32 if fitted_target(manifest) else torch.int64)
        ids = np.full(rows_per_rank, None, dtype=object) if with_ids else None
    if world_size > 1:
        logits = _all_gather_rows(logits, device, world_size)
        labels = _all_gather_rows(labels, device, world_size)
        if ids is not None:
            gathered: list[Any] = [None] * world_size
            dist.all_gather_object(gathered, ids)
            ids = np.concatenate(gathered)
    # Rank chunks in rank order are the split in manifest order; past n, the plan's repeats.
    logits, labels = logits[:n], labels[:n]
    ids = ids[:n] if ids is not None else None
    if exported_padded:
        _, first = np.unique(ids.astype(str), return_index=True)
        keep = np.sort(first)
        logits, labels, ids = logits[torch.from_numpy(keep)], labels[torch.from_numpy(keep)], ids[keep]
    result = split_metrics(logits, labels.numpy(), manifest)
    if per_row:
        target = fitted_target(manifest)
        if target is not None:
            values = target_values(logits, target)
            result["outputs"] = {str(i): float(v) for i, v in zip(ids, values, strict=True)}
        else:
            probabilities = class_probabilities(logits)
            result["outputs"] = {str(i): p.tolist() for i, p in zip(ids, probabilities, strict=True)}
    return result


def fitted_target(manifest: Manifest) -> dict[str, Any] | None:
    """A continuous label's standardisation (the transform's ``label.target``), or None."""
    doc = manifest.transform_document
    return None if doc is None else label_kinds.fitted_target(doc["label"])


def _logit_shape(manifest: Manifest) -> tuple[int, ...]:
    """One row's model output: one logit for two classes (or a regression's one value),
    one per class otherwise."""
    classes = len(manifest.label.classes)
    return () if classes == 2 or fitted_target(manifest) else (classes,)


def _score_chunk(
    model: torch.nn.Module,
    manifest: Manifest,
    split: str,
    device: torch.device,
    rank: int,
    world_size: int,
    with_ids: bool,
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray | None]:
    """This rank's chunk of ``split`` in plan order: fp32 logits and labels on the CPU, and the row ids."""
    data = RankBatches(
        manifest,
        split,
        rank,
        world_size=world_size,
        prefetch=EVALUATION_PREFETCH,
        pin_memory=device.type == "cuda",
        with_ids=with_ids,
    )
    logits_parts: list[torch.Tensor] = []
    label_parts: list[torch.Tensor] = []
    id_parts: list[np.ndarray] = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for batch in data:
                if with_ids:
                    id_parts.append(batch.ids)
                label_parts.append(batch.label)
                batch = batch.to(device, non_blocking=True)
                logits_parts.append(model(batch.numeric, batch.categorical, batch.text).float().cpu())
    finally:
        model.train(was_training)
    ids = np.concatenate(id_parts) if with_ids else None
    return torch.cat(logits_parts), torch.cat(label_parts), ids


def _all_gather_rows(tensor: torch.Tensor, device: torch.device, world_size: int) -> torch.Tensor:
    """Every rank's rows of ``tensor`` (equal shapes), concatenated in rank order, on the CPU.

    On ``device``: NCCL gathers CUDA tensors only, gloo CPU ones.
    """
    local = tensor.to(device)
    parts = [torch.empty_like(local) for _ in range(world_size)]
    dist.all_gather(parts, local)
    return torch.cat([part.cpu() for part in parts])


def split_metrics(logits: torch.Tensor, labels: np.ndarray, manifest: Manifest) -> dict[str, Any]:
    """Loss, accuracy, balanced accuracy, AUC and the training-majority baseline of scored
    rows; for a continuous label, the loss (MSE of the standardised target) and MAE, RMSE
    and R² on the label's scale against the train mean (``metrics.regression_metrics``)."""
    fitted = fitted_target(manifest)
    if fitted is not None:
        mean, std = fitted["mean"], fitted["std"]
        values = labels.astype(np.float64)
        standardised = torch.from_numpy((values - mean) / std).float()
        return {
            "loss": float(F.mse_loss(logits, standardised)),
            **regression_metrics(target_values(logits, fitted), values, mean),
            "rows": int(len(labels)),
        }
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
    return {
        "loss": float(loss),
        "accuracy": float((predicted == labels).mean()),
        "balanced_accuracy": balanced_accuracy(predicted, labels, len(classes)),
        "auc": auc,
        "rows": int(len(labels)),
        "baseline": majority_baseline(labels, classes, majority_class=majority),
    }
