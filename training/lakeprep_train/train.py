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
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from lakeprep_contracts import knobs
from lakeprep_train import model_folder
from lakeprep_train.dataset import RankBatches
from lakeprep_train.evaluate import evaluate_split
from lakeprep_train.loop import Loop, frozen_startup_objects, gather
from lakeprep_train.manifest import Manifest, ManifestError, load_manifest, with_transform_document
from lakeprep_train.model import HIDDEN, TabularMLP
from lakeprep_train.precision import PRECISIONS, Precision, resolve_precision
from lakeprep_train.preflight import (
    DistributedEnv,
    PreflightError,
    check_memory,
    estimate_memory,
    plan_train,
    resolve_device,
)
from lakeprep_train.telemetry import summarize

log = logging.getLogger("lakeprep_train")

TRAINING = knobs.defaults("training")  # the spec's defaults are the command line's


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m lakeprep_train.train", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--manifest", required=True, help="path or URI of the export's manifest.json")
    parser.add_argument("--output", required=True, help="folder for metrics.json, model.pt, telemetry.json")
    parser.add_argument("--epochs", type=int, default=TRAINING["epochs"])
    parser.add_argument("--lr", type=float, default=TRAINING["learning_rate"])
    parser.add_argument("--seed", type=int, default=TRAINING["seed"])
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
    """Train on every rank; rank 0 then scores the test split's share with the others and
    writes the model folder (lakeprep_train.model_folder)."""
    loop = Loop(manifest, args, env, device, precision or resolve_precision(args.precision, device))
    loop.resume()
    with frozen_startup_objects():
        loop.run()
    summary = loop.telemetry.summary()
    utilisation = summary["accelerator_utilisation"]
    log.info(
        "finished %d epochs: %d steps on this rank, accelerator utilisation %s (compute / step time)",
        args.epochs,
        len(loop.telemetry.steps),
        "n/a" if utilisation is None else f"{utilisation:.0%}",
    )
    summaries = gather(summary, env.world_size, loop.distributed)
    has_test = "test" in manifest.splits and manifest.splits["test"].rows > 0
    test = (
        evaluate_split(loop.model, manifest, "test", device, rank=env.rank, world_size=env.world_size)
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
        comm_measure="ddp comm hook: host time with an all-reduce in flight" if loop.distributed else None,
    )
    written = model_folder.write(
        args.output,
        metrics=run_metrics(loop, test, preflight),
        telemetry=report,
        model=model_folder.saved_model(loop.model, manifest, loop.target),
        manifest=manifest,
        transform=transform,
    )
    log.info(
        "wrote %s to %s; run is %s: %s. %s",
        ", ".join(written),
        args.output,
        report["classification"],
        report["reason"],
        report["recommendation"],
    )


def run_metrics(loop: Loop, test: dict[str, Any] | None, preflight: dict[str, Any] | None) -> dict[str, Any]:
    """metrics.json: the run, its losses and scores, the plan it read and how fast."""
    manifest, args, progress = loop.manifest, loop.args, loop.progress
    validation = progress.validation
    return {
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
        "world_size": loop.env.world_size,
        "device": loop.device.type,
        "precision": loop.precision.name,
        "grad_accumulation": args.grad_accumulation,
        "optimizer_steps": loop.global_step,
        "samples_per_second": progress.rows_seen / progress.train_seconds if progress.train_seconds else 0.0,
        "train_seconds": progress.train_seconds,
        "steps_per_rank": loop.steps_per_epoch,
        "batch_size": loop.data.plan.batch_size,
        # The read-time plan for this run's world size, and the export's for comparison.
        "plan": {**loop.data.plan.to_json(), "export_world_size": manifest.split("train").plan.world_size},
        # torchrun counts its restarts of the worker group; the position the run resumed at.
        "restarts": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        "resumed_from": loop.resumed,
        "preflight": preflight,
        "lr": args.lr,
        "seed": args.seed,
    }


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
        transform = model_folder.read_transform(manifest)
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
