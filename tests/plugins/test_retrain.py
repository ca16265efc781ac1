"""The train DAG's partition: the run_ds template rendered as a task would render it.

The events are the Task SDK's own types (`TriggeringAssetEventsAccessor` over
`AssetEventDagRunReferenceResult`), as `get_template_context` builds them from the run's
consumed asset events; the manual case has none, as a hand-triggered run has none.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from lakeprep_airflow.dag_factory import build_train_dag
from lakeprep_airflow.operators.retrain_handoff import run_folder_name
from lakeprep_airflow.operators.spark_stage import SparkStageOperator
from lakeprep_airflow.retrain import EXTRA_KEYS, export_asset
from lakeprep_airflow.spec import config_hash, load_spec

REPO = Path(__file__).resolve().parents[2]
FLIGHTS = REPO / "pipelines" / "flights.yaml"
LAKE = "file:///lake"


def event(extra: dict, minute: int, asset=None):
    from airflow.sdk.api.datamodels._generated import AssetReferenceAssetEventDagRun
    from airflow.sdk.execution_time.comms import AssetEventDagRunReferenceResult

    asset = asset or export_asset("flights")
    return AssetEventDagRunReferenceResult(
        asset=AssetReferenceAssetEventDagRun(name=asset.name, uri=asset.uri, extra={}),
        extra=extra,
        source_task_id="export_shards",
        source_dag_id="lakeprep_flights",
        source_run_id=f"scheduled__2013-01-0{minute}T00:00:00+00:00",
        source_map_index=-1,
        source_aliases=[],
        timestamp=dt.datetime(2026, 1, 1, 12, minute, tzinfo=dt.UTC),
    )


def rendered_handoff(conf: dict, events: list, run_id: str = "asset_triggered__2026-01-01T12:05:00+00:00"):
    """The train DAG's handoff after rendering against a task-like context."""
    from airflow.sdk.execution_time.context import TriggeringAssetEventsAccessor

    dag = build_train_dag(load_spec(FLIGHTS))
    params = copy.deepcopy(dag.params)
    params.update(conf)
    task = copy.deepcopy(dag.get_task("gpu_training_handoff"))
    context = {
        "params": params.validate(),
        "triggering_asset_events": TriggeringAssetEventsAccessor.build(events),
        "run_id": run_id,
        "var": {"value": SimpleNamespace(get=lambda key, default="": LAKE)},
    }
    task.render_template_fields(context)
    return task


def test_an_asset_triggered_run_trains_the_partition_in_the_event():
    task = rendered_handoff({}, [event({"ds": "2013-01-02"}, 1)])
    assert task.run_ds == "2013-01-02"
    assert task.overrides == {"training.backend": "local", "training.epochs": "3"}
    export, model = task.locations(task.run_spec())
    assert export == f"{LAKE}/export_shards/flights/dt=2013-01-02"
    # Its own folder, outside the daily run's models/flights/dt=2013-01-02 (replaced whole).
    assert model == f"{LAKE}/models/flights/retrain/dt=2013-01-02/asset_triggered__2026-01-01T12_05_00_00_00"


def test_several_consumed_events_train_the_latest_and_log_the_others(caplog):
    events = [event({"ds": "2013-01-03"}, 4), event({"ds": "2013-01-01"}, 2), event({"ds": "2013-01-02"}, 3)]
    with caplog.at_level(logging.WARNING, logger="lakeprep_airflow.retrain"):
        task = rendered_handoff({}, events)
    assert task.run_ds == "2013-01-03"  # the latest event, not the latest date or the last listed
    assert "not 2013-01-01, 2013-01-02" in caplog.text


def test_a_manual_run_trains_the_partition_of_the_form():
    task = rendered_handoff(
        {"run_ds": "2013-01-01", "epochs": 10}, [], run_id="manual__2026-01-01T12:00:00+00:00"
    )
    assert task.run_ds == "2013-01-01"
    assert task.overrides["training.epochs"] == "10"
    assert task.run_spec().training["epochs"] == 10


def test_the_form_wins_over_an_event():
    task = rendered_handoff({"run_ds": "2013-01-01"}, [event({"ds": "2013-01-02"}, 1)])
    assert task.run_ds == "2013-01-01"


def test_without_event_or_form_date_the_run_says_how_to_choose_one():
    with pytest.raises(ValueError, match="trigger it with run_ds"):
        rendered_handoff({}, [])
    # An event of another asset does not count.
    other = SimpleNamespace(name="lakeprep_penguins.export_shards", uri="lakeprep://penguins/export_shards")
    with pytest.raises(ValueError, match="not triggered by an event of 'lakeprep_flights.export_shards'"):
        rendered_handoff({}, [event({"ds": "2013-01-02"}, 1, asset=other)])


@pytest.mark.parametrize("extra", [{}, {"ds": "../../etc"}, {"ds": "20130102"}, {"ds": 20130102}])
def test_an_event_without_a_usable_date_is_refused(extra):
    with pytest.raises(ValueError, match="must be a date YYYY-MM-DD"):
        rendered_handoff({}, [event(extra, 1)])


def test_the_form_refuses_a_date_that_is_not_one():
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError):
        rendered_handoff({"run_ds": "2013-13-01"}, [])


def test_run_folder_names_are_one_hdfs_safe_segment():
    assert run_folder_name("manual__2026-01-01T12:00:00.5+00:00") == "manual__2026-01-01T12_00_00.5_00_00"
    assert run_folder_name("my retrain/2") == "my_retrain_2"
    with pytest.raises(ValueError, match="no usable folder name"):
        run_folder_name("::")


def test_export_shards_describes_its_event_with_the_partition():
    from airflow.sdk.execution_time.context import OutletEventAccessors

    asset = export_asset("flights")
    op = SparkStageOperator(
        task_id="export_shards",
        stage="export_shards",
        spec_path=str(FLIGHTS),
        lake_root=LAKE,
        run_ds="2013-01-02",
        overrides={"stages.sample.seed": "11"},
        outlets=[asset],
    )
    context = {"outlet_events": OutletEventAccessors()}
    op._describe_outlet_events(context, f"{LAKE}/export_shards/flights/dt=2013-01-02")
    extra = context["outlet_events"][asset].extra
    assert set(extra) == set(EXTRA_KEYS)
    assert extra["ds"] == "2013-01-02" and extra["dataset"] == "flights"
    assert extra["manifest_uri"] == f"{LAKE}/export_shards/flights/dt=2013-01-02/manifest.json"
    # The hash of the run's spec, trigger-form overrides applied (as the manifest records it).
    assert extra["config_hash"] == config_hash(load_spec(FLIGHTS).with_overrides({"stages.sample.seed": 11}))
    assert extra["config_hash"] != config_hash(load_spec(FLIGHTS))


def test_stages_without_outlets_describe_no_event():
    from airflow.sdk.execution_time.context import OutletEventAccessors

    op = SparkStageOperator(
        task_id="sample", stage="sample", spec_path=str(FLIGHTS), lake_root=LAKE, run_ds="2013-01-02"
    )
    context = {"outlet_events": OutletEventAccessors()}
    op._describe_outlet_events(context, f"{LAKE}/sample/flights/dt=2013-01-02")
    assert len(context["outlet_events"]) == 0
