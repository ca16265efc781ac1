"""`GpuTrainingHandoffOperator`: hand an exported manifest to the reference trainer.

`training.backend` picks where the trainer runs: one `Backend` class each in
`lakeprep_airflow.backends` (`local`, `spark`, `kubernetes`; docs/TRAINING.md), chosen by
name from its registry; an unknown one fails before any work, listing the backends. The
operator stages, runs the backend and commits; the staging, the copy-down of a remote
lake's export and the commit below are the same for every backend.

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
into place. A backend that reads the lake itself (`kubernetes`) gets the lake's manifest
URI and writes into the lake's staging folder.
The task returns the trainer's metrics (its XCom), so the run summary and later tasks
read them without touching the lake.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import posixpath
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from lakeprep_airflow import lake_fs
from lakeprep_airflow import spec as spec_mod
from lakeprep_airflow.backends import Backend, TrainingRun, backend_class
from lakeprep_airflow.lineage import HandoffLineageMixin
from lakeprep_airflow.locations import require_lake_root
from lakeprep_airflow.run_spec import RUN_SPEC_FIELDS, RunSpecMixin
from lakeprep_contracts import documents, layout

if TYPE_CHECKING:
    import logging

    from airflow.sdk import Context

TRAINER_OUTPUTS = layout.MODEL_FILES


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
    where = lake_fs.join(export_path, layout.MANIFEST)
    try:
        manifest = json.loads((local_export / layout.MANIFEST).read_text())
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
    return local_export / layout.MANIFEST


@dataclass(frozen=True)
class ModelStaging:
    """Where a run's model folder is built, and the partition it is committed onto."""

    fs: lake_fs.LakeFS  # the lake's filesystem
    partition: str  # `models/<dataset>/dt=<ds>` in `fs`
    staged: str  # its staging folder in `fs`
    work: Path  # the trainer's folder: `model/`, `checkpoints/` (and `lake/`, a copied export)
    remote: bool  # the lake is not on this host's filesystem


def model_staging(model_uri: str, key: str, *, webhdfs_conn_id: str) -> ModelStaging:
    """The run's `ModelStaging`: the trainer works in the lake's own staging folder on a
    file:// lake, in a local folder of the same name otherwise (the trainer reads and writes
    local files). The name is stable for the task's run, so a retry finds its checkpoint."""
    fs, partition = lake_fs.resolve(model_uri, webhdfs_conn_id=webhdfs_conn_id)
    staged = staging_path(partition, key)
    remote = urlparse(model_uri).scheme not in ("", "file")
    work = Path(tempfile.gettempdir()) / f"lakeprep-train-{Path(staged).name}" if remote else Path(staged)
    return ModelStaging(fs=fs, partition=partition, staged=staged, work=work, remote=remote)


