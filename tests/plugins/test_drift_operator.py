"""`DriftCheckOperator` on a tmp file:// lake holding `_stats.json` files, without a DB.

Rendered and executed with a hand-made context, as the task runner would; the stats
are synthetic (tests/plugins/stats_data.py) and land where validate and
preprocess write them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakeprep_airflow.drift import DriftError
from lakeprep_airflow.operators.drift import DriftCheckOperator
from lakeprep_contracts import documents, knobs
from tests.plugins.stats_data import categorical, day, normal, text

SPEC = """\
name: toy
source: {uri: "{lake}/raw/toy/dt={ds}", format: csv}
columns:
  - {name: flight_id, type: string, role: id}
  - {name: distance, type: double, role: numeric}
  - {name: carrier, type: string, role: categorical}
  - {name: tailnum, type: string, role: ignored}
  - {name: delayed, type: int, role: label}
derived: []
label: {column: delayed, classes: [0, 1]}
references:
  - name: planes
    uri: "{lake}/raw/planes"
    format: csv
    join_keys: [tailnum]
    columns:
      - {name: model, role: text}
window: {days: 4}
stages:
  check_drift: {action: ACTION}
"""
DS = "2013-01-04"


@pytest.fixture
def spec_path(tmp_path: Path):
    def write(action: str = "warn") -> str:
        path = tmp_path / "pipelines" / "toy.yaml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(SPEC.replace("ACTION", action))
        return str(path)

    return write


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    return tmp_path / "lake"


def land(lake: Path, stage: str, ds: str, *, committed: bool = True, **columns) -> Path:
    """A stage partition of `toy` for `ds` with its `_stats.json` (and `_SUCCESS`)."""
    partition = lake / stage / "toy" / f"dt={ds}"
    partition.mkdir(parents=True)
    doc = day(ds, **columns)
    doc["partition"] = f"file://{partition}"
    (partition / "_stats.json").write_text(json.dumps(doc))
    if committed:
        (partition / "_SUCCESS").write_text("")
    return partition


def land_day(lake: Path, ds: str, *, shift: float = 0.0, committed: bool = True) -> None:
    land(
        lake,
        "validate",
        ds,
        committed=committed,
        distance=normal(shift),
        carrier=categorical({"UA": 60, "AA": 40}),
        delayed=normal(0.3, 0.1),
    )
    land(lake, "preprocess", ds, committed=committed, model=text({"boeing": 300, "airbus": 100}))


def run(op: DriftCheckOperator, ds: str = DS) -> dict:
    context = {"ds": ds, "run_id": f"manual__{ds}T00:00:00+00:00"}
    op.render_template_fields(context)
    return op.execute(context)


def make_op(spec: str, lake: Path, **kw) -> DriftCheckOperator:
    return DriftCheckOperator(
        task_id="check_drift", spec_path=spec, lake_root=f"file://{lake}", run_ds="{{ ds }}", **kw
    )


def test_compares_the_day_with_the_committed_earlier_days_and_writes_the_report(spec_path, lake, capfd):
    land_day(lake, "2013-01-02")
    land_day(lake, "2013-01-03", committed=False)  # refused by validate: not a reference
    land_day(lake, DS, shift=1.0)
    op = make_op(spec_path(), lake)
    report = run(op)

    assert op.run_ds == DS
    written = json.loads((lake / "check_drift" / "toy" / f"dt={DS}" / "drift.json").read_text())
    assert written == report
    assert documents.problems("drift", report) == []
    assert list(report["features"]) == ["distance", "carrier", "model", "delayed"]
    assert {n: f["status"] for n, f in report["features"].items()} == {
        "distance": "drift",
        "carrier": "ok",
        "model": "ok",
        "delayed": "ok",
    }
    assert all(f["reference_days"] == 1 for f in report["features"].values())
    assert report["reference_partitions"] == [f"file://{lake}/validate/toy/dt=2013-01-02"]
    assert report["stats_files"] == [
        f"file://{lake}/{stage}/toy/dt={d}/_stats.json"
        for d in (DS, "2013-01-02")
        for stage in ("validate", "preprocess")
    ]
    assert (report["dataset"], report["logical_date"]) == ("toy", DS)
    assert report["params"] == {**knobs.defaults("check_drift"), "action": "warn"}
    psi = report["features"]["distance"]["value"]
    # The task log (Airflow's structlog renders to the task's stdout): one line per feature.
    log = capfd.readouterr().out
    noise = report["features"]["distance"]["noise"]
    assert f"drift distance psi={psi:.3f} (noise {noise:.3f}, threshold 0.25), mean shift +1.000 sd" in log
    assert "drift carrier jsd=0.000 (noise " in log
    assert log.count("] drift ") == 4
    assert sorted(p.name for p in (lake / "check_drift" / "toy" / f"dt={DS}").iterdir()) == ["drift.json"]


def test_stop_fails_the_task_after_writing_the_report(spec_path, lake):
    land_day(lake, "2013-01-01")
    land_day(lake, DS, shift=1.0)
    op = make_op(spec_path("stop"), lake)
    from airflow.sdk.exceptions import AirflowFailException

    # AirflowFailException: the same statistics give the same verdict, so no retry.
    with pytest.raises(AirflowFailException, match=r"distance psi=\d\.\d{3} > threshold 0\.25") as err:
        run(op)
    assert isinstance(err.value.__cause__, DriftError)
    assert err.value.__cause__.features == ["distance"]
    written = json.loads((lake / "check_drift" / "toy" / f"dt={DS}" / "drift.json").read_text())
    assert written["drifting"] == ["distance"] and written["status"] == "drift"


def test_an_override_from_the_trigger_form_changes_the_threshold(spec_path, lake):
    land_day(lake, "2013-01-03")
    land_day(lake, DS, shift=1.0)
    overrides = {"stages.check_drift.psi_threshold": "5", "stages.check_drift.min_effect": "2"}
    report = run(make_op(spec_path("stop"), lake, overrides=overrides))
    distance = report["features"]["distance"]
    assert distance["threshold"] == 5 and distance["shift"]["threshold"] == 2 and report["status"] == "ok"


def test_a_column_marked_drift_ignore_is_recorded_never_judged(spec_path, lake):
    land_day(lake, "2013-01-03")
    land_day(lake, DS, shift=1.0)
    path = spec_path("stop")
    Path(path).write_text(Path(path).read_text().replace("role: numeric}", "role: numeric, drift: ignore}"))
    report = run(make_op(path, lake))
    distance = report["features"]["distance"]
    assert distance["status"] == "ignored" and distance["value"] > distance["threshold"]
    assert distance["note"] == "marked `drift: ignore` in the spec: recorded, never drift"
    assert report["drifting"] == [] and report["status"] == "ok"


def test_the_first_day_has_no_reference_and_does_not_fail(spec_path, lake):
    land_day(lake, DS, shift=3.0)
    report = run(make_op(spec_path("stop"), lake))
    assert report["status"] == "no_reference"
    assert {f["status"] for f in report["features"].values()} == {"no_reference"}
    assert report["reference_partitions"] == []


def test_running_twice_leaves_one_report(spec_path, lake):
    land_day(lake, "2013-01-02")
    land_day(lake, DS, shift=0.1)
    op = make_op(spec_path(), lake)
    first = run(op)
    second = run(op)
    assert first == second
    folder = lake / "check_drift" / "toy" / f"dt={DS}"
    assert [p.name for p in folder.iterdir()] == ["drift.json"]


def test_without_the_days_validate_statistics_it_names_the_file(spec_path, lake):
    land_day(lake, "2013-01-03")
    with pytest.raises(FileNotFoundError, match=rf"check_drift needs .*/validate/toy/dt={DS}/_stats\.json"):
        run(make_op(spec_path(), lake))


def test_a_malformed_stats_file_is_refused_naming_it(spec_path, lake):
    land_day(lake, DS)
    stats = lake / "validate" / "toy" / f"dt={DS}" / "_stats.json"
    doc = json.loads(stats.read_text())
    del doc["columns"]["distance"]["quantiles"]
    stats.write_text(json.dumps(doc))
    with pytest.raises(documents.DocumentError) as err:
        run(make_op(spec_path(), lake))
    assert str(err.value).startswith(f"invalid statistics file://{stats}:")
    assert err.value.problems == ["columns.distance: 'quantiles' is a required property"]


def test_a_feature_without_statistics_is_not_judged(spec_path, lake, capfd):
    land(lake, "validate", DS, distance=normal(), delayed=normal(0.3, 0.1))
    report = run(make_op(spec_path(), lake))
    assert list(report["features"]) == ["distance", "delayed"]
    assert "no statistics for ['carrier', 'model']; not judged" in capfd.readouterr().out
