from __future__ import annotations

import collections
import hashlib
import json
import re
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeprep_airflow import lake_fs
from lakeprep_airflow.backends import trainer_args
from lakeprep_airflow.backends.local import preflight_command
from lakeprep_airflow.operators.handoff import copy_export_down, run_key, staging_path, trainer_command
from lakeprep_contracts import knobs
from lakeprep_train.dataset import split_batches
from lakeprep_train.manifest import load_manifest, verify_shards, with_transform_document


def training(**changes):
    return {**knobs.defaults("training"), **changes}


ARGS = trainer_args(
    manifest="/m.json",
    output="/out",
    training=training(epochs=3, learning_rate=0.01, checkpoint_every_steps=50, grad_accumulation_steps=2),
    seed=7,
    checkpoint_dir="/ckpt",
)


def test_trainer_args_carry_the_spec_training_section():
    assert ARGS == [
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


def test_single_rank_without_restarts_runs_the_trainer_module():
    cmd = trainer_command(args=ARGS, training=training(world_size=1, max_restarts=0))
    assert cmd == [sys.executable, "-m", "lakeprep_train.train", *ARGS]


@pytest.mark.parametrize(("world_size", "restarts"), [(2, 0), (2, 3), (1, 2)])
def test_several_ranks_or_restarts_go_through_torchrun(world_size, restarts):
    cmd = trainer_command(args=ARGS, training=training(world_size=world_size, max_restarts=restarts))
    assert cmd == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={world_size}",
        f"--max-restarts={restarts}",
        "-m",
        "lakeprep_train.train",
        *ARGS,
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
    from lakeprep_airflow.operators.handoff import GpuTrainingHandoffOperator

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
    from lakeprep_airflow.backends import local as local_backend

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
