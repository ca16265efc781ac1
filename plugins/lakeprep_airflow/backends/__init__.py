"""Where `gpu_training_handoff` runs the trainer: one `Backend` class per `training.backend`.

- `local`: torchrun on the Airflow worker (`lakeprep_airflow.backends.local`).
- `spark`: `TorchDistributor` on the Spark cluster (`lakeprep_airflow.backends.spark`).
- `kubernetes`: a Kubeflow Trainer `TrainJob` or `PyTorchJob`, waited for in the
  triggerer (`lakeprep_airflow.backends.kubernetes`).

`BACKENDS` is the registry the handoff chooses from by name; the `training.backend`
knob's enum lists the same names (a test keeps them equal). The interface and the
trainer's argv are in `lakeprep_airflow.backends.base`. Heavy imports (pyspark,
kubernetes) stay inside the backends' methods: the DAG processor imports the handoff
operator, and so this package.
"""

from __future__ import annotations

from lakeprep_airflow.backends.base import Backend, TrainingRun, trainer_args
from lakeprep_airflow.backends.kubernetes import KubernetesBackend
from lakeprep_airflow.backends.local import LocalBackend
from lakeprep_airflow.backends.spark import SparkBackend

BACKENDS: dict[str, type[Backend]] = {
    backend.name: backend for backend in (LocalBackend, SparkBackend, KubernetesBackend)
}

__all__ = ["BACKENDS", "Backend", "TrainingRun", "backend_class", "trainer_args"]


def backend_class(name: object) -> type[Backend]:
    """The backend called `name`, else a ValueError that lists them all."""
    try:
        return BACKENDS[name]  # type: ignore[index]
    except (KeyError, TypeError):
        raise ValueError(
            f"training backend {name!r} is not supported; choose one of {', '.join(BACKENDS)} "
            "(spec field `training.backend`, trigger form field `training_backend`)"
        ) from None
