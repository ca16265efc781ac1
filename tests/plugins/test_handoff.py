"""`GpuTrainingHandoffOperator`: staging, the remote copy-down, the run through each backend, the commit."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import re
import sys
import types
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.sdk.exceptions import TaskDeferred

from lakeprep_airflow import lake_fs
from lakeprep_airflow.backends import kubernetes as k8s
from lakeprep_airflow.backends import local as local_backend
from lakeprep_airflow.backends import spark as spark_backend
from lakeprep_airflow.operators.handoff import (
    GpuTrainingHandoffOperator,
    copy_export_down,
    run_key,
    staging_path,
)
from lakeprep_airflow.triggers.training_job import TrainingJobTrigger
from lakeprep_train.dataset import split_batches
from lakeprep_train.manifest import load_manifest, verify_shards, with_transform_document
from tests.plugins.test_backends import HOOK_MODULE, FakeHook, event


class _TI:
    def __init__(self, dag_id, run_id, map_index=-1):
        self.dag_id, self.run_id, self.map_index = dag_id, run_id, map_index


def test_run_key_is_stable_across_tries_and_differs_between_runs():
    first = run_key({"ti": _TI("lakeprep_flights", "scheduled__2013-01-01")})
    assert first == run_key({"ti": _TI("lakeprep_flights", "scheduled__2013-01-01")})
    assert first != run_key({"ti": _TI("lakeprep_flights_train", "scheduled__2013-01-01")})
    assert first != run_key({"ti": _TI("lakeprep_flights", "manual__2013-01-01")})
    assert run_key({}) == "manual"


def test_staging_is_a_hidden_sibling_of_the_model_partition():
    assert (
        staging_path("/lake/models/flights/dt=2013-01-01", "abc")
        == "/lake/models/flights/_staging/dt=2013-01-01-abc"
    )


# ------------------------------------------- a remote lake: the export and the files it names


REPO = Path(__file__).resolve().parents[2]
FLIGHTS = str(REPO / "pipelines" / "flights.yaml")
RUN_DS = "2013-01-03"
SAMPLED = "../../../sample/flights/dt=2013-01-02"  # from export_shards/flights/dt=<ds>/


def prepared_lake(root: Path, paths: dict[str, str] | None = None) -> Path:
    """A lake whose prepared export for RUN_DS slices a sampled day's files of one class each.

    ``paths`` renames entries' paths (file name -> path as the manifest writes it).
    """
    from tests.training import prepared_export

    doc = prepared_export.transform_doc()
    rows = prepared_export.prepared_rows(120, seed=1)
    day = root / "sample" / "flights" / "dt=2013-01-02"
    files = {}
    for label in (0, 1):
        part = rows.slice(label * 60, 60)
        part = part.set_column(
            part.schema.get_field_index("label"), "label", pa.array([label] * 60, pa.int32())
        )
        name = f"part-train-{label}-00000.parquet"
        files[name] = {
            **prepared_export.write_file(part, day / name, 16),
            "path": (paths or {}).get(name, f"{SAMPLED}/{name}"),
        }
    pq.write_table(rows.slice(0, 5), day / "part-validation-0-00000.parquet")  # named by no entry
    (day / "_shards.json").write_text("{}")
    entries = [  # the class-0 file sliced twice (once oversampled), the class-1 file whole
        {**files["part-train-0-00000.parquet"], "offset": 0, "rows": 40},
        {**files["part-train-0-00000.parquet"], "offset": 20, "rows": 40},
        {**files["part-train-1-00000.parquet"], "rows": 60},
    ]
    export = root / "export_shards" / "flights" / f"dt={RUN_DS}"
    export.mkdir(parents=True)
    data = json.dumps(doc, sort_keys=True).encode()
    (export / "transform.json").write_bytes(data)
    prepared_export.write_manifest(
        export,
        entries,
        batch_size=16,
        shard_columns="prepared",
        transform={"uri": "transform.json", "sha256": hashlib.sha256(data).hexdigest()},
    )
    return root


class CountingFS(lake_fs.LocalFS):
    """The lake as a remote filesystem would serve it; counts the files read."""

    def __init__(self) -> None:
        self.reads: collections.Counter[str] = collections.Counter()

    def read_bytes(self, path: str) -> bytes:
        self.reads[path] += 1
        return super().read_bytes(path)


def files_under(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_the_copy_of_a_remote_export_holds_every_file_its_manifest_names(tmp_path):
    lake = prepared_lake(tmp_path / "lake")
    fs = CountingFS()
    export = f"{lake}/export_shards/flights/dt={RUN_DS}"
    copied = copy_export_down(fs, str(lake), export, tmp_path / "work" / "lake")
    local = tmp_path / "work" / "lake"
    assert copied == local / "export_shards" / "flights" / f"dt={RUN_DS}" / "manifest.json"
    # The lake's layout: the export folder, and the sampled files its entries name (no others).
    assert files_under(local) == [
        f"export_shards/flights/dt={RUN_DS}/manifest.json",
        f"export_shards/flights/dt={RUN_DS}/transform.json",
        "sample/flights/dt=2013-01-02/part-train-0-00000.parquet",
        "sample/flights/dt=2013-01-02/part-train-1-00000.parquet",
    ]
    assert set(fs.reads.values()) == {1}  # a file two entries slice is copied once
    manifest = load_manifest(str(copied))
    assert all(Path(s.location).is_relative_to(local) for s in manifest.split("train").shards)
    assert verify_shards(manifest) == []
    rows = list(split_batches(with_transform_document(manifest), "train", with_ids=True))
    assert sum(len(b) for b in rows) == 140
    assert {int(x) for b in rows for x in b.label} == {0, 1}


@pytest.mark.parametrize(
    "path",
    [
        "../../../../part-train-0-00000.parquet",  # beside the lake root
        "../../../../../etc/part-train-0-00000.parquet",
    ],
)
def test_an_entry_that_leaves_the_lake_is_refused_naming_it(tmp_path, path):
    lake = prepared_lake(tmp_path / "lake", {"part-train-0-00000.parquet": path})
    # The file is there beside the lake: only the check keeps it from being read and copied.
    source = lake / "sample" / "flights" / "dt=2013-01-02" / "part-train-0-00000.parquet"
    (tmp_path / "part-train-0-00000.parquet").write_bytes(source.read_bytes())
    export = f"{lake}/export_shards/flights/dt={RUN_DS}"
    with pytest.raises(
        ValueError, match=rf"splits.train.shards\[0\].path '{re.escape(path)}' resolves outside the lake root"
    ):
        copy_export_down(lake_fs.LocalFS(), str(lake), export, tmp_path / "work" / "lake")
    assert files_under(tmp_path / "work") == [
        f"lake/export_shards/flights/dt={RUN_DS}/manifest.json",
        f"lake/export_shards/flights/dt={RUN_DS}/transform.json",
    ]


def remote_handoff(tmp_path: Path, monkeypatch):
    """The handoff task for RUN_DS on an hdfs:// lake, served here from ``tmp_path``."""
    resolve = lake_fs.resolve
    monkeypatch.setattr(
        lake_fs,
        "resolve",
        lambda uri, **kw: (
            (lake_fs.LocalFS(), str(tmp_path) + uri.removeprefix("hdfs://nn:8020"))
            if uri.startswith("hdfs://nn:8020/")
            else resolve(uri, **kw)
        ),
    )
    return GpuTrainingHandoffOperator(
        task_id="gpu_training_handoff",
        spec_path=str(Path(__file__).resolve().parents[2] / "pipelines" / "flights.yaml"),
        lake_root="hdfs://nn:8020/lake",
        run_ds=RUN_DS,
        overrides={"training.world_size": "1", "training.max_restarts": "0"},
    )


