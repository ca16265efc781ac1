"""`GpuTrainingHandoffOperator`: hand an exported manifest to the reference trainer.

`training.backend` picks where it runs (one module each in `lakeprep_airflow.backends`,
docs/TRAINING.md); an unknown one fails before any work, listing the backends.

- `local` runs the trainer on the Airflow worker: `python -m lakeprep_train.preflight`
  first (every rank's plan, the GPUs, the memory estimate: one clear error instead of N
  failing ranks), then `torchrun --standalone --nproc-per-node N --max-restarts R`
  (NCCL on CUDA, gloo on CPU, chosen by the trainer; plain `python -m
  lakeprep_train.train` for one rank without restarts). Its output is streamed into the
  task log; a non-zero exit fails the task with the trainer's last line.
- `spark` runs the same entry point through `TorchDistributor` on the Spark cluster of
  the `spark_conn_id` connection; the outputs are read and copied as for `local`.
- `kubernetes` renders a Kubeflow Trainer `TrainJob` (or a v1 `PyTorchJob`, by
  `training.kubernetes_api`) reading the manifest from the lake and writing the model to
  the lake's staging folder (a `file://` lake the pods mount at the same path), submits
  it when the `kubernetes_conn_id` connection exists, and defers: `TrainingJobTrigger`
  polls the job from the triggerer, so no worker slot is held while it trains. On success
  `execute_complete` commits the model folder as for `local`; on failure it fails the task
  with the job's reason and the failed pods' messages, without retries when the trainer
  refused its input. `on_kill` (and the trigger's, while deferred) deletes the job.

The model folder lands like every stage's partition: the trainer writes it under
`models/<dataset>/_staging/dt=<ds>-<run key>/` (with its checkpoints beside it), and
only a finished run is committed, `_SUCCESS` inside, by a rename onto
`models/<dataset>/dt=<ds>`. The run key is the same for every try of the task, so a
retry resumes from the killed try's checkpoint; what that try had written of the model
folder is removed first. For an `hdfs://` lake the trainer reads local files: the export
partition and every file its manifest names (a prepared export's entries are the sampled
days' files, `../../../sample/<dataset>/dt=<day>/...`) are copied to a local work folder
laid out as the lake (`copy_export_down`), so the manifest's relative paths resolve there
as in the lake; the model folder is uploaded to the lake's staging folder and renamed
into place.
The task returns the trainer's metrics (its XCom), so the run summary and later tasks
read them without touching the lake.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from lakeprep_airflow import lake_fs
from lakeprep_airflow import spec as spec_mod
from lakeprep_airflow.backends import local as local_backend
from lakeprep_airflow.backends import require_backend, trainer_args
from lakeprep_airflow.backends.local import trainer_command
from lakeprep_airflow.lineage import HandoffLineageMixin
from lakeprep_airflow.locations import (
    contracts_dir,
    require_lake_root,
    training_dir,
)
from lakeprep_airflow.run_spec import RUN_SPEC_FIELDS, RunSpecMixin
from lakeprep_contracts import documents, layout

if TYPE_CHECKING:
    from airflow.sdk import Context

TRAINER_OUTPUTS = ("metrics.json", "telemetry.json", "model.pt", "transform.json")
__all__ = ["GpuTrainingHandoffOperator", "trainer_command"]


def run_key(context: Context | dict) -> str:
    """A short name for the task's run, the same for all its tries (`manual` outside a run)."""
    ti = context.get("ti") if hasattr(context, "get") else None
    if ti is None:
        return "manual"
    identity = f"{ti.dag_id}/{ti.run_id}/{getattr(ti, 'map_index', -1)}"
    return hashlib.sha1(identity.encode()).hexdigest()[:12]


def staging_path(out_path: str, key: str) -> str:
    """`<models>/<dataset>/_staging/dt=<ds>-<key>`: where a run's model folder is built."""
    parent, _, leaf = out_path.rstrip("/").rpartition("/")
    return f"{parent}/{layout.STAGING_DIR}/{leaf}-{key}"


