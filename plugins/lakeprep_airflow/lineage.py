"""OpenLineage for lakeprep's tasks: which task read and wrote which lake partition.

The Airflow OpenLineage provider emits a START and a COMPLETE (or FAIL) event for every
task once a transport is configured (docs/LINEAGE.md); it asks the operator for its
datasets through `get_openlineage_facets_on_start/complete/failure` (the provider's
`DefaultExtractor`). The mixins here answer for lakeprep's operators:

- datasets are named as OpenLineage names files and HDFS paths (its naming spec, and what
  the OpenLineage Spark listener reports for the same folders): namespace `file` or
  `hdfs://<namenode>:<port>`, name the absolute path of the partition;
- START names what the task will read and write, from the spec's wiring
  (`spec.stage_io`); COMPLETE names what each stage recorded it read
  (`_lakeprep_report.json` `inputs`, the reference tables, the export's transform),
  so a window stage lists the days `wait_for_window` decided; FAIL repeats START (a failed
  stage committed nothing, and an older report would name another run's reads);
- the run facet `lakeprep` carries the dataset, date, stages, the spec's `config_hash`
  (as the manifest records it) and, where the task's output holds the fitted transform,
  its sha256; such an output also carries the dataset facet `lakeprepTransform`.

Spark stages also run the OpenLineage Spark listener (`spark_listener_conf`): the jar from
Maven Central (`listener_jar`, cached), the provider's transport translated to the
listener's `spark.openlineage.transport.*`, and the provider's parent-job properties so
the Spark application's events name the Airflow task as their parent.

The provider calls these hooks in a forked child of the task process and logs (never
raises) what fails there, so they read only the spec file and the lake: no XCom, no
Airflow API call.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from attrs import define

from lakeprep_airflow import lake_fs
from lakeprep_airflow import spec as spec_mod
from lakeprep_contracts import layout

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context

log = logging.getLogger(__name__)

# The OpenLineage Spark integration for Scala 2.13 (Spark 4.x), run with PySpark 4.3.0.
SPARK_LISTENER_ARTIFACT = "io.openlineage:openlineage-spark_2.13:1.53.0"
SPARK_LISTENER_CLASS = "io.openlineage.spark.agent.OpenLineageSparkListener"
# A deployment that ships the jar (an image without Maven) points this at it.
SPARK_LISTENER_JAR_ENV = "LAKEPREP_OPENLINEAGE_SPARK_JAR"
# The listener looks for connectors' lineage extensions by calling
# SecureClassLoader.defineClass reflectively (SparkOpenLineageExtensionVisitorWrapper); on
# Java 17 that needs java.security opened, else every driver logs an
# InaccessibleObjectException with its stack trace at WARN.
SPARK_LISTENER_JAVA_OPTIONS = "--add-opens=java.base/java.security=ALL-UNNAMED"


# --------------------------------------------------------------------------- datasets and facets


def dataset_id(uri: str) -> tuple[str, str]:
    """(namespace, name) of a lake URI, as OpenLineage names files and HDFS paths.

    `file:///lake/sample/x/dt=D` -> (`file`, `/lake/sample/x/dt=D`);
    `hdfs://nn:8020/lake/...` -> (`hdfs://nn:8020`, `/lake/...`). The Spark listener names
    the folders it reads and writes the same way.
    """
    parts = urlsplit(uri)
    # A path, not a URI: decoded, as the listener's `Path.toUri().getPath()` gives it.
    path = unquote(parts.path).rstrip("/") or "/"
    if parts.scheme in ("", "file"):
        return "file", path
    if parts.scheme in ("hdfs", "webhdfs") and parts.netloc:
        return f"{parts.scheme}://{parts.netloc}", path
    if not parts.scheme or not parts.netloc:
        raise ValueError(f"lake URI {uri!r} must be file:///path or <scheme>://<host>[:port]/path")
    return f"{parts.scheme}://{parts.netloc}", path


@cache
def _facet_classes() -> tuple[type, type]:
    from openlineage.client.facet_v2 import DatasetFacet, RunFacet

    @define
    class LakeprepRunFacet(RunFacet):
        """What a lakeprep task ran: the dataset's spec (by hash), date and stages."""

        dataset: str
        ds: str
        stages: list[str]
        configHash: str  # noqa: N815 (OpenLineage facets are camelCase)
        transformSha256: str | None = None  # noqa: N815

    @define
    class LakeprepTransformDatasetFacet(DatasetFacet):
        """The fitted transform this partition holds (or was encoded with)."""

        sha256: str
        uri: str

    return LakeprepRunFacet, LakeprepTransformDatasetFacet