def test_the_handoff_on_a_remote_lake_trains_on_the_copy(tmp_path, monkeypatch):
    """The trainer gets the copied manifest, whose entries all resolve in the copy."""
    lake = prepared_lake(tmp_path / "lake")
    seen: list[tuple[str, list[str]]] = []

    def trainer(command, **kwargs):
        manifest = command[command.index("--manifest") + 1]
        seen.append((manifest, verify_shards(load_manifest(manifest))))
        if "--output" in command:
            out = Path(command[command.index("--output") + 1])
            (out / "metrics.json").write_text(json.dumps({"validation": {"accuracy": 1.0}}))

    monkeypatch.setattr(local_backend, "run_trainer", trainer)
    result = remote_handoff(tmp_path, monkeypatch).execute({})
    (check, check_problems), (trained, problems) = seen
    assert check == trained and check_problems == problems == []
    assert trained.endswith(f"/lake/export_shards/flights/dt={RUN_DS}/manifest.json")
    assert not trained.startswith(str(lake))  # a local copy, not the lake
    assert result["metrics"] == {"validation": {"accuracy": 1.0}}
    assert (lake / "models" / "flights" / f"dt={RUN_DS}" / "metrics.json").exists()


def test_a_remote_export_naming_a_file_outside_the_lake_fails_without_retries(tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    prepared_lake(tmp_path / "lake", {"part-train-1-00000.parquet": "../../../../x.parquet"})
    with pytest.raises(AirflowFailException, match=r"splits.train.shards\[2\].path '../../../../x.parquet'"):
        remote_handoff(tmp_path, monkeypatch).execute({})


# ------------------------------------------------------------ each backend through the operator


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    """A lake whose export partition for RUN_DS has a manifest (the operator checks it exists)."""
    export = tmp_path / "lake" / "export_shards" / "flights" / f"dt={RUN_DS}"
    export.mkdir(parents=True)
    (export / "manifest.json").write_text("{}")
    return tmp_path / "lake"


def handoff(lake: Path, **overrides) -> GpuTrainingHandoffOperator:
    return GpuTrainingHandoffOperator(
        task_id="gpu_training_handoff",
        spec_path=FLIGHTS,
        lake_root=f"file://{lake}",
        run_ds=RUN_DS,
        overrides={f"training.{k}": v for k, v in overrides.items()},
    )


def fake_trainer(calls: list, output_of):
    """Records its call and writes the metrics.json the operator then reads."""

    def run(*args, **kwargs):
        calls.append((args, kwargs))
        out = output_of(args, kwargs)
        if out is not None:  # the preflight writes nothing
            (Path(out) / "metrics.json").write_text(json.dumps({"validation": {"accuracy": 1.0}}))

    return run


def test_operator_refuses_an_unknown_backend_before_any_work(tmp_path, monkeypatch):
    op = handoff(tmp_path / "empty-lake")  # no manifest: a later check would fail differently
    spec = op.run_spec()
    # The spec schema refuses the name at parse; the operator must refuse it on its own too.
    bad = dataclasses.replace(spec, data={**spec.data, "training": {**spec.training, "backend": "slurm"}})
    monkeypatch.setattr(op, "run_spec", lambda: bad)
    with pytest.raises(ValueError, match="choose one of local, spark, kubernetes"):
        op.execute({})


def test_local_backend_runs_the_command_on_the_worker(lake, monkeypatch):
    calls: list = []
    output_of = lambda args, kwargs: args[0][args[0].index("--output") + 1] if "--output" in args[0] else None  # noqa: E731
    monkeypatch.setattr(local_backend, "run_trainer", fake_trainer(calls, output_of))
    result = handoff(lake, world_size="1", max_restarts="0").execute({})
    ((check,), _), ((command,), kwargs) = calls
    assert check[1:3] == ["-m", "lakeprep_train.preflight"]  # before any rank starts
    assert command[1:3] == ["-m", "lakeprep_train.train"]
    assert kwargs["manifest_uri"] == f"file://{lake}/export_shards/flights/dt={RUN_DS}/manifest.json"
    assert result["metrics"] == {"validation": {"accuracy": 1.0}}
    # Written under the staging folder, with its checkpoint folder beside it; committed with _SUCCESS.
    output = Path(command[command.index("--output") + 1])
    assert output.parent.parent == lake / "models" / "flights" / "_staging"
    assert command[command.index("--checkpoint-dir") + 1] == str(output.parent / "checkpoints")
    committed = lake / "models" / "flights" / f"dt={RUN_DS}"
    assert sorted(p.name for p in committed.iterdir()) == ["_SUCCESS", "metrics.json"]
    assert not output.parent.parent.exists()  # staging and checkpoints removed after the commit


def test_spark_backend_hands_the_trainer_args_to_the_distributor(lake, monkeypatch):
    calls: list = []
    output_of = lambda args, kwargs: kwargs["args"][kwargs["args"].index("--output") + 1]  # noqa: E731
    monkeypatch.setattr(spark_backend, "run_trainer", fake_trainer(calls, output_of))
    result = handoff(lake, backend="spark", local_mode="true").execute({})
    (_, kwargs) = calls[0]
    assert kwargs["spark_conn_id"] == "spark_default"
    assert kwargs["training"]["backend"] == "spark" and kwargs["training"]["local_mode"] is True
    assert kwargs["args"][:2] == [
        "--manifest",
        str(lake / "export_shards" / "flights" / f"dt={RUN_DS}" / "manifest.json"),
    ]
    assert str(REPO / "training") in kwargs["pythonpath"].split(":")
    assert kwargs["spec_conf"]["spark.sql.shuffle.partitions"] == "4"  # the spec's spark.conf
    assert (lake / "models" / "flights" / f"dt={RUN_DS}" / "metrics.json").exists()
    assert result["model_uri"] == f"file://{lake}/models/flights/dt={RUN_DS}"


def test_kubernetes_backend_renders_only_without_a_connection(lake, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", raising=False)
    result = handoff(lake, backend="kubernetes", gpus_per_worker="1", image="registry/t:1").execute({})
    assert result["submitted"] is False
    job = result["job"]
    assert (job["kind"], job["spec"]["runtimeRef"]["name"]) == ("TrainJob", "torch-distributed")
    assert job["metadata"]["name"] == f"lakeprep-flights-{RUN_DS}-manual"  # run key outside a run
    trainer = job["spec"]["trainer"]
    assert trainer["image"] == "registry/t:1"
    manifest = f"file://{lake}/export_shards/flights/dt={RUN_DS}/manifest.json"
    assert trainer["command"][trainer["command"].index("--manifest") + 1] == manifest
    # The pods write into the lake's staging folder, from which the operator commits.
    staging = lake / "models" / "flights" / "_staging" / f"dt={RUN_DS}-manual"
    assert trainer["command"][trainer["command"].index("--output") + 1] == str(staging / "model")
    assert trainer["command"][trainer["command"].index("--checkpoint-dir") + 1] == str(
        staging / "checkpoints"
    )


def test_kubernetes_backend_submits_through_the_provider_hook_and_defers(lake, monkeypatch):
    hook = FakeHook()
    monkeypatch.setitem(sys.modules, HOOK_MODULE, types.SimpleNamespace(KubernetesHook=hook))
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps({"conn_type": "kubernetes"}))
    with pytest.raises(TaskDeferred) as deferred:
        handoff(lake, backend="kubernetes", namespace="ml", poll_seconds="5").execute({})
    ((call, kwargs),) = [c for c in hook.calls if c[0] == "create"]
    assert (kwargs["group"], kwargs["version"], kwargs["plural"], kwargs["namespace"]) == (
        "trainer.kubeflow.org",
        "v1alpha1",
        "trainjobs",
        "ml",
    )
    assert hook.conn_ids == {"kubernetes_default"}
    trigger = deferred.value.trigger
    assert deferred.value.method_name == "execute_complete"
    assert isinstance(trigger, TrainingJobTrigger)
    assert (trigger.api, trigger.name, trigger.namespace, trigger.poll_seconds) == (
        "trainjob",
        kwargs["body"]["metadata"]["name"],
        "ml",
        5,
    )


def test_kubernetes_backend_with_a_connection_but_no_provider_fails_clearly(lake, monkeypatch):
    monkeypatch.setitem(sys.modules, HOOK_MODULE, None)
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps({"conn_type": "kubernetes"}))
    with pytest.raises(
        RuntimeError, match="needs the Airflow provider package apache-airflow-providers-cncf-kubernetes"
    ):
        handoff(lake, backend="kubernetes").execute({})


