from __future__ import annotations

import asyncio
import time

import pytest
from airflow.sdk.exceptions import AirflowSensorTimeout

from lakeprep_airflow.partition_status import check_partition
from lakeprep_airflow.sensors.partition import PartitionSensor
from lakeprep_airflow.triggers.partition import PartitionCompleteTrigger


@pytest.fixture
def partition(tmp_path):
    path = tmp_path / "raw" / "dt=2013-01-01"
    return path, f"file://{path}"


def test_status_reports_what_it_saw(partition):
    path, uri = partition
    assert not check_partition(uri).exists
    path.mkdir(parents=True)
    (path / "part-0.csv").write_text("a,b\n1,2\n")
    (path / ".part-0.csv.crc").write_text("x")
    status = check_partition(uri)
    assert (status.exists, status.has_marker, status.data_files, status.data_bytes) == (True, False, 1, 8)
    assert "_SUCCESS missing, 1 data file(s), 8 bytes" in status.describe()
    (path / "_SUCCESS").write_text("")
    assert check_partition(uri).complete(min_files=1, min_bytes=8)
    assert not check_partition(uri).complete(min_files=2, min_bytes=0)
    assert not check_partition(uri).complete(min_files=1, min_bytes=9)


def test_poke_is_false_until_marker_and_files(partition):
    path, uri = partition
    sensor = PartitionSensor(task_id="wait", uri=uri, min_files=1)
    assert sensor.poke({}) is False
    path.mkdir(parents=True)
    (path / "_SUCCESS").write_text("")
    assert sensor.poke({}) is False  # a marker without data is not a partition
    (path / "part-0.csv").write_text("x\n")
    assert sensor.poke({}) is True


def test_timeout_names_the_partition(partition):
    _, uri = partition
    sensor = PartitionSensor(task_id="wait", uri=uri, poke_interval=0.05, timeout=0.2, mode="poke")
    with pytest.raises(
        AirflowSensorTimeout, match=r"partition file://.*dt=2013-01-01 was not complete"
    ) as err:
        sensor.execute({})
    assert "partition directory does not exist" in str(err.value)


def test_unsupported_scheme_is_refused():
    sensor = PartitionSensor(task_id="wait", uri="s3://bucket/x")
    with pytest.raises(ValueError, match="expected file://, hdfs:// or webhdfs://"):
        sensor.poke({})


def _events(trigger: PartitionCompleteTrigger) -> list[dict]:
    async def collect():
        return [event.payload async for event in trigger.run()]

    return asyncio.run(collect())


def test_trigger_completes_when_partition_lands(partition):
    path, uri = partition
    path.mkdir(parents=True)
    (path / "part-0.csv").write_text("x\n")
    (path / "_SUCCESS").write_text("")
    trigger = PartitionCompleteTrigger(
        uri=uri, min_files=1, min_bytes=0, poke_interval=0.05, deadline=time.time() + 5
    )
    [event] = _events(trigger)
    assert event["status"] == "complete"


def test_trigger_times_out_with_what_it_saw(partition):
    _, uri = partition
    trigger = PartitionCompleteTrigger(
        uri=uri, min_files=1, min_bytes=0, poke_interval=0.05, deadline=time.time() + 0.2
    )
    [event] = _events(trigger)
    assert event["status"] == "timeout"
    assert "does not exist" in event["seen"]
    sensor = PartitionSensor(task_id="wait", uri=uri, timeout=1)
    with pytest.raises(AirflowSensorTimeout, match="was not complete"):
        sensor.execute_complete({}, event)


def test_trigger_serializes_round_trip(partition):
    _, uri = partition
    trigger = PartitionCompleteTrigger(uri=uri, min_files=2, min_bytes=5, poke_interval=3, deadline=123.0)
    path, kwargs = trigger.serialize()
    assert path == "lakeprep_airflow.triggers.partition.PartitionCompleteTrigger"
    assert PartitionCompleteTrigger(**kwargs).serialize() == (path, kwargs)


@pytest.mark.parametrize(
    ("ds", "message"),
    [
        ("2026-12-01", r"date 2026-12-01 is after the dataset's end_date 2013-12-31; the trigger form"),
        ("2012-12-31", r"date 2012-12-31 is before the dataset's start_date 2013-01-01"),
        ("2013-13-01", r"partition date '2013-13-01' must be YYYY-MM-DD"),
    ],
)
def test_a_date_outside_the_dataset_fails_at_once(partition, ds, message):
    """The pre-filled logical date (now) must not leave a sensor waiting 6 hours."""
    from airflow.sdk.exceptions import AirflowFailException

    _, uri = partition
    sensor = PartitionSensor(
        task_id="wait", uri=uri, ds=ds, valid_from="2013-01-01", valid_to="2013-12-31", timeout=3600
    )
    started = time.monotonic()
    with pytest.raises(AirflowFailException, match=message):
        sensor.execute({})
    assert time.monotonic() - started < 5


def test_a_future_date_fails_and_a_date_inside_waits(partition):
    from airflow.sdk.exceptions import AirflowFailException

    path, uri = partition
    with pytest.raises(AirflowFailException, match="is in the future"):
        PartitionSensor(task_id="wait", uri=uri, ds="2999-01-01").execute({})
    path.mkdir(parents=True)
    (path / "_SUCCESS").write_text("")
    (path / "part-0.csv").write_text("x\n")
    inside = PartitionSensor(
        task_id="wait", uri=uri, ds="2013-01-01", valid_from="2013-01-01", valid_to="2013-12-31", mode="poke"
    )
    assert inside.execute({}) is None  # complete: no refusal, no wait
