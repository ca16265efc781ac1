"""wait_for_window: a run's window sees exactly the days a sequential run would see."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from types import SimpleNamespace

import pytest

from lakeprep_airflow.sensors.window import WindowSensor, classify_day

REPO = Path(__file__).resolve().parents[2]
FLIGHTS = str(REPO / "pipelines" / "flights.yaml")


@pytest.mark.parametrize(
    ("kw", "outcome"),
    [
        (
            dict(day="2012-12-31", run_exists=False, sample_state=None, partition_complete=False),
            "before_start",
        ),
        (
            dict(day="2013-01-02", run_exists=True, sample_state="success", partition_complete=True),
            "complete",
        ),
        (dict(day="2013-01-02", run_exists=True, sample_state="failed", partition_complete=False), "failed"),
        (
            dict(day="2013-01-02", run_exists=True, sample_state="upstream_failed", partition_complete=False),
            "failed",
        ),
        (dict(day="2013-01-02", run_exists=True, sample_state="running", partition_complete=True), None),
        (
            dict(day="2013-01-02", run_exists=True, sample_state="up_for_retry", partition_complete=False),
            None,
        ),
        (dict(day="2013-01-02", run_exists=True, sample_state=None, partition_complete=False), None),
        (dict(day="2013-01-02", run_exists=False, sample_state=None, partition_complete=False), "missing"),
        (dict(day="2013-01-02", run_exists=False, sample_state=None, partition_complete=True), "complete"),
        (
            dict(day="2013-01-02", run_exists=True, sample_state="success", partition_complete=False),
            "missing",
        ),
    ],
)
def test_classify_day(kw, outcome):
    assert classify_day(start_date="2013-01-01", **kw) == outcome


class FakeTI:
    """The two Task SDK calls the sensor makes, answered from a table of day -> sample state."""

    def __init__(self, states: dict[str, str | None]) -> None:
        self.states = states

    def _day(self, logical_dates):
        (when,) = logical_dates
        return when.date().isoformat()

    def get_task_states(self, dag_id, task_ids, logical_dates):
        assert dag_id == "lakeprep_flights" and task_ids == ["sample"]
        day = self._day(logical_dates)
        assert logical_dates[0].tzinfo == dt.UTC
        if day in self.states and self.states[day] is not None:
            return {f"scheduled__{day}": {"sample": self.states[day]}}
        return {}

    def get_dr_count(self, dag_id, logical_dates):
        return int(self._day(logical_dates) in self.states)


def poke(tmp_path, states, complete_days, ds="2013-01-04", days=4):
    for day in complete_days:
        part = tmp_path / "sample" / "flights" / f"dt={day}"
        part.mkdir(parents=True, exist_ok=True)
        (part / "_SUCCESS").write_text("")
    sensor = WindowSensor(
        task_id="wait_for_window",
        spec_path=FLIGHTS,
        lake_root=f"file://{tmp_path}",
        run_ds=ds,
        overrides={"window.days": str(days)},
    )
    context = {"ti": FakeTI(states), "dag": SimpleNamespace(dag_id="lakeprep_flights")}
    return sensor, sensor.poke(context)


def test_waits_while_an_earlier_day_is_still_sampling(tmp_path):
    sensor, result = poke(
        tmp_path,
        {"2013-01-01": "success", "2013-01-02": "running", "2013-01-03": "success"},
        ["2013-01-01", "2013-01-03"],
    )
    assert result.is_done is False
    assert sensor._waiting_on == ["2013-01-02 (sample running)"]


def test_names_failed_missing_and_before_start_days(tmp_path):
    # Window of 5 days ending 2013-01-04: 2012-12-31 is before the dataset's start.
    _, result = poke(
        tmp_path,
        {"2013-01-01": "success", "2013-01-02": "failed"},
        ["2013-01-01"],
        days=5,
    )
    assert result.is_done is True
    assert result.xcom_value == {
        "days": ["2012-12-31", "2013-01-01", "2013-01-02", "2013-01-03", "2013-01-04"],
        "complete": ["2013-01-01", "2013-01-04"],
        "failed": ["2013-01-02"],
        "missing": ["2013-01-03"],
        "before_start": ["2012-12-31"],
    }
