"""The window's stages in the Airflow worker (WindowStageOperator over WorkerLake): the
partitions a Spark driver writes for the same window, byte for byte, and the task's errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lakeprep_airflow.operators.spark_stage import StageFailed, StageRefused
from lakeprep_airflow.operators.window_stage import _run_stage
from lakeprep_airflow.worker_lake import WorkerLake
from lakeprep_jobs import export_shards, fit_transform
from tests.spark_jobs.window_data import DAY_3, day_rows, export_params, fit_params, land_sampled_day


def _files(folder: Path) -> dict[str, bytes]:
    """The partition's files, without the `.crc` checksums Hadoop's local FileSystem adds."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.endswith(".crc")
    }


def _params(p) -> dict:
    """A params dataclass as the `--params` JSON the operator builds from the spec."""
    import dataclasses

    return json.loads(json.dumps(dataclasses.asdict(p)))


@pytest.fixture
def sampled(spark, tmp_path) -> tuple[Path, list[str]]:
    """Three sampled days, day 1's first train id delivered again on day 3."""
    root = tmp_path / "landed"
    first = day_rows("2013-01-01", 6, 2, 2)
    again = (first[0][0], first[0][1], 50.0, "b", ["w"], "train")
    inputs = [
        land_sampled_day(spark, root, "2013-01-01", first),
        land_sampled_day(spark, root, "2013-01-02", day_rows("2013-01-02", 7, 3, 2)),
        land_sampled_day(spark, root, DAY_3, [*day_rows(DAY_3, 5, 2, 2), again]),
    ]
    return root, inputs


@pytest.mark.parametrize(
    "balance", [{"strategy": "undersample"}, {"strategy": "oversample", "target_ratio": 0.9}]
)
def test_the_worker_writes_what_the_driver_writes(spark, sampled, tmp_path, balance):
    root, inputs = sampled
    outputs = {}
    for where in ("driver", "worker"):
        lake = tmp_path / where
        shutil.copytree(root / "sample", lake / "sample")
        days = [f"file://{lake}/sample/{u.rsplit('/', 1)[-1]}" for u in inputs]
        fit_out, export_out = (
            f"file://{lake}/fit_transform/dt={DAY_3}",
            f"file://{lake}/export_shards/dt={DAY_3}",
        )
        fit = fit_params()
        export = export_params(f"{fit_out}/transform.json", shards="prepared", balance=balance)
        if where == "driver":
            fit_transform.run(spark, days, fit_out, fit)
            report = export_shards.run(spark, days, export_out, export)
        else:
            worker = WorkerLake()
            _run_stage("fit_transform", worker, days, fit_out, _params(fit))
            report = _run_stage("export_shards", worker, days, export_out, _params(export))
        assert report["rows_superseded"] == 1 and report["files_rewritten"] == 1
        outputs[where] = {
            stage: _files(lake / stage / f"dt={DAY_3}") for stage in ("fit_transform", "export_shards")
        }
        assert not (lake / "export_shards" / "_staging").exists() or not any(
            (lake / "export_shards" / "_staging").iterdir()
        )
    # The transform records its partitions' URIs (absolute: the two lakes differ), the
    # manifest names the days' files relative to itself (the same in both lakes).
    driver, worker = outputs["driver"], outputs["worker"]
    assert driver["export_shards"].keys() == worker["export_shards"].keys()
    for name, data in driver["export_shards"].items():
        if name in ("transform.json", "manifest.json", "_lakeprep_report.json"):
            continue
        assert worker["export_shards"][name] == data, name
    a = json.loads(driver["export_shards"]["manifest.json"])
    b = json.loads(worker["export_shards"]["manifest.json"])
    assert a["splits"] == b["splits"] and a["class_weights"] == b["class_weights"]
    assert [s["fingerprint"] for s in a["source_partitions"]] == [
        s["fingerprint"] for s in b["source_partitions"]
    ]


class _TaskInstance:
    def __init__(self, window: dict | None) -> None:
        self.window = window

    def xcom_pull(self, task_ids: str) -> dict | None:
        return self.window


def _operator(**kw):
    from lakeprep_airflow.operators.window_stage import WindowStageOperator

    return WindowStageOperator(
        task_id="fit_transform",
        stage="fit_transform",
        spec_path=str(Path(__file__).resolve().parents[2] / "pipelines" / "flights.yaml"),
        lake_root=kw.pop("lake_root"),
        run_ds=DAY_3,
        **kw,
    )


def test_a_window_without_statistics_is_refused_without_retries(tmp_path):
    """A sampled day without its fit statistics: the same refusal on every retry."""
    day = tmp_path / "sample" / "flights" / f"dt={DAY_3}"
    day.mkdir(parents=True)
    (day / "_SUCCESS").write_bytes(b"")
    op = _operator(lake_root=f"file://{tmp_path}")
    window = {"days": [DAY_3], "complete": [DAY_3], "failed": [], "missing": [], "before_start": []}
    with pytest.raises(
        StageRefused, match=r"stage fit_transform failed: StatisticsError: .*_fit_statistics\.json"
    ):
        op.execute({"ti": _TaskInstance(window), "run_id": "manual__x"})


def test_a_day_not_committed_yet_is_retried(tmp_path):
    (tmp_path / "sample" / "flights" / f"dt={DAY_3}").mkdir(parents=True)
    op = _operator(lake_root=f"file://{tmp_path}")
    window = {"days": [DAY_3], "complete": [DAY_3], "failed": [], "missing": [], "before_start": []}
    with pytest.raises(StageFailed, match="not complete") as err:
        op.execute({"ti": _TaskInstance(window), "run_id": "manual__x"})
    assert not isinstance(err.value, StageRefused)


def test_without_the_window_decision_the_task_fails_naming_the_sensor(tmp_path):
    op = _operator(lake_root=f"file://{tmp_path}")
    with pytest.raises(ValueError, match="wait_for_window"):
        op.execute({"ti": _TaskInstance(None), "run_id": "manual__x"})
