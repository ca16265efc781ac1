"""Backend `local`: the trainer on the Airflow worker, torchrun for several ranks."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from lakeprep_airflow.backends import torchrun_options


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