def make_dataset(uri: str, *, output: bool, transform: tuple[str, str] | None = None) -> Any:
    """An OpenLineage input or output dataset for a lake URI; `transform` = (uri, sha256)."""
    from openlineage.client.event_v2 import InputDataset, OutputDataset

    namespace, name = dataset_id(uri)
    facets = {}
    if transform:
        facets["lakeprepTransform"] = _facet_classes()[1](uri=transform[0], sha256=transform[1])
    return (OutputDataset if output else InputDataset)(namespace=namespace, name=name, facets=facets)


def operator_lineage(
    *,
    inputs: Iterable[str],
    outputs: Iterable[str],
    spec: spec_mod.DatasetSpec,
    ds: str,
    stages: Sequence[str],
    transform: tuple[str, str] | None = None,
) -> OperatorLineage:
    """The provider's `OperatorLineage`: inputs not produced by the task itself, every output.

    A fused task's later stages read what its earlier ones wrote: those partitions are
    its outputs, not its inputs. `transform` (uri, sha256) goes on the last output.
    """
    from airflow.providers.openlineage.extractors import OperatorLineage

    out = list(dict.fromkeys(outputs))
    read = [uri for uri in dict.fromkeys(inputs) if uri not in out]
    run_facet = _facet_classes()[0](
        dataset=spec.name,
        ds=ds,
        stages=list(stages),
        configHash=spec_mod.config_hash(spec),
        transformSha256=transform[1] if transform else None,
    )
    return OperatorLineage(
        inputs=[make_dataset(uri, output=False) for uri in read],
        outputs=[
            make_dataset(uri, output=True, transform=transform if i == len(out) - 1 else None)
            for i, uri in enumerate(out)
        ],
        run_facets={"lakeprep": run_facet},
    )


# --------------------------------------------------------------------------- what a stage recorded


def _read_json(uri: str, name: str, webhdfs_conn_id: str) -> dict[str, Any]:
    fs, path = lake_fs.resolve(uri, webhdfs_conn_id=webhdfs_conn_id)
    return json.loads(fs.read_bytes(lake_fs.join(path, name)))


def _sha256_of(uri: str, name: str, webhdfs_conn_id: str) -> str:
    fs, path = lake_fs.resolve(uri, webhdfs_conn_id=webhdfs_conn_id)
    return hashlib.sha256(fs.read_bytes(lake_fs.join(path, name))).hexdigest()


def recorded_inputs(report: Mapping[str, Any], output: str) -> list[str]:
    """The URIs a stage's `_lakeprep_report.json` says it read.

    `inputs` (its `--input` partitions), the reference tables a preprocess joined
    (`reference_snapshots`: the snapshot folder or plain folder read), and the fitted
    transform an export encoded with (`transform`, a file: its partition is named).
    """
    read = [str(u) for u in report.get("inputs") or []]
    read += [str(ref["uri"]) for ref in (report.get("reference_snapshots") or {}).values() if ref.get("uri")]
    transform = report.get("transform")
    if isinstance(transform, str) and transform.rstrip("/") != output.rstrip("/"):
        read.append(transform.rstrip("/").rsplit("/", 1)[0])
    return read


