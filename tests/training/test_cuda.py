"""The trainer's CUDA path: runs wherever torch sees a CUDA device, skipped elsewhere.

CI has no GPU, so these are skipped there; on a GPU machine run

    LAKEPREP_GPU_REPORT=gpu.json .venv/bin/python -m pytest -m cuda tests/training/test_cuda.py

and copy the numbers the report holds (samples per second, data-wait share, peak
memory per precision) into docs/GPU.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from lakeprep_train.preflight import DistributedEnv, PreflightError, resolve_device
from tests.training.test_train import run_module

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device"),
]


def train_on_cuda(manifest: Path, out: Path, *extra: str) -> dict:
    result = run_module(
        [
            "-m",
            "lakeprep_train.train",
            "--manifest",
            str(manifest),
            "--output",
            str(out),
            "--epochs",
            "3",
            "--lr",
            "1e-2",
            "--device",
            "cuda",
            *extra,
        ],
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    metrics = json.loads((out / "metrics.json").read_text())
    telemetry = json.loads((out / "telemetry.json").read_text())
    report = os.environ.get("LAKEPREP_GPU_REPORT")
    if report:
        rows = json.loads(Path(report).read_text()) if Path(report).exists() else []
        rows.append(
            {
                "device": torch.cuda.get_device_name(0),
                "precision": metrics["precision"],
                "grad_accumulation": metrics["grad_accumulation"],
                "samples_per_second": metrics["samples_per_second"],
                "data_share": telemetry["shares"]["data"],
                "peak_memory_bytes": telemetry["evidence"]["peak_memory_bytes"],
                "classification": telemetry["classification"],
            }
        )
        Path(report).write_text(json.dumps(rows, indent=2))
    return metrics | {"telemetry": telemetry}


@pytest.mark.parametrize("precision", ["auto", "bf16", "fp16", "fp32"])
def test_trains_on_cuda_in_each_precision(export_one_rank, tmp_path, precision):
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    metrics = train_on_cuda(export_one_rank, tmp_path / "run", "--precision", precision)
    expected = ("bf16" if torch.cuda.is_bf16_supported() else "fp16") if precision == "auto" else precision
    assert metrics["device"] == "cuda" and metrics["precision"] == expected
    assert metrics["validation"]["accuracy"] > metrics["baseline"]["accuracy"] + 0.1
    telemetry = metrics["telemetry"]
    assert telemetry["ranks"][0]["memory_measure"] == "torch.cuda.max_memory_allocated"
    assert 0 < telemetry["evidence"]["peak_memory_bytes"] < telemetry["evidence"]["device_memory_bytes"]
    assert metrics["preflight"]["free_on"].endswith("(cuda:0)")


def test_gradient_accumulation_on_cuda(export_one_rank, tmp_path):
    metrics = train_on_cuda(export_one_rank, tmp_path / "run", "--grad-accumulation", "4")
    assert metrics["optimizer_steps"] == 3 * 16


def test_more_local_ranks_than_gpus_is_refused_naming_both():
    visible = torch.cuda.device_count()
    with pytest.raises(
        PreflightError, match=rf"{visible + 1} ranks on this host .* torch sees {visible} CUDA"
    ):
        resolve_device("cuda", DistributedEnv(0, visible + 1, 0, visible + 1))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL across ranks needs two GPUs")
def test_two_ranks_on_nccl(export_two_ranks, tmp_path):
    out = tmp_path / "run"
    result = run_module(
        [
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            "-m",
            "lakeprep_train.train",
            "--manifest",
            str(export_two_ranks),
            "--output",
            str(out),
            "--device",
            "cuda",
        ],
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert json.loads((out / "telemetry.json").read_text())["steps_per_rank"] == [10, 10]
