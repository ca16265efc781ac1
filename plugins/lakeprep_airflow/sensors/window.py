"""`WindowSensor` (`wait_for_window`): decide which days a run's window stages read.

A run's window stages (fit_transform, export_shards) read the sampled partitions of the
`window.days` days ending at its date. Runs overlap: a backfill runs several dates at
once, so when run D reaches its window stages, the run of D-1 may still be sampling.
The rule is that a run sees exactly the days a sequential run would have seen, so this
sensor waits, per earlier day of the window, until that day's outcome is final:

- its run's `sample` task succeeded and the sampled partition has `_SUCCESS`: **complete**;
- its run's `sample` failed (or was skipped because something upstream failed): **failed**;
- no run exists for the day and no complete partition either: **missing**;
- the day is before the dataset's `start_date`: **before_start** (never expected).

"The `sample` task" is `sample_task_id`: the task that commits the sampled partition
(`prepare_day` when the spec fuses its daily stages, `spark.fuse_stages`).

A day whose run exists but has not finished sampling keeps the sensor waiting
(`mode="reschedule"`: no worker slot held). The decision is the task's XCom, which the
window stages read, and it goes into the manifest, so a failed or missing day is named
there, never silently skipped. Day states come from the Task SDK's execution API
(`RuntimeTaskInstance.get_task_states` / `get_dr_count`), so this works the same under
the scheduler, a backfill and `airflow dags test`.

Why not `depends_on_past`: it orders whole task instances (D waits for D-1's
`fit_transform`, which waits for D-2's ...) and a single failed day blocks every later
run, where the window only needs each earlier day's sampling to be final.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowSensorTimeout

from lakeprep_airflow import spec as spec_mod
from lakeprep_airflow.locations import require_lake_root
from lakeprep_airflow.partition_status import check_partition
from lakeprep_airflow.run_spec import RUN_SPEC_FIELDS, RunSpecMixin
from lakeprep_contracts import pipeline

if TYPE_CHECKING:
    from airflow.sdk import Context

# TaskInstance states after which a day's sampling will not change by itself.
SUCCESS_STATES = frozenset({"success"})
FAILED_STATES = frozenset({"failed", "upstream_failed", "skipped", "removed"})


def classify_day(
    day: str,
    *,
    start_date: str | None,
    run_exists: bool,
    sample_state: str | None,
    partition_complete: bool,
) -> str | None:
    """One earlier day's outcome, or None while it is not final (pure, for tests)."""
    if start_date and day < start_date:
        return "before_start"
    if not run_exists:
        return "complete" if partition_complete else "missing"
    if sample_state in SUCCESS_STATES:
        # A success without a committed partition means it was removed since: not readable.
        return "complete" if partition_complete else "missing"
    if sample_state in FAILED_STATES:
        return "failed"
    return None


def empty_window(days: Sequence[str]) -> dict[str, list[str]]:
    return {"days": list(days), **{outcome: [] for outcome in pipeline.WINDOW_OUTCOMES}}


class WindowSensor(RunSpecMixin, BaseSensorOperator):
    """Wait until every earlier day of the run's window has a final outcome.

    :param spec_path: the dataset spec (`window.days`, `start_date`). (templated)
    :param lake_root: lake root URI; defaults to the `lakeprep_lake_root` Variable. (templated)
    :param run_ds: the run's date, YYYY-MM-DD. (templated)
    :param overrides: dotted spec paths to values from the trigger form. (templated)
    :param sample_task_id: the daily task whose outcome decides a day.
    :param webhdfs_conn_id: connection used for `hdfs://` lakes.
    """

    template_fields: Sequence[str] = RUN_SPEC_FIELDS
    ui_color = "#e8f1fa"

    def __init__(self, *, sample_task_id: str = "sample", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sample_task_id = sample_task_id
        self._waiting_on: list[str] = []

    def _partition_complete(self, lake_root: str, dataset: str, day: str) -> bool:
        uri = spec_mod.lake_uri(lake_root, "sample", dataset, day)
        return check_partition(uri, webhdfs_conn_id=self.webhdfs_conn_id).has_marker

    def _day_state(self, ti: Any, dag_id: str, day: str) -> tuple[bool, str | None]:
        """(a run exists for `day`, its sample task's state)."""
        logical = dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC)
        states = ti.get_task_states(dag_id=dag_id, task_ids=[self.sample_task_id], logical_dates=[logical])
        if not states:
            return ti.get_dr_count(dag_id=dag_id, logical_dates=[logical]) > 0, None
        # One run per logical date and DAG; take the sample task's state from it.
        (run_states,) = states.values()
        return True, run_states.get(self.sample_task_id)

    def poke(self, context: Context) -> PokeReturnValue:
        spec = self.run_spec()
        lake_root = require_lake_root(self.lake_root)
        days = spec_mod.run_window(spec, self.run_ds)
        window = empty_window(days)
        waiting: list[str] = []
        ti = context["ti"]
        for day in days[:-1]:
            if spec.data.get("start_date") and day < spec.data["start_date"]:
                window["before_start"].append(day)
                continue
            run_exists, state = self._day_state(ti, context["dag"].dag_id, day)
            outcome = classify_day(
                day,
                start_date=spec.data.get("start_date"),
                run_exists=run_exists,
                sample_state=state,
                partition_complete=self._partition_complete(lake_root, spec.name, day),
            )
            if outcome is None:
                waiting.append(f"{day} (sample {state or 'not started'})")
            else:
                window[outcome].append(day)
        # The run's own day: its sample task is upstream of this sensor, so it succeeded.
        window["complete"].append(days[-1])
        self._waiting_on = waiting
        if waiting:
            self.log.info("window %s..%s: waiting on %s", days[0], days[-1], ", ".join(waiting))
            return PokeReturnValue(is_done=False)
        self.log.info(
            "window %s..%s: %d complete, failed %s, missing %s, %d before start",
            days[0],
            days[-1],
            len(window["complete"]),
            window["failed"] or "none",
            window["missing"] or "none",
            len(window["before_start"]),
        )
        return PokeReturnValue(is_done=True, xcom_value=window)

    def execute(self, context: Context) -> Any:
        try:
            return super().execute(context)
        except AirflowSensorTimeout as err:
            raise AirflowSensorTimeout(
                f"window of {self.run_ds}: earlier days still not final after {self.timeout:.0f}s: "
                f"{', '.join(self._waiting_on) or '?'} (their runs must finish sampling first)"
            ) from err
