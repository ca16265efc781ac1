"""Checkpoints and resume: a run that restarts trains on the same rows as one that did not.

The two-rank case kills one rank with SIGKILL in the middle of an epoch, as an OOM
killer or a lost node would; torchrun restarts the group (`--max-restarts 1`) and the
trainer resumes from its last checkpoint. Each epoch's row digest (an order-independent
sum of the row ids' hashes, `--audit-rows`) and row count must equal a run without the
fault: no row trained on twice in an epoch, none missing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from tests.training.conftest import write_export
from tests.training.test_train import TRAINER_PATH, run_module


def trainer_args(manifest: Path, out: Path, *extra: str, epochs: int = 2) -> list[str]:
    return [
        "--manifest",
        str(manifest),
        "--output",
        str(out / "model"),
        "--checkpoint-dir",
        str(out / "checkpoints"),
        "--epochs",
        str(epochs),
        "--lr",
        "1e-2",
        "--device",
        "cpu",
        "--audit-rows",
        *extra,
    ]


def metrics_of(out: Path) -> dict:
    return json.loads((out / "model" / "metrics.json").read_text())


def per_epoch(metrics: dict) -> list[tuple[int, int, str]]:
    return [(h["epoch"], h["rows"], h["rows_digest"]) for h in metrics["history"]]


def test_a_resumed_run_continues_from_its_epoch_end_checkpoint(export_one_rank, tmp_path):
    """One process: 1 epoch, then the same run asked for 3 resumes at epoch 2 and matches a 3-epoch run."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert (
        run_module(
            ["-m", "lakeprep_train.train", *trainer_args(export_one_rank, straight, epochs=3)]
        ).returncode
        == 0
    )
    first = run_module(["-m", "lakeprep_train.train", *trainer_args(export_one_rank, resumed, epochs=1)])
    assert first.returncode == 0, first.stderr[-3000:]
    position = json.loads((resumed / "checkpoints" / "checkpoint.json").read_text())["position"]
    assert position == {"epoch": 1, "step": 0, "global_step": 63}
    second = run_module(["-m", "lakeprep_train.train", *trainer_args(export_one_rank, resumed, epochs=3)])
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resuming from" in second.stderr and "epoch 2, 0 of 63 steps done" in second.stderr

    a, b = metrics_of(straight), metrics_of(resumed)
    assert b["resumed_from"]["epoch"] == 1 and a["resumed_from"] is None
    assert per_epoch(a) == per_epoch(b)
    assert b["optimizer_steps"] == a["optimizer_steps"] == 3 * 63
    # The RNG (dropout), optimizer and model state are restored: the same numbers come out.
    assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-6)
    model_a = torch.load(straight / "model" / "model.pt", weights_only=True)["state_dict"]
    model_b = torch.load(resumed / "model" / "model.pt", weights_only=True)["state_dict"]
    for name, tensor in model_a.items():
        torch.testing.assert_close(model_b[name], tensor, rtol=1e-5, atol=1e-6)


def test_a_checkpoint_of_another_run_is_not_resumed(export_one_rank, tmp_path):
    out = tmp_path / "run"
    assert (
        run_module(["-m", "lakeprep_train.train", *trainer_args(export_one_rank, out, epochs=1)]).returncode
        == 0
    )
    # Another learning rate changes what every step does: the checkpoint must not be used.
    again = run_module(
        ["-m", "lakeprep_train.train", *trainer_args(export_one_rank, out, "--lr", "5e-3", epochs=1)]
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "belongs to another run (lr 0.01 there, 0.005 now): starting over" in again.stderr
    assert metrics_of(out)["resumed_from"] is None


def test_a_torn_checkpoint_is_ignored(export_one_rank, tmp_path):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "checkpoint.pt").write_bytes(b"not a checkpoint")
    result = run_module(["-m", "lakeprep_train.train", *trainer_args(export_one_rank, out, epochs=1)])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "cannot be read" in result.stderr and metrics_of(out)["resumed_from"] is None


