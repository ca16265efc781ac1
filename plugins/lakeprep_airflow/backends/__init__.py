"""Where `gpu_training_handoff` runs the trainer: one small module per backend.

- `local`: torchrun on the Airflow worker (`lakeprep_airflow.backends.local`).
- `spark`: `TorchDistributor` on the Spark cluster (`lakeprep_airflow.backends.spark`).
- `kubernetes`: a Kubeflow Trainer `TrainJob` or `PyTorchJob` (`lakeprep_airflow.backends.kubernetes`).

The names are declared once, as the `training.backend` knob's enum; every backend runs
the same entry point, `lakeprep_train.train`, with the argv of `trainer_args`. Heavy
imports (pyspark, kubernetes) stay inside the backend functions: the DAG processor
imports the handoff operator, and so this package.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lakeprep_contracts import knobs

BACKENDS: tuple[str, ...] = tuple(knobs.knob("training", "backend").schema["enum"])


def require_backend(name: object) -> str:
    """`name` if it is a backend, else a ValueError that lists them all."""
    if name not in BACKENDS:
        raise ValueError(
            f"training backend {name!r} is not supported; choose one of {', '.join(BACKENDS)} "
            "(spec field `training.backend`, trigger form field `training_backend`)"
        )
    return str(name)


def trainer_args(
    *,
    manifest: str,
    output: str,
    training: Mapping[str, Any],
    seed: int,
    checkpoint_dir: str | None = None,
) -> list[str]:
    """The arguments of `python -m lakeprep_train.train`, the same for every backend.

    `training` is the spec's training section (epochs, learning_rate, precision,
    grad_accumulation_steps, checkpoint_every_steps); `checkpoint_dir` is where the
    trainer keeps its checkpoint, so that a restarted trainer resumes.
    """
    args = [
        "--manifest",
        manifest,
        "--output",
        output,
        "--epochs",
        str(training["epochs"]),
        "--lr",
        str(training["learning_rate"]),
        "--seed",
        str(seed),
        "--precision",
        training["precision"],
        "--grad-accumulation",
        str(training["grad_accumulation_steps"]),
    ]
    if checkpoint_dir is not None:
        args += [
            "--checkpoint-dir",
            checkpoint_dir,
            "--checkpoint-every",
            str(training["checkpoint_every_steps"]),
        ]
    return args


def torchrun_options(training: Mapping[str, Any]) -> list[str]:
    """torchrun's options from the spec: restarts of the worker group after a rank fails."""
    return [f"--max-restarts={training['max_restarts']}"]
