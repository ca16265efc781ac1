"""The handoff's backends: the registry, the trainer's argv, the spark and kubernetes settings,
the rendered jobs, the kubernetes backend's refusals and events.

The PyTorchJob's pod templates and metadata are checked against the Kubernetes API
schema as the official client models it: deserialized into `V1PodTemplateSpec` /
`V1ObjectMeta` and serialized back unchanged (a misspelled or misplaced field is
dropped by the models, a missing required one raises, so either fails the test).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowFailException
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from lakeprep_airflow import spec as spec_mod
from lakeprep_airflow.backends import BACKENDS, Backend, backend_class, trainer_args
from lakeprep_airflow.backends import kubernetes as k8s
from lakeprep_airflow.backends import spark as spark_backend
from lakeprep_airflow.backends.local import preflight_command, trainer_command
from lakeprep_airflow.operators.handoff import GpuTrainingHandoffOperator
from lakeprep_contracts import knobs

REPO = Path(__file__).resolve().parents[2]
FLIGHTS = str(REPO / "pipelines" / "flights.yaml")
RUN_DS = "2013-01-03"
HOOK_MODULE = "airflow.providers.cncf.kubernetes.hooks.kubernetes"


def training(**changes):
    return {**knobs.defaults("training"), **changes}


def as_k8s_model(data: dict, klass: str):
    """`data` as a kubernetes client model; it must serialize back to exactly `data`."""
    client = ApiClient()
    model = client._ApiClient__deserialize(data, klass)  # the client's own response decoder
    assert client.sanitize_for_serialization(model) == data
    return model


# --------------------------------------------------------------------------- the registry


def test_every_backend_name_the_spec_accepts_has_a_backend_and_vice_versa():
    """The knob's enum (what the spec and the trigger form accept) is the registry's names."""
    assert tuple(BACKENDS) == tuple(knobs.knob("training", "backend").schema["enum"])
    for name, backend in BACKENDS.items():
        assert backend.name == name and issubclass(backend, Backend)
        assert spec_with_backend(name).training["backend"] == name
    with pytest.raises(spec_mod.SpecError, match="training.backend"):
        spec_with_backend("slurm")


def spec_with_backend(name: str) -> spec_mod.DatasetSpec:
    """flights.yaml with `training.backend` set as the trigger form sets it."""
    op = GpuTrainingHandoffOperator(task_id="t", spec_path=FLIGHTS, overrides={"training.backend": name})
    return op.run_spec()


def test_a_backend_with_a_connection_gets_the_handoffs_argument_of_its_name():
    op = GpuTrainingHandoffOperator(
        task_id="t", spec_path=FLIGHTS, spark_conn_id="spark_x", kubernetes_conn_id="k8s_x"
    )
    for name, backend in BACKENDS.items():
        spec = SimpleNamespace(training={"backend": name})
        assert op.backend(spec).conn_id == ({"spark": "spark_x", "kubernetes": "k8s_x"}.get(name))
        assert backend.uses_connection == (name != "local")


def test_an_unknown_backend_is_refused_with_the_list():
    with pytest.raises(ValueError, match=r"'slurm' is not supported; choose one of local, spark, kubernetes"):
        backend_class("slurm")
    assert backend_class("spark") is spark_backend.SparkBackend


# --------------------------------------------------------------------------- the trainer's argv


TRAIN_ARGS = trainer_args(
    manifest="/m.json",
    output="/out",
    training=training(epochs=3, learning_rate=0.01, checkpoint_every_steps=50, grad_accumulation_steps=2),
    seed=7,
    checkpoint_dir="/ckpt",
)


def test_trainer_args_carry_the_spec_training_section():
    assert TRAIN_ARGS == [
        "--manifest",
        "/m.json",
        "--output",
        "/out",
        "--epochs",
        "3",
        "--lr",
        "0.01",
        "--seed",
        "7",
        "--precision",
        "auto",
        "--grad-accumulation",
        "2",
        "--checkpoint-dir",
        "/ckpt",
        "--checkpoint-every",
        "50",
    ]
    no_checkpoints = trainer_args(manifest="/m.json", output="/out", training=training(), seed=0)
    assert "--checkpoint-dir" not in no_checkpoints


# --------------------------------------------------------------------------- local


def test_single_rank_without_restarts_runs_the_trainer_module():
    cmd = trainer_command(args=TRAIN_ARGS, training=training(world_size=1, max_restarts=0))
    assert cmd == [sys.executable, "-m", "lakeprep_train.train", *TRAIN_ARGS]


@pytest.mark.parametrize(("world_size", "restarts"), [(2, 0), (2, 3), (1, 2)])
def test_several_ranks_or_restarts_go_through_torchrun(world_size, restarts):
    cmd = trainer_command(args=TRAIN_ARGS, training=training(world_size=world_size, max_restarts=restarts))
    assert cmd == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={world_size}",
        f"--max-restarts={restarts}",
        "-m",
        "lakeprep_train.train",
        *TRAIN_ARGS,
    ]


def test_preflight_checks_the_world_size_of_the_spec():
    cmd = preflight_command(manifest="/m.json", training=training(world_size=4))
    assert cmd == [
        sys.executable,
        "-m",
        "lakeprep_train.preflight",
        "--manifest",
        "/m.json",
        "--world-size",
        "4",
    ]


# --------------------------------------------------------------------------- spark


def test_spark_distributor_settings_come_from_the_spec():
    assert spark_backend.distributor_kwargs(training(world_size=2, use_gpu=True)) == {
        "num_processes": 2,
        "local_mode": False,
        "use_gpu": True,
    }
    explicit = training(world_size=4, num_processes=4, local_mode=True)
    assert spark_backend.distributor_kwargs(explicit)["num_processes"] == 4
    assert spark_backend.distributor_kwargs(explicit)["local_mode"] is True


def test_spark_refuses_processes_the_shards_are_not_planned_for():
    with pytest.raises(ValueError, match=r"num_processes 3 must equal training.world_size 2"):
        spark_backend.distributor_kwargs(training(world_size=2, num_processes=3))


@pytest.mark.parametrize(
    ("host", "port", "master"),
    [
        ("127.0.0.1", 7077, "spark://127.0.0.1:7077"),
        ("spark://master.example", None, "spark://master.example"),
        ("local[2]", None, "local[2]"),
        ("yarn", None, "yarn"),
    ],
)
def test_spark_master_is_read_like_spark_submit_hook(host, port, master):
    assert spark_backend.master_url(SimpleNamespace(host=host, port=port)) == master


def test_spark_runs_the_trainers_own_entry_point(monkeypatch):
    path = spark_backend.train_file()
    assert path == REPO / "training" / "lakeprep_train" / "train.py" and path.is_file()
    import lakeprep_train.train

    calls = []
    monkeypatch.setattr(lakeprep_train.train, "main", lambda argv: calls.append(argv) or 3)
    assert spark_backend.trainer_entry_point()(["--manifest", "m"]) == 3
    assert calls == [["--manifest", "m"]]


def test_spark_entry_point_unpickles_without_the_plugin_package(tmp_path):
    """What an executor does: unpickle and call it, with lakeprep_airflow unimportable."""
    from pyspark import cloudpickle

    pickled = tmp_path / "entry.pkl"
    pickled.write_bytes(cloudpickle.dumps(spark_backend.trainer_entry_point()))
    code = (
        "import sys; sys.modules['lakeprep_airflow'] = None\n"  # any import of it now fails
        "from pyspark import cloudpickle\n"
        f"entry = cloudpickle.loads(open({str(pickled)!r}, 'rb').read())\n"
        "entry(['--help'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr  # argparse's --help exits 0
    assert "--manifest" in out.stdout


def test_spark_session_settings():
    conf = spark_backend.session_conf(pythonpath="/t:/c", python="/venv/bin/python")
    assert conf["spark.executorEnv.PYTHONPATH"] == "/t:/c"
    assert conf["spark.pyspark.python"] == "/venv/bin/python"
    assert conf["spark.task.maxFailures"] == "1"


# --------------------------------------------------------------------------- kubernetes


ARGS = trainer_args(
    manifest="hdfs://nn:8020/m.json",
    output="/outputs",
    training=training(epochs=2, learning_rate=0.01),
    seed=7,
)


def test_pytorch_job_has_one_master_and_workers_with_gpu_limits():
    job = k8s.render_pytorch_job(
        name="lakeprep-flights-2013-01-03",
        training=training(world_size=4, gpus_per_worker=2, image="registry/lakeprep:1", namespace="ml"),
        args=ARGS,
    )
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert job["metadata"]["namespace"] == "ml"
    assert job["spec"]["nprocPerNode"] == "2"
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert {role: spec["replicas"] for role, spec in replicas.items()} == {"Master": 1, "Worker": 1}
    for spec in replicas.values():
        assert spec["restartPolicy"] in ("Always", "OnFailure", "Never", "ExitCode")
        pod = as_k8s_model(spec["template"], "V1PodTemplateSpec")
        (container,) = pod.spec.containers
        assert container.name == "pytorch"  # the training operator's container name
        assert container.image == "registry/lakeprep:1"
        assert container.resources.limits == {"nvidia.com/gpu": "2"}
        assert container.command[:5] == [
            "python",
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            "--nproc-per-node=2",
        ]
        assert container.command[5:] == ["--max-restarts=2", "-m", "lakeprep_train.train", *ARGS]
        assert "hdfs://nn:8020/m.json" in container.command
    as_k8s_model(job["metadata"], "V1ObjectMeta")


def test_pytorch_job_workers_default_to_world_size_per_pod():
    one = k8s.render_pytorch_job(name="j", training=training(world_size=1, gpus_per_worker=1), args=ARGS)
    assert list(one["spec"]["pytorchReplicaSpecs"]) == ["Master"]
    cpu = k8s.render_pytorch_job(name="j", training=training(world_size=3, gpus_per_worker=0), args=ARGS)
    assert cpu["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    template = cpu["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    assert "resources" not in template["spec"]["containers"][0]  # no GPU asked for
    as_k8s_model(template, "V1PodTemplateSpec")


def test_pytorch_job_refuses_workers_that_do_not_make_the_world_size():
    with pytest.raises(
        ValueError, match=r"workers 3 x 2 process\(es\) per pod .* must equal training.world_size 4"
    ):
        k8s.worker_count(training(world_size=4, gpus_per_worker=2, workers=3))
    with pytest.raises(ValueError, match=r"must equal training.world_size 3"):
        k8s.worker_count(training(world_size=3, gpus_per_worker=2))


def test_job_names_are_dns_labels():
    name = k8s.job_name("Flights_Delays.v2", "2013-01-03")
    assert name == "lakeprep-flights-delays-v2-2013-01-03"
    as_k8s_model({"name": name}, "V1ObjectMeta")
    assert len(k8s.job_name("x" * 80, RUN_DS)) <= 48
    # A retrain of the same day (another run key) gets another job; the key survives the cut.
    keyed = k8s.job_name("x" * 80, RUN_DS, "0123456789ab")
    assert len(keyed) <= 48 and keyed.endswith(f"-{RUN_DS}-0123456789ab")
    assert k8s.job_name("flights", RUN_DS, "aaa") != k8s.job_name("flights", RUN_DS, "bbb")
    as_k8s_model({"name": keyed}, "V1ObjectMeta")


def test_the_schema_check_catches_bad_templates():
    """The model round trip is a real check: it fails on a typo and on a missing name."""
    good = k8s.render_pytorch_job(name="j", training=training(), args=ARGS)
    template = good["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    typo = json.loads(json.dumps(template))
    typo["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(AssertionError):
        as_k8s_model(typo, "V1PodTemplateSpec")
    nameless = json.loads(json.dumps(template))
    del nameless["spec"]["containers"][0]["name"]
    with pytest.raises(ValueError, match="name"):
        as_k8s_model(nameless, "V1PodTemplateSpec")


def test_submission_without_the_provider_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, HOOK_MODULE, None)  # import fails as if not installed
    job = k8s.render_pytorch_job(name="j", training=training(), args=ARGS)
    with pytest.raises(RuntimeError, match="apache-airflow-providers-cncf-kubernetes"):
        k8s.submit(job, kubernetes_conn_id="kubernetes_default")


# --------------------------------------------------------------------------- TrainJob

NO_PLACEMENT = {"runtime": "torch-distributed", "node_selector": {}, "tolerations": []}
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def test_train_job_runs_the_trainer_on_the_torch_runtime():
    placed = {"runtime": "torch-cuda", "node_selector": {"pool": "a100"}, "tolerations": [TOLERATION]}
    job = k8s.render_train_job(
        name="lakeprep-flights-2013-01-03",
        training=training(world_size=4, gpus_per_worker=2, image="registry/lakeprep:1", namespace="ml"),
        args=ARGS,
        placed=placed,
        labels={"lakeprep/dataset": "flights"},
    )
    assert (job["apiVersion"], job["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert job["spec"]["runtimeRef"] == {
        "name": "torch-cuda",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    trainer = job["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"], trainer["image"]) == (2, 2, "registry/lakeprep:1")
    resources = as_k8s_model(trainer["resourcesPerNode"], "V1ResourceRequirements")
    assert resources.limits == {"nvidia.com/gpu": "2"}
    for env in trainer["env"]:
        as_k8s_model(env, "V1EnvVar")
    assert not {e["name"] for e in trainer["env"]} & {"PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR"}
    assert trainer["command"][:5] == [
        "python",
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--nproc-per-node=2",
    ]
    assert trainer["command"][5:] == ["--max-restarts=2", "-m", "lakeprep_train.train", *ARGS]
    (patch,) = job["spec"]["runtimePatches"]
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert node["name"] == "node"  # the torch runtime's trainer job and container
    pod = node["template"]["spec"]["template"]
    assert as_k8s_model(pod["metadata"], "V1ObjectMeta").labels["lakeprep/dataset"] == "flights"
    assert pod["spec"]["nodeSelector"] == {"pool": "a100"}
    assert [as_k8s_model(t, "V1Toleration").key for t in pod["spec"]["tolerations"]] == ["nvidia.com/gpu"]
    meta = as_k8s_model(job["metadata"], "V1ObjectMeta")
    assert meta.namespace == "ml" and len(meta.annotations[k8s.DIGEST_ANNOTATION]) == 64


def test_train_job_without_gpus_or_placement_asks_for_neither():
    job = k8s.render_train_job(
        name="j", training=training(world_size=3, gpus_per_worker=0), args=ARGS, placed=NO_PLACEMENT
    )
    assert "resourcesPerNode" not in job["spec"]["trainer"]
    assert job["spec"]["trainer"]["numNodes"] == 3
    pod = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    assert "spec" not in pod["template"]["spec"]["template"]


def test_pytorch_job_is_kept_for_v1_clusters_with_placement():
    placed = {"runtime": "unused", "node_selector": {"pool": "gpu"}, "tolerations": [TOLERATION]}
    job = k8s.render_job(
        name="j", training=training(kubernetes_api="pytorchjob", world_size=2), args=ARGS, placed=placed
    )
    assert job["kind"] == "PyTorchJob"
    pod = as_k8s_model(job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"], "V1PodTemplateSpec")
    assert pod.spec.node_selector == {"pool": "gpu"}
    assert pod.spec.tolerations[0].effect == "NoSchedule"
    assert pod.spec.containers[0].termination_message_policy == "FallbackToLogsOnError"


def test_placement_is_the_specs_else_the_connections_else_the_default():
    extra = {"runtime": "torch-cuda", "node_selector": {"pool": "gpu"}, "tolerations": [TOLERATION]}
    assert k8s.placement(training(), extra, "k8s") == extra
    spec_says = training(node_selector={"pool": "cpu"}, tolerations=[])
    assert k8s.placement(spec_says, extra, "k8s") == {
        "runtime": "torch-cuda",
        "node_selector": {"pool": "cpu"},
        "tolerations": [],
    }
    assert k8s.placement(training(), None, "k8s") == NO_PLACEMENT
    with pytest.raises(
        ValueError, match=r"connection 'k8s': extra lakeprep_training.tolerations .* is not valid"
    ):
        k8s.placement(training(), {"tolerations": [{"effect": "Sometimes"}]}, "k8s")
    with pytest.raises(ValueError, match=r"lakeprep_training.image is not a setting it can hold"):
        k8s.placement(training(), {"image": "x"}, "k8s")


# --------------------------------------------------------------------------- job status


def trainjob_status(*conditions, active=0):
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "j", "namespace": "ml"},
        "status": {
            "conditions": [
                {"type": t, "status": "True", "reason": r, "message": m} for t, r, m in conditions
            ],
            "jobsStatus": [
                {"name": "node", "active": active, "ready": 0, "succeeded": 0, "failed": 0, "suspended": 0}
            ],
        },
    }


def test_job_state_reads_both_apis_conditions():
    submitted = {"kind": "TrainJob", "metadata": {"name": "j"}}
    assert k8s.job_state(submitted).phase == "pending"
    assert k8s.job_state(trainjob_status(active=2)).phase == "running"
    done = k8s.job_state(trainjob_status(("Complete", "JobsCompleted", "all done")))
    assert (done.phase, done.reason) == ("succeeded", "JobsCompleted")
    failed = k8s.job_state(trainjob_status(("Failed", "FailedJobs", "jobset failed")))
    assert failed.describe() == "failed (FailedJobs: jobset failed)"
    v1 = {
        "kind": "PyTorchJob",
        "metadata": {"name": "j"},
        "status": {
            "conditions": [
                {"type": "Created", "status": "True"},
                {"type": "Running", "status": "False"},
                {"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded"},
            ]
        },
    }
    assert k8s.job_state(v1).phase == "succeeded"
    v1["status"]["conditions"][1]["status"] = "True"
    v1["status"]["conditions"].pop()
    assert k8s.job_state(v1).phase == "running"


def failed_pod(name, exit_code, message="", reason="Error", container="node"):
    return {
        "metadata": {"name": name},
        "status": {
            "containerStatuses": [
                {
                    "name": container,
                    "state": {"terminated": {"exitCode": exit_code, "reason": reason, "message": message}},
                }
            ]
        },
    }


TORCHRUN_SUMMARY = """lakeprep_train.train FAILED
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : 2 (pid: 31)"""


def test_a_failed_job_reports_its_pods_and_whether_a_retry_could_help():
    job = trainjob_status(("Failed", "FailedJobs", "jobset failed"))
    state = k8s.job_state(job)
    oom = k8s.pod_failures(
        [failed_pod("j-node-0-1", 137, reason="OOMKilled"), {"metadata": {"name": "ok"}}], "node"
    )
    report = k8s.failure_report(job, state, oom)
    assert report["refusal"] is False
    assert "pod j-node-0-1 container node exited with 137 (OOMKilled)" in report["message"]
    refused = k8s.pod_failures([failed_pod("j-node-0-0", 1, TORCHRUN_SUMMARY)], "node")
    report = k8s.failure_report(job, state, refused)
    assert report["refusal"] is True and "exitcode  : 2" in report["message"]
    assert k8s.failure_report(job, state, k8s.pod_failures([failed_pod("p", 2)], "node"))["refusal"]
    unsupported = trainjob_status(("Failed", "TrainingRuntimeNotSupported", "runtime x"))
    assert k8s.failure_report(unsupported, k8s.job_state(unsupported), [])["refusal"] is True
    assert k8s.pod_failures([failed_pod("p", 2, container="sidecar")], "node") == []


# --------------------------------------------------------------------------- submission


class FakeHook:
    """The provider's KubernetesHook as `submit`/`delete` use it, over an in-memory API."""

    def __init__(self, existing=None, create_error=None):
        self.objects = dict(existing or {})
        self.calls: list = []
        self.conn_ids: set = set()
        self.create_error = create_error

    def __call__(self, conn_id=None):
        self.conn_ids.add(conn_id)
        return self

    def create_custom_object(self, **kwargs):
        self.calls.append(("create", kwargs))
        if self.create_error:
            raise self.create_error
        name = kwargs["body"]["metadata"]["name"]
        if name in self.objects:
            raise ApiException(status=409, reason="AlreadyExists")
        self.objects[name] = kwargs["body"]
        return kwargs["body"]

    def get_custom_object(self, *, name, **kwargs):
        self.calls.append(("get", name))
        if name not in self.objects:
            raise ApiException(status=404, reason="NotFound")
        return self.objects[name]

    def delete_custom_object(self, *, name, **kwargs):
        self.calls.append(("delete", name, kwargs.get("propagation_policy")))
        if self.objects.pop(name, None) is None:
            raise ApiException(status=404, reason="NotFound")


