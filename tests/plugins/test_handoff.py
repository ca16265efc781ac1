from __future__ import annotations

import sys

import pytest

from lakeprep_airflow.backends import trainer_args
from lakeprep_airflow.backends.local import preflight_command
from lakeprep_airflow.operators.handoff import run_key, staging_path, trainer_command
from lakeprep_contracts import knobs


def training(**changes):
    return {**knobs.defaults("training"), **changes}


ARGS = trainer_args(
    manifest="/m.json",
    output="/out",
    training=training(epochs=3, learning_rate=0.01, checkpoint_every_steps=50, grad_accumulation_steps=2),
    seed=7,
    checkpoint_dir="/ckpt",
)


def test_trainer_args_carry_the_spec_training_section():
    assert ARGS == [
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
        "--precision",
        "auto",
        "--grad-accumulation",
        "2",
        "--checkpoint-dir",
        "/ckpt",
        "--checkpoint-every",
        "50",
    ]
    no_checkpoints = trainer_args(manifest="/m.json", output="/out", training=training(), seed=0)
    assert "--checkpoint-dir" not in no_checkpoints


def test_single_rank_without_restarts_runs_the_trainer_module():
    cmd = trainer_command(args=ARGS, training=training(world_size=1, max_restarts=0))
    assert cmd == [sys.executable, "-m", "lakeprep_train.train", *ARGS]


@pytest.mark.parametrize(("world_size", "restarts"), [(2, 0), (2, 3), (1, 2)])
def test_several_ranks_or_restarts_go_through_torchrun(world_size, restarts):
    cmd = trainer_command(args=ARGS, training=training(world_size=world_size, max_restarts=restarts))
    assert cmd == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={world_size}",
        f"--max-restarts={restarts}",
        "-m",
        "lakeprep_train.train",
        *ARGS,
    ]


def test_preflight_checks_the_world_size_of_the_spec():
    cmd = preflight_command(manifest="/m.json", training=training(world_size=4))
    assert cmd == [
        sys.executable,
        "-m",
        "lakeprep_train.preflight",
        "--manifest",
        "/m.json",
        "--world-size",
        "4",
    ]


class _TI:
    def __init__(self, dag_id, run_id, map_index=-1):
        self.dag_id, self.run_id, self.map_index = dag_id, run_id, map_index


def test_run_key_is_stable_across_tries_and_differs_between_runs():
    first = run_key({"ti": _TI("lakeprep_flights", "scheduled__2013-01-01")})
    assert first == run_key({"ti": _TI("lakeprep_flights", "scheduled__2013-01-01")})
    assert first != run_key({"ti": _TI("lakeprep_flights_train", "scheduled__2013-01-01")})
    assert first != run_key({"ti": _TI("lakeprep_flights", "manual__2013-01-01")})
    assert run_key({}) == "manual"


def test_staging_is_a_hidden_sibling_of_the_model_partition():
    assert (
        staging_path("/lake/models/flights/dt=2013-01-01", "abc")
        == "/lake/models/flights/_staging/dt=2013-01-01-abc"
    )
