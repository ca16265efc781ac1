"""Build one Airflow DAG per dataset spec: `lakeprep_<name>`.

    wait_for_partition >> validate >> preprocess >> select_features >> sample
        >> export_shards >> gpu_training_handoff

Only wiring happens here (it runs at every parse): no Spark, no connection or Variable
look-ups, no I/O beyond the spec file. Run-time values (the lake root, the date, the
trigger form's values) are templates rendered in the task.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param, chain

from lakeprep_airflow.locations import LAKE_ROOT_TEMPLATE, RUN_DS_TEMPLATE
from lakeprep_airflow.operators.handoff import GpuTrainingHandoffOperator
from lakeprep_airflow.operators.spark_stage import SparkStageOperator
from lakeprep_airflow.sensors.partition import PartitionSensor
from lakeprep_airflow.spec import STAGES, DatasetSpec, expand

# Trigger-form fields and the spec fields they override.
FORM_OVERRIDES = {
    "sample_fraction": "stages.sample.fraction",
    "seed": "stages.sample.seed",
    "epochs": "training.epochs",
}


def trigger_params(spec: DatasetSpec) -> dict[str, Param]:
    """The trigger form: defaults from the spec, bounds as in the spec schema."""
    sample = spec.stages["sample"]
    return {
        "sample_fraction": Param(
            sample["fraction"],
            type="number",
            exclusiveMinimum=0,
            maximum=1,
            title="Sample fraction",
            description="Share of each class kept; classes in the spec's class_fractions keep theirs.",
            section="Sampling",
        ),
        "seed": Param(
            sample["seed"],
            type="integer",
            minimum=0,
            maximum=2**31 - 1,
            title="Sampling seed",
            description="Same data and seed give the same sample.",
            section="Sampling",
        ),
        "epochs": Param(
            spec.training["epochs"],
            type="integer",
            minimum=1,
            maximum=1000,
            title="Training epochs",
            section="Training",
        ),
    }


def build_dag(spec: DatasetSpec) -> DAG:
    overrides = {target: f"{{{{ params.{name} }}}}" for name, target in FORM_OVERRIDES.items()}
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
        stages = [
            SparkStageOperator(task_id=stage, stage=stage, spec_path=str(spec.path), overrides=overrides)
            for stage in STAGES
        ]
        handoff = GpuTrainingHandoffOperator(
            task_id="gpu_training_handoff", spec_path=str(spec.path), overrides=overrides
        )
        chain(wait, *stages, handoff)
    return dag


def _doc(spec: DatasetSpec) -> str:
    chain_line = " >> ".join(["wait_for_partition", *STAGES, "gpu_training_handoff"])
    return (
        f"### lakeprep: `{spec.name}`\n\n{(spec.data.get('description') or '').strip()}\n\n"
        f"Spec: `{spec.path.name}`. Raw partitions: `{spec.source['uri']}`.\n\n`{chain_line}`\n"
    )