def rendered(**changes):
    return k8s.render_train_job(name="j", training=training(**changes), args=ARGS, placed=NO_PLACEMENT)


def with_status(job, *conditions):
    return {**job, "status": trainjob_status(*conditions)["status"]}


def test_a_retry_adopts_its_own_running_job_and_recreates_a_failed_or_changed_one(monkeypatch):
    job = rendered()
    hook = FakeHook()
    monkeypatch.setitem(sys.modules, HOOK_MODULE, types.SimpleNamespace(KubernetesHook=hook))
    assert k8s.submit(job, kubernetes_conn_id="k") == "created"
    hook.objects["j"] = with_status(job)  # running, no condition yet
    assert k8s.submit(job, kubernetes_conn_id="k") == "adopted"
    assert not [c for c in hook.calls if c[0] == "delete"]
    hook.objects["j"] = with_status(job, ("Failed", "FailedJobs", "x"))
    assert k8s.submit(job, kubernetes_conn_id="k", sleep=lambda s: None) == "recreated"
    assert ("delete", "j", "Foreground") in hook.calls and "status" not in hook.objects["j"]
    changed = rendered(image="registry/other:2")  # e.g. the spec changed between tries
    assert k8s.submit(changed, kubernetes_conn_id="k", sleep=lambda s: None) == "recreated"
    assert hook.objects["j"] is not job


