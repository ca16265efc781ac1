"""`TrainingJobTrigger`: wait for a Kubeflow training job in the triggerer, not a worker slot."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from lakeprep_airflow.backends import kubernetes as k8s

# Consecutive failed reads of the job (API server restarting, a network blip) tolerated
# before the task is failed for a retry.
MAX_API_ERRORS = 5
# Lines of a failed container's log read when it left no termination message.
LOG_TAIL_LINES = 40


class KubernetesJobClient:
    """The four calls the trigger makes, on kubernetes_asyncio's API classes.

    The names and arguments are the client's own, so a test's fake replaying a recorded
    sequence stands in for it.
    """

    def __init__(self, api_client: Any) -> None:
        from kubernetes_asyncio import client

        self._custom = client.CustomObjectsApi(api_client)
        self._core = client.CoreV1Api(api_client)
        self._api_client = api_client

    async def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> Any:
        return await self._custom.get_namespaced_custom_object(group, version, namespace, plural, name)

    async def delete_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, **kwargs: Any
    ) -> Any:
        return await self._custom.delete_namespaced_custom_object(
            group, version, namespace, plural, name, **kwargs
        )

    async def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> Any:
        return await self._core.list_namespaced_pod(namespace, **kwargs)

    async def read_namespaced_pod_log(self, name: str, namespace: str, **kwargs: Any) -> Any:
        return await self._core.read_namespaced_pod_log(name, namespace, **kwargs)

    def sanitize(self, model: Any) -> Any:
        """A client model as the API's JSON (camelCase keys), what `k8s.pod_failures` reads."""
        return self._api_client.sanitize_for_serialization(model)


def _status(err: BaseException) -> int | None:
    return getattr(err, "status", None) if type(err).__name__ == "ApiException" else None


class TrainingJobTrigger(BaseTrigger):
    """Poll a TrainJob or PyTorchJob until it succeeds, fails or disappears.

    Events (`status`): `succeeded`; `failed` with the job's reason, each failed pod's exit
    code and termination message (or its log's last lines), and `refusal` when another
    try cannot end differently; `deleted` when the job is gone (killed by someone else);
    `error` after `MAX_API_ERRORS` failed reads in a row. `on_kill` (a user marks the
    deferred task failed or clears it) deletes the job; a triggerer restart does not.
    """

    def __init__(
        self,
        *,
        api: str,
        name: str,
        namespace: str,
        kubernetes_conn_id: str,
        poll_seconds: float,
    ) -> None:
        super().__init__()
        self.api = api
        self.name = name
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.poll_seconds = poll_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "api": self.api,
                "name": self.name,
                "namespace": self.namespace,
                "kubernetes_conn_id": self.kubernetes_conn_id,
                "poll_seconds": self.poll_seconds,
            },
        )

    @property
    def job_api(self) -> k8s.JobApi:
        return k8s.job_api(self.api)

    @contextlib.asynccontextmanager
    async def job_client(self) -> AsyncIterator[Any]:
        """A client for the connection's cluster (the provider's AsyncKubernetesHook)."""
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        hook = AsyncKubernetesHook(conn_id=self.kubernetes_conn_id)
        async with hook.get_conn() as api_client:
            yield KubernetesJobClient(api_client)

    def _event(self, status: str, **fields: Any) -> TriggerEvent:
        return TriggerEvent(
            {"status": status, "api": self.api, "name": self.name, "namespace": self.namespace, **fields}
        )

    async def _failures(self, client: Any) -> list[k8s.PodFailure]:
        api = self.job_api
        pods = await client.list_namespaced_pod(self.namespace, label_selector=f"{api.pod_label}={self.name}")
        failures = k8s.pod_failures([client.sanitize(p) for p in pods.items], api.container)
        described = []
        for failure in failures:
            if not failure.message:
                try:
                    tail = await client.read_namespaced_pod_log(
                        failure.pod, self.namespace, container=failure.container, tail_lines=LOG_TAIL_LINES
                    )
                except Exception as err:  # the pod may be gone; the exit code still says enough
                    self.log.warning("could not read the log of pod %s: %s", failure.pod, err)
                else:
                    failure = k8s.PodFailure(**{**failure.__dict__, "message": str(tail).strip()})
            described.append(failure)
        return described

    async def run(self) -> AsyncIterator[TriggerEvent]:
        api = self.job_api
        label = f"{api.kind} {self.namespace}/{self.name}"
        async with self.job_client() as client:
            seen, errors = None, 0
            while True:
                try:
                    job = await client.get_namespaced_custom_object(
                        api.group, api.version, self.namespace, api.plural, self.name
                    )
                except Exception as err:
                    if _status(err) == 404:
                        yield self._event("deleted", message=f"{label} was deleted before it finished")
                        return
                    errors += 1
                    self.log.warning("reading %s failed (%d in a row): %s", label, errors, err)
                    if errors >= MAX_API_ERRORS:
                        yield self._event("error", message=f"reading {label} failed {errors} times: {err}")
                        return
                    await asyncio.sleep(self.poll_seconds)
                    continue
                errors = 0
                state = k8s.job_state(job)
                if state != seen:
                    self.log.info("%s: %s", label, state.describe())
                    seen = state
                if state.phase == "succeeded":
                    yield self._event("succeeded", message=f"{label}: {state.describe()}")
                    return
                if state.phase == "failed":
                    report = k8s.failure_report(job, state, await self._failures(client))
                    yield self._event("failed", **report)
                    return
                await asyncio.sleep(self.poll_seconds)

    async def on_kill(self) -> None:
        """The user killed the deferred task: delete the job and its pods."""
        api = self.job_api
        async with self.job_client() as client:
            try:
                await client.delete_namespaced_custom_object(
                    api.group,
                    api.version,
                    self.namespace,
                    api.plural,
                    self.name,
                    propagation_policy="Foreground",
                )
            except Exception as err:
                if _status(err) != 404:
                    raise
        self.log.info("deleted %s %s/%s", api.kind, self.namespace, self.name)