def commit_model(staging: ModelStaging, log: logging.Logger) -> dict[str, Any]:
    """Commit `work/model` as the run's model partition, `_SUCCESS` inside; returns its metrics.

    A reader sees the old folder, no folder or the new one, never a part (as a Spark
    stage's `PartitionCommit`). On a remote lake the files are first uploaded to the
    lake's staging folder, then renamed. The work folder (checkpoints too) goes after.
    """
    model_dir, fs = staging.work / "model", staging.fs
    metrics = json.loads((model_dir / layout.METRICS).read_text())
    (model_dir / layout.SUCCESS).write_bytes(b"")
    if staging.remote:
        fs.delete(staging.staged)
        for name in (*TRAINER_OUTPUTS, layout.SUCCESS):
            if (model_dir / name).exists():
                fs.write_bytes(lake_fs.join(staging.staged, name), (model_dir / name).read_bytes())
        source = staging.staged
    else:
        source = str(model_dir)
    if fs.exists(staging.partition):
        fs.delete(staging.partition)
    fs.replace(source, staging.partition)
    log.info("committed %s", staging.partition)
    shutil.rmtree(staging.work, ignore_errors=True)
    if not staging.remote:  # the last run's staging leaves no empty `_staging/` in the lake
        with contextlib.suppress(OSError):
            staging.work.parent.rmdir()
    return metrics


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
        self._backend: Backend | None = None

    def locations(self, spec: spec_mod.DatasetSpec) -> tuple[str, str]:
        """(export partition URI, model output URI) for this run."""
        root = require_lake_root(self.lake_root)
        return (
            spec_mod.lake_uri(root, "export_shards", spec.name, self.run_ds),
            spec_mod.lake_uri(root, layout.MODELS, spec.name, self.run_ds),
        )

    def backend(self, spec: spec_mod.DatasetSpec) -> Backend:
        """The spec's `training.backend`, with this task's `<name>_conn_id` connection."""
        backend = backend_class(spec.training["backend"])
        conn_id = getattr(self, f"{backend.name}_conn_id") if backend.uses_connection else None
        return backend(conn_id=conn_id, log=self.log)

    def execute(self, context: Context) -> dict[str, Any]:
        spec = self.run_spec()
        self._backend = backend = self.backend(spec)  # an unknown name fails here, before any work
        export_uri, model_uri = self.locations(spec)
        manifest_uri = f"{export_uri}/manifest.json"
        fs, export_path = lake_fs.resolve(export_uri, webhdfs_conn_id=self.webhdfs_conn_id)
        if not fs.exists(lake_fs.join(export_path, layout.MANIFEST)):
            raise FileNotFoundError(f"no manifest at {manifest_uri}; did export_shards run?")
        backend.prepare(model_uri)
        staging = model_staging(model_uri, run_key(context), webhdfs_conn_id=self.webhdfs_conn_id)
        if not backend.reads_local_files:
            manifest = manifest_uri
        elif staging.remote:
            manifest = str(self._copy_export_down(fs, export_uri, export_path, staging.work / "lake"))
        else:
            manifest = str(Path(export_path) / layout.MANIFEST)
        run = TrainingRun(
            dataset=spec.name,
            run_ds=self.run_ds,
            run_key=run_key(context),
            training=spec.training,
            seed=spec.training["seed"],
            spark_conf=spec.data.get("spark", {}).get("conf", {}),
            manifest=manifest,
            manifest_uri=manifest_uri,
            work=staging.work,
        )
        untrained = backend.train(run)  # a backend that waits in the triggerer defers here
        if untrained is not None:
            return untrained
        return self._trained(staging, manifest_uri, model_uri)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """A deferred backend's trigger event: commit the model, or fail with the backend's reason."""
        spec = self.run_spec()
        backend = self.backend(spec)
        export_uri, model_uri = self.locations(spec)
        backend.prepare(model_uri)
        staging = model_staging(model_uri, run_key(context), webhdfs_conn_id=self.webhdfs_conn_id)
        backend.result(event, staging.work)
        return self._trained(staging, f"{export_uri}/manifest.json", model_uri)

    def on_kill(self) -> None:
        """Stop what the backend started (a Kubernetes job; while deferred, the trigger's on_kill)."""
        if self._backend is not None:
            self._backend.on_kill()

    def _copy_export_down(
        self, fs: lake_fs.LakeFS, export_uri: str, export_path: str, local_lake: Path
    ) -> Path:
        """`copy_export_down` into a fresh `local_lake`; a manifest it refuses fails without retries."""
        self.log.info(
            "copying %s and the files its manifest names to %s for training", export_uri, local_lake
        )
        shutil.rmtree(local_lake, ignore_errors=True)
        _, lake_path = lake_fs.resolve(
            require_lake_root(self.lake_root), webhdfs_conn_id=self.webhdfs_conn_id
        )
        try:
            return copy_export_down(fs, lake_path, export_path, local_lake)
        except ValueError as err:
            raise ExportRefused(str(err)) from err

    def _trained(self, staging: ModelStaging, manifest_uri: str, model_uri: str) -> dict[str, Any]:
        """Commit the model folder; the task's result (its XCom) names it and holds the metrics."""
        metrics = commit_model(staging, self.log)
        self.log.info(
            "trained (%s, %d restart(s)%s): %s",
            metrics.get("precision"),
            metrics.get("restarts", 0),
            f", resumed at {metrics['resumed_from']}" if metrics.get("resumed_from") else "",
            json.dumps(metrics.get("validation", {}), sort_keys=True),
        )
        return {"model_uri": model_uri, "manifest_uri": manifest_uri, "metrics": metrics}