# --------------------------------------------------------------------------- a deferred run's completion


def test_a_succeeded_job_is_committed_like_the_local_backend(lake):
    op = handoff(lake, backend="kubernetes")
    staging = lake / "models" / "flights" / "_staging" / f"dt={RUN_DS}-manual"
    # What the pods leave on the mounted lake: the model folder and their checkpoints.
    (staging / "model").mkdir(parents=True)
    (staging / "checkpoints").mkdir()
    (staging / "model" / "metrics.json").write_text(json.dumps({"validation": {"accuracy": 0.5}}))
    (staging / "model" / "model.pt").write_bytes(b"weights")
    result = op.execute_complete({}, event("succeeded", message="TrainJob ml/j: succeeded"))
    committed = lake / "models" / "flights" / f"dt={RUN_DS}"
    assert sorted(p.name for p in committed.iterdir()) == ["_SUCCESS", "metrics.json", "model.pt"]
    assert result["metrics"] == {"validation": {"accuracy": 0.5}}
    assert result["model_uri"] == f"file://{lake}/models/flights/dt={RUN_DS}"
    assert not staging.parent.exists()


def test_on_kill_deletes_the_submitted_job(lake, monkeypatch):
    hook = FakeHook()
    monkeypatch.setitem(sys.modules, HOOK_MODULE, types.SimpleNamespace(KubernetesHook=hook))
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps({"conn_type": "kubernetes"}))
    op = handoff(lake, backend="kubernetes")
    op.on_kill()  # nothing submitted yet: nothing to delete
    with pytest.raises(TaskDeferred):
        op.execute({})
    (name,) = hook.objects
    op.on_kill()
    assert hook.objects == {} and ("delete", name, "Foreground") in hook.calls


def test_a_failed_job_fails_the_task_and_commits_nothing(lake):
    op = handoff(lake, backend="kubernetes")
    with pytest.raises(k8s.TrainingJobFailed, match="OOMKilled"):
        op.execute_complete({}, event("failed", message="pod p exited with 137 (OOMKilled)", refusal=False))
    assert not (lake / "models" / "flights").exists()