def stage_transform(stage: str, output: str, webhdfs_conn_id: str) -> tuple[str, str] | None:
    """(uri, sha256) of the transform a committed stage output holds; None for other stages."""
    if stage == "fit_transform":
        return f"{output}/transform.json", _sha256_of(output, layout.TRANSFORM, webhdfs_conn_id)
    if stage == "export_shards":
        manifest = _read_json(output, layout.MANIFEST, webhdfs_conn_id)
        ref = manifest.get("transform")
        if ref:
            return f"{output}/{ref['uri']}", ref["sha256"]
    return None


# --------------------------------------------------------------------------- operator hooks


class StageLineageMixin:
    """Lineage of `SparkStageOperator` and `WindowStageOperator`: each stage's partitions.

    Needs the RunSpecMixin fields and `stages`; put it before the Airflow base class.
    """

    stages: tuple[str, ...]

    def _planned_io(self) -> tuple[list[str], list[str]]:
        """(inputs, outputs) from the spec's wiring; a window stage's days are not known yet."""
        spec, root, ds = self.run_spec(), self.lake_root_uri(), self.run_ds  # type: ignore[attr-defined]
        inputs: list[str] = []
        outputs: list[str] = []
        for stage in self.stages:
            if stage in spec_mod.WINDOW_STAGES:
                outputs.append(spec_mod.lake_uri(root, stage, spec.name, ds))
                continue
            read, written = spec_mod.stage_io(spec, stage, lake_root=root, ds=ds)
            inputs += read
            outputs.append(written)
        return inputs, outputs

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        inputs, outputs = self._planned_io()
        return operator_lineage(
            inputs=inputs, outputs=outputs, spec=self.run_spec(), ds=self.run_ds, stages=self.stages
        )

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        spec, root, ds = self.run_spec(), self.lake_root_uri(), self.run_ds
        conn = self.webhdfs_conn_id
        inputs: list[str] = []
        outputs: list[str] = []
        transform = None
        for stage in self.stages:
            output = spec_mod.lake_uri(root, stage, spec.name, ds)
            inputs += recorded_inputs(_read_json(output, spec_mod.REPORT_NAME, conn), output)
            outputs.append(output)
            transform = stage_transform(stage, output, conn) or transform
        return operator_lineage(
            inputs=inputs, outputs=outputs, spec=spec, ds=ds, stages=self.stages, transform=transform
        )

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage:
        return self.get_openlineage_facets_on_start()


class SparkLineageMixin(StageLineageMixin):
    """`StageLineageMixin` plus the OpenLineage Spark listener on the submission.

    Goes between the lakeprep operator and `SparkSubmitOperator`: its `execute` adds the
    listener's settings to the prepared `conf` and hands over to the provider's.
    """

    def execute(self, context: Context) -> Any:
        self.conf = spark_listener_conf(self.conf or {}, context)  # type: ignore[has-type]
        return super().execute(context)  # type: ignore[misc]


class HandoffLineageMixin:
    """Lineage of `GpuTrainingHandoffOperator`: the export partition in, the model partition out."""

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        spec = self.run_spec()  # type: ignore[attr-defined]
        export_uri, model_uri = self.locations(spec)  # type: ignore[attr-defined]
        return operator_lineage(
            inputs=[export_uri], outputs=[model_uri], spec=spec, ds=self.run_ds, stages=["training"]
        )

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        spec = self.run_spec()  # type: ignore[attr-defined]
        export_uri, model_uri = self.locations(spec)  # type: ignore[attr-defined]
        transform = stage_transform("export_shards", export_uri, self.webhdfs_conn_id)
        return operator_lineage(
            inputs=[export_uri],
            outputs=[model_uri],
            spec=spec,
            ds=self.run_ds,
            stages=["training"],
            transform=transform,
        )


