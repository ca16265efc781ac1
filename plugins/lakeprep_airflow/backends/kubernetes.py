"""Backend `kubernetes`: a Kubeflow Trainer job runs the trainer; the triggerer waits for it.

`KubernetesBackend` renders the run's job, reading the manifest from the lake and writing
the model into the lake's staging folder (a `file://` lake the pods mount at the same
path), submits it when the `kubernetes_conn_id` connection exists (else it only logs
it), and defers: `TrainingJobTrigger` polls the job from the triggerer, so no worker slot
is held while it trains. A succeeded job's model folder is committed by the handoff as
for `local`; a failed job fails the task with the job's reason and the failed pods'
messages, without retries when the trainer refused its input. `on_kill` (and the
trigger's, while deferred) deletes the job.

Two job APIs, picked by `training.kubernetes_api`:

- `trainjob` (default): a Kubeflow Trainer v2 `TrainJob` (trainer.kubeflow.org/v1alpha1,
  Trainer >= 2.2) on a torch `ClusterTrainingRuntime` (`torch-distributed` unless the spec or
  the connection names another). `spec.trainer` sets the image, the command, `numNodes`,
  `numProcPerNode` and the GPU limit; node selector, tolerations and the pods' labels go in
  a `runtimePatches` entry for the runtime's `node` job. The torch plugin sets `PET_NNODES`,
  `PET_NPROC_PER_NODE`, `PET_NODE_RANK`, `PET_MASTER_ADDR` and `PET_MASTER_PORT` on the
  `node` container (kubeflow/trainer pkg/runtime/framework/plugins/torch/torch.go).
  https://www.kubeflow.org/docs/components/trainer/
- `pytorchjob`: a `PyTorchJob` (kubeflow.org/v1) for clusters with the v1 training
  operator: one Master and `workers - 1` Worker replicas, container `pytorch`.
  https://www.kubeflow.org/docs/components/training/user-guides/pytorch/

Every pod runs `torch.distributed.run` with one process per GPU, then
`lakeprep_train.train`. Rendering is pure (tests check the pod templates, metadata,
resources and tolerations against the Kubernetes client's models); `job_state` and
`pod_failures` read a job's status and its pods as the API returns them, also pure, so
the trigger that polls them (`lakeprep_airflow.triggers.training_job`) is tested on a
recorded status sequence. `submit` and `delete` go through the cncf-kubernetes provider's
`KubernetesHook`, imported only then.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from lakeprep_airflow.backends.base import RESUME_METHOD, Backend, TrainingRun, torchrun_options
from lakeprep_contracts import layout

PROVIDER_PACKAGE = "apache-airflow-providers-cncf-kubernetes"
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_RUNTIME = "torch-distributed"
# The connection's extra that holds the cluster's defaults for the null `training` knobs.
CONNECTION_EXTRA = "lakeprep_training"
CONNECTION_KNOBS = ("runtime", "node_selector", "tolerations")
# Annotation with the rendered job's digest: a retry adopts a job only if it is this one.
DIGEST_ANNOTATION = "lakeprep/rendered-sha256"
# `lakeprep_train.train.main` returns 2 when it refuses its input (the manifest, the plan,
# the memory estimate); torchrun reports a child's code as `exitcode : 2` in its summary.
TRAINER_REFUSAL_EXIT_CODE = 2
_TORCHRUN_EXIT = re.compile(r"exitcode\s*:\s*(-?\d+)")
# Failed-condition reasons that another try of the same job cannot change.
DETERMINISTIC_REASONS = frozenset({"TrainingRuntimeNotSupported"})


@dataclass(frozen=True)
class JobApi:
    """One Kubeflow job API: where it lives, its container, how its pods are labelled."""

    name: str  # the `training.kubernetes_api` value
    group: str
    version: str
    plural: str
    kind: str
    container: str  # the trainer's container, the one the operator/runtime configures
    pod_label: str  # label whose value is the job's name on every pod of the job

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


TRAINJOB = JobApi(
    "trainjob",
    "trainer.kubeflow.org",
    "v1alpha1",
    "trainjobs",
    "TrainJob",
    container="node",
    # A TrainJob runs as a JobSet of its own name; JobSet labels every pod with it.
    pod_label="jobset.sigs.k8s.io/jobset-name",
)
PYTORCHJOB = JobApi(
    "pytorchjob",
    "kubeflow.org",
    "v1",
    "pytorchjobs",
    "PyTorchJob",
    container="pytorch",
    pod_label="training.kubeflow.org/job-name",
)
APIS = {api.name: api for api in (TRAINJOB, PYTORCHJOB)}


def job_api(name: str) -> JobApi:
    try:
        return APIS[name]
    except KeyError:
        raise ValueError(
            f"training.kubernetes_api {name!r} is not supported; choose one of {', '.join(APIS)}"
        ) from None


# --------------------------------------------------------------------------- rendering


def processes_per_worker(training: Mapping[str, Any]) -> int:
    """One process per GPU, or one CPU process for a pod without GPUs."""
    return max(1, training["gpus_per_worker"])


def worker_count(training: Mapping[str, Any]) -> int:
    """Pods, the master included; pods x processes per pod must be the planned world size."""
    world_size, per_pod = training["world_size"], processes_per_worker(training)
    workers = training.get("workers") or (world_size // per_pod if world_size % per_pod == 0 else None)
    if workers is None or workers * per_pod != world_size:
        raise ValueError(
            f"training.workers {training.get('workers')!r} x {per_pod} process(es) per pod "
            f"(gpus_per_worker {training['gpus_per_worker']}) must equal training.world_size "
            f"{world_size}, the ranks the shards are planned for"
        )
    return workers


def job_name(dataset: str, run_ds: str, run_key: str | None = None) -> str:
    """A DNS-1035 label, short enough for the pod names the controllers derive from it.

    `run_key` (the handoff's hash of DAG and run) keeps a retrain of a day apart from
    that day's own job; the date and the key always survive the cut. It starts with
    `lakeprep-`, so with a letter, as a TrainJob's name must.
    """
    suffix = "-".join(filter(None, [run_ds, run_key]))
    limit = 48 - len(suffix) - 1
    head = re.sub(r"[^a-z0-9-]+", "-", f"lakeprep-{dataset}".lower()).strip("-")[:limit].rstrip("-")
    return re.sub(r"[^a-z0-9-]+", "-", f"{head}-{suffix}".lower()).strip("-")


def placement(training: Mapping[str, Any], extra: Mapping[str, Any] | None, conn_id: str) -> dict[str, Any]:
    """`runtime`, `node_selector`, `tolerations`: the spec's, else the connection's, else the default.

    `extra` is the connection's `lakeprep_training` extra, e.g.
    `{"node_selector": {"pool": "gpu"}, "tolerations": [...], "runtime": "torch-cuda"}`:
    settings of the cluster, which a spec that states its own overrides. Its values are
    checked against the knobs' own schemas.
    """
    import jsonschema

    from lakeprep_contracts import knobs

    extra = dict(extra or {})
    unknown = sorted(set(extra) - set(CONNECTION_KNOBS))
    if unknown:
        raise ValueError(
            f"connection {conn_id!r}: extra {CONNECTION_EXTRA}.{unknown[0]} is not a setting it can "
            f"hold; it can hold {', '.join(CONNECTION_KNOBS)}"
        )
    chosen: dict[str, Any] = {}
    for name in CONNECTION_KNOBS:
        value = training.get(name)
        if value is None and extra.get(name) is not None:
            value = extra[name]
            try:
                jsonschema.validate(value, knobs.knob("training", name).schema)
            except jsonschema.ValidationError as err:
                raise ValueError(
                    f"connection {conn_id!r}: extra {CONNECTION_EXTRA}.{name} {value!r} is not valid: "
                    f"{err.message} (the same form as the spec's training.{name})"
                ) from err
        chosen[name] = value
    chosen["runtime"] = chosen["runtime"] or DEFAULT_RUNTIME
    chosen["node_selector"] = dict(chosen["node_selector"] or {})
    chosen["tolerations"] = [dict(t) for t in chosen["tolerations"] or []]
    return chosen


def trainer_command(training: Mapping[str, Any], args: list[str]) -> list[str]:
    """torchrun on each pod: `workers` nodes of one process per GPU, then the trainer."""
    return [
        "python",
        "-m",
        "torch.distributed.run",
        f"--nnodes={worker_count(training)}",
        f"--nproc-per-node={processes_per_worker(training)}",
        *torchrun_options(training),
        "-m",
        "lakeprep_train.train",
        *args,
    ]


def _gpu_resources(training: Mapping[str, Any]) -> dict[str, Any] | None:
    # Extended resources are set as limits; the request defaults to the limit.
    gpus = training["gpus_per_worker"]
    return {"limits": {GPU_RESOURCE: str(gpus)}} if gpus else None


def _labels(labels: Mapping[str, str] | None) -> dict[str, str]:
    return {"app.kubernetes.io/name": "lakeprep-trainer", **(labels or {})}


def _with_digest(job: dict[str, Any]) -> dict[str, Any]:
    digest = hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest()
    job["metadata"].setdefault("annotations", {})[DIGEST_ANNOTATION] = digest
    return job


def render_train_job(
    *,
    name: str,
    training: Mapping[str, Any],
    args: list[str],
    placed: Mapping[str, Any],
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The TrainJob for `training` on the runtime `placed["runtime"]`."""
    trainer: dict[str, Any] = {
        "image": training["image"],
        "command": trainer_command(training, args),
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
        "numNodes": worker_count(training),
        "numProcPerNode": processes_per_worker(training),
    }
    if resources := _gpu_resources(training):
        trainer["resourcesPerNode"] = resources
    pod_spec: dict[str, Any] = {}
    if placed["node_selector"]:
        pod_spec["nodeSelector"] = dict(placed["node_selector"])
    if placed["tolerations"]:
        pod_spec["tolerations"] = [dict(t) for t in placed["tolerations"]]
    pod_template: dict[str, Any] = {"metadata": {"labels": _labels(labels)}}
    if pod_spec:
        pod_template["spec"] = pod_spec
    patch = {
        "manager": "lakeprep",
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {"name": TRAINJOB.container, "template": {"spec": {"template": pod_template}}}
                    ]
                }
            }
        },
    }
    return _with_digest(
        {
            "apiVersion": TRAINJOB.api_version,
            "kind": TRAINJOB.kind,
            "metadata": {"name": name, "namespace": training["namespace"], "labels": _labels(labels)},
            "spec": {
                "runtimeRef": {
                    "name": placed["runtime"],
                    "apiGroup": TRAINJOB.group,
                    "kind": "ClusterTrainingRuntime",
                },
                "trainer": trainer,
                "runtimePatches": [patch],
            },
        }
    )


