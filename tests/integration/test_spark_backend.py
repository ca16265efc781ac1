"""Backend `spark`: the handoff trains through TorchDistributor on the loopback standalone cluster.

Two CPU processes (gloo), each a barrier task on the cluster's executor
(`local_mode: false`, `use_gpu: false`), running `lakeprep_train/train.py` on a tiny
two-rank export built by the trainer tests' `write_export`.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import cluster_module
from tests.training.conftest import write_export

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
RUN_DS = "2013-01-01"


def spark_handoff(tmp_path: Path, *, export_world_size: int, **training):
    from lakeprep_airflow.operators.handoff import GpuTrainingHandoffOperator

    lake = tmp_path / "lake"
    write_export(
        lake / "export_shards" / "flights" / f"dt={RUN_DS}",
        world_size=export_world_size,
        rows_per_rank={"train": 64, "validation": 32, "test": 32},
        batch_size=32,
    )
    data = yaml.safe_load((REPO / "pipelines" / "flights.yaml").read_text())
    data["training"].update(backend="spark", use_gpu=False, local_mode=False, epochs=1, **training)
    spec = tmp_path / "flights.yaml"
    spec.write_text(yaml.safe_dump(data))
    op = GpuTrainingHandoffOperator(
        task_id="gpu_training_handoff", spec_path=str(spec), lake_root=f"file://{lake}", run_ds=RUN_DS
    )
    return lake, op


def completed_apps() -> list[str]:
    """Names of the applications the standalone master has seen finish (its JSON UI)."""
    port = cluster_module.Ports.from_env().spark_master_ui
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/", timeout=10) as response:
        return [app["name"] for app in json.load(response)["completedapps"]]


def test_torch_distributor_trains_two_cpu_ranks_on_the_cluster(hdfs_spark_cluster, tmp_path):
    lake, op = spark_handoff(tmp_path, export_world_size=2, world_size=2, num_processes=2)
    result = op.execute({})
    metrics = result["metrics"]
    assert metrics["world_size"] == 2 and metrics["device"] == "cpu"
    assert len(metrics["train_loss"]) == 1
    model = lake / "models" / "flights" / f"dt={RUN_DS}"
    assert result["model_uri"] == f"file://{model}"
    assert (model / "model.pt").stat().st_size > 0
    # 64 rows per rank at batch 32: 2 steps on each of the two ranks.
    assert json.loads((model / "telemetry.json").read_text())["steps_per_rank"] == [2, 2]
    # The ranks ran as an application of the standalone master, not in-process.
    assert f"lakeprep-train-flights-{RUN_DS}" in completed_apps()


def test_a_failing_rank_fails_the_task_with_the_trainers_reason(hdfs_spark_cluster, tmp_path, capfd):
    lake, op = spark_handoff(tmp_path, export_world_size=2, world_size=2)
    # A train shard is gone: every rank's preflight refuses before any collective.
    shard = "shard-00001.parquet"
    (lake / "export_shards" / "flights" / f"dt={RUN_DS}" / "shards" / "train" / shard).unlink()
    with pytest.raises(RuntimeError, match=r"TorchDistributor\(num_processes=2.*exited with 2 on rank 0"):
        op.execute({})
    assert not (lake / "models" / "flights" / f"dt={RUN_DS}" / "metrics.json").exists()
    # The ranks' output reached the driver, so the task log: it names the missing shard.
    captured = capfd.readouterr()
    assert shard in captured.out + captured.err