class DriftLineageMixin:
    """Lineage of `DriftCheckOperator`: the statistics it compared in, its report out.

    COMPLETE names the partitions whose `_stats.json` the report lists (`stats_files`: the
    day's and the window's earlier days'); START the day's own validate partition.
    """

    def _drift_io(self, read: list[str]) -> OperatorLineage:
        spec, root, ds = self.run_spec(), self.lake_root_uri(), self.run_ds  # type: ignore[attr-defined]
        output = spec_mod.lake_uri(root, "check_drift", spec.name, ds)
        return operator_lineage(inputs=read, outputs=[output], spec=spec, ds=ds, stages=["check_drift"])

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        spec, root, ds = self.run_spec(), self.lake_root_uri(), self.run_ds  # type: ignore[attr-defined]
        return self._drift_io([spec_mod.lake_uri(root, "validate", spec.name, ds)])

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        spec, root, ds = self.run_spec(), self.lake_root_uri(), self.run_ds  # type: ignore[attr-defined]
        output = spec_mod.lake_uri(root, "check_drift", spec.name, ds)
        report = _read_json(output, layout.DRIFT, self.webhdfs_conn_id)  # type: ignore[attr-defined]
        return self._drift_io([uri.rsplit("/", 1)[0] for uri in report.get("stats_files", [])])


class ReportLineageMixin:
    """Lineage of `RunReportOperator`: the run's partitions it summarises in, its report out."""

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        spec, root, ds = self.run_spec(), self.lake_root_uri(), self.run_ds  # type: ignore[attr-defined]
        read = [spec_mod.lake_uri(root, s, spec.name, ds) for s in (*spec_mod.STAGES, "check_drift")]
        read.append(spec_mod.lake_uri(root, layout.MODELS, spec.name, ds))
        output = spec_mod.lake_uri(root, layout.REPORTS, spec.name, ds)
        return operator_lineage(inputs=read, outputs=[output], spec=spec, ds=ds, stages=["write_report"])

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        return self.get_openlineage_facets_on_start()


class PartitionLineageMixin:
    """Lineage of `PartitionSensor`: the raw partition it waited for, as the run's first input."""

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        from airflow.providers.openlineage.extractors import OperatorLineage

        return OperatorLineage(inputs=[make_dataset(self.uri, output=False)])  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- the Spark listener


def _provider_transport() -> dict[str, Any]:
    """The provider's transport config: `[openlineage] transport`, else its config file's."""
    from airflow.providers.openlineage import conf

    transport = dict(conf.transport())
    if not transport and conf.config_path():
        import yaml

        transport = dict((yaml.safe_load(Path(conf.config_path()).read_text()) or {}).get("transport") or {})
    if not transport and os.getenv("OPENLINEAGE_URL"):
        transport = {"type": "http", "url": os.environ["OPENLINEAGE_URL"]}
    return transport


def spark_transport_conf(transport: Mapping[str, Any]) -> dict[str, str] | None:
    """The Spark listener's `spark.openlineage.transport.*` for a provider transport config.

    file, console and http (url, endpoint, api-key auth, compression) have the same
    meaning on both sides; None for other kinds (the task's own events still go out).
    """
    kind = transport.get("type")
    prefix = "spark.openlineage.transport."
    if kind == "console":
        return {f"{prefix}type": "console"}
    if kind == "file":
        if not transport.get("log_file_path"):
            raise ValueError("[openlineage] transport of type file needs log_file_path (the events' file)")
        # The listener appends one event per line, as the provider's file transport with append.
        return {f"{prefix}type": "file", f"{prefix}location": str(transport["log_file_path"])}
    if kind == "http":
        if not transport.get("url"):
            raise ValueError("[openlineage] transport of type http needs url (e.g. http://marquez:5000)")
        out = {f"{prefix}type": "http", f"{prefix}url": str(transport["url"])}
        if transport.get("endpoint"):
            out[f"{prefix}endpoint"] = str(transport["endpoint"])
        auth = transport.get("auth") or {}
        if auth.get("type") == "api_key" and auth.get("apiKey"):
            out[f"{prefix}auth.type"] = "api_key"
            out[f"{prefix}auth.apiKey"] = str(auth["apiKey"])
        if transport.get("compression"):
            out[f"{prefix}compression"] = str(transport["compression"])
        return out
    return None


