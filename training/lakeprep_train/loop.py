"""One rank's training loop: epochs of steps, and the checkpoints it resumes from.

Each step reads a batch, runs forward and backward under the run's precision, and steps
the optimizer every ``grad_accumulation`` batches (DDP syncs gradients only then); the
step's time is split into data, compute and communication for the telemetry. Each epoch
ends with every rank scoring its share of the validation split, and a checkpoint when
the run keeps them; a restarted run resumes from the last one at the same step.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import logging
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
import xxhash

from lakeprep_train import checkpoint
from lakeprep_train.dataset import Batch, RankBatches
from lakeprep_train.evaluate import evaluate_split, fitted_target
from lakeprep_train.manifest import Manifest
from lakeprep_train.model import HIDDEN, TabularMLP
from lakeprep_train.precision import Precision
from lakeprep_train.preflight import DistributedEnv
from lakeprep_train.telemetry import CommTimer, StepTelemetry

log = logging.getLogger("lakeprep_train")

DIGEST_MODULUS = 2**64


def training_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    class_weight: torch.Tensor | None,
    target: Mapping[str, Any] | None = None,
) -> torch.Tensor:
    """BCE on one logit for two classes (positive = classes[1]), cross-entropy otherwise;
    for a continuous label (``target``: the transform's ``label.target``), the mean squared
    error of the standardised value, ``(value - mean) / std``."""
    if target is not None:
        return F.mse_loss(logits, (labels - target["mean"]) / target["std"])
    if logits.dim() == 1:
        weight = class_weight[labels] if class_weight is not None else None
        return F.binary_cross_entropy_with_logits(logits, labels.float(), weight=weight)
    return F.cross_entropy(logits, labels, weight=class_weight)


def all_reduce(values: list[float], device: torch.device, distributed: bool, op: str = "sum") -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    if distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return tensor.tolist()


def gather(value: Any, world_size: int, distributed: bool) -> list[Any]:
    if not distributed:
        return [value]
    gathered: list[Any] = [None] * world_size
    dist.all_gather_object(gathered, value)
    return gathered


def _row_digest(ids: Any) -> int:
    """Order-independent digest of row ids: the sum of their xxh64, modulo 2**64."""
    return sum(xxhash.xxh64_intdigest(str(i).encode()) for i in ids) % DIGEST_MODULUS


@dataclass
class Progress:
    """What a run has done so far; saved in each checkpoint, restored on resume.

    ``epoch_loss``, ``epoch_rows`` and ``epoch_digest`` are the current epoch's sums over
    all ranks up to the checkpoint's step (rank 0 carries them after a resume).
    """

    train_losses: list[float] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    validation: dict[str, Any] = field(default_factory=dict)
    train_seconds: float = 0.0
    rows_seen: float = 0.0
    epoch_loss: float = 0.0
    epoch_rows: float = 0.0
    epoch_digest: int = 0


@dataclass
class EpochSums:
    """One rank's running sums over an epoch's steps."""

    loss: torch.Tensor
    rows: float
    digest: int


def run_identity(manifest: Manifest, args: argparse.Namespace, precision: Precision) -> dict[str, Any]:
    """What a checkpoint must match to be resumed from (lakeprep_train.checkpoint)."""
    return {
        "manifest": manifest.location,
        "run_id": manifest.run_id,
        "config_hash": manifest.config_hash,
        "lr": args.lr,
        "seed": args.seed,
        "shuffle": args.shuffle,
        "precision": precision.name,
        "grad_accumulation": args.grad_accumulation,
    }


@contextlib.contextmanager
def frozen_startup_objects():
    """The epochs, with what start-up allocated moved out of the cyclic collector's way.

    Start-up (torch, the model, the optimizer, the manifest) leaves a few hundred thousand
    objects that live for the whole run, and every batch allocates tensors, so the
    collector's full collections walked all of those objects again on every pass (the
    input-pipeline benchmark's readers run frozen the same way: benchmarks/input_pipeline.py).
    Collected first (nothing unreachable is frozen), frozen for the epochs, thawed after,
    as Airflow's DAG processor does for its parse children. A host process that froze
    objects itself keeps its own arrangement: nothing is frozen or thawed here.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class Loop:
    """One rank's model, optimizer, data and progress through the run's epochs."""

    def __init__(
        self,
        manifest: Manifest,
        args: argparse.Namespace,
        env: DistributedEnv,
        device: torch.device,
        precision: Precision,
    ) -> None:
        self.manifest, self.args, self.env = manifest, args, env
        self.device, self.precision = device, precision
        self.distributed = env.world_size > 1
        torch.manual_seed(args.seed)
        self.target = fitted_target(manifest)  # a continuous label's standardisation, or None
        self.model = TabularMLP(
            manifest.features, len(manifest.label.classes), hidden=HIDDEN, regression=self.target is not None
        ).to(device)
        self.net: torch.nn.Module = self.model
        self.comm_timer: CommTimer | None = None
        if self.distributed:
            self.net = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[device.index] if device.type == "cuda" else None
            )
            self.comm_timer = CommTimer()
            self.net.register_comm_hook(state=None, hook=self.comm_timer.hook)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=args.lr)
        self.scaler = torch.amp.GradScaler(device.type) if precision.scaler else None
        self.class_weight = None
        if manifest.class_weights and self.target is None:  # a regression's bins are strata, not classes
            self.class_weight = torch.tensor(
                [manifest.class_weights[str(c)] for c in manifest.label.classes],
                dtype=torch.float32,
                device=device,
            )
        self.data = RankBatches(
            manifest,
            "train",
            env.rank,
            world_size=env.world_size,
            seed=args.seed,
            shuffle=args.shuffle,
            prefetch=args.prefetch,
            pin_memory=device.type == "cuda",
            with_ids=args.audit_rows,
        )
        self.steps_per_epoch = self.data.plan.steps_per_rank
        self.telemetry = StepTelemetry(device, rank=env.rank, world_size=env.world_size)
        self.identity = run_identity(manifest, args, precision)
        self.progress = Progress()
        self.position = checkpoint.Position(0, 0, 0)
        self.global_step = 0
        self.resumed: dict[str, Any] | None = None

    # ---- checkpoints

    def resume(self) -> None:
        """Continue from the run's checkpoint, if it keeps them and one matches this run."""
        args, env = self.args, self.env
        if not args.checkpoint_dir:
            return
        state = checkpoint.load(
            args.checkpoint_dir, identity=self.identity, world_size=env.world_size, epochs=args.epochs
        )
        if state is None:
            return
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scaler is not None and state["scaler"] is not None:
            self.scaler.load_state_dict(state["scaler"])
        if state["rng"] is not None:
            torch.set_rng_state(state["rng"][env.rank])
        self.position, self.progress = state["position"], state["progress"]
        if env.rank != 0:  # rank 0 alone carries the epoch's sums so far
            self.progress.epoch_loss = self.progress.epoch_rows = 0.0
            self.progress.epoch_digest = 0
        self.resumed = {
            **asdict(self.position),
            "from": os.path.join(args.checkpoint_dir, checkpoint.CHECKPOINT),
        }
        log.info(
            "resuming from %s: epoch %d, %d of %d steps done (%d optimizer steps)",
            self.resumed["from"],
            self.position.epoch + 1,
            self.position.step,
            self.steps_per_epoch,
            self.position.global_step,
        )

    def save_checkpoint(self, at: checkpoint.Position, loss_sum: float, rows: float, digest: int) -> None:
        """Collective: every rank calls it at the same step; rank 0 writes."""
        env = self.env
        (total_loss, total_rows) = all_reduce([loss_sum, rows], self.device, self.distributed)
        rngs = gather(torch.get_rng_state(), env.world_size, self.distributed)
        digests = gather(digest, env.world_size, self.distributed)
        if env.rank != 0:
            return
        saved = dataclasses.replace(
            self.progress,
            epoch_loss=total_loss,
            epoch_rows=total_rows,
            epoch_digest=sum(digests) % DIGEST_MODULUS,
        )
        checkpoint.save(
            self.args.checkpoint_dir,
            {
                "format": checkpoint.FORMAT,
                "identity": self.identity,
                "world_size": env.world_size,
                "position": at,
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler is not None else None,
                "rng": rngs,
                "progress": saved,
            },
        )
        log.info("checkpoint: epoch %d, step %d/%d", at.epoch + 1, at.step, self.steps_per_epoch)

    # ---- epochs

    def run(self) -> None:
        """The epochs from the resumed position to ``args.epochs``."""
        self.global_step = self.position.global_step
        upcoming: Iterator[Batch] | None = None  # the next epoch's batches, already being read
        for epoch in range(self.position.epoch, self.args.epochs):
            start_step = self.position.step if epoch == self.position.epoch else 0
            if upcoming is None:
                self.data.set_epoch(epoch, start_step=start_step)
                upcoming = iter(self.data)
            batches, upcoming = upcoming, None
            started = time.perf_counter()
            sums = self._train_epoch(epoch, batches, start_step)
            epoch_seconds = time.perf_counter() - started
            if epoch + 1 < self.args.epochs:
                # Start reading the next epoch now: its first batches load while the ranks
                # evaluate and rank 0 checkpoints, instead of stalling the epoch's first step.
                self.data.set_epoch(epoch + 1)
                upcoming = iter(self.data)
            self._end_epoch(epoch, sums, epoch_seconds)

    def _train_epoch(self, epoch: int, batches: Iterator[Batch], start_step: int) -> EpochSums:
        self.net.train()
        progress, args = self.progress, self.args
        carried = start_step > 0 and self.env.rank == 0
        sums = EpochSums(
            torch.tensor(progress.epoch_loss if carried else 0.0, dtype=torch.float64, device=self.device),
            progress.epoch_rows if carried else 0.0,
            progress.epoch_digest if carried else 0,
        )
        step = start_step
        while True:
            before = time.perf_counter()
            batch = next(batches, None)
            fetched = time.perf_counter()
            if batch is None:
                return sums
            if args.audit_rows:
                sums.digest = (sums.digest + _row_digest(batch.ids)) % DIGEST_MODULUS
            batch = batch.to(self.device, non_blocking=True)
            loss, last_of_group = self._step(batch, step)
            step += 1
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # kernels are async: read the clock after they finish
            self.telemetry.record(
                data_s=fetched - before,
                compute_s=time.perf_counter() - fetched,
                comm_s=self.comm_timer.take() if self.comm_timer else 0.0,
                rows=len(batch),
            )
            sums.loss += loss.detach().double() * len(batch)
            sums.rows += len(batch)
            if (
                args.checkpoint_dir
                and args.checkpoint_every
                and last_of_group
                and self.global_step % args.checkpoint_every == 0
                and step < self.steps_per_epoch
            ):
                self.save_checkpoint(
                    checkpoint.Position(epoch, step, self.global_step),
                    float(sums.loss),
                    sums.rows,
                    sums.digest,
                )

    def _step(self, batch: Batch, step: int) -> tuple[torch.Tensor, bool]:
        """Forward and backward of the batch at ``step`` (0-based); the optimizer steps at the
        last batch of its accumulation group. The loss, and whether it stepped."""
        accumulation = self.args.grad_accumulation
        group_start = (step // accumulation) * accumulation
        group = min(accumulation, self.steps_per_epoch - group_start)
        last_of_group = step + 1 - group_start == group
        # Between optimizer steps DDP must not all-reduce: no_sync keeps the gradients local.
        sync = contextlib.nullcontext() if last_of_group or not self.distributed else self.net.no_sync()
        with sync:
            with self.precision.context(self.device):
                logits = self.net(batch.numeric, batch.categorical, batch.text)
                loss = training_loss(logits.float(), batch.label, self.class_weight, self.target)
            scaled = loss / group
            (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
        if last_of_group:
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.global_step += 1
        return loss, last_of_group

    def _end_epoch(self, epoch: int, sums: EpochSums, epoch_seconds: float) -> None:
        env, progress, device = self.env, self.progress, self.device
        total_loss, total_rows = all_reduce([float(sums.loss), float(sums.rows)], device, self.distributed)
        (slowest,) = all_reduce([epoch_seconds], device, self.distributed, op="max")
        epoch_digest = sum(gather(sums.digest, env.world_size, self.distributed)) % DIGEST_MODULUS
        progress.train_seconds += slowest
        progress.rows_seen += total_rows
        progress.train_losses.append(total_loss / total_rows)
        # Every rank evaluates its share at once and holds the same metrics after: no
        # rank idles in a collective for a whole validation pass (lakeprep_train.evaluate).
        evaluating = time.perf_counter()
        progress.validation = evaluate_split(
            self.model, self.manifest, "validation", device, rank=env.rank, world_size=env.world_size
        )
        log.info(
            "validation of epoch %d scored with the other ranks in %.2f s on this rank",
            epoch + 1,
            time.perf_counter() - evaluating,
        )
        if env.rank == 0:
            record: dict[str, Any] = {
                "epoch": epoch + 1,
                "train_loss": progress.train_losses[-1],
                "rows": int(total_rows),
                "validation": progress.validation,
            }
            if self.args.audit_rows:
                record["rows_digest"] = f"{epoch_digest:016x}"
            progress.history.append(record)
            self._log_epoch(epoch, total_rows, slowest)
        if self.args.checkpoint_dir:
            progress.epoch_loss = progress.epoch_rows = 0.0
            progress.epoch_digest = 0
            self.save_checkpoint(checkpoint.Position(epoch + 1, 0, self.global_step), 0.0, 0.0, 0)
        if self.distributed:
            dist.barrier()  # the other ranks wait here while rank 0 writes the checkpoint

    def _log_epoch(self, epoch: int, total_rows: float, slowest: float) -> None:
        validation = self.progress.validation
        trained = (
            epoch + 1,
            self.args.epochs,
            self.progress.train_losses[-1],
            total_rows,
            self.steps_per_epoch,
            total_rows / slowest if slowest else 0.0,
            validation["loss"],
        )
        if self.target is not None:
            log.info(
                "epoch %d/%d: train_loss %.4f on %d rows in %d steps/rank (%.0f samples/s); "
                "validation loss %.4f MAE %.4f RMSE %.4f R² %s (baseline: the train mean %.4f, "
                "MAE %.4f RMSE %.4f)",
                *trained,
                validation["mae"],
                validation["rmse"],
                "n/a" if validation["r2"] is None else f"{validation['r2']:.4f}",
                validation["baseline"]["mean"],
                validation["baseline"]["mae"],
                validation["baseline"]["rmse"],
            )
            return
        log.info(
            "epoch %d/%d: train_loss %.4f on %d rows in %d steps/rank (%.0f samples/s); "
            "validation loss %.4f accuracy %.4f balanced accuracy %.4f auc %s (baseline: always "
            "class %s, the training majority: accuracy %.4f)",
            *trained,
            validation["accuracy"],
            validation["balanced_accuracy"],
            "n/a" if validation["auc"] is None else f"{validation['auc']:.4f}",
            validation["baseline"]["majority_class"],
            validation["baseline"]["accuracy"],
        )