def _copy_tree_down(fs: lake_fs.LakeFS, src: str, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for entry in fs.list_dir(src):
        if entry.is_dir:
            _copy_tree_down(fs, lake_fs.join(src, entry.name), dst / entry.name)
        else:
            (dst / entry.name).write_bytes(fs.read_bytes(lake_fs.join(src, entry.name)))


class ExportRefused(AirflowFailException, ValueError):
    """The export's manifest cannot be copied for training (it does not validate, or names a
    file outside the lake). An AirflowFailException, so the task fails without retries (the
    same manifest refuses again), and a ValueError naming the manifest and the field."""


def _named_files(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """(JSON path, reference) of each file the manifest names relative to its folder."""
    named = [
        (f"splits.{name}.shards[{i}].path", shard["path"])
        for name, split in manifest["splits"].items()
        for i, shard in enumerate(split["shards"])
    ]
    transform = manifest.get("transform")
    if transform and "://" not in transform["uri"] and not transform["uri"].startswith("/"):
        named.append(("transform.uri", transform["uri"]))
    return named


def copy_export_down(fs: lake_fs.LakeFS, lake_path: str, export_path: str, local_lake: Path) -> Path:
    """Copy an export partition and the files its manifest names to ``local_lake``, as in the lake.

    The export folder goes to ``local_lake/<its path in the lake>``. A prepared export's
    entries name the sampled days' files outside it, relative to the manifest's folder
    (``../../../sample/<dataset>/dt=<day>/...``, docs/MANIFEST.md): each is copied to the
    same place under ``local_lake``, once however many entries slice it, so the copied
    manifest's paths resolve as they do in the lake. ``lake_path`` and ``export_path`` are
    paths in ``fs``. Returns the copied manifest's local path.

    :raises ValueError: the manifest does not match its schema, or names a file that
        would resolve outside the lake root (the trainer could only read a copy of it
        from some other place).
    """
    export_in_lake = posixpath.relpath(export_path, lake_path)
    if export_in_lake == ".." or export_in_lake.startswith("../"):
        raise ValueError(f"export folder {export_path} is not inside the lake root {lake_path}")
    local_export = local_lake / export_in_lake
    _copy_tree_down(fs, export_path, local_export)
    where = lake_fs.join(export_path, "manifest.json")
    try:
        manifest = json.loads((local_export / "manifest.json").read_text())
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{where}: not a JSON document: {err}") from err
    documents.require("manifest", manifest, where)
    copied: set[str] = set()
    for field, reference in _named_files(manifest):
        in_lake = posixpath.normpath(posixpath.join(export_in_lake, reference))
        if in_lake == ".." or in_lake.startswith(("../", "/")):
            raise ValueError(
                f"{where}: {field} {reference!r} resolves outside the lake root {lake_path} "
                f"(to {posixpath.normpath(posixpath.join(export_path, reference))}); a manifest "
                "names files relative to its folder, within the lake (docs/MANIFEST.md)"
            )
        if in_lake in copied or posixpath.commonpath([in_lake, export_in_lake]) == export_in_lake:
            continue  # copied already, with the export folder or for an earlier entry
        copied.add(in_lake)
        target = local_lake.joinpath(*in_lake.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(fs.read_bytes(lake_fs.join(lake_path, in_lake)))
    return local_export / "manifest.json"


class TrainingJobRefused(AirflowFailException, ValueError):
    """The Kubernetes job cannot succeed as rendered: the API refused it, the trainer refused
    its input, or the lake is not one the pods write to. Fails without retries."""


class TrainingJobFailed(AirflowException):
    """The Kubernetes job failed, or vanished, for a reason another try may not meet."""


class GpuTrainingHandoffOperator(RunSpecMixin, HandoffLineageMixin, BaseOperator):
    """Train on the run's manifest and record the trainer's metrics.

    :param spec_path: the dataset spec (training section: backend, world_size, epochs). (templated)
    :param lake_root: lake root URI; defaults to the `lakeprep_lake_root` Variable. (templated)
    :param run_ds: the partition date, YYYY-MM-DD; defaults to the run's logical date. (templated)
    :param overrides: dotted spec paths to values from the trigger form. (templated)
    :param webhdfs_conn_id: connection used for `hdfs://` lakes.
    :param spark_conn_id: Spark connection (its master) of the `spark` backend.
    :param kubernetes_conn_id: cncf-kubernetes connection of the `kubernetes` backend; the
        job is rendered and logged but not submitted while no such connection exists. Its
        extra `lakeprep_training` may hold the cluster's `runtime`, `node_selector` and
        `tolerations`, used where the spec leaves them null.
    """

    template_fields: Sequence[str] = RUN_SPEC_FIELDS
    ui_color = "#f6e8fa"

    def __init__(
        self,
        *,
        spark_conn_id: str = "spark_default",
        kubernetes_conn_id: str = "kubernetes_default",
        **kwargs: Any,
    ) -> None:
        # The spec fields are RunSpecMixin's; an own __init__ lets Airflow apply default_args.
        super().__init__(**kwargs)
        self.spark_conn_id = spark_conn_id
        self.kubernetes_conn_id = kubernetes_conn_id

    def locations(self, spec: spec_mod.DatasetSpec) -> tuple[str, str]:
        """(export partition URI, model output URI) for this run."""
        root = require_lake_root(self.lake_root)
        return (
            spec_mod.lake_uri(root, "export_shards", spec.name, self.run_ds),
            spec_mod.lake_uri(root, layout.MODELS, spec.name, self.run_ds),
        )

    def execute(self, context: Context) -> dict[str, Any]:
        spec = self.run_spec()
        training = spec.training
        backend = require_backend(training["backend"])
        export_uri, output_uri = self.locations(spec)
        fs, export_path = lake_fs.resolve(export_uri, webhdfs_conn_id=self.webhdfs_conn_id)
        if not fs.exists(lake_fs.join(export_path, "manifest.json")):
            raise FileNotFoundError(f"no manifest at {export_uri}/manifest.json; did export_shards run?")
        if backend == "kubernetes":
            return self._train_on_kubernetes(spec, export_uri, output_uri, context)

        remote = urlparse(export_uri).scheme not in ("", "file")
        out_fs, out_path = lake_fs.resolve(output_uri, webhdfs_conn_id=self.webhdfs_conn_id)
        staged = staging_path(out_path, run_key(context))
        # The trainer writes under `work`: the lake's own staging folder on file:// lakes,
        # a local folder otherwise (the trainer reads and writes local files). Its name
        # is stable for the task's run, so a retry finds the killed attempt's checkpoint
        # and resumes; whatever else that attempt left is removed first.
        work = (
            Path(staged)
            if not remote
            else Path(tempfile.gettempdir()) / f"lakeprep-train-{Path(staged).name}"
        )
        model_dir, checkpoints = work / "model", work / "checkpoints"
        if model_dir.exists():
            self.log.info("removing %s, left by an earlier attempt (its checkpoints stay)", model_dir)
            shutil.rmtree(model_dir)
        model_dir.mkdir(parents=True)
        if remote:
            local_lake = work / "lake"
            self.log.info(
                "copying %s and the files its manifest names to %s for training", export_uri, local_lake
            )
            shutil.rmtree(local_lake, ignore_errors=True)
            _, lake_path = lake_fs.resolve(
                require_lake_root(self.lake_root), webhdfs_conn_id=self.webhdfs_conn_id
            )
            try:
                manifest = copy_export_down(fs, lake_path, export_path, local_lake)
            except ValueError as err:
                raise ExportRefused(str(err)) from err
        else:
            manifest = Path(export_path) / "manifest.json"
        args = trainer_args(
            manifest=str(manifest),
            output=str(model_dir),
            training=training,
            seed=spec.stages["sample"]["seed"],
            checkpoint_dir=str(checkpoints),
        )
        # The trainer checks the manifest against lakeprep_contracts' schema.
        pythonpath = os.pathsep.join(
            filter(None, [str(training_dir()), str(contracts_dir()), os.environ.get("PYTHONPATH")])
        )
        if backend == "spark":
            from lakeprep_airflow.backends import spark as spark_backend

            self.log.info("TorchDistributor: %s %s", spark_backend.train_file(), " ".join(args))
            spark_backend.run_trainer(
                args=args,
                training=training,
                spark_conn_id=self.spark_conn_id,
                pythonpath=pythonpath,
                app_name=f"lakeprep-train-{spec.name}-{self.run_ds}",
                spec_conf=spec.data.get("spark", {}).get("conf", {}),
            )
        else:
            env = {**os.environ, "PYTHONPATH": pythonpath}
            where = f"{export_uri}/manifest.json"
            check = local_backend.preflight_command(manifest=str(manifest), training=training)
            self.log.info("preflight: %s", " ".join(check))
            local_backend.run_trainer(check, env=env, cwd=str(work), manifest_uri=where)
            command = trainer_command(args=args, training=training)
            self.log.info("running trainer: %s", " ".join(command))
            local_backend.run_trainer(command, env=env, cwd=str(work), manifest_uri=where)
        return self._commit_trained(
            out_fs, work, staged, out_path, remote=remote, export_uri=export_uri, output_uri=output_uri
        )

    def _commit_trained(
        self,
        out_fs: lake_fs.LakeFS,
        work: Path,
        staged: str,
        out_path: str,
        *,
        remote: bool,
        export_uri: str,
        output_uri: str,
    ) -> dict[str, Any]:
        """Read the trainer's metrics, commit `work/model` as the run's model folder, clean up."""
        model_dir = work / "model"
        metrics = json.loads((model_dir / "metrics.json").read_text())
        (model_dir / layout.SUCCESS).write_bytes(b"")
        self._commit(out_fs, model_dir, staged, out_path, remote=remote)
        shutil.rmtree(work, ignore_errors=True)
        if not remote:  # the last run's staging leaves no empty `_staging/` in the lake
            with contextlib.suppress(OSError):
                work.parent.rmdir()
        self.log.info(
            "trained (%s, %d restart(s)%s): %s",
            metrics.get("precision"),
            metrics.get("restarts", 0),
            f", resumed at {metrics['resumed_from']}" if metrics.get("resumed_from") else "",
            json.dumps(metrics.get("validation", {}), sort_keys=True),
        )
        return {"model_uri": output_uri, "manifest_uri": f"{export_uri}/manifest.json", "metrics": metrics}

    def _commit(
        self, fs: lake_fs.LakeFS, model_dir: Path, staged: str, out_path: str, *, remote: bool
    ) -> None:
        """Swap the finished model folder in as the run's partition; `_SUCCESS` is already inside.

        A reader sees the old folder, no folder or the new one, never a part (as a Spark
        stage's `PartitionCommit`). On a remote lake the files are first uploaded to the
        lake's staging folder, then renamed.
        """
        if remote:
            fs.delete(staged)
            for name in (*TRAINER_OUTPUTS, layout.SUCCESS):
                if (model_dir / name).exists():
                    fs.write_bytes(lake_fs.join(staged, name), (model_dir / name).read_bytes())
            source = staged
        else:
            source = str(model_dir)
        if fs.exists(out_path):
            fs.delete(out_path)
        fs.replace(source, out_path)
        self.log.info("committed %s", out_path)

    def _kubernetes_work(self, spec: spec_mod.DatasetSpec, output_uri: str, context: Context) -> tuple:
        """(lake fs, model path in it, staging path, work folder) of a kubernetes run.

        The pods write the model where the operator commits it from: the lake's own staging
        folder, so the lake must be a `file://` one the pods mount at the same path.
        """
        out_fs, out_path = lake_fs.resolve(output_uri, webhdfs_conn_id=self.webhdfs_conn_id)
        if urlparse(output_uri).scheme not in ("", "file"):
            raise TrainingJobRefused(
                f"training.backend kubernetes writes the model to the lake's staging folder, which "
                f"the pods must mount at the same path: {output_uri} is not a file:// lake (mount the "
                "lake in the pods and the worker as file://, or train with backend local or spark)"
            )
        staged = staging_path(out_path, run_key(context))
        return out_fs, out_path, staged, Path(staged)

    def _train_on_kubernetes(
        self, spec: spec_mod.DatasetSpec, export_uri: str, output_uri: str, context: Context
    ) -> dict[str, Any]:
        """Render the run's job, submit it (adopting this run's own), defer to its trigger."""
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException

        from lakeprep_airflow.backends import kubernetes as k8s_backend
        from lakeprep_airflow.triggers.training_job import TrainingJobTrigger

        training = spec.training
        _, _, _, work = self._kubernetes_work(spec, output_uri, context)
        try:
            extra = BaseHook.get_connection(self.kubernetes_conn_id).extra_dejson
        except AirflowNotFoundException:
            extra = None
        try:
            placed = k8s_backend.placement(
                training, (extra or {}).get(k8s_backend.CONNECTION_EXTRA), self.kubernetes_conn_id
            )
            job = k8s_backend.render_job(
                name=k8s_backend.job_name(spec.name, self.run_ds, run_key(context)),
                training=training,
                # The pods read the manifest from the lake and write beside its staging folder,
                # the checkpoints next to the model: a restarted pod's trainer resumes.
                args=trainer_args(
                    manifest=f"{export_uri}/manifest.json",
                    output=str(work / "model"),
                    training=training,
                    seed=spec.stages["sample"]["seed"],
                    checkpoint_dir=str(work / "checkpoints"),
                ),
                placed=placed,
                labels={"lakeprep/dataset": spec.name, "lakeprep/run-ds": self.run_ds},
            )
        except ValueError as err:
            raise TrainingJobRefused(str(err)) from err
        kind, name, namespace = job["kind"], job["metadata"]["name"], job["metadata"]["namespace"]
        self.log.info("%s: %s", kind, json.dumps(job, sort_keys=True))
        result = {"backend": "kubernetes", "manifest_uri": f"{export_uri}/manifest.json", "job": job}
        if extra is None:
            self.log.warning("no connection %r: %s rendered, not submitted", self.kubernetes_conn_id, kind)
            return {**result, "submitted": False}
        if (work / "model").exists():
            self.log.info("removing %s, left by an earlier attempt (its checkpoints stay)", work / "model")
            shutil.rmtree(work / "model")
        self._job = job
        try:
            outcome = k8s_backend.submit(job, kubernetes_conn_id=self.kubernetes_conn_id, log=self.log.info)
        except k8s_backend.JobRefused as err:
            raise TrainingJobRefused(str(err)) from err
        self.log.info(
            "%s %s/%s %s; logs: kubectl logs -f -n %s -l %s=%s --prefix",
            kind,
            namespace,
            name,
            outcome,
            namespace,
            k8s_backend.api_of(job).pod_label,
            name,
        )
        self.defer(
            trigger=TrainingJobTrigger(
                api=training["kubernetes_api"],
                name=name,
                namespace=namespace,
                kubernetes_conn_id=self.kubernetes_conn_id,
                poll_seconds=training["poll_seconds"],
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """The trigger's event: commit the model of a finished job, or fail with the job's reason."""
        label = f"{event.get('name')} in namespace {event.get('namespace')}"
        status = event.get("status")
        if status == "failed":
            if event.get("refusal"):
                raise TrainingJobRefused(event["message"])
            raise TrainingJobFailed(event["message"])
        if status != "succeeded":
            # `deleted` (killed by someone else) or `error` (the API unreachable): a retry
            # submits again and resumes from the checkpoint.
            raise TrainingJobFailed(f"training job {label}: {status}: {event.get('message')}")
        self.log.info("%s", event.get("message"))
        spec = self.run_spec()
        export_uri, output_uri = self.locations(spec)
        out_fs, out_path, staged, work = self._kubernetes_work(spec, output_uri, context)
        if not (work / "model" / "metrics.json").exists():
            raise TrainingJobRefused(
                f"training job {label} succeeded but left no {work / 'model' / 'metrics.json'}: the "
                "pods must mount the lake at the path the worker sees (docs/TRAINING.md)"
            )
        return self._commit_trained(
            out_fs, work, staged, out_path, remote=False, export_uri=export_uri, output_uri=output_uri
        )

    def on_kill(self) -> None:
        """Delete the job this try submitted (while deferred, the trigger's on_kill does)."""
        job = getattr(self, "_job", None)
        if job is None:
            return
        from lakeprep_airflow.backends import kubernetes as k8s_backend

        if k8s_backend.delete(job, kubernetes_conn_id=self.kubernetes_conn_id):
            self.log.info("deleted %s %s", job["kind"], job["metadata"]["name"])
