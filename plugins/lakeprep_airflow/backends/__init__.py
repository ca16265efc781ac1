"""Where `gpu_training_handoff` runs the trainer: one small module per backend.

- `local`: torchrun on the Airflow worker (`lakeprep_airflow.backends.local`).
- `spark`: `TorchDistributor` on the Spark cluster (`lakeprep_airflow.backends.spark`).
- `kubernetes`: a Kubeflow `PyTorchJob` (`lakeprep_airflow.backends.kubernetes`).

The names are declared once, as the `training.backend` knob's enum; every backend runs
the same entry point, `lakeprep_train.train`, with the argv of `trainer_args`. Heavy
imports (pyspark, kubernetes) stay inside the backend functions: the DAG processor
imports the handoff operator, and so this package.
"""

from __future__ import annotations

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


def trainer_args(*, manifest: str, output: str, epochs: int, learning_rate: float, seed: int) -> list[str]:
    """The arguments of `python -m lakeprep_train.train`, the same for every backend."""
    return [
        "--manifest",
        manifest,
        "--output",
        output,
        "--epochs",
        str(epochs),
        "--lr",
        str(learning_rate),
        "--seed",
        str(seed),
    ]
