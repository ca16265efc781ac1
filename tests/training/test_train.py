from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

TRAINING = Path(__file__).resolve().parents[2] / "training"
# The trainer reads the manifest schema from lakeprep_contracts (as the handoff's path has it).
TRAINER_PATH = os.pathsep.join(str(TRAINING.parent / d) for d in ("training", "contracts"))


def run_module(args: list[str], *, env: dict[str, str] | None = None, timeout: int = 120):
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    environ.update(PYTHONPATH=TRAINER_PATH, OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run(
        [sys.executable, *args], env=environ, capture_output=True, text=True, timeout=timeout
    )


def test_single_process_run_beats_the_baseline(export_one_rank, tmp_path):
    out = tmp_path / "run"
    result = run_module(
        [
            "-m",
            "lakeprep_train",
            "--manifest",
            str(export_one_rank),
            "--output",
            str(out),
            "--epochs",
            "3",
            "--lr",
            "1e-2",
            "--device",
            "cpu",
        ]
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("INFO [rank 0/1] lakeprep_train: epoch ") == 3

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["epochs"] == 3 and len(metrics["train_loss"]) == 3
    assert metrics["world_size"] == 1 and metrics["device"] == "cpu"
    validation = metrics["validation"]
    assert validation["rows"] == 500
    assert validation["accuracy"] > metrics["baseline"]["accuracy"] + 0.1
    assert validation["auc"] > 0.9
    assert (
        metrics["test"]["rows"] == 500
        and metrics["test"]["accuracy"] > metrics["test"]["baseline"]["accuracy"]
    )
    assert metrics["samples_per_second"] > 0

    telemetry = json.loads((out / "telemetry.json").read_text())
    assert telemetry["classification"] in (
        "input-bound",
        "communication-bound",
        "memory-bound",
        "compute-bound",
    )
    assert telemetry["reason"] and telemetry["recommendation"]
    assert telemetry["steps_per_rank"] == [3 * 63]
    assert telemetry["ranks"][0]["peak_memory_bytes"] > 0

    checkpoint = torch.load(out / "model.pt", weights_only=True)
    assert [f["name"] for f in checkpoint["features"]] == ["num__x", "cat__c", "txt__t"]
    assert "mlp.0.weight" in checkpoint["state_dict"]


def test_preflight_plans_for_the_world_size_it_finds(export_two_ranks):
    from lakeprep_train.manifest import load_manifest
    from lakeprep_train.preflight import DistributedEnv
    from lakeprep_train.preflight import plan_train as preflight

    manifest = load_manifest(str(export_two_ranks))  # exported for 2 ranks, 300 train rows
    plans = [preflight(manifest, DistributedEnv(rank, 3, rank)) for rank in range(3)]
    assert [(p.rows_per_rank, p.steps_per_rank, p.rows_dropped) for p in plans] == [(100, 4, 0)] * 3
    assert preflight(manifest, DistributedEnv(0, 1, 0)).rows_per_rank == 300


def test_preflight_refuses_more_ranks_than_train_rows(export_two_ranks, tmp_path):
    started = time.monotonic()
    result = run_module(
        [
            "-m",
            "lakeprep_train.train",
            "--manifest",
            str(export_two_ranks),
            "--output",
            str(tmp_path / "run"),
        ],
        env={"WORLD_SIZE": "301", "RANK": "0", "LOCAL_RANK": "0"},
        timeout=60,
    )
    assert result.returncode == 2
    assert "splits.train: the split has 300 rows, fewer than the 301 ranks of this run" in result.stderr
    assert str(export_two_ranks) in result.stderr
    assert time.monotonic() - started < 30
    assert not (tmp_path / "run").exists()


@pytest.mark.integration
@pytest.mark.parametrize(
    ("world_size", "steps", "dropped"),
    [(1, 10, 0), (2, 5, 1), (3, 4, 1)],  # 301 rows at batch 32: 301, 150 or 100 rows per rank
)
def test_one_export_trains_on_any_world_size_with_equal_steps(
    export_odd, tmp_path, world_size, steps, dropped
):
    out = tmp_path / "run"
    result = run_module(
        [
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(world_size),
            "-m",
            "lakeprep_train.train",
            "--manifest",
            str(export_odd),
            "--output",
            str(out),
            "--epochs",
            "2",
            "--device",
            "cpu",
        ],
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    telemetry = json.loads((out / "telemetry.json").read_text())
    assert telemetry["world_size"] == world_size
    assert telemetry["steps_per_rank"] == [2 * steps] * world_size
    assert [r["rows"] for r in telemetry["ranks"]] == [2 * (301 - dropped) // world_size] * world_size
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["world_size"] == world_size and metrics["steps_per_rank"] == steps
    assert metrics["plan"]["export_world_size"] == 1
    assert metrics["plan"]["rows_dropped_per_epoch"] == dropped
    assert metrics["plan"]["rows_padded_per_epoch"] == 0
    assert metrics["plan"]["rows_per_rank"] * world_size + dropped == 301
    # Every rank scores its share of the validation split; none is left out or waits for rank 0.
    assert metrics["validation"]["rows"] == 61
    for rank in range(world_size):
        prefix = f"[rank {rank}/{world_size}] lakeprep_train: "
        assert f"{prefix}validation of epoch 2 scored with the other ranks in " in result.stderr
        assert f"{prefix}finished 2 epochs: {2 * steps} steps on this rank, accelerator utilisation " in (
            result.stderr
        )
    utilisation = telemetry["accelerator_utilisation"]["per_rank"]
    assert len(utilisation) == world_size and all(0 < u <= 1 for u in utilisation)


@pytest.mark.integration
def test_two_rank_torchrun_on_cpu_takes_equal_steps(export_two_ranks, tmp_path):
    out = tmp_path / "run"
    result = run_module(
        [
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "lakeprep_train.train",
            "--manifest",
            str(export_two_ranks),
            "--output",
            str(out),
            "--epochs",
            "2",
            "--device",
            "cpu",
        ],
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    for rank in (0, 1):
        assert f"[rank {rank}/2] lakeprep_train: finished 2 epochs: 10 steps on this rank" in result.stderr
    telemetry = json.loads((out / "telemetry.json").read_text())
    assert telemetry["steps_per_rank"] == [10, 10]
    assert telemetry["world_size"] == 2
    assert [r["rows"] for r in telemetry["ranks"]] == [300, 300]
    assert telemetry["totals_s"]["comm"] > 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["validation"]["rows"] == 120


def test_the_epochs_run_with_start_up_objects_frozen_and_thawed_after(export_one_rank, tmp_path, monkeypatch):
    from lakeprep_train import train

    frozen_at_each_epoch = []
    real_iter = train.RankBatches.__iter__

    def spying_iter(self):
        if self.split.name == "train":  # evaluation reads its splits through RankBatches too
            frozen_at_each_epoch.append(gc.get_freeze_count())
        return real_iter(self)

    monkeypatch.setattr(train.RankBatches, "__iter__", spying_iter)
    args = ["--manifest", str(export_one_rank), "--output", str(tmp_path / "m"), "--epochs", "2"]
    assert train.main([*args, "--device", "cpu"]) == 0
    assert len(frozen_at_each_epoch) == 2 and min(frozen_at_each_epoch) > 0
    assert gc.get_freeze_count() == 0

    # An epoch that fails thaws them too (in-process callers go on allocating).
    with pytest.raises(RuntimeError, match="a failed epoch"), train.frozen_startup_objects():
        assert gc.get_freeze_count() > 0
        raise RuntimeError("a failed epoch")
    assert gc.get_freeze_count() == 0


def test_a_host_that_froze_objects_itself_keeps_them_frozen(monkeypatch):
    from lakeprep_train import train

    # Not by freeze counts: frozen objects that die (reference counts) leave the count.
    gc.freeze()
    try:
        calls = []
        for name in ("collect", "freeze", "unfreeze"):
            monkeypatch.setattr(gc, name, lambda *_, _name=name, **__: calls.append(_name))
        with train.frozen_startup_objects():
            assert calls == []
        assert calls == []
        monkeypatch.undo()
        # Without the host's freeze the same call collects, freezes and thaws.
        gc.unfreeze()
        for name in ("collect", "freeze", "unfreeze"):
            monkeypatch.setattr(gc, name, lambda *_, _name=name, **__: calls.append(_name))
        with train.frozen_startup_objects():
            pass
        assert calls == ["collect", "freeze", "unfreeze"]
    finally:
        monkeypatch.undo()
        gc.unfreeze()


def test_prepared_shards_train_as_their_encoded_shards(tmp_path):
    """The trainer hands the transform it checked to the loader: the same losses, bit for bit."""
    from tests.training import prepared_export

    encoded, prepared = prepared_export.write_pair(tmp_path / "data", rows=200, files=2)
    losses = []
    for manifest in (encoded, prepared):
        out = tmp_path / manifest.parent.name
        args = ["-m", "lakeprep_train", "--manifest", str(manifest), "--output", str(out)]
        result = run_module([*args, "--epochs", "2", "--device", "cpu", "--seed", "3"])
        assert result.returncode == 0, result.stderr
        losses.append(json.loads((out / "metrics.json").read_text())["train_loss"])
    assert losses[0] == losses[1]
    assert (tmp_path / "prepared" / "transform.json").read_bytes() == (
        tmp_path / "data" / "prepared" / "transform.json"
    ).read_bytes()
