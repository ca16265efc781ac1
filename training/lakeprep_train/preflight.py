"""Checks before any process group exists: refuse a run that would hang or run out of memory.

    python -m lakeprep_train.preflight --manifest M --world-size 4 [--nproc-per-node 4] [--device auto]

A distributed run that goes wrong after its ranks have met hangs in the first collective
until a timeout; one that goes wrong before fails at once. So each rank checks, before
``init_process_group``: its plan (every rank gets at least one train row), the shards'
footers against the manifest, the devices (a rank per GPU on this host), and an
estimate of the memory one training step needs against what the device has free. The
handoff runs the same checks once on the launching host (this module's ``main``)
before it starts torchrun, so a mismatch is one clear error naming both numbers, not N
failing ranks and a restart loop.

The memory estimate is the model's parameters with their gradients and Adam's two
moments (fp32, 16 bytes per parameter), the batches the loader holds (``prefetch`` + 1
in flight, their sizes from the manifest's features), and the activations of one step
(every layer's output and its gradient, fp32). It is an estimate: the allocator's
caching and the CUDA context add to it, so a device must have it free with
``HEADROOM`` to spare.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from lakeprep_train.dataset import ID_DTYPE, LABEL_DTYPE, NUMERIC_DTYPE, RankBatches, RankPlan, plan_rank
from lakeprep_train.manifest import Manifest, ManifestError, load_manifest, with_transform_document
from lakeprep_train.model import TabularMLP

log = logging.getLogger("lakeprep_train")

HEADROOM = 1.2  # free memory must be at least the estimate times this
FP32 = 4


class PreflightError(RuntimeError):
    """The run cannot start as configured; raised before any collective."""


@dataclass(frozen=True)
class DistributedEnv:
    """This process's place in the job, from torchrun's environment variables."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int = 1

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> DistributedEnv:
        values = {}
        for key, default in (("RANK", 0), ("WORLD_SIZE", 1), ("LOCAL_RANK", 0), ("LOCAL_WORLD_SIZE", None)):
            raw = environ.get(key)
            if raw is None:
                values[key] = default
                continue
            try:
                values[key] = int(raw)
            except ValueError:
                raise PreflightError(f"environment variable {key}={raw!r} must be an integer") from None
        local_world = (
            values["LOCAL_WORLD_SIZE"] if values["LOCAL_WORLD_SIZE"] is not None else values["WORLD_SIZE"]
        )
        env = cls(values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"], local_world)
        if env.world_size < 1 or not 0 <= env.rank < env.world_size:
            raise PreflightError(f"RANK={env.rank} must be in [0, WORLD_SIZE={env.world_size})")
        if not 0 <= env.local_rank < env.local_world_size:
            raise PreflightError(
                f"LOCAL_RANK={env.local_rank} must be in [0, LOCAL_WORLD_SIZE={env.local_world_size})"
            )
        return env


def plan_train(manifest: Manifest, env: DistributedEnv) -> RankPlan:
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


def resolve_device(choice: str, env: DistributedEnv) -> torch.device:
    """The rank's device: a GPU per local rank, and enough of them for every rank on this host."""
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise PreflightError("--device cuda was asked for, but torch sees no CUDA device")
    visible = torch.cuda.device_count()
    if env.local_world_size > visible:
        raise PreflightError(
            f"{env.local_world_size} ranks on this host (LOCAL_WORLD_SIZE), but torch sees {visible} "
            f"CUDA device(s) (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): "
            "one GPU per rank; lower the processes per node or make more GPUs visible"
        )
    torch.cuda.set_device(env.local_rank)
    return torch.device("cuda", env.local_rank)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one rank needs for training steps (see the module docs)."""

    parameters: int
    state_bytes: int
    batch_bytes: int
    buffered_batches: int
    activation_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.state_bytes + self.batch_bytes * self.buffered_batches + self.activation_bytes

    def describe(self) -> str:
        return (
            f"{_size(self.total_bytes)} (model and Adam state {_size(self.state_bytes)} for "
            f"{self.parameters} parameters, {self.buffered_batches} batches of {_size(self.batch_bytes)}, "
            f"activations {_size(self.activation_bytes)})"
        )

    def to_json(self) -> dict[str, int]:
        return {**asdict(self), "total_bytes": self.total_bytes}


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def estimate_memory(
    manifest: Manifest, model: nn.Module, batch_size: int, *, prefetch: int
) -> MemoryEstimate:
    """The estimate for ``model`` on ``manifest``'s features at ``batch_size`` rows per step."""
    parameters = sum(p.numel() for p in model.parameters())
    numeric = len(manifest.features_with_role("numeric"))
    categorical = len(manifest.features_with_role("categorical"))
    text = manifest.features_with_role("text")
    text_length = max((f.length for f in text), default=0)
    value, index, label = (np.dtype(t).itemsize for t in (NUMERIC_DTYPE, ID_DTYPE, LABEL_DTYPE))
    row_bytes = numeric * value + (categorical + len(text) * text_length) * index + label
    widths = numeric
    for module in model.modules():
        if isinstance(module, nn.Linear):
            widths += 3 * module.out_features  # the layer's output, its activation and dropout mask
        elif isinstance(module, nn.Embedding | nn.EmbeddingBag):
            widths += module.embedding_dim
    return MemoryEstimate(
        parameters=parameters,
        state_bytes=parameters * FP32 * 4,  # weights, gradients, Adam's exp_avg and exp_avg_sq
        batch_bytes=row_bytes * batch_size,
        buffered_batches=prefetch + 1,
        activation_bytes=widths * batch_size * FP32 * 2,  # values and their gradients
    )


def free_memory(device: torch.device, env: DistributedEnv) -> tuple[int, str]:
    """(bytes free for this rank, where that number comes from)."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free), f"{torch.cuda.get_device_name(device)} ({device})"
    available = _host_available_bytes()
    return available // max(1, env.local_world_size), f"host memory shared by {env.local_world_size} rank(s)"


def _host_available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass  # not Linux: fall back to physical memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_memory(estimate: MemoryEstimate, device: torch.device, env: DistributedEnv) -> dict[str, object]:
    """Refuse a step that cannot fit; the numbers as JSON for the run's metrics."""
    free, where = free_memory(device, env)
    if estimate.total_bytes * HEADROOM > free:
        raise PreflightError(
            f"a training step needs about {estimate.describe()}, with {HEADROOM}x headroom "
            f"{_size(estimate.total_bytes * HEADROOM)}, but {where} has {_size(free)} free: lower the "
            "batch size at export (stages.export_shards.batch_size) and use gradient accumulation "
            "(training.grad_accumulation_steps) to keep the effective batch"
        )
    return {"estimate": estimate.to_json(), "free_bytes": free, "free_on": where, "headroom": HEADROOM}


def check_run(
    manifest: Manifest, *, world_size: int, nproc_per_node: int, device_choice: str, prefetch: int
) -> dict[str, object]:
    """Every rank's plan, the devices of this host and one rank's memory: what the handoff checks."""
    plans = [
        plan_train(manifest, DistributedEnv(rank, world_size, rank % nproc_per_node, nproc_per_node))
        for rank in range(world_size)
    ]
    if manifest.shard_columns == "prepared" and manifest.transform_document is None:
        manifest = with_transform_document(manifest)  # the column types to check come from it
    RankBatches(manifest, "train", 0, world_size=world_size).check_shards()
    env = DistributedEnv(0, world_size, 0, nproc_per_node)
    device = resolve_device(device_choice, env)
    model = TabularMLP(manifest.features, len(manifest.label.classes))
    memory = check_memory(
        estimate_memory(manifest, model, plans[0].batch_size, prefetch=prefetch), device, env
    )
    return {
        "manifest": manifest.location,
        "world_size": world_size,
        "nproc_per_node": nproc_per_node,
        "device": str(device),
        "cuda_devices": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "plan": plans[0].to_json(),
        "memory": memory,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lakeprep_train.preflight", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--nproc-per-node", type=int, help="ranks on this host (default: the world size)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--prefetch", type=int, default=4)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.world_size < 1:
        parser.error(f"--world-size {args.world_size} must be at least 1")
    try:
        report = check_run(
            load_manifest(args.manifest),
            world_size=args.world_size,
            nproc_per_node=args.nproc_per_node or args.world_size,
            device_choice=args.device,
            prefetch=args.prefetch,
        )
    except (ManifestError, PreflightError, ValueError) as err:
        log.error("preflight failed: %s", err)
        return 2
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
