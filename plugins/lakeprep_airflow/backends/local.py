"""Backend `local`: the trainer on the Airflow worker, torchrun for several ranks.

`python -m lakeprep_train.preflight` runs first (every rank's plan, the GPUs, the memory
estimate: one clear error instead of N failing ranks), then `torchrun --standalone
--nproc-per-node N --max-restarts R` (NCCL on CUDA, gloo on CPU, chosen by the trainer;
plain `python -m lakeprep_train.train` for one rank without restarts). Their output is
streamed into the task log; a non-zero exit fails the task with the trainer's last line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from lakeprep_airflow.backends.base import Backend, TrainingRun, torchrun_options, trainer_pythonpath


def trainer_command(
    *, args: list[str], training: Mapping[str, Any], python: str = sys.executable
) -> list[str]:
    """The trainer's command line for `args` (pure, so tests compare it as a list).

    One rank without restarts runs the module directly; otherwise torchrun starts
    `world_size` ranks and restarts them `max_restarts` times after a failure (the
    trainer resumes from its checkpoint). torch.distributed.run is torchrun; calling it
    through this interpreter avoids depending on PATH.
    """
    world_size = training["world_size"]
    if world_size == 1 and not training["max_restarts"]:
        return [python, "-m", "lakeprep_train.train", *args]
    return [
        python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={world_size}",
        *torchrun_options(training),
        "-m",
        "lakeprep_train.train",
        *args,
    ]


def preflight_command(
    *, manifest: str, training: Mapping[str, Any], python: str = sys.executable
) -> list[str]:
    """`lakeprep_train.preflight` for this host: every rank's plan, the GPUs, the memory estimate."""
    return [
        python,
        "-m",
        "lakeprep_train.preflight",
        "--manifest",
        manifest,
        "--world-size",
        str(training["world_size"]),
    ]


def run_trainer(command: list[str], *, env: dict[str, str], cwd: str, manifest_uri: str) -> None:
    """Run `command`, its output streamed into the task log; a non-zero exit raises with its last line."""
    from airflow.providers.standard.hooks.subprocess import SubprocessHook

    result = SubprocessHook().run_command(command=command, env=env, cwd=cwd)
    if result.exit_code != 0:
        raise RuntimeError(f"{command[2]} exited with {result.exit_code} on {manifest_uri}: {result.output}")


class LocalBackend(Backend):
    """`training.backend: local`: preflight, then the trainer, in the worker's own process tree."""

    name = "local"

    def train(self, run: TrainingRun) -> None:
        run.clear_model_dir(self.log)
        run.model_dir.mkdir(parents=True)
        env = {**os.environ, "PYTHONPATH": trainer_pythonpath()}
        check = preflight_command(manifest=run.manifest, training=run.training)
        self.log.info("preflight: %s", " ".join(check))
        run_trainer(check, env=env, cwd=str(run.work), manifest_uri=run.manifest_uri)
        command = trainer_command(args=run.trainer_args(), training=run.training)
        self.log.info("running trainer: %s", " ".join(command))
        run_trainer(command, env=env, cwd=str(run.work), manifest_uri=run.manifest_uri)
