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
