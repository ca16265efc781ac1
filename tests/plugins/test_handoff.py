from __future__ import annotations

import sys

from lakeprep_airflow.operators.handoff import trainer_command


def test_single_rank_runs_the_trainer_module():
    cmd = trainer_command(
        manifest="/m.json", output="/out", world_size=1, epochs=3, learning_rate=0.01, seed=7
    )
    assert cmd == [
        sys.executable,
        "-m",
        "lakeprep_train.train",
        "--manifest",
        "/m.json",
        "--output",
        "/out",
        "--epochs",
        "3",
        "--lr",
        "0.01",
        "--seed",
        "7",
    ]


def test_several_ranks_go_through_torchrun():
    cmd = trainer_command(
        manifest="/m.json", output="/out", world_size=2, epochs=1, learning_rate=0.1, seed=0
    )
    assert cmd[:5] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    assert cmd[5:8] == ["-m", "lakeprep_train.train", "--manifest"]