def render_pytorch_job(
    *,
    name: str,
    training: Mapping[str, Any],
    args: list[str],
    placed: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The PyTorchJob for `training`: one Master, `workers - 1` Workers."""
    placed = placed or {"node_selector": {}, "tolerations": []}
    workers = worker_count(training)
    container: dict[str, Any] = {
        "name": PYTORCHJOB.container,
        "image": training["image"],
        "command": trainer_command(training, args),
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
        # A failed container's last log lines become its termination message, which the
        # trigger reports when the job fails.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if resources := _gpu_resources(training):
        container["resources"] = resources
    pod_spec: dict[str, Any] = {"containers": [container], "restartPolicy": "Never"}
    if placed["node_selector"]:
        pod_spec["nodeSelector"] = dict(placed["node_selector"])
    if placed["tolerations"]:
        pod_spec["tolerations"] = [dict(t) for t in placed["tolerations"]]
    replica = {
        "restartPolicy": "Never",
        "template": {"metadata": {"labels": _labels(labels)}, "spec": pod_spec},
    }
    replicas = {"Master": {"replicas": 1, **replica}}
    if workers > 1:
        replicas["Worker"] = {"replicas": workers - 1, **json.loads(json.dumps(replica))}
    return _with_digest(
        {
            "apiVersion": PYTORCHJOB.api_version,
            "kind": PYTORCHJOB.kind,
            "metadata": {"name": name, "namespace": training["namespace"], "labels": _labels(labels)},
            "spec": {
                "nprocPerNode": str(processes_per_worker(training)),
                # A failed rank fails the job (and the Airflow task's retry starts a new one).
                "runPolicy": {"backoffLimit": 0, "cleanPodPolicy": "None"},
                "pytorchReplicaSpecs": replicas,
            },
        }
    )


def render_job(
    *,
    name: str,
    training: Mapping[str, Any],
    args: list[str],
    placed: Mapping[str, Any],
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The job of `training.kubernetes_api`."""
    render = render_train_job if job_api(training["kubernetes_api"]) is TRAINJOB else render_pytorch_job
    return render(name=name, training=training, args=args, placed=placed, labels=labels)


def api_of(job: Mapping[str, Any]) -> JobApi:
    """The JobApi of a rendered or fetched job, by its kind."""
    for api in APIS.values():
        if job.get("kind") == api.kind:
            return api
    raise ValueError(f"not a Kubeflow training job: kind {job.get('kind')!r}")


# --------------------------------------------------------------------------- status


@dataclass(frozen=True)
class JobState:
    """Where a job is: `pending`, `running`, `succeeded`, `failed` or `suspended`, and why."""

    phase: str
    reason: str = ""
    message: str = ""

    def describe(self) -> str:
        why = ": ".join(filter(None, [self.reason, self.message]))
        return f"{self.phase} ({why})" if why else self.phase


def _true_conditions(job: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    conditions = (job.get("status") or {}).get("conditions") or []
    return {c.get("type"): c for c in conditions if str(c.get("status")) == "True"}


def job_state(job: Mapping[str, Any]) -> JobState:
    """The state of a job as the API returns it (its `status.conditions`).

    TrainJob: `Complete`, `Failed`, `Suspended` (trainjob_types.go); running is any job
    with active child jobs (`status.jobsStatus[].active`). PyTorchJob: `Created`,
    `Running`, `Restarting`, `Succeeded`, `Failed` (the v1 training operator's JobCondition).
    """
    api = api_of(job)
    true = _true_conditions(job)
    done = "Complete" if api is TRAINJOB else "Succeeded"
    for kind, phase in ((done, "succeeded"), ("Failed", "failed"), ("Suspended", "suspended")):
        if kind in true:
            return JobState(phase, true[kind].get("reason") or "", true[kind].get("message") or "")
    if api is TRAINJOB:
        jobs = (job.get("status") or {}).get("jobsStatus") or []
        running = any((j.get("active") or 0) > 0 or (j.get("ready") or 0) > 0 for j in jobs)
    else:
        running = "Running" in true or "Restarting" in true
    return JobState("running" if running else "pending")


@dataclass(frozen=True)
class PodFailure:
    """A container of the job's pods that ended with a non-zero exit code."""

    pod: str
    container: str
    exit_code: int
    reason: str
    message: str

    def refuses(self) -> bool:
        """The trainer refused its input: exit code 2 itself, or as torchrun reports a child's."""
        if self.exit_code == TRAINER_REFUSAL_EXIT_CODE:
            return True
        return any(int(code) == TRAINER_REFUSAL_EXIT_CODE for code in _TORCHRUN_EXIT.findall(self.message))


def pod_failures(pods: list[Mapping[str, Any]], container: str) -> list[PodFailure]:
    """The failed trainer containers of `pods` (the API's Pod objects as JSON), by pod name."""
    failures = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status.get("name") != container:
                continue
            for state in (status.get("state"), status.get("lastState")):
                terminated = (state or {}).get("terminated")
                if terminated and terminated.get("exitCode"):
                    failures.append(
                        PodFailure(
                            pod=pod["metadata"]["name"],
                            container=container,
                            exit_code=int(terminated["exitCode"]),
                            reason=terminated.get("reason") or "",
                            message=(terminated.get("message") or "").strip(),
                        )
                    )
                    break
    return failures


def failure_report(job: Mapping[str, Any], state: JobState, failures: list[PodFailure]) -> dict[str, Any]:
    """The task's error for a failed job: the job's reason, each failed pod's, and whether
    another try could end differently (`refusal`)."""
    api, name = api_of(job), job["metadata"]["name"]
    lines = [f"{api.kind} {job['metadata'].get('namespace')}/{name} failed: {state.describe()}"]
    for f in failures:
        lines.append(f"pod {f.pod} container {f.container} exited with {f.exit_code} ({f.reason})")
        if f.message:
            lines.append(f.message)
    refusal = state.reason in DETERMINISTIC_REASONS or any(f.refuses() for f in failures)
    if refusal:
        lines.append(
            "this failure repeats on every try (the trainer refused its input, exit code 2, or "
            "the cluster refused the job): fix the spec or the export, then clear the task"
        )
    return {"message": "\n".join(lines), "refusal": refusal}


# --------------------------------------------------------------------------- the API


class JobRefused(ValueError):
    """The API refused the job (invalid object, unknown kind or runtime): a retry would too."""


def _hook(kubernetes_conn_id: str, job: Mapping[str, Any]) -> Any:
    try:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    except ImportError as err:
        raise RuntimeError(
            f"submitting the {job['kind']} {job['metadata']['name']!r} needs the Airflow provider package "
            f"{PROVIDER_PACKAGE} (pip install {PROVIDER_PACKAGE}); the rendered job is in the task log"
        ) from err
    return KubernetesHook(conn_id=kubernetes_conn_id)


def _status(err: BaseException) -> int | None:
    return getattr(err, "status", None) if type(err).__name__ == "ApiException" else None


def submit(
    job: Mapping[str, Any],
    *,
    kubernetes_conn_id: str,
    log: Callable[..., None] = lambda *a: None,
    wait_gone_seconds: float = 120.0,
    sleep: Callable[[float], None] | None = None,
) -> str:
    """Create `job`; returns `created`, `adopted` or `recreated`.

    A job of that name exists when the task is retried (the try that created it was
    killed, or the triggerer lost it). It is adopted when it is this very job (same
    rendered digest) and has not failed: a running job keeps its progress, a finished one
    is collected. A failed one, or one rendered from other settings, is deleted and
    created again: the retry is meant to run it again (its trainer resumes from the
    checkpoint on the lake).
    """
    import time

    sleep = sleep or time.sleep
    hook = _hook(kubernetes_conn_id, job)
    api, meta = api_of(job), job["metadata"]
    where = dict(group=api.group, version=api.version, plural=api.plural, namespace=meta["namespace"])
    label = f"{api.kind} {meta['namespace']}/{meta['name']}"

    def create() -> None:
        try:
            hook.create_custom_object(body=dict(job), **where)
        except Exception as err:
            status = _status(err)
            if status in (400, 404, 422):
                raise JobRefused(
                    f"the API refused {label} (HTTP {status}): {getattr(err, 'body', err)}; "
                    + (
                        f"the cluster does not serve {api.plural}.{api.group}/{api.version}: install "
                        "Kubeflow Trainer or set training.kubernetes_api"
                        if status == 404
                        else "check training.image, runtime, node_selector and tolerations"
                    )
                ) from err
            raise

    try:
        create()
        return "created"
    except Exception as err:
        if _status(err) != 409:
            raise
    existing = hook.get_custom_object(name=meta["name"], **where)
    same = (existing["metadata"].get("annotations") or {}).get(DIGEST_ANNOTATION) == meta["annotations"][
        DIGEST_ANNOTATION
    ]
    state = job_state(existing)
    if same and state.phase != "failed":
        log("%s exists (%s), rendered the same: adopting it", label, state.describe())
        return "adopted"
    log(
        "%s exists (%s%s): deleting it and creating it again",
        label,
        state.describe(),
        "" if same else ", rendered from other settings",
    )
    delete(job, kubernetes_conn_id=kubernetes_conn_id)
    deadline = time.monotonic() + wait_gone_seconds
    while True:
        try:
            hook.get_custom_object(name=meta["name"], **where)
        except Exception as err:
            if _status(err) == 404:
                break
            raise
        if time.monotonic() >= deadline:
            raise RuntimeError(f"{label} was deleted but is still there after {wait_gone_seconds:.0f} s")
        sleep(2.0)
    create()
    return "recreated"


def delete(job: Mapping[str, Any], *, kubernetes_conn_id: str) -> bool:
    """Delete `job` and its pods; False when it was already gone."""
    hook = _hook(kubernetes_conn_id, job)
    api, meta = api_of(job), job["metadata"]
    try:
        hook.delete_custom_object(
            group=api.group,
            version=api.version,
            plural=api.plural,
            name=meta["name"],
            namespace=meta["namespace"],
            # The pods go with the job, before it is gone (no orphan keeps a GPU).
            propagation_policy="Foreground",
        )
    except Exception as err:
        if _status(err) == 404:
            return False
        raise
    return True


# --------------------------------------------------------------------------- the backend


class TrainingJobRefused(AirflowFailException, ValueError):
    """The Kubernetes job cannot succeed as rendered: the API refused it, the trainer refused
    its input, or the lake is not one the pods write to. Fails without retries."""


class TrainingJobFailed(AirflowException):
    """The Kubernetes job failed, or vanished, for a reason another try may not meet."""


class KubernetesBackend(Backend):
    """`training.backend: kubernetes`: submit the run's job, adopting this run's own, and defer."""

    name = "kubernetes"
    reads_local_files = False
    uses_connection = True

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job: dict[str, Any] | None = None  # the job this try submitted

    def prepare(self, model_uri: str) -> None:
        """The pods write the model where the handoff commits it from: the lake's own staging
        folder, so the lake must be a `file://` one the pods mount at the same path."""
        if urlparse(model_uri).scheme not in ("", "file"):
            raise TrainingJobRefused(
                f"training.backend kubernetes writes the model to the lake's staging folder, which "
                f"the pods must mount at the same path: {model_uri} is not a file:// lake (mount the "
                "lake in the pods and the worker as file://, or train with backend local or spark)"
            )

    def _connection_extra(self) -> dict[str, Any] | None:
        """The connection's extra; None when there is no such connection (render only)."""
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            return BaseHook.get_connection(str(self.conn_id)).extra_dejson
        except AirflowNotFoundException:
            return None

    def train(self, run: TrainingRun) -> dict[str, Any]:
        from lakeprep_airflow.triggers.training_job import TrainingJobTrigger

        extra = self._connection_extra()
        try:
            job = render_job(
                name=job_name(run.dataset, run.run_ds, run.run_key),
                training=run.training,
                # The pods read the manifest from the lake and write beside its staging
                # folder, the checkpoints next to the model: a restarted pod's trainer resumes.
                args=run.trainer_args(),
                placed=placement(run.training, (extra or {}).get(CONNECTION_EXTRA), str(self.conn_id)),
                labels={"lakeprep/dataset": run.dataset, "lakeprep/run-ds": run.run_ds},
            )
        except ValueError as err:
            raise TrainingJobRefused(str(err)) from err
        kind, name, namespace = job["kind"], job["metadata"]["name"], job["metadata"]["namespace"]
        self.log.info("%s: %s", kind, json.dumps(job, sort_keys=True))
        result = {"backend": self.name, "manifest_uri": run.manifest_uri, "job": job}
        if extra is None:
            self.log.warning("no connection %r: %s rendered, not submitted", self.conn_id, kind)
            return {**result, "submitted": False}
        run.clear_model_dir(self.log)
        self.job = job
        try:
            outcome = submit(job, kubernetes_conn_id=str(self.conn_id), log=self.log.info)
        except JobRefused as err:
            raise TrainingJobRefused(str(err)) from err
        self.log.info(
            "%s %s/%s %s; logs: kubectl logs -f -n %s -l %s=%s --prefix",
            kind,
            namespace,
            name,
            outcome,
            namespace,
            api_of(job).pod_label,
            name,
        )
        raise TaskDeferred(
            trigger=TrainingJobTrigger(
                api=run.training["kubernetes_api"],
                name=name,
                namespace=namespace,
                kubernetes_conn_id=str(self.conn_id),
                poll_seconds=run.training["poll_seconds"],
            ),
            method_name=RESUME_METHOD,
        )

    def result(self, event: Mapping[str, Any], work: Path) -> None:
        """The trigger's event: the model of a finished job is on the lake, or the job's reason."""
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
        if not (work / "model" / layout.METRICS).exists():
            raise TrainingJobRefused(
                f"training job {label} succeeded but left no {work / 'model' / layout.METRICS}: the "
                "pods must mount the lake at the path the worker sees (docs/TRAINING.md)"
            )

    def on_kill(self) -> None:
        """Delete the job this try submitted (while deferred, the trigger's on_kill does)."""
        if self.job is not None and delete(self.job, kubernetes_conn_id=str(self.conn_id)):
            self.log.info("deleted %s %s", self.job["kind"], self.job["metadata"]["name"])
