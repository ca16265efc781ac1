"""Per-step timing and peak memory, and the run's verdict on what bounds it.

Each training step is split into the time spent waiting for the next batch (data)
and the time in forward, backward and the optimizer step (compute). With DDP the
gradient all-reduce runs inside backward, overlapped with it, so communication is
measured separately by a DDP communication hook as the time during which at least one
bucket's all-reduce was in flight; its share is a part of the compute share, not
added to it.

Each rank's accelerator utilisation is its compute time over its step wall time (data
wait plus compute), MLPerf Storage's measure (AU), whose pass line is 90 %: below it the
accelerator idles for more than a tenth of every step waiting for input, which is what
makes a run input-bound. The summary states the utilisation of every rank and classifies
the run as input-, communication-, memory- or compute-bound by its worst rank, with the
numbers behind it and what to change.
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

# MLPerf Storage's pass line: a training workload passes when accelerator utilisation
# (compute time / total time) is at least 90 % (3D U-Net, ResNet-50; 70 % for CosmoFlow,
# https://mlcommons.org/benchmarks/storage/).
ACCELERATOR_UTILISATION_TARGET = 0.90
COMMUNICATION_BOUND_SHARE = 0.30
MEMORY_BOUND_SHARE = 0.90


@dataclass(frozen=True)
class StepTiming:
    data_s: float
    compute_s: float
    comm_s: float
    rows: int


class CommTimer:
    """A DDP communication hook: the default all-reduce, timed per bucket.

    Register with ``ddp_model.register_comm_hook(state=None, hook=timer.hook)``
    (``state=None`` means the default process group). Times are host times from
    launching a bucket's all-reduce to its future completing; with NCCL the future
    completes when the work is queued on the stream, so on CUDA they under-count.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._intervals: list[tuple[float, float]] = []
        self.buckets = 0

    # Unannotated on purpose: DDP's _check_comm_hook compares the annotations with
    # dist.GradBucket and Future[Tensor], and `from __future__ import annotations`
    # turns them into strings that never compare equal.
    def hook(self, process_group, bucket):  # noqa: ANN001, ANN201
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        start = time.perf_counter()

        def finished(fut: torch.futures.Future) -> torch.Tensor:
            # Runs on the thread that completes the all-reduce.
            with self._lock:
                self._intervals.append((start, time.perf_counter()))
            return fut.value()

        return default_hooks.allreduce_hook(process_group, bucket).then(finished)

    def take(self) -> float:
        """Seconds with an all-reduce in flight since the last call (overlaps merged)."""
        with self._lock:
            intervals, self._intervals = sorted(self._intervals), []
        self.buckets += len(intervals)
        total = 0.0
        end = float("-inf")
        for start, stop in intervals:
            if stop <= end:
                continue
            total += stop - max(start, end)
            end = stop
        return total