def listener_jar(cache: Path | None = None) -> Path:
    """The OpenLineage Spark listener jar: `LAKEPREP_OPENLINEAGE_SPARK_JAR`, else fetched once.

    Fetched from Maven Central with Maven (as the Hadoop jars, hadoop/pom.xml) into the
    user's own cache (`~/.cache/lakeprep`, as the class-data archive: a jar the drivers
    load is code, so only its owner writes it), under a temporary name then renamed, so
    concurrent tasks never load a partial jar.
    """
    shipped = os.environ.get(SPARK_LISTENER_JAR_ENV)
    if shipped:
        if not Path(shipped).is_file():
            raise FileNotFoundError(f"{SPARK_LISTENER_JAR_ENV}={shipped!r} is not a file")
        return Path(shipped)
    from lakeprep_airflow.spark_startup import default_folder

    folder = cache or default_folder()
    _, artifact, version = SPARK_LISTENER_ARTIFACT.split(":")
    jar = folder / f"{artifact}-{version}.jar"
    if jar.is_file():
        return jar
    mvn = shutil.which("mvn")
    if mvn is None:
        raise FileNotFoundError(
            f"the OpenLineage Spark listener ({SPARK_LISTENER_ARTIFACT}) is not in {folder} and mvn is "
            f"not on PATH to fetch it: install Maven, or set {SPARK_LISTENER_JAR_ENV} to the jar"
        )
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        cmd = [
            mvn,
            "-B",
            "-q",
            "dependency:copy",
            f"-Dartifact={SPARK_LISTENER_ARTIFACT}",
            f"-DoutputDirectory={tmp}",
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        fetched = Path(tmp) / jar.name
        if done.returncode != 0 or not fetched.is_file():
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
            raise RuntimeError(f"{' '.join(cmd)} failed (exit {done.returncode}): {tail}")
        os.replace(fetched, jar)
    return jar


def _append(conf: Mapping[str, str], key: str, value: str) -> str:
    given = [v for v in (conf.get(key) or "").split(",") if v]
    return ",".join(given if value in given else [*given, value])


def spark_listener_conf(conf: Mapping[str, str], context: Context) -> dict[str, str]:
    """`conf` plus the OpenLineage Spark listener, when the provider emits lineage.

    The listener (jar and class), the provider's namespace and transport, and the
    provider's parent-job properties (`inject_parent_job_information_into_spark_properties`:
    the Airflow task's job name and run id, and the DAG run's), so the application's events
    hang under the task's. Settings already in `conf` (`spark.openlineage.*` from the
    spec's `spark.conf`) win. Unchanged when lineage is off, the transport is of a kind the
    listener is not given, or the jar cannot be had (both logged as warnings).
    """
    from airflow.providers.openlineage import conf as ol_conf

    if ol_conf.is_disabled():
        return dict(conf)
    transport = spark_transport_conf(_provider_transport())
    if transport is None:
        log.warning(
            "OpenLineage transport %r is not passed to the Spark listener (file, console and http "
            "are); the task's own events still go out",
            _provider_transport().get("type"),
        )
        return dict(conf)
    try:
        jar = listener_jar()
    except (FileNotFoundError, RuntimeError) as err:
        # Lineage observes the data work; a listener that cannot be had must not stop it.
        log.warning("the Spark application runs without the OpenLineage listener: %s", err)
        return dict(conf)
    from airflow.providers.openlineage.utils.spark import (
        inject_parent_job_information_into_spark_properties,
    )

    added = {
        "spark.openlineage.namespace": ol_conf.namespace(),
        **transport,
        **inject_parent_job_information_into_spark_properties({}, context),
    }
    from lakeprep_airflow.operators.spark_stage import DRIVER_JAVA_OPTIONS, with_java_options

    out = with_java_options({**added, **conf}, DRIVER_JAVA_OPTIONS, SPARK_LISTENER_JAVA_OPTIONS)
    out["spark.jars"] = _append(conf, "spark.jars", str(jar))
    out["spark.extraListeners"] = _append(conf, "spark.extraListeners", SPARK_LISTENER_CLASS)
    return out