def test_a_job_the_api_refuses_is_a_refusal(monkeypatch):
    hook = FakeHook(create_error=ApiException(status=422, reason="Invalid"))
    monkeypatch.setitem(sys.modules, HOOK_MODULE, types.SimpleNamespace(KubernetesHook=hook))
    with pytest.raises(k8s.JobRefused, match=r"refused TrainJob default/j \(HTTP 422\)"):
        k8s.submit(rendered(), kubernetes_conn_id="k")
    hook.create_error = ApiException(status=404, reason="NotFound")
    with pytest.raises(k8s.JobRefused, match=r"does not serve trainjobs.trainer.kubeflow.org/v1alpha1"):
        k8s.submit(rendered(), kubernetes_conn_id="k")


# --------------------------------------------------------------------------- the kubernetes backend


def kubernetes_backend() -> k8s.KubernetesBackend:
    return k8s.KubernetesBackend(conn_id="kubernetes_default", log=logging.getLogger("test"))


def event(status, **fields):
    return {"status": status, "api": "trainjob", "name": "j", "namespace": "ml", **fields}


def test_a_failed_job_fails_the_task_with_its_reason(tmp_path):
    backend = kubernetes_backend()
    with pytest.raises(k8s.TrainingJobRefused, match="exitcode  : 2") as refused:
        backend.result(
            event("failed", message=f"TrainJob ml/j failed\n{TORCHRUN_SUMMARY}", refusal=True), tmp_path
        )
    assert isinstance(refused.value, AirflowFailException)  # no retries
    with pytest.raises(k8s.TrainingJobFailed, match="OOMKilled") as failed:
        backend.result(event("failed", message="pod p exited with 137 (OOMKilled)", refusal=False), tmp_path)
    assert not isinstance(failed.value, AirflowFailException)  # retried
    with pytest.raises(k8s.TrainingJobFailed, match="deleted: TrainJob ml/j was deleted"):
        backend.result(event("deleted", message="TrainJob ml/j was deleted before it finished"), tmp_path)


def test_a_succeeded_job_without_a_model_on_the_lake_names_the_mount(tmp_path):
    with pytest.raises(k8s.TrainingJobRefused, match="must mount the lake at the path the worker sees"):
        kubernetes_backend().result(event("succeeded"), tmp_path)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "metrics.json").write_text("{}")
    kubernetes_backend().result(event("succeeded"), tmp_path)  # the model is there: nothing raised


def test_kubernetes_backend_refuses_a_lake_the_pods_cannot_write():
    backend = kubernetes_backend()
    with pytest.raises(
        k8s.TrainingJobRefused, match=r"hdfs://nn:8020/lake/models/flights/dt=.* is not a file:// lake"
    ):
        backend.prepare(f"hdfs://nn:8020/lake/models/flights/dt={RUN_DS}")
    backend.prepare(f"file:///lake/models/flights/dt={RUN_DS}")


def test_backends_that_run_in_the_task_have_no_event_to_read(tmp_path):
    local = BACKENDS["local"](conn_id=None, log=logging.getLogger("test"))
    with pytest.raises(TypeError, match="training backend 'local' does not defer"):
        local.result(event("succeeded"), tmp_path)
