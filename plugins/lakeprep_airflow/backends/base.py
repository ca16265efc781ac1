"""`Backend`: what the handoff asks of a place that runs the trainer, and what it hands it.

The handoff operator stages (the run's work folder, a remote lake's export copied down),
hands a `TrainingRun` to the backend the spec names, and commits the model folder the
trainer wrote; a backend only runs the trainer. Every backend runs the same entry point,
`lakeprep_train.train`, with the argv of `trainer_args`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from lakeprep_airflow.locations import contracts_dir, training_dir

if TYPE_CHECKING:
    import logging

# The handoff's method that a deferred backend resumes; it calls the backend's `result`.
RESUME_METHOD = "execute_complete"


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


def trainer_pythonpath() -> str:
    """PYTHONPATH of a trainer on this host: the training code, and the contracts it checks
    the manifest against (lakeprep_contracts' schema), before the worker's own."""
    return os.pathsep.join(
        filter(None, [str(training_dir()), str(contracts_dir()), os.environ.get("PYTHONPATH")])
    )


@dataclass(frozen=True)
class TrainingRun:
    """One run of the trainer, as the handoff hands it to a backend.

    `work` holds the trainer's `model/` and `checkpoints/` folders. Its name is stable
    for the task's run, so a retry finds the killed try's checkpoint and resumes.
    """

    dataset: str
    run_ds: str
    run_key: str  # the same for every try of the task (the handoff's `run_key`)
    training: Mapping[str, Any]  # the spec's training section
    seed: int
    spark_conf: Mapping[str, str]  # the spec's `spark.conf`
    manifest: str  # where the trainer reads the manifest: a path on this host, or the lake's URI
    manifest_uri: str  # the manifest in the lake, for messages
    work: Path

    @property
    def model_dir(self) -> Path:
        return self.work / "model"

    def trainer_args(self) -> list[str]:
        """`trainer_args` for this run: the model into `work/model`, checkpoints beside it."""
        return trainer_args(
            manifest=self.manifest,
            output=str(self.model_dir),
            training=self.training,
            seed=self.seed,
            checkpoint_dir=str(self.work / "checkpoints"),
        )

    def clear_model_dir(self, log: logging.Logger) -> None:
        """Remove what an earlier try wrote of the model folder; its checkpoints stay."""
        if self.model_dir.exists():
            log.info("removing %s, left by an earlier attempt (its checkpoints stay)", self.model_dir)
            shutil.rmtree(self.model_dir)


class Backend:
    """Where `gpu_training_handoff` runs the trainer: one subclass per `training.backend` value.

    The handoff calls `prepare` before any work, then `train`; a backend that waits in
    the triggerer raises `TaskDeferred` resuming `RESUME_METHOD`, which calls `result`
    with the trigger's event. `on_kill` stops what `train` started.

    :param conn_id: the connection of this backend, the handoff's `<name>_conn_id` argument
        (None for a backend without one, `uses_connection` False).
    :param log: the task's logger.
    """

    name: ClassVar[str]
    # True: the trainer reads and writes files on this host, so a remote lake's export is
    # copied down first and the model uploaded. False: it reads the manifest from the
    # lake and writes the model into the lake's staging folder itself.
    reads_local_files: ClassVar[bool] = True
    uses_connection: ClassVar[bool] = False

    def __init__(self, *, conn_id: str | None, log: logging.Logger) -> None:
        self.conn_id = conn_id
        self.log = log

    def prepare(self, model_uri: str) -> None:
        """Refuse, before any work, a model partition this backend cannot write."""

    def train(self, run: TrainingRun) -> dict[str, Any] | None:
        """Run the trainer until `run.model_dir` holds the model and `metrics.json` (None: the
        handoff commits it), or return the task's result when nothing was trained."""
        raise NotImplementedError

    def result(self, event: Mapping[str, Any], work: Path) -> None:
        """A deferred run's trigger event: return when `work/model` is written, else raise."""
        raise TypeError(f"training backend {self.name!r} does not defer; no trigger event to read")

    def on_kill(self) -> None:
        """Stop what `train` started elsewhere (nothing for a backend that runs in the task)."""
