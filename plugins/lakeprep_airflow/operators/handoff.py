"""`GpuTrainingHandoffOperator`: hand an exported manifest to the reference trainer.

Backend `local` (the one built so far) runs the trainer on the Airflow worker: plain
`python -m lakeprep_train.train` for one rank, `torchrun --standalone --nproc-per-node N`
for several (NCCL on CUDA, gloo on CPU, chosen by the trainer). The trainer's output is
streamed into the task log; a non-zero exit fails the task with the trainer's last line.

For an `hdfs://` lake the export partition is copied to a local work folder first (the
trainer reads local files) and the trainer's outputs are copied back to `output_uri`.
The task returns the trainer's metrics (its XCom), so the run summary and later tasks
read them without touching the lake.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from airflow.sdk import BaseOperator

from lakeprep_airflow import lake_fs
from lakeprep_airflow import spec as spec_mod
from lakeprep_airflow.locations import (
    contracts_dir,
    require_lake_root,
    training_dir,
)
from lakeprep_airflow.run_spec import RUN_SPEC_FIELDS, RunSpecMixin

if TYPE_CHECKING:
    from airflow.sdk import Context

TRAINER_OUTPUTS = ("metrics.json", "telemetry.json", "model.pt", "transform.json")


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
    if world_size == 1:
        return [python, *args]
    # torch.distributed.run is torchrun; calling it through this interpreter avoids
    # depending on PATH.
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world_size}", *args]


def _copy_tree_down(fs: lake_fs.LakeFS, src: str, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for entry in fs.list_dir(src):
        if entry.is_dir:
            _copy_tree_down(fs, lake_fs.join(src, entry.name), dst / entry.name)
        else:
            (dst / entry.name).write_bytes(fs.read_bytes(lake_fs.join(src, entry.name)))


class GpuTrainingHandoffOperator(RunSpecMixin, BaseOperator):
    """Train on the run's manifest and record the trainer's metrics.

    :param spec_path: the dataset spec (training section: backend, world_size, epochs). (templated)
    :param lake_root: lake root URI; defaults to the `lakeprep_lake_root` Variable. (templated)
    :param run_ds: the partition date, YYYY-MM-DD; defaults to the run's logical date. (templated)
    :param overrides: dotted spec paths to values from the trigger form. (templated)
    :param webhdfs_conn_id: connection used for `hdfs://` lakes.
    """

    template_fields: Sequence[str] = RUN_SPEC_FIELDS
    ui_color = "#f6e8fa"

    def __init__(self, **kwargs: Any) -> None:
        # The spec fields are RunSpecMixin's; an own __init__ lets Airflow apply default_args.
        super().__init__(**kwargs)

    def locations(self, spec: spec_mod.DatasetSpec) -> tuple[str, str]:
        """(export partition URI, model output URI) for this run."""
        root = require_lake_root(self.lake_root)
        return (
            spec_mod.lake_uri(root, "export_shards", spec.name, self.run_ds),
            spec_mod.lake_uri(root, "models", spec.name, self.run_ds),
        )

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow.providers.standard.hooks.subprocess import SubprocessHook

        spec = self.run_spec()
        training = spec.training
        if training["backend"] != "local":
            raise ValueError(f"training backend {training['backend']!r} is not supported; use 'local'")
        export_uri, output_uri = self.locations(spec)
        fs, export_path = lake_fs.resolve(export_uri, webhdfs_conn_id=self.webhdfs_conn_id)
        if not fs.exists(lake_fs.join(export_path, "manifest.json")):
            raise FileNotFoundError(f"no manifest at {export_uri}/manifest.json; did export_shards run?")

        remote = urlparse(export_uri).scheme not in ("", "file")
        work = Path(tempfile.mkdtemp(prefix=f"lakeprep-train-{spec.name}-"))
        try:
            if remote:
                self.log.info("copying %s to %s for training", export_uri, work / "export")
                _copy_tree_down(fs, export_path, work / "export")
                manifest, out_dir = work / "export" / "manifest.json", work / "model"
            else:
                manifest, out_dir = Path(export_path) / "manifest.json", Path(urlparse(output_uri).path)
            out_dir.mkdir(parents=True, exist_ok=True)
            command = trainer_command(
                manifest=str(manifest),
                output=str(out_dir),
                world_size=training["world_size"],
                epochs=training["epochs"],
                learning_rate=training["learning_rate"],
                seed=spec.stages["sample"]["seed"],
            )
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join(
                    # The trainer checks the manifest against lakeprep_contracts' schema.
                    filter(None, [str(training_dir()), str(contracts_dir()), os.environ.get("PYTHONPATH")])
                ),
            }
            self.log.info("running trainer: %s", " ".join(command))
            result = SubprocessHook().run_command(command=command, env=env, cwd=str(work))
            if result.exit_code != 0:
                raise RuntimeError(
                    f"trainer exited with {result.exit_code} on {export_uri}/manifest.json: {result.output}"
                )
            metrics = json.loads((out_dir / "metrics.json").read_text())
            if remote:
                out_fs, out_path = lake_fs.resolve(output_uri, webhdfs_conn_id=self.webhdfs_conn_id)
                out_fs.makedirs(out_path)
                for name in TRAINER_OUTPUTS:
                    if (out_dir / name).exists():
                        out_fs.write_bytes(lake_fs.join(out_path, name), (out_dir / name).read_bytes())
        finally:
            shutil.rmtree(work, ignore_errors=True)
        self.log.info("trained: %s", json.dumps(metrics.get("validation", {}), sort_keys=True))
        return {"model_uri": output_uri, "manifest_uri": f"{export_uri}/manifest.json", "metrics": metrics}