class StepTelemetry:
    """Collects one rank's step timings and reports its peak memory."""

    def __init__(
        self, device: torch.device, *, rank: int = 0, world_size: int = 1, warmup_steps: int = 1
    ) -> None:
        self.device = device
        self.rank = rank
        self.world_size = world_size
        # The first step pays one-time costs (lazy imports inside pyarrow, the first
        # shard open, allocator and DDP set-up) that say nothing about the steady state.
        self.warmup_steps = warmup_steps
        self.steps: list[StepTiming] = []
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)

    def record(self, *, data_s: float, compute_s: float, comm_s: float, rows: int) -> None:
        self.steps.append(StepTiming(data_s, compute_s, comm_s, rows))

    def peak_memory(self) -> dict[str, Any]:
        if self.device.type == "cuda":
            return {
                "peak_memory_bytes": int(torch.cuda.max_memory_allocated(self.device)),
                "device_memory_bytes": int(torch.cuda.get_device_properties(self.device).total_memory),
                "memory_measure": "torch.cuda.max_memory_allocated",
            }
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # ru_maxrss is KiB on Linux, bytes on macOS (getrusage(2)).
        peak = maxrss if sys.platform == "darwin" else maxrss * 1024
        return {
            "peak_memory_bytes": int(peak),
            "device_memory_bytes": host_memory_bytes(),
            "memory_measure": "getrusage ru_maxrss (process resident set)",
        }

    def summary(self) -> dict[str, Any]:
        """This rank's totals, per-step medians and shares after warm-up, as plain JSON values."""
        warmup = self.steps[: self.warmup_steps] if len(self.steps) > self.warmup_steps else []
        measured = self.steps[len(warmup) :]
        data = [s.data_s for s in measured]
        compute = [s.compute_s for s in measured]
        comm = [s.comm_s for s in measured]
        step = [d + c for d, c in zip(data, compute, strict=True)]
        total_step = sum(step)
        memory = self.peak_memory()
        # MLPerf Storage's accelerator utilisation; None when no step was measured.
        utilisation = sum(compute) / total_step if total_step else None
        memory["memory_share"] = (
            memory["peak_memory_bytes"] / memory["device_memory_bytes"]
            if memory["device_memory_bytes"]
            else 0.0
        )
        return {
            "rank": self.rank,
            "steps": len(self.steps),
            "rows": sum(s.rows for s in self.steps),
            "warmup_steps": len(warmup),
            "warmup_s": sum(s.data_s + s.compute_s for s in warmup),
            "totals_s": {"data": sum(data), "compute": sum(compute), "comm": sum(comm), "step": total_step},
            "median_step_s": {
                "data": _median(data),
                "compute": _median(compute),
                "comm": _median(comm),
                "step": _median(step),
            },
            "shares": {
                "data": sum(data) / total_step if total_step else 0.0,
                "compute": sum(compute) / total_step if total_step else 0.0,
                "comm": sum(comm) / total_step if total_step else 0.0,
            },
            "accelerator_utilisation": utilisation,
            **memory,
        }


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def host_memory_bytes() -> int:
    """Physical memory, or the cgroup's limit when a container sets a lower one."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass  # no cgroup v2 limit visible: physical memory is the limit
    return int(total)


def classify(
    *,
    utilisation: float | None,
    data_share: float,
    comm_share: float,
    memory_share: float,
    device: str,
    world_size: int,
    prefetch: int,
) -> tuple[str, str, str]:
    """(classification, the numbers behind it, a recommendation), first match wins.

    :param utilisation: the worst rank's accelerator utilisation (compute / step time;
        None: no step measured); under ``ACCELERATOR_UTILISATION_TARGET`` the run is
        input-bound, since the rest of a step is the wait for its batch.
    :param data_share: that rank's data-wait share of step time (``1 - utilisation``).
    """
    if utilisation is not None and utilisation < ACCELERATOR_UTILISATION_TARGET:
        return (
            "input-bound",
            f"accelerator utilisation is {utilisation:.0%} (compute / step time), under MLPerf "
            f"Storage's {ACCELERATOR_UTILISATION_TARGET:.0%} line: waiting for data is {data_share:.0%} "
            "of step time",
            f"Feed the model faster: raise --prefetch (now {prefetch}) or read with more loader "
            "threads, and export bigger shards with larger row groups (fewer, longer reads); "
            + (
                "keep pinned memory on."
                if device == "cuda"
                else "a larger batch also amortises per-batch cost."
            ),
        )
    if comm_share > COMMUNICATION_BOUND_SHARE:
        return (
            "communication-bound",
            f"a gradient all-reduce is in flight {comm_share:.0%} of step time "
            f"(> {COMMUNICATION_BOUND_SHARE:.0%}) across {world_size} ranks",
            "Communicate less per sample: use a larger batch per rank or gradient accumulation "
            "(one all-reduce per several batches), fewer ranks for a model this small, or a faster "
            "interconnect (NCCL over NVLink/InfiniBand).",
        )
    if memory_share > MEMORY_BOUND_SHARE:
        return (
            "memory-bound",
            f"peak memory is {memory_share:.0%} of the {device} memory (> {MEMORY_BOUND_SHARE:.0%})",
            "Lower the batch size and use gradient accumulation to keep the effective batch, or "
            "bf16 autocast to halve activation memory.",
        )
    return (
        "compute-bound",
        f"accelerator utilisation {_percent(utilisation)} (at least {ACCELERATOR_UTILISATION_TARGET:.0%}), "
        f"all-reduce {comm_share:.0%} of step time and peak memory {memory_share:.0%} (both under "
        "their thresholds)",
        (
            "The GPU is the bottleneck, as it should be: raise the batch size while memory allows, "
            "use bf16 autocast, or add GPUs."
            if device == "cuda"
            else "Compute on the CPU is the bottleneck: train on a GPU (--device cuda), "
            "or raise the batch size."
        ),
    )


def summarize(
    ranks: Sequence[dict[str, Any]], *, device: str, world_size: int, prefetch: int, comm_measure: str | None
) -> dict[str, Any]:
    """telemetry.json: the run's numbers, averaged over ranks, classified by its worst rank.

    Totals, medians and shares leave out each rank's warm-up steps (``warmup_s``).
    """
    n = len(ranks)

    def mean_of(key: str, sub: str) -> float:
        return sum(r[key][sub] for r in ranks) / n

    utilisation = [r["accelerator_utilisation"] for r in ranks]
    measured = [r for r in ranks if r["accelerator_utilisation"] is not None]
    # The rank that waits most for data idles its accelerator most: it classifies the run.
    worst_data = min(measured, key=lambda r: r["accelerator_utilisation"]) if measured else ranks[0]
    worst_comm = max(ranks, key=lambda r: r["shares"]["comm"])
    worst_memory = max(ranks, key=lambda r: r["memory_share"])
    classification, reason, recommendation = classify(
        utilisation=worst_data["accelerator_utilisation"],
        data_share=worst_data["shares"]["data"],
        comm_share=worst_comm["shares"]["comm"],
        memory_share=worst_memory["memory_share"],
        device=device,
        world_size=world_size,
        prefetch=prefetch,
    )
    return {
        "classification": classification,
        "reason": reason,
        "recommendation": recommendation,
        "thresholds": {
            "accelerator_utilisation_target": ACCELERATOR_UTILISATION_TARGET,
            "communication_bound_comm_share": COMMUNICATION_BOUND_SHARE,
            "memory_bound_memory_share": MEMORY_BOUND_SHARE,
        },
        "accelerator_utilisation": {
            "measure": "compute / step wall time (data wait + compute) after warm-up, MLPerf Storage's AU",
            "target": ACCELERATOR_UTILISATION_TARGET,
            "per_rank": utilisation,
        },
        "evidence": {
            "accelerator_utilisation": worst_data["accelerator_utilisation"],
            "data_share": worst_data["shares"]["data"],
            "data_share_rank": worst_data["rank"],
            "comm_share": worst_comm["shares"]["comm"],
            "comm_share_rank": worst_comm["rank"],
            "memory_share": worst_memory["memory_share"],
            "memory_share_rank": worst_memory["rank"],
            "peak_memory_bytes": worst_memory["peak_memory_bytes"],
            "device_memory_bytes": worst_memory["device_memory_bytes"],
        },
        "world_size": world_size,
        "device": device,
        "comm_measure": comm_measure,
        "steps_per_rank": [r["steps"] for r in ranks],
        "totals_s": {k: mean_of("totals_s", k) for k in ("data", "compute", "comm", "step")},
        "median_step_s": {k: mean_of("median_step_s", k) for k in ("data", "compute", "comm", "step")},
        "shares": {k: mean_of("shares", k) for k in ("data", "compute", "comm")},
        "ranks": list(ranks),
    }


def _percent(share: float | None) -> str:
    return "n/a" if share is None else f"{share:.0%}"
