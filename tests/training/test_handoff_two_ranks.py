"""The Airflow handoff operator launching the trainer on two ranks (torchrun, gloo on CPU).

Plugin and trainer together: the operator reads the spec's `training.world_size`, finds
the run's manifest in the lake layout and starts `torchrun --nproc-per-node 2`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.training.conftest import write_export

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def spec_with(tmp_path: Path, **training) -> Path:
    data = yaml.safe_load((REPO / "pipelines" / "flights.yaml").read_text())
    data["training"].update(training)
    path = tmp_path / "pipelines" / "flights.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(data))
    return path


def handoff_on_export(tmp_path: Path, *, rows_per_rank: dict[str, int], batch_size: int, **training):
    """A lake holding a 2-rank export for 2013-01-01, and the handoff task for that day."""
    from lakeprep_airflow.operators.handoff import GpuTrainingHandoffOperator

    lake = tmp_path / "lake"
    export = lake / "export_shards" / "flights" / "dt=2013-01-01"
    write_export(export, world_size=2, rows_per_rank=rows_per_rank, batch_size=batch_size)
    op = GpuTrainingHandoffOperator(
        task_id="gpu_training_handoff",
        spec_path=str(spec_with(tmp_path, **training)),
        lake_root=f"file://{lake}",
        run_ds="2013-01-01",
    )
    return lake, op


def test_handoff_runs_two_ranks_and_records_metrics(tmp_path):
    lake, op = handoff_on_export(
        tmp_path,
        rows_per_rank={"train": 96, "validation": 32, "test": 32},
        batch_size=32,
        world_size=2,
        epochs=2,
    )
    result = op.execute({})
    metrics = result["metrics"]
    assert metrics["world_size"] == 2
    assert len(metrics["train_loss"]) == 2
    assert result["model_uri"] == f"file://{lake}/models/flights/dt=2013-01-01"
    telemetry = json.loads((lake / "models" / "flights" / "dt=2013-01-01" / "telemetry.json").read_text())
    assert telemetry["world_size"] == 2
    # 96 rows per rank at batch 32: 3 steps per epoch on each rank, 2 epochs.
    assert telemetry["steps_per_rank"] == [6, 6]


def test_handoff_trains_a_two_rank_export_on_another_world_size(tmp_path):
    # The export was planned for 2 ranks; the spec asks for 1: the trainer plans at read time.
    lake, op = handoff_on_export(
        tmp_path,
        rows_per_rank={"train": 32, "validation": 16, "test": 16},
        batch_size=16,
        world_size=1,
        epochs=1,
    )
    metrics = op.execute({})["metrics"]
    assert metrics["world_size"] == 1
    assert metrics["plan"]["export_world_size"] == 2
    # 64 train rows on one rank at batch 16: 4 steps, nothing dropped.
    assert metrics["steps_per_rank"] == 4 and metrics["plan"]["rows_dropped_per_epoch"] == 0


class _TaskInstance:
    dag_id, run_id, map_index = "lakeprep_flights", "scheduled__2013-01-01T00:00:00+00:00", -1


def test_a_retry_resumes_from_the_killed_try_and_commits_only_a_finished_model(tmp_path):
    """A try killed after its first epoch left a checkpoint and half a model folder in staging."""
    import subprocess
    import sys

    from lakeprep_airflow.backends import trainer_args
    from lakeprep_airflow.operators.handoff import run_key, staging_path
    from tests.training.test_train import TRAINER_PATH

    lake, op = handoff_on_export(
        tmp_path,
        rows_per_rank={"train": 64, "validation": 16, "test": 16},
        batch_size=16,
        world_size=1,
        epochs=2,
        max_restarts=0,
    )
    context = {"ti": _TaskInstance()}
    committed = lake / "models" / "flights" / "dt=2013-01-01"
    staged = Path(staging_path(str(committed), run_key(context)))
    spec = op.run_spec()
    killed_try = trainer_args(
        manifest=str(lake / "export_shards" / "flights" / "dt=2013-01-01" / "manifest.json"),
        output=str(staged / "model"),
        training={**spec.training, "epochs": 1},
        seed=spec.training["seed"],
        checkpoint_dir=str(staged / "checkpoints"),
    )
    done = subprocess.run(
        [sys.executable, "-m", "lakeprep_train.train", *killed_try, "--device", "cpu"],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": TRAINER_PATH, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (staged / "model" / "model.pt").write_bytes(b"half a model")  # what the kill left behind
    assert not committed.exists()  # nothing visible until a try finishes

    metrics = op.execute(context)["metrics"]
    assert metrics["resumed_from"]["epoch"] == 1 and metrics["resumed_from"]["step"] == 0
    assert [h["epoch"] for h in metrics["history"]] == [1, 2]
    assert sorted(p.name for p in committed.iterdir()) == [
        "_SUCCESS",
        "metrics.json",
        "model.pt",
        "telemetry.json",
    ]
    import torch

    assert "state_dict" in torch.load(committed / "model.pt", weights_only=True)
    assert not staged.exists()  # the staging folder and its checkpoints are gone after the commit
