"""Train the demo model on a lakeprep manifest, on one process or many (torchrun).

    python -m lakeprep_train.train --manifest M --output DIR [--epochs 2] [--lr 1e-3]
    torchrun --nproc-per-node 2 -m lakeprep_train.train --manifest M --output DIR

RANK, WORLD_SIZE and LOCAL_RANK come from the environment, as torchrun sets them.
The export does not fix the number of processes: each rank plans its rows for the
WORLD_SIZE it finds (``lakeprep_train.dataset.plan_rank``), equal steps on every rank,
the remainder dropped or padded as the manifest says and counted in ``metrics.json``
(``plan``). A preflight runs before any process group exists: a train split with fewer
rows than ranks, or a shard whose footer disagrees with the manifest, is refused at
once, naming the manifest field, instead of hanging at the first collective. Rank 0
writes ``metrics.json``, ``model.pt`` and ``telemetry.json`` to the output folder, each
atomically, and copies the manifest's fitted transform there as
``transform.json`` (checked against the manifest's sha256 before training starts), so
the folder alone serves: ``python -m lakeprep_train.predict --model DIR --input RAW``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
import xxhash

from lakeprep_train import checkpoint, storage
from lakeprep_train.dataset import RankBatches
from lakeprep_train.evaluate import evaluate_split, fitted_target
from lakeprep_train.manifest import Manifest, ManifestError, load_manifest, with_transform_document
from lakeprep_train.model import HIDDEN, TabularMLP
from lakeprep_train.preflight import (
    DistributedEnv,
    PreflightError,
    check_memory,
    estimate_memory,
    plan_train,
    resolve_device,
)
from lakeprep_train.telemetry import CommTimer, StepTelemetry, summarize

log = logging.getLogger("lakeprep_train")

TRANSFORM_FILE = "transform.json"
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
DIGEST_MODULUS = 2**64


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m lakeprep_train.train", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--manifest", required=True, help="path or URI of the export's manifest.json")
    parser.add_argument("--output", required=True, help="folder for metrics.json, model.pt, telemetry.json")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--prefetch", type=int, default=4, help="batches read ahead per rank (0: none)")
    parser.add_argument("--no-shuffle", dest="shuffle", action="store_false", help="read in manifest order")
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="auto: bf16 autocast on a CUDA device with bf16, else fp16 with a gradient scaler; fp32 on CPU",
    )
    parser.add_argument(
        "--grad-accumulation", type=int, default=1, help="batches per optimizer step (1: every batch)"
    )
    parser.add_argument(
        "--checkpoint-dir",
        help="folder for the run's checkpoint; a restarted run resumes from it (default: no checkpoints)",
    )
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        help="optimizer steps between checkpoints, besides the one at each epoch end (0: epoch ends only)",
    )
    parser.add_argument(
        "--audit-rows",
        action="store_true",
        help="record a digest of the row ids each epoch trained on (metrics history rows_digest)",
    )
    args = parser.parse_args(argv)
    for name, least in (("epochs", 1), ("grad_accumulation", 1), ("checkpoint_every", 0), ("prefetch", 0)):
        if getattr(args, name) < least:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)} must be at least {least}")
    return args


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


def _all_reduce(values: list[float], device: torch.device, distributed: bool, op: str = "sum") -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    if distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return tensor.tolist()


def read_transform(manifest: Manifest) -> bytes | None:
    """The bytes of the manifest's fitted transform, checked against its sha256; None if it has none.

    Read before training so a wrong or missing transform fails the run at once, not
    after the epochs; written beside ``model.pt`` at the end. A manifest from before
    ``fit_transform`` has no transform: the model folder then cannot serve, said in a log line.
    """
    ref = manifest.transform
    if ref is None:
        log.info("%s has no transform: model folder will not hold %s", manifest.location, TRANSFORM_FILE)
        return None
    try:
        with storage.open_input(ref.location) as f:
            data = f.read()
    except (OSError, ValueError) as err:
        raise PreflightError(
            f"{manifest.location}: transform.uri {ref.uri!r}: cannot read {ref.location}: {err}"
        ) from err
    digest = hashlib.sha256(data).hexdigest()
    if digest != ref.sha256:
        raise PreflightError(
            f"{manifest.location}: transform.sha256 is {ref.sha256}, but {ref.location} has sha256 {digest}"
        )
    return data


def transform_tokenizer_files(manifest: Manifest, transform: bytes) -> dict[str, bytes]:
    """File name -> bytes of the tokenizer files beside the manifest's transform (checked
    against the sha256 the transform records); none for a transform without subword text."""
    from lakeprep_contracts.encode import tokenizer_files
    from lakeprep_train.transform import load_tokenizers

    doc = manifest.transform_document
    if doc is None:
        doc = load_tokenizers(json.loads(transform.decode("utf-8")), manifest.transform.location)
    return tokenizer_files(doc)


def _write_json(path: str, value: Any) -> None:
    storage.write_atomically(path, lambda f: f.write(json.dumps(value, indent=2).encode() + b"\n"))


@dataclass(frozen=True)
class Precision:
    """How steps compute: ``autocast`` dtype (None: fp32) and whether a gradient scaler runs."""

    name: str
    autocast: torch.dtype | None
    scaler: bool

    def context(self, device: torch.device) -> Any:
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=self.autocast)


def resolve_precision(choice: str, device: torch.device) -> Precision:
    """``auto``: bf16 on CUDA devices that have it, fp16 with a scaler on older ones, fp32 on CPU."""
    bf16_ok = device.type != "cuda" or torch.cuda.is_bf16_supported()
    if choice == "auto":
        if device.type != "cuda":
            return Precision("fp32", None, False)
        choice = "bf16" if bf16_ok else "fp16"
    if choice == "bf16":
        if not bf16_ok:
            raise PreflightError(
                f"--precision bf16: {torch.cuda.get_device_name(device)} has no bf16 support; "
                "use fp16 (with a gradient scaler) or auto"
            )
        return Precision("bf16", torch.bfloat16, False)
    if choice == "fp16":
        return Precision("fp16", torch.float16, True)
    return Precision("fp32", None, False)


def _row_digest(ids: Any) -> int:
    """Order-independent digest of row ids: the sum of their xxh64, modulo 2**64."""
    return sum(xxhash.xxh64_intdigest(str(i).encode()) for i in ids) % DIGEST_MODULUS


def _gather(value: Any, world_size: int, distributed: bool) -> list[Any]:
    if not distributed:
        return [value]
    gathered: list[Any] = [None] * world_size
    dist.all_gather_object(gathered, value)
    return gathered


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


def run_identity(manifest: Manifest, args: argparse.Namespace, precision: Precision) -> dict[str, Any]:
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
    collector's full collections walked all of those objects again: over the 9 M rows
    (35,000 batches) of the 16 M-row benchmark's export, 70 ms of a 1.1 s pass (the
    benchmark's readers run frozen the same way: benchmarks/input_pipeline.py).
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


def fit(
    manifest: Manifest,
    args: argparse.Namespace,
    env: DistributedEnv,
    device: torch.device,
    transform: bytes | None = None,
    precision: Precision | None = None,
    *,
    preflight: dict[str, Any] | None = None,
) -> None:
    distributed = env.world_size > 1
    precision = precision or resolve_precision(args.precision, device)
    torch.manual_seed(args.seed)
    target = fitted_target(manifest)  # a continuous label's standardisation, or None
    model = TabularMLP(
        manifest.features, len(manifest.label.classes), hidden=HIDDEN, regression=target is not None
    ).to(device)
    net: torch.nn.Module = model
    comm_timer: CommTimer | None = None
    if distributed:
        net = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
        comm_timer = CommTimer()
        net.register_comm_hook(state=None, hook=comm_timer.hook)
    optimizer = torch.optim.Adam(net.parameters(), lr=args.lr)
    scaler = torch.amp.GradScaler(device.type) if precision.scaler else None
    class_weight = None
    if manifest.class_weights and target is None:  # a regression's bins are strata, not classes
        class_weight = torch.tensor(
            [manifest.class_weights[str(c)] for c in manifest.label.classes],
            dtype=torch.float32,
            device=device,
        )
    data = RankBatches(
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
    steps_per_epoch = data.plan.steps_per_rank
    telemetry = StepTelemetry(device, rank=env.rank, world_size=env.world_size)
    identity = run_identity(manifest, args, precision)
    progress = Progress()
    position = checkpoint.Position(0, 0, 0)
    resumed = None
    if args.checkpoint_dir:
        state = checkpoint.load(
            args.checkpoint_dir, identity=identity, world_size=env.world_size, epochs=args.epochs
        )
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            if scaler is not None and state["scaler"] is not None:
                scaler.load_state_dict(state["scaler"])
            if state["rng"] is not None:
                torch.set_rng_state(state["rng"][env.rank])
            position, progress = state["position"], state["progress"]
            if env.rank != 0:  # rank 0 alone carries the epoch's sums so far
                progress.epoch_loss = progress.epoch_rows = 0.0
                progress.epoch_digest = 0
            resumed = {**asdict(position), "from": os.path.join(args.checkpoint_dir, checkpoint.CHECKPOINT)}
            log.info(
                "resuming from %s: epoch %d, %d of %d steps done (%d optimizer steps)",
                resumed["from"],
                position.epoch + 1,
                position.step,
                steps_per_epoch,
                position.global_step,
            )

    def save_checkpoint(at: checkpoint.Position, loss_sum: float, rows: float, digest: int) -> None:
        """Collective: every rank calls it at the same step; rank 0 writes."""
        (total_loss, total_rows) = _all_reduce([loss_sum, rows], device, distributed)
        rngs = _gather(torch.get_rng_state(), env.world_size, distributed)
        digests = _gather(digest, env.world_size, distributed)
        if env.rank != 0:
            return
        saved = dataclasses.replace(
            progress,
            epoch_loss=total_loss,
            epoch_rows=total_rows,
            epoch_digest=sum(digests) % DIGEST_MODULUS,
        )
        checkpoint.save(
            args.checkpoint_dir,
            {
                "format": checkpoint.FORMAT,
                "identity": identity,
                "world_size": env.world_size,
                "position": at,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scaler": scaler.state_dict() if scaler is not None else None,
                "rng": rngs,
                "progress": saved,
            },
        )
        log.info("checkpoint: epoch %d, step %d/%d", at.epoch + 1, at.step, steps_per_epoch)

    with frozen_startup_objects():
        global_step = position.global_step
        upcoming: Any = None  # the next epoch's batches, already being read
        for epoch in range(position.epoch, args.epochs):
            start_step = position.step if epoch == position.epoch else 0
            if upcoming is None:
                data.set_epoch(epoch, start_step=start_step)
                upcoming = iter(data)
            batches, upcoming = upcoming, None
            net.train()
            carried = start_step > 0 and env.rank == 0
            loss_sum = torch.tensor(
                progress.epoch_loss if carried else 0.0, dtype=torch.float64, device=device
            )
            rows = progress.epoch_rows if carried else 0.0
            digest = progress.epoch_digest if carried else 0
            step = start_step
            started = time.perf_counter()
            while True:
                before = time.perf_counter()
                batch = next(batches, None)
                fetched = time.perf_counter()
                if batch is None:
                    break
                if args.audit_rows:
                    digest = (digest + _row_digest(batch.ids)) % DIGEST_MODULUS
                batch = batch.to(device, non_blocking=True)
                group_start = (step // args.grad_accumulation) * args.grad_accumulation
                group = min(args.grad_accumulation, steps_per_epoch - group_start)
                step += 1
                last_of_group = step - group_start == group
                # Between optimizer steps DDP must not all-reduce: no_sync keeps the gradients local.
                sync = contextlib.nullcontext() if last_of_group or not distributed else net.no_sync()
                with sync:
                    with precision.context(device):
                        logits = net(batch.numeric, batch.categorical, batch.text)
                        loss = training_loss(logits.float(), batch.label, class_weight, target)
                    scaled = loss / group
                    (scaler.scale(scaled) if scaler is not None else scaled).backward()
                if last_of_group:
                    if scaler is not None:
                        scaler.step(optimizer)
                        scaler.update()
                    else:
                        optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    global_step += 1
                if device.type == "cuda":
                    torch.cuda.synchronize(device)  # kernels are async: read the clock after they finish
                telemetry.record(
                    data_s=fetched - before,
                    compute_s=time.perf_counter() - fetched,
                    comm_s=comm_timer.take() if comm_timer else 0.0,
                    rows=len(batch),
                )
                loss_sum += loss.detach().double() * len(batch)
                rows += len(batch)
                if (
                    args.checkpoint_dir
                    and args.checkpoint_every
                    and last_of_group
                    and global_step % args.checkpoint_every == 0
                    and step < steps_per_epoch
                ):
                    save_checkpoint(
                        checkpoint.Position(epoch, step, global_step), float(loss_sum), rows, digest
                    )
            epoch_seconds = time.perf_counter() - started
            if epoch + 1 < args.epochs:
                # Start reading the next epoch now: its first batches load while the ranks
                # evaluate and rank 0 checkpoints, instead of stalling the epoch's first step.
                data.set_epoch(epoch + 1)
                upcoming = iter(data)
            total_loss, total_rows = _all_reduce([float(loss_sum), float(rows)], device, distributed)
            (slowest,) = _all_reduce([epoch_seconds], device, distributed, op="max")
            epoch_digest = sum(_gather(digest, env.world_size, distributed)) % DIGEST_MODULUS
            progress.train_seconds += slowest
            progress.rows_seen += total_rows
            progress.train_losses.append(total_loss / total_rows)
            # Every rank evaluates its share at once and holds the same metrics after: no
            # rank idles in a collective for a whole validation pass (lakeprep_train.evaluate).
            evaluating = time.perf_counter()
            progress.validation = evaluate_split(
                model, manifest, "validation", device, rank=env.rank, world_size=env.world_size
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
                if args.audit_rows:
                    record["rows_digest"] = f"{epoch_digest:016x}"
                progress.history.append(record)
                validation = progress.validation
                if target is not None:
                    log.info(
                        "epoch %d/%d: train_loss %.4f on %d rows in %d steps/rank (%.0f samples/s); "
                        "validation loss %.4f MAE %.4f RMSE %.4f R² %s (baseline: the train mean %.4f, "
                        "MAE %.4f RMSE %.4f)",
                        epoch + 1,
                        args.epochs,
                        progress.train_losses[-1],
                        total_rows,
                        steps_per_epoch,
                        total_rows / slowest if slowest else 0.0,
                        validation["loss"],
                        validation["mae"],
                        validation["rmse"],
                        "n/a" if validation["r2"] is None else f"{validation['r2']:.4f}",
                        validation["baseline"]["mean"],
                        validation["baseline"]["mae"],
                        validation["baseline"]["rmse"],
                    )
                else:
                    log.info(
                        "epoch %d/%d: train_loss %.4f on %d rows in %d steps/rank (%.0f samples/s); "
                        "validation loss %.4f accuracy %.4f balanced accuracy %.4f auc %s (baseline: always "
                        "class %s, the training majority: accuracy %.4f)",
                        epoch + 1,
                        args.epochs,
                        progress.train_losses[-1],
                        total_rows,
                        steps_per_epoch,
                        total_rows / slowest if slowest else 0.0,
                        validation["loss"],
                        validation["accuracy"],
                        validation["balanced_accuracy"],
                        "n/a" if validation["auc"] is None else f"{validation['auc']:.4f}",
                        validation["baseline"]["majority_class"],
                        validation["baseline"]["accuracy"],
                    )
            if args.checkpoint_dir:
                progress.epoch_loss = progress.epoch_rows = 0.0
                progress.epoch_digest = 0
                save_checkpoint(checkpoint.Position(epoch + 1, 0, global_step), 0.0, 0.0, 0)
            if distributed:
                dist.barrier()  # the other ranks wait here while rank 0 writes the checkpoint

    summary = telemetry.summary()
    utilisation = summary["accelerator_utilisation"]
    log.info(
        "finished %d epochs: %d steps on this rank, accelerator utilisation %s (compute / step time)",
        args.epochs,
        len(telemetry.steps),
        "n/a" if utilisation is None else f"{utilisation:.0%}",
    )
    summaries = _gather(summary, env.world_size, distributed)
    has_test = "test" in manifest.splits and manifest.splits["test"].rows > 0
    test = (
        evaluate_split(model, manifest, "test", device, rank=env.rank, world_size=env.world_size)
        if has_test
        else None
    )
    if env.rank != 0:
        return

    report = summarize(
        summaries,
        device=device.type,
        world_size=env.world_size,
        prefetch=args.prefetch,
        comm_measure="ddp comm hook: host time with an all-reduce in flight" if distributed else None,
    )
    validation = progress.validation
    metrics: dict[str, Any] = {
        "manifest": manifest.location,
        "dataset": manifest.dataset,
        "logical_date": manifest.logical_date,
        "run_id": manifest.run_id,
        "config_hash": manifest.config_hash,
        "epochs": args.epochs,
        "train_loss": progress.train_losses,
        "validation": validation,
        **({"test": test} if test is not None else {}),
        "baseline": {"split": "validation", **validation["baseline"]},
        "history": progress.history,
        "world_size": env.world_size,
        "device": device.type,
        "precision": precision.name,
        "grad_accumulation": args.grad_accumulation,
        "optimizer_steps": global_step,
        "samples_per_second": progress.rows_seen / progress.train_seconds if progress.train_seconds else 0.0,
        "train_seconds": progress.train_seconds,
        "steps_per_rank": steps_per_epoch,
        "batch_size": data.plan.batch_size,
        # The read-time plan for this run's world size, and the export's for comparison.
        "plan": {**data.plan.to_json(), "export_world_size": manifest.split("train").plan.world_size},
        # torchrun counts its restarts of the worker group; the position the run resumed at.
        "restarts": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        "resumed_from": resumed,
        "preflight": preflight,
        "lr": args.lr,
        "seed": args.seed,
    }
    os.makedirs(args.output, exist_ok=True)
    _write_json(os.path.join(args.output, "metrics.json"), metrics)
    _write_json(os.path.join(args.output, "telemetry.json"), report)
    saved_model = {
        "state_dict": model.state_dict(),
        "features": [f.to_json() for f in manifest.features],
        "label": {
            "name": manifest.label.name,
            "classes": list(manifest.label.classes),
            **({"target": dict(target)} if target is not None else {}),
        },
        "hidden": list(HIDDEN),
        "manifest": manifest.location,
    }
    storage.write_atomically(os.path.join(args.output, "model.pt"), lambda f: torch.save(saved_model, f))
    written = "metrics.json, model.pt, telemetry.json"
    if transform is not None:
        storage.write_atomically(os.path.join(args.output, TRANSFORM_FILE), lambda f: f.write(transform))
        written += f", {TRANSFORM_FILE}"
        # The tokenizer files the transform names, beside it: the model folder alone serves.
        for name, data in transform_tokenizer_files(manifest, transform).items():
            storage.write_atomically(os.path.join(args.output, name), lambda f, data=data: f.write(data))
            written += f", {name}"
    log.info(
        "wrote %s to %s; run is %s: %s. %s",
        written,
        args.output,
        report["classification"],
        report["reason"],
        report["recommendation"],
    )


def init_process_group(device: torch.device) -> None:
    """NCCL on CUDA, gloo on CPU, over a store namespaced by torchrun's restart count.

    torchrun's agent keeps one store for all restarts of the worker group; without a
    namespace the restarted ranks can read the killed ranks' addresses and fail to
    connect (gloo: "connectFullMesh failed ... Connection refused").
    """
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store, rank, world_size = next(dist.rendezvous("env://"))
    dist.init_process_group(
        backend="nccl" if device.type == "cuda" else "gloo",
        store=dist.PrefixStore(f"lakeprep/restart-{restart}", store),
        rank=rank,
        world_size=world_size,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        env = DistributedEnv.from_environ(os.environ)
    except PreflightError as err:
        logging.basicConfig(level=logging.INFO)
        log.error("preflight failed: %s", err)
        return 2
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s %(levelname)s [rank {env.rank}/{env.world_size}] %(name)s: %(message)s",
    )
    try:
        manifest = load_manifest(args.manifest)
        plan = plan_train(manifest, env)
        device = resolve_device(args.device, env)
        precision = resolve_precision(args.precision, device)
        # Every rank: prepared shards are encoded with the transform on the rank that reads them.
        transform = read_transform(manifest)
        if manifest.shard_columns == "prepared":
            manifest = with_transform_document(manifest, transform)
        RankBatches(manifest, "train", env.rank, world_size=env.world_size).check_shards()
        model = TabularMLP(manifest.features, len(manifest.label.classes), hidden=HIDDEN)
        memory = check_memory(
            estimate_memory(manifest, model, plan.batch_size, prefetch=args.prefetch), device, env
        )
    except (ManifestError, PreflightError, ValueError) as err:
        log.error("preflight failed: %s", err)
        return 2
    log.info(
        "training on %s: %s, world size %d (exported for %d), device %s, precision %s, memory "
        "estimate %.1f MiB of %.1f MiB free; train: %d rows per rank in %d steps, %d dropped and %d "
        "padded per epoch (remainder %s)",
        manifest.location,
        ", ".join(f"{s.name} {s.rows} rows" for s in manifest.splits.values()),
        env.world_size,
        manifest.split("train").plan.world_size,
        device,
        precision.name,
        memory["estimate"]["total_bytes"] / 2**20,
        memory["free_bytes"] / 2**20,
        plan.rows_per_rank,
        plan.steps_per_rank,
        plan.rows_dropped,
        plan.rows_padded,
        plan.remainder,
    )
    if env.world_size > 1:
        init_process_group(device)
    try:
        fit(manifest, args, env, device, transform, precision, preflight=memory)
        if dist.is_initialized():
            # Every rank past its last collective before any tears the group down: rank 0
            # writes the run's files after the last step, and a rank that destroyed gloo's
            # group meanwhile could abort at exit ("terminate called without an active
            # exception", SIGABRT, failing the whole torchrun). Not after an error: the
            # others would wait here until torchrun stops them.
            dist.barrier()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
