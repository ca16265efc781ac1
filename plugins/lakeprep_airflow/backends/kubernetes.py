"""Backend `kubernetes`: a Kubeflow `PyTorchJob` (kubeflow.org/v1) runs the trainer.

`render_pytorch_job` is pure: a dict ready for the API (tests check its pod templates
against the Kubernetes client's models). One Master and `workers - 1` Worker replicas,
each pod running `torch.distributed.run` with one process per GPU; the training
operator sets `PET_NNODES`, `PET_NODE_RANK`, `PET_MASTER_ADDR` and `PET_MASTER_PORT`
on every pod, which torchrun reads as its defaults.
https://www.kubeflow.org/docs/components/training/user-guides/pytorch/

`submit` creates it through the cncf-kubernetes provider's `KubernetesHook`; the
provider is imported only then, so rendering works without it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from lakeprep_airflow.backends import torchrun_options

GROUP, VERSION, PLURAL, KIND = "kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"
PROVIDER_PACKAGE = "apache-airflow-providers-cncf-kubernetes"
# The training operator finds the trainer by this container name.
CONTAINER = "pytorch"
GPU_RESOURCE = "nvidia.com/gpu"


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
    """A DNS-1123 name, short enough for the pod names the operator derives from it.

    `run_key` (the handoff's hash of DAG and run) keeps a retrain of a day apart from
    that day's own job; the date and the key always survive the cut.
    """
    suffix = "-".join(filter(None, [run_ds, run_key]))
    limit = 48 - len(suffix) - 1
    head = re.sub(r"[^a-z0-9-]+", "-", f"lakeprep-{dataset}".lower()).strip("-")[:limit].rstrip("-")
    return re.sub(r"[^a-z0-9-]+", "-", f"{head}-{suffix}".lower()).strip("-")


def _pod_template(*, image: str, command: list[str], gpus: int, labels: dict[str, str]) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "command": command,
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
    }
    if gpus:
        # Extended resources are set as limits; the request defaults to the limit.
        container["resources"] = {"limits": {GPU_RESOURCE: str(gpus)}}
    return {"metadata": {"labels": labels}, "spec": {"containers": [container], "restartPolicy": "Never"}}


def render_pytorch_job(
    *,
    name: str,
    training: Mapping[str, Any],
    args: list[str],
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The PyTorchJob for `training` (image, namespace, gpus_per_worker, workers)."""
    workers = worker_count(training)
    per_pod = processes_per_worker(training)
    command = [
        "python",
        "-m",
        "torch.distributed.run",
        f"--nnodes={workers}",
        f"--nproc-per-node={per_pod}",
        *torchrun_options(training),
        "-m",
        "lakeprep_train.train",
        *args,
    ]
    pod_labels = {"app.kubernetes.io/name": "lakeprep-trainer", **(labels or {})}
    replica = {
        "restartPolicy": "Never",
        "template": _pod_template(
            image=training["image"], command=command, gpus=training["gpus_per_worker"], labels=pod_labels
        ),
    }
    replicas = {"Master": {"replicas": 1, **replica}}
    if workers > 1:
        replicas["Worker"] = {"replicas": workers - 1, **replica}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name, "namespace": training["namespace"], "labels": pod_labels},
        "spec": {
            "nprocPerNode": str(per_pod),
            # A failed rank fails the job (and the Airflow task's retry starts a new one).
            "runPolicy": {"backoffLimit": 0, "cleanPodPolicy": "None"},
            "pytorchReplicaSpecs": replicas,
        },
    }


def submit(job: Mapping[str, Any], *, kubernetes_conn_id: str) -> dict[str, Any]:
    """Create `job` in its namespace through the provider's KubernetesHook."""
    try:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    except ImportError as err:
        raise RuntimeError(
            f"submitting the {KIND} {job['metadata']['name']!r} needs the Airflow provider package "
            f"{PROVIDER_PACKAGE} (pip install {PROVIDER_PACKAGE}); the rendered job is in the task log"
        ) from err
    hook = KubernetesHook(conn_id=kubernetes_conn_id)
    return hook.create_custom_object(
        group=GROUP, version=VERSION, plural=PLURAL, body=dict(job), namespace=job["metadata"]["namespace"]
    )
