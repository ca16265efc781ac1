"""Backend `local`: the trainer on the Airflow worker, torchrun for several ranks."""

from __future__ import annotations

import sys

from lakeprep_airflow.backends import trainer_args


def trainer_command(
    *,
    manifest: str,
    output: str,
    world_size: int,
    epochs: int,
    learning_rate: float,
    seed: int,
    python: str = sys.executable,
) -> list[str]:
    """The trainer's command line (pure, so tests compare it as a list)."""
    args = [
        "-m",
        "lakeprep_train.train",
        *trainer_args(
            manifest=manifest, output=output, epochs=epochs, learning_rate=learning_rate, seed=seed
        ),
    ]
    if world_size == 1:
        return [python, *args]
    # torch.distributed.run is torchrun; calling it through this interpreter avoids
    # depending on PATH.
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world_size}", *args]


def run_trainer(command: list[str], *, env: dict[str, str], cwd: str, manifest_uri: str) -> None:
    """Run `command`, its output streamed into the task log; a non-zero exit raises with its last line."""
    from airflow.providers.standard.hooks.subprocess import SubprocessHook

    result = SubprocessHook().run_command(command=command, env=env, cwd=cwd)
    if result.exit_code != 0:
        raise RuntimeError(f"trainer exited with {result.exit_code} on {manifest_uri}: {result.output}")