def test_gradient_accumulation_takes_one_optimizer_step_per_group(export_one_rank, tmp_path):
    out = tmp_path / "run"
    result = run_module(
        [
            "-m",
            "lakeprep_train.train",
            *trainer_args(export_one_rank, out, "--grad-accumulation", "4", epochs=1),
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = metrics_of(out)
    assert metrics["grad_accumulation"] == 4
    assert metrics["optimizer_steps"] == 16  # 63 batches: 15 groups of 4 and one of 3
    assert metrics["history"][0]["rows"] == 2000


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_trains_on_cpu_autocast(export_one_rank, tmp_path, precision):
    """The autocast and gradient-scaler path, on CPU here; on CUDA in test_cuda.py."""
    out = tmp_path / "run"
    result = run_module(
        [
            "-m",
            "lakeprep_train.train",
            *trainer_args(export_one_rank, out, "--precision", precision, epochs=2),
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = metrics_of(out)
    assert metrics["precision"] == precision
    assert metrics["validation"]["accuracy"] > metrics["baseline"]["accuracy"]
    assert all(loss == loss for loss in metrics["train_loss"])  # no NaN


@pytest.fixture(scope="module")
def long_two_rank_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Enough steps per epoch that a kill lands inside one: 2 ranks x 1600 rows at batch 16."""
    return write_export(
        tmp_path_factory.mktemp("long_two_ranks"),
        world_size=2,
        rows_per_rank={"train": 1600, "validation": 64, "test": 64},
        batch_size=16,
        row_group_size=64,
    )


def torchrun(manifest: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "--max-restarts=1",
        "-m",
        "lakeprep_train.train",
        *trainer_args(manifest, out, "--checkpoint-every", "10", epochs=3),
    ]


def trainer_env() -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return {**environ, "PYTHONPATH": TRAINER_PATH, "OMP_NUM_THREADS": "1"}


def rank_process(launcher: psutil.Process, rank: int) -> psutil.Process | None:
    for child in launcher.children(recursive=True):
        try:
            if child.environ().get("RANK") == str(rank) and "lakeprep_train.train" in child.cmdline():
                return child
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return None


@pytest.mark.integration
def test_sigkill_of_one_rank_resumes_and_trains_on_the_same_rows(long_two_rank_export, tmp_path):
    clean, faulty = tmp_path / "clean", tmp_path / "faulty"
    done = subprocess.run(
        torchrun(long_two_rank_export, clean), env=trainer_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]

    log = tmp_path / "faulty.log"
    with log.open("w") as sink:
        launcher = subprocess.Popen(
            torchrun(long_two_rank_export, faulty), env=trainer_env(), stdout=sink, stderr=subprocess.STDOUT
        )
        position_file = faulty / "checkpoints" / "checkpoint.json"
        killed_at = None
        deadline = time.monotonic() + 240
        while killed_at is None and launcher.poll() is None and time.monotonic() < deadline:
            if position_file.exists():
                position = json.loads(position_file.read_text())["position"]
                # Inside the second epoch, after at least one checkpoint in it.
                if position["epoch"] == 1 and position["step"] > 0:
                    victim = rank_process(psutil.Process(launcher.pid), rank=1)
                    if victim is not None:
                        victim.send_signal(signal.SIGKILL)
                        killed_at = position
            time.sleep(0.02)
        launcher.wait(timeout=300)
    output = log.read_text()
    assert killed_at is not None, f"no mid-epoch checkpoint to kill at:\n{output[-4000:]}"
    assert launcher.returncode == 0, output[-4000:]

    clean_metrics, faulty_metrics = metrics_of(clean), metrics_of(faulty)
    assert faulty_metrics["restarts"] == 1 and clean_metrics["restarts"] == 0
    resumed = faulty_metrics["resumed_from"]
    assert resumed["epoch"] == 1 and resumed["step"] >= killed_at["step"] > 0
    # Every epoch saw the same rows as the run without the fault, each once.
    assert per_epoch(faulty_metrics) == per_epoch(clean_metrics)
    assert [h["rows"] for h in clean_metrics["history"]] == [3200, 3200, 3200]
    assert faulty_metrics["optimizer_steps"] == clean_metrics["optimizer_steps"] == 3 * 100
    assert faulty_metrics["train_loss"] == pytest.approx(clean_metrics["train_loss"], rel=1e-5)
