"""Build one Airflow DAG per dataset spec: `lakeprep_<name>`.

    daily:  wait_for_partition >> validate >> preprocess >> sample
    window: >> wait_for_window >> check_drift >> fit_transform >> export_shards
            >> gpu_training_handoff

The daily stages keep no fitted state, so backfilled days run in parallel; the window
stages run once per run over the trailing window (docs/PIPELINE.md).

Only wiring happens here (it runs at every parse): no Spark, no connection or Variable
look-ups, no I/O beyond the spec file. Run-time values (the lake root, the date, the
trigger form's values) are templates rendered in the task.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param, chain

from lakeprep_airflow.locations import LAKE_ROOT_TEMPLATE, RUN_DS_TEMPLATE
from lakeprep_airflow.operators.drift import DriftCheckOperator
from lakeprep_airflow.operators.handoff import GpuTrainingHandoffOperator
from lakeprep_airflow.operators.spark_stage import SparkStageOperator
from lakeprep_airflow.sensors.partition import PartitionSensor
from lakeprep_airflow.sensors.window import WindowSensor
from lakeprep_airflow.spec import DAILY_STAGES, WINDOW_STAGES, DatasetSpec, expand
from lakeprep_contracts import knobs

TASKS = (
    "wait_for_partition",
    *DAILY_STAGES,
    "wait_for_window",
    "check_drift",
    *WINDOW_STAGES,
    "gpu_training_handoff",
)


def _spec_value(spec: DatasetSpec, dotted: str):
    node = spec.data
    for key in dotted.split("."):
        node = node[key]
    return node


def form_overrides() -> dict[str, str]:
    """Trigger-form field -> the spec field it overrides (from the knob declarations)."""
    return {k.form.param: path for path, k in knobs.form_knobs()}


def trigger_params(spec: DatasetSpec) -> dict[str, Param]:
    """The trigger form: one field per `form` knob, default from the spec, bounds from the knob."""
    params = {}
    for path, k in knobs.form_knobs():
        schema = {key: v for key, v in k.schema.items() if key != "description"}
        params[k.form.param] = Param(
            _spec_value(spec, path),
            title=k.form.title,
            description=f"{k.doc[0].upper()}{k.doc[1:]}. Allowed: {knobs.describe_bounds(k.schema)}. "
            f"Spec field `{path}`.",
            section=k.form.section,
            **schema,
        )
    return params


def build_dag(spec: DatasetSpec) -> DAG:
    overrides = {target: f"{{{{ params.{name} }}}}" for name, target in form_overrides().items()}
    source = spec.source
    start = spec.data.get("start_date")
    end = spec.data.get("end_date")
    with DAG(
        dag_id=spec.dag_id,
        description=(spec.data.get("description") or "").strip()[:200] or None,
        doc_md=_doc(spec),
        schedule=spec.data.get("schedule"),
        start_date=pendulum.parse(start, tz="UTC") if start else None,
        end_date=pendulum.parse(end, tz="UTC") if end else None,
        catchup=spec.data.get("catchup", False),
        max_active_runs=4,
        default_args={
            "owner": spec.data.get("owner", "lakeprep"),
            "retries": 2,
            "retry_delay": timedelta(minutes=2),
        },
        params=trigger_params(spec),
        tags=["lakeprep", spec.name],
    ) as dag:
        wait = PartitionSensor(
            task_id="wait_for_partition",
            uri=expand(source["uri"], lake_root=LAKE_ROOT_TEMPLATE, ds=RUN_DS_TEMPLATE),
            min_files=source.get("min_files", 1),
            min_bytes=source.get("min_bytes", 0),
            # Deferrable waits in the triggerer; otherwise reschedule frees the worker slot
            # between pokes. Either way no worker is held while the partition is missing.
            deferrable=source.get("deferrable", False),
            mode="reschedule",
            poke_interval=source.get("poke_interval_seconds", 300),
            timeout=source.get("timeout_seconds", 6 * 3600),
        )
        spec_path = str(spec.path)
        daily = [
            SparkStageOperator(task_id=stage, stage=stage, spec_path=spec_path, overrides=overrides)
            for stage in DAILY_STAGES
        ]
        window_cfg = spec.data["window"]
        wait_window = WindowSensor(
            task_id="wait_for_window",
            spec_path=spec_path,
            overrides=overrides,
            mode="reschedule",
            poke_interval=window_cfg["poke_interval_seconds"],
            timeout=window_cfg["wait_timeout_seconds"],
        )
        drift = DriftCheckOperator(task_id="check_drift", spec_path=spec_path, overrides=overrides)
        window = [
            SparkStageOperator(task_id=stage, stage=stage, spec_path=spec_path, overrides=overrides)
            for stage in WINDOW_STAGES
        ]
        handoff = GpuTrainingHandoffOperator(
            task_id="gpu_training_handoff", spec_path=spec_path, overrides=overrides
        )
        chain(wait, *daily, wait_window, drift, *window, handoff)
    return dag


def _doc(spec: DatasetSpec) -> str:
    chain_line = " >> ".join(TASKS)
    return (
        f"### lakeprep: `{spec.name}`\n\n{(spec.data.get('description') or '').strip()}\n\n"
        f"Spec: `{spec.path.name}`. Raw partitions: `{spec.source['uri']}`.\n\n`{chain_line}`\n"
    )
