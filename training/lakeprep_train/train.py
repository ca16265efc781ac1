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
import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from lakeprep_train import storage
from lakeprep_train.dataset import RankBatches, RankPlan, plan_rank
from lakeprep_train.evaluate import evaluate_split
from lakeprep_train.manifest import Manifest, ManifestError, load_manifest
from lakeprep_train.model import TabularMLP
from lakeprep_train.telemetry import CommTimer, StepTelemetry, summarize

log = logging.getLogger("lakeprep_train")

HIDDEN = (128, 64)
TRANSFORM_FILE = "transform.json"


class PreflightError(RuntimeError):
    """The run cannot start as configured; raised before any collective."""


@dataclass(frozen=True)
class DistributedEnv:
    """This process's place in the job, from torchrun's environment variables."""

    rank: int
    world_size: int
    local_rank: int

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> DistributedEnv:
        values = {}
        for key, default in (("RANK", 0), ("WORLD_SIZE", 1), ("LOCAL_RANK", 0)):
            raw = environ.get(key, str(default))
            try:
                values[key] = int(raw)
            except ValueError:
                raise PreflightError(f"environment variable {key}={raw!r} must be an integer") from None
        env = cls(values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"])
        if env.world_size < 1 or not 0 <= env.rank < env.world_size:
            raise PreflightError(f"RANK={env.rank} must be in [0, WORLD_SIZE={env.world_size})")
        return env


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
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error(f"--epochs {args.epochs} must be at least 1")
    return args


def preflight(manifest: Manifest, env: DistributedEnv) -> RankPlan:
    """Plan this rank's train rows for the run's world size; refuse a run that would hang.

    Any world size is accepted, not only the export's ``plan.world_size``, as long as
    every rank gets at least one train row.
    """
    try:
        plan = plan_rank(
            manifest.split("train"), env.world_size, env.rank, where=f"{manifest.location}: splits.train"
        )
    except ValueError as err:
        raise PreflightError(str(err)) from err
    manifest.split("validation")
    return plan


def resolve_device(choice: str, local_rank: int) -> torch.device:
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise PreflightError("--device cuda was asked for, but torch sees no CUDA device")
    if local_rank >= torch.cuda.device_count():
        raise PreflightError(
            f"LOCAL_RANK={local_rank} has no GPU: torch sees {torch.cuda.device_count()} CUDA device(s)"
        )
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def training_loss(
    logits: torch.Tensor, labels: torch.Tensor, class_weight: torch.Tensor | None
) -> torch.Tensor:
    """BCE on one logit for two classes (positive = classes[1]), cross-entropy otherwise."""
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


def _write_atomically(path: str, write: Any) -> None:
    partial = f"{path}.partial"
    write(partial)
    os.replace(partial, path)


def _write_json(path: str, value: Any) -> None:
    def write(target: str) -> None:
        with open(target, "w") as f:
            json.dump(value, f, indent=2, sort_keys=False)
            f.write("\n")

    _write_atomically(path, write)


def fit(
    manifest: Manifest,
    args: argparse.Namespace,
    env: DistributedEnv,
    device: torch.device,
    transform: bytes | None = None,
) -> None:
    distributed = env.world_size > 1
    torch.manual_seed(args.seed)
    model = TabularMLP(manifest.features, len(manifest.label.classes), hidden=HIDDEN).to(device)
    net: torch.nn.Module = model
    comm_timer: CommTimer | None = None
    if distributed:
        net = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
        comm_timer = CommTimer()
        net.register_comm_hook(state=None, hook=comm_timer.hook)
    optimizer = torch.optim.Adam(net.parameters(), lr=args.lr)
    class_weight = None
    if manifest.class_weights:
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
    )
    telemetry = StepTelemetry(device, rank=env.rank, world_size=env.world_size)
    train_losses: list[float] = []
    history: list[dict[str, Any]] = []
    validation: dict[str, Any] = {}
    train_seconds = 0.0
    rows_seen = 0.0

    for epoch in range(args.epochs):
        data.set_epoch(epoch)
        net.train()
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        rows = 0
        started = time.perf_counter()
        batches = iter(data)
        while True:
            before = time.perf_counter()
            batch = next(batches, None)
            fetched = time.perf_counter()
            if batch is None:
                break
            batch = batch.to(device, non_blocking=True)
            logits = net(batch.numeric, batch.categorical, batch.text)
            loss = training_loss(logits, batch.label, class_weight)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
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
        epoch_seconds = time.perf_counter() - started
        total_loss, total_rows = _all_reduce([float(loss_sum), float(rows)], device, distributed)
        (slowest,) = _all_reduce([epoch_seconds], device, distributed, op="max")
        train_seconds += slowest
        rows_seen += total_rows
        train_losses.append(total_loss / total_rows)
        if env.rank == 0:
            validation = evaluate_split(model, manifest, "validation", device)
            history.append({"epoch": epoch + 1, "train_loss": train_losses[-1], "validation": validation})
            log.info(
                "epoch %d/%d: train_loss %.4f on %d rows in %d steps/rank (%.0f samples/s); validation "
                "loss %.4f accuracy %.4f balanced accuracy %.4f auc %s (baseline: always class %s, the "
                "training majority: accuracy %.4f)",
                epoch + 1,
                args.epochs,
                train_losses[-1],
                total_rows,
                data.plan.steps_per_rank,
                total_rows / slowest if slowest else 0.0,
                validation["loss"],
                validation["accuracy"],
                validation["balanced_accuracy"],
                "n/a" if validation["auc"] is None else f"{validation['auc']:.4f}",
                validation["baseline"]["majority_class"],
                validation["baseline"]["accuracy"],
            )
        if distributed:
            dist.barrier()  # the other ranks wait here while rank 0 evaluates

    log.info("finished %d epochs: %d steps on this rank", args.epochs, len(telemetry.steps))
    summaries = [telemetry.summary()]
    if distributed:
        gathered: list[Any] = [None] * env.world_size
        dist.all_gather_object(gathered, summaries[0])
        summaries = gathered
    if env.rank != 0:
        return

    has_test = "test" in manifest.splits and manifest.splits["test"].rows > 0
    test = evaluate_split(model, manifest, "test", device) if has_test else None
    report = summarize(
        summaries,
        device=device.type,
        world_size=env.world_size,
        prefetch=args.prefetch,
        comm_measure="ddp comm hook: host time with an all-reduce in flight" if distributed else None,
    )
    metrics: dict[str, Any] = {
        "manifest": manifest.location,
        "dataset": manifest.dataset,
        "logical_date": manifest.logical_date,
        "run_id": manifest.run_id,
        "config_hash": manifest.config_hash,
        "epochs": args.epochs,
        "train_loss": train_losses,
        "validation": validation,
        **({"test": test} if test is not None else {}),
        "baseline": {"split": "validation", **validation["baseline"]},
        "history": history,
        "world_size": env.world_size,
        "device": device.type,
        "samples_per_second": rows_seen / train_seconds if train_seconds else 0.0,
        "train_seconds": train_seconds,
        "steps_per_rank": data.plan.steps_per_rank,
        "batch_size": data.plan.batch_size,
        # The read-time plan for this run's world size, and the export's for comparison.
        "plan": {**data.plan.to_json(), "export_world_size": manifest.split("train").plan.world_size},
        "lr": args.lr,
        "seed": args.seed,
    }
    os.makedirs(args.output, exist_ok=True)
    _write_json(os.path.join(args.output, "metrics.json"), metrics)
    _write_json(os.path.join(args.output, "telemetry.json"), report)
    checkpoint = {
        "state_dict": model.state_dict(),
        "features": [f.to_json() for f in manifest.features],
        "label": {"name": manifest.label.name, "classes": list(manifest.label.classes)},
        "hidden": list(HIDDEN),
        "manifest": manifest.location,
    }
    _write_atomically(os.path.join(args.output, "model.pt"), lambda target: torch.save(checkpoint, target))
    written = "metrics.json, model.pt, telemetry.json"
    if transform is not None:

        def write_transform(target: str) -> None:
            with open(target, "wb") as f:
                f.write(transform)

        _write_atomically(os.path.join(args.output, TRANSFORM_FILE), write_transform)
        written += f", {TRANSFORM_FILE}"
    log.info(
        "wrote %s to %s; run is %s: %s. %s",
        written,
        args.output,
        report["classification"],
        report["reason"],
        report["recommendation"],
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
        plan = preflight(manifest, env)
        device = resolve_device(args.device, env.local_rank)
        RankBatches(manifest, "train", env.rank, world_size=env.world_size).check_shards()
        transform = read_transform(manifest) if env.rank == 0 else None
    except (ManifestError, PreflightError, ValueError) as err:
        log.error("preflight failed: %s", err)
        return 2
    log.info(
        "training on %s: %s, world size %d (exported for %d), device %s; train: %d rows per rank in "
        "%d steps, %d dropped and %d padded per epoch (remainder %s)",
        manifest.location,
        ", ".join(f"{s.name} {s.rows} rows" for s in manifest.splits.values()),
        env.world_size,
        manifest.split("train").plan.world_size,
        device,
        plan.rows_per_rank,
        plan.steps_per_rank,
        plan.rows_dropped,
        plan.rows_padded,
        plan.remainder,
    )
    if env.world_size > 1:
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    try:
        fit(manifest, args, env, device, transform)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
