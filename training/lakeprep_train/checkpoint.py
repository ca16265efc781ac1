"""Checkpoints of a training run, so a restarted run resumes where the last one stopped.

One checkpoint per run folder, replaced as the run goes: ``checkpoint.pt`` (torch.save
of the model, the optimizer, the gradient scaler, every rank's RNG state, the loader's
position and the run's progress) and ``checkpoint.json`` (the position and identity, for
people and tools; written after the ``.pt``, so it never names a checkpoint that is not
there). Both are written to a hidden partial file, flushed to disk and renamed into
place: a rank killed while writing leaves the previous checkpoint intact.

The position is ``(epoch, step)``: ``step`` batches of ``epoch`` are done (their
optimizer steps taken). The reader's plan is deterministic in the manifest, the seed,
the epoch and the world size (``lakeprep_train.dataset.plan_rank``), so a resumed
rank skips exactly the batches it had trained on and sees the rest of the epoch's rows
once. A checkpoint resumes only the run it belongs to: its identity (the manifest, the
training settings that change what a step does, and the world size for a position
inside an epoch) must match, or the trainer starts over and says why.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch

from lakeprep_train import storage

log = logging.getLogger("lakeprep_train")

CHECKPOINT = "checkpoint.pt"
POSITION = "checkpoint.json"
FORMAT = 1
# What a step does depends on these; a checkpoint written under other values cannot resume.
IDENTITY_KEYS = (
    "manifest",
    "run_id",
    "config_hash",
    "lr",
    "seed",
    "shuffle",
    "precision",
    "grad_accumulation",
)


@dataclass(frozen=True)
class Position:
    """``step`` batches of ``epoch`` are trained on; ``global_step`` optimizer steps in all."""

    epoch: int
    step: int
    global_step: int


def save(folder: str, state: Mapping[str, Any]) -> None:
    """Write ``state`` (with ``identity``, ``world_size`` and ``position``) as the folder's checkpoint."""
    os.makedirs(folder, exist_ok=True)
    storage.write_atomically(os.path.join(folder, CHECKPOINT), lambda f: torch.save(dict(state), f))
    summary = {
        "format": FORMAT,
        "identity": state["identity"],
        "world_size": state["world_size"],
        "position": asdict(state["position"]),
    }
    storage.write_atomically(
        os.path.join(folder, POSITION), lambda f: f.write(json.dumps(summary, indent=2).encode() + b"\n")
    )


def load(folder: str, *, identity: Mapping[str, Any], world_size: int, epochs: int) -> dict[str, Any] | None:
    """The folder's checkpoint if it can resume this run, else None (the reason logged)."""
    path = os.path.join(folder, CHECKPOINT)
    if not os.path.exists(path):
        return None
    try:
        # Our own file: it holds optimizer and RNG state (numpy/bytes), not only tensors.
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # a torn or foreign file: starting over is correct, and logged
        log.warning("checkpoint %s cannot be read (%s): starting from the beginning", path, err)
        return None
    if state.get("format") != FORMAT:
        log.warning("checkpoint %s has format %r, not %d: starting over", path, state.get("format"), FORMAT)
        return None
    differs = {
        k: (state["identity"].get(k), identity[k])
        for k in IDENTITY_KEYS
        if state["identity"].get(k) != identity[k]
    }
    if differs:
        log.warning(
            "checkpoint %s belongs to another run (%s): starting over",
            path,
            ", ".join(f"{k} {old!r} there, {new!r} now" for k, (old, new) in differs.items()),
        )
        return None
    position: Position = state["position"]
    if position.epoch > epochs or (position.epoch == epochs and position.step):
        log.warning(
            "checkpoint %s is at epoch %d, past the %d epochs asked for: starting over",
            path,
            position.epoch,
            epochs,
        )
        return None
    if state["world_size"] != world_size:
        if position.step:
            # Inside an epoch the position means "these rows of this rank's chunk", which
            # another world size plans differently: go back to the start of that epoch.
            log.warning(
                "checkpoint %s was written by %d ranks inside epoch %d, this run has %d: resuming "
                "at the start of epoch %d is not possible either (its model already saw part of "
                "the epoch), starting over",
                path,
                state["world_size"],
                position.epoch + 1,
                world_size,
                position.epoch + 1,
            )
            return None
        state["rng"] = None  # per-rank RNG states do not map onto other ranks
    return state
