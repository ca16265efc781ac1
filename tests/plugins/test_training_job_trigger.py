"""`TrainingJobTrigger`'s real `run()` loop against a recorded status sequence.

No Kubernetes API server runs here: a fake client with the four calls of
`KubernetesJobClient` (kubernetes_asyncio's own names and arguments) replays what the
API returns for a TrainJob that is submitted, runs and succeeds, fails, or is deleted;
pods come back as kubernetes_asyncio's own models, errors as its ApiException.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from kubernetes_asyncio.client import ApiClient, ApiException
from kubernetes_asyncio.client.models import (
    V1ContainerState,
    V1ContainerStateTerminated,
    V1ContainerStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodList,
    V1PodStatus,
)

from lakeprep_airflow.triggers.training_job import MAX_API_ERRORS, TrainingJobTrigger

NAME, NAMESPACE = "lakeprep-flights-2013-01-03-abc", "ml"


def trainjob(*conditions, active=0):
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "status": {
            "conditions": [
                {"type": t, "status": "True", "reason": r, "message": m} for t, r, m in conditions
            ],
            "jobsStatus": [{"name": "node", "active": active}],
        },
    }


SUBMITTED = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": NAME}}
RUNNING = trainjob(active=2)
SUCCEEDED = trainjob(("Complete", "JobsCompleted", "jobset completed"))
FAILED = trainjob(("Failed", "FailedJobs", "jobset failed: node-0 reached its backoff limit"))


def pod(name, exit_code, message=None, container="node"):
    terminated = V1ContainerStateTerminated(exit_code=exit_code, reason="Error", message=message)
    status = V1ContainerStatus(
        name=container,
        image="i",
        image_id="",
        ready=False,
        restart_count=0,
        state=V1ContainerState(terminated=terminated),
    )
    return V1Pod(
        metadata=V1ObjectMeta(name=name),
        status=V1PodStatus(container_statuses=[status]),
    )


class RecordedApi:
    """Replays `statuses` (a dict, or an exception to raise) one per read of the job."""

    def __init__(self, statuses, pods=(), logs=None):
        self.statuses = list(statuses)
        self.pods = list(pods)
        self.logs = logs or {}
        self.calls: list = []

    async def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        self.calls.append(("get", group, version, namespace, plural, name))
        status = self.statuses.pop(0)
        if isinstance(status, Exception):
            raise status
        return status

    async def list_namespaced_pod(self, namespace, **kwargs):
        self.calls.append(("pods", namespace, kwargs["label_selector"]))
        return V1PodList(items=self.pods)

    async def read_namespaced_pod_log(self, name, namespace, **kwargs):
        self.calls.append(("log", name, kwargs["container"], kwargs["tail_lines"]))
        return self.logs[name]

    async def delete_namespaced_custom_object(self, group, version, namespace, plural, name, **kwargs):
        self.calls.append(("delete", plural, name, kwargs["propagation_policy"]))
        if not self.statuses:  # nothing recorded: the job is already gone
            raise ApiException(status=404, reason="NotFound")

    def sanitize(self, model):
        # The client's own serializer; it reads only class attributes, so no HTTP session
        # (which needs a running loop) is opened for it.
        return ApiClient.sanitize_for_serialization(ApiClient.__new__(ApiClient), model)


def trigger_with(api, monkeypatch, kind="trainjob"):
    trigger = TrainingJobTrigger(
        api=kind, name=NAME, namespace=NAMESPACE, kubernetes_conn_id="kubernetes_default", poll_seconds=0
    )

    @contextlib.asynccontextmanager
    async def job_client():
        yield api

    monkeypatch.setattr(trigger, "job_client", job_client)
    return trigger


def events_of(trigger):
    async def collect():
        return [event.payload async for event in trigger.run()]

    return asyncio.run(collect())


def test_submitted_running_succeeded(monkeypatch):
    api = RecordedApi([SUBMITTED, RUNNING, RUNNING, SUCCEEDED])
    (event,) = events_of(trigger_with(api, monkeypatch))
    assert event["status"] == "succeeded" and event["name"] == NAME and event["namespace"] == NAMESPACE
    assert [c[0] for c in api.calls] == ["get"] * 4  # polled until done, no pod listing
    assert api.calls[0][1:] == ("get", "trainer.kubeflow.org", "v1alpha1", NAMESPACE, "trainjobs", NAME)[1:]


def test_a_failed_job_reports_the_failed_pods_message_and_the_refusal(monkeypatch):
    summary = "lakeprep_train.train FAILED\nRoot Cause (first observed failure):\n  exitcode  : 2 (pid: 9)"
    api = RecordedApi(
        [SUBMITTED, RUNNING, FAILED],
        pods=[pod(f"{NAME}-node-0-1", 1, None), pod(f"{NAME}-node-0-0", 1, "torch failed")],
        logs={f"{NAME}-node-0-1": f"preflight failed: manifest.json: splits.train has no shards\n{summary}"},
    )
    (event,) = events_of(trigger_with(api, monkeypatch))
    assert event["status"] == "failed" and event["refusal"] is True
    message = event["message"]
    assert message.startswith(f"TrainJob {NAMESPACE}/{NAME} failed: failed (FailedJobs: jobset failed")
    # The pod without a termination message is described by its log's last lines.
    assert "preflight failed: manifest.json: splits.train has no shards" in message
    assert "torch failed" in message
    assert ("pods", NAMESPACE, f"jobset.sigs.k8s.io/jobset-name={NAME}") in api.calls
    assert ("log", f"{NAME}-node-0-1", "node", 40) in api.calls


def test_a_failure_without_the_trainers_refusal_is_retried(monkeypatch):
    api = RecordedApi([RUNNING, FAILED], pods=[pod("p", 137, "Killed")])
    (event,) = events_of(trigger_with(api, monkeypatch))
    assert (event["status"], event["refusal"]) == ("failed", False)
    assert "exited with 137" in event["message"]


def test_a_job_deleted_under_the_trigger_fails_the_task(monkeypatch):
    api = RecordedApi([SUBMITTED, RUNNING, ApiException(status=404, reason="NotFound")])
    (event,) = events_of(trigger_with(api, monkeypatch))
    assert event["status"] == "deleted" and "was deleted before it finished" in event["message"]


def test_api_errors_are_tolerated_then_reported(monkeypatch):
    blip = ApiException(status=503, reason="Unavailable")
    api = RecordedApi([RUNNING, blip, blip, SUCCEEDED])
    assert events_of(trigger_with(api, monkeypatch))[0]["status"] == "succeeded"
    api = RecordedApi([blip] * MAX_API_ERRORS)
    (event,) = events_of(trigger_with(api, monkeypatch))
    assert event["status"] == "error" and f"failed {MAX_API_ERRORS} times" in event["message"]


def test_pytorch_jobs_are_polled_on_their_own_api(monkeypatch):
    job = {
        "kind": "PyTorchJob",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "PyTorchJobFailed"}]},
    }
    api = RecordedApi([job], pods=[pod("m", 2, container="pytorch")])
    (event,) = events_of(trigger_with(api, monkeypatch, kind="pytorchjob"))
    assert api.calls[0][2:5] == ("v1", NAMESPACE, "pytorchjobs")
    assert ("pods", NAMESPACE, f"training.kubeflow.org/job-name={NAME}") in api.calls
    assert event["refusal"] is True  # the trainer's own exit code 2


def test_killing_the_deferred_task_deletes_the_job(monkeypatch):
    api = RecordedApi([RUNNING])
    asyncio.run(trigger_with(api, monkeypatch).on_kill())
    assert api.calls == [("delete", "trainjobs", NAME, "Foreground")]
    api = RecordedApi([])  # already gone: not an error
    asyncio.run(trigger_with(api, monkeypatch).on_kill())


def test_the_trigger_serializes_to_what_builds_it_again():
    trigger = TrainingJobTrigger(
        api="trainjob", name=NAME, namespace=NAMESPACE, kubernetes_conn_id="k", poll_seconds=30
    )
    path, kwargs = trigger.serialize()
    assert path == "lakeprep_airflow.triggers.training_job.TrainingJobTrigger"
    assert TrainingJobTrigger(**kwargs).serialize() == (path, kwargs)


def test_an_unknown_api_is_refused():
    trigger = TrainingJobTrigger(
        api="mpijob", name=NAME, namespace=NAMESPACE, kubernetes_conn_id="k", poll_seconds=1
    )
    with pytest.raises(ValueError, match="'mpijob' is not supported; choose one of trainjob, pytorchjob"):
        trigger.job_api  # noqa: B018
