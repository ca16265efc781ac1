"""Build two Airflow DAGs per dataset spec: `lakeprep_<name>` and `lakeprep_<name>_train`.

    daily:  wait_for_partition >> validate >> preprocess >> sample
    window: >> wait_for_window >> check_drift >> fit_transform >> export_shards
            >> gpu_training_handoff >> write_report
    train:  gpu_training_handoff      (on each event of the export's Asset, or by hand)

`fit_transform` and a `prepared` export (the default) run in the worker, without Spark
(`WindowStageOperator`); the other stages, and an `encoded` export, are spark-submits
(`SparkStageOperator`). With the spec's `spark.fuse_stages`, the daily stages are one task
(`prepare_day`, one spark-submit) and the window stages another (`fit_and_export`, in the
worker or one spark-submit) (docs/PIPELINE.md#fused-stages):

    wait_for_partition >> prepare_day >> wait_for_window >> check_drift >> fit_and_export
        >> gpu_training_handoff >> write_report

A spec that does not load gives stand-ins under the same two ids instead, each one task
that fails with the spec's error (`dags_for_spec`, docs/SPEC.md#a-broken-spec): the
other specs' DAGs are unaffected.

The daily stages keep no fitted state, so backfilled days run in parallel; the window
stages run once per run over the trailing window (docs/PIPELINE.md). `export_shards`
publishes the dataset's export Asset; the train DAG retrains on an export without
re-running Spark (`lakeprep_airflow.retrain`, docs/TRAINING.md).

Only wiring happens here (it runs at every parse): no Spark, no connection or Variable
look-ups, no I/O beyond the spec file. Run-time values (the lake root, the date, the
trigger form's values) are templates rendered in the task.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, chain

from lakeprep_airflow.locations import LAKE_ROOT_TEMPLATE, RUN_DS_TEMPLATE
from lakeprep_airflow.operators.broken_spec import BrokenSpecOperator
from lakeprep_airflow.operators.drift import DriftCheckOperator
from lakeprep_airflow.operators.handoff import GpuTrainingHandoffOperator
from lakeprep_airflow.operators.report import RunReportOperator
from lakeprep_airflow.operators.retrain_handoff import RetrainHandoffOperator
from lakeprep_airflow.operators.spark_stage import SparkStageOperator
from lakeprep_airflow.operators.window_stage import WindowStageOperator, runs_in_worker
from lakeprep_airflow.retrain import (
    PARTITION_MACRO,
    RUN_DS_PARAM,
    TRAIN_RUN_DS_TEMPLATE,
    export_asset,
    partition_to_train,
)
from lakeprep_airflow.sensors.partition import PartitionSensor
from lakeprep_airflow.sensors.window import WindowSensor
from lakeprep_airflow.spec import DAILY_STAGES, WINDOW_STAGES, DatasetSpec, SpecError, expand, load_spec
from lakeprep_airflow.trigger_guard import refuse_unusable_conf
from lakeprep_contracts import knobs, pipeline

log = logging.getLogger(__name__)

# The tasks that run the daily and the window stages when `spark.fuse_stages` is on.
FUSED_DAILY_TASK = "prepare_day"
FUSED_WINDOW_TASK = "fit_and_export"


def pipeline_tasks(fused: bool = False) -> tuple[str, ...]:
    """The pipeline DAG's task ids, in order: a task per stage, or one per kind when fused."""
    return (
        "wait_for_partition",
        *((FUSED_DAILY_TASK,) if fused else DAILY_STAGES),
        "wait_for_window",
        "check_drift",
        *((FUSED_WINDOW_TASK,) if fused else WINDOW_STAGES),
        "gpu_training_handoff",
        "write_report",
    )


TRAIN_TASKS = ("gpu_training_handoff",)
# The spec section whose form knobs the train DAG's form offers (backend, epochs).
TRAIN_FORM_SECTION = "training"

# The JSON Schema draft the trigger form's Params declare. Airflow resolves a Param with
# `jsonschema.validate`, which first checks the schema against its draft's metaschema
# (airflow/sdk/definitions/param.py `Param.resolve`). Checked against Draft 7's metaschema a
# resolve costs about a fifth of one against 2020-12's, the default (66 against 338 us
# here), and the form's keywords mean the same in both drafts (`DRAFT7_SAME_KEYWORDS`). The
# UI's form reads only the keywords it renders (type, enum, bounds, format, title,
# section), so it is unchanged.
PARAM_SCHEMA_DRAFT = "http://json-schema.org/draft-07/schema#"
# Keywords whose meaning Draft 7 and 2020-12 share (2020-12 moved `items` as a list to
# `prefixItems` and `definitions` to `$defs`, dropped `dependencies`, added `unevaluated*`).
DRAFT7_SAME_KEYWORDS = frozenset(
    {
        "type",
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "items",  # as one schema: every item (checked below)
        "minItems",
        "maxItems",
        "uniqueItems",
        "title",
        "description",
        "default",
        "examples",
        # Airflow's form keys, no JSON Schema keywords: ignored by both drafts.
        "section",
        "values_display",
        "description_md",
    }
)


def param_schema(where: str, schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` for a trigger-form Param: declared Draft 7, once its keywords are known to
    mean the same there (a keyword that does not would silently stop validating)."""
    _check_draft7_keywords(where, schema)
    return {"$schema": PARAM_SCHEMA_DRAFT, **schema}


def _check_draft7_keywords(where: str, schema: dict[str, Any]) -> None:
    unknown = sorted(set(schema) - DRAFT7_SAME_KEYWORDS)
    if unknown:
        raise ValueError(
            f"trigger form field {where}: schema keywords {unknown} may mean something else in "
            f"JSON Schema Draft 7, the Params' draft; expected only {sorted(DRAFT7_SAME_KEYWORDS)}"
        )
    items = schema.get("items")
    if items is not None:
        if not isinstance(items, dict):
            raise ValueError(f"trigger form field {where}: `items` must be one schema, got {items!r}")
        _check_draft7_keywords(f"{where}.items", items)


def _spec_value(spec: DatasetSpec, dotted: str):
    node = spec.data
    for key in dotted.split("."):
        node = node[key]
    return node


def _form_knobs(spec_section: str | None) -> list[tuple[str, knobs.Knob]]:
    """The `form` knobs, all or those of one spec section (`training`)."""
    return [
        (path, k)
        for path, k in knobs.form_knobs()
        if spec_section is None or path.split(".", 1)[0] == spec_section
    ]


def form_overrides(spec_section: str | None = None) -> dict[str, str]:
    """Trigger-form field -> the spec field it overrides (from the knob declarations)."""
    return {k.form.param: path for path, k in _form_knobs(spec_section)}


def override_templates(spec_section: str | None = None) -> dict[str, str]:
    """The tasks' `overrides`: spec field -> `{{ params.<form field> }}`."""
    return {target: f"{{{{ params.{name} }}}}" for name, target in form_overrides(spec_section).items()}


def trigger_params(spec: DatasetSpec, spec_section: str | None = None) -> dict[str, Param]:
    """The trigger form: one field per `form` knob, default from the spec, bounds from the knob."""
    params = {}
    for path, k in _form_knobs(spec_section):
        schema = {key: v for key, v in k.schema.items() if key != "description"}
        params[k.form.param] = Param(
            _spec_value(spec, path),
            description=f"{k.doc[0].upper()}{k.doc[1:]}. Allowed: {knobs.describe_bounds(k.schema)}. "
            f"Spec field `{path}`.",
            schema=param_schema(k.form.param, {"title": k.form.title, "section": k.form.section, **schema}),
        )
    return params


def build_dags(spec: DatasetSpec) -> list[DAG]:
    """Both DAGs of a spec: the pipeline and its retraining DAG."""
    return [build_dag(spec), build_train_dag(spec)]


# The stand-ins of a spec that does not load: their one task, and the tag the UI filters on.
BROKEN_SPEC_TASK = "refuse_broken_spec"
BROKEN_SPEC_TAG = "broken_spec"
# What Airflow accepts in a dag_id (airflow/sdk/definitions/_internal/node.py
# KEY_REGEX); a spec file's stem may hold more until its name is checked against it.
_NOT_IN_DAG_ID = re.compile(r"[^A-Za-z0-9_.-]")


def dags_for_spec(path: Path, *, checks_cache: Path | None = None) -> list[DAG]:
    """The spec's two DAGs; when it does not load, stand-ins under the same ids that say why.

    The DAG file builds every spec's DAGs in one module, and an exception out of it is an
    import error of the whole file: Airflow then keeps no DAG of it, so one broken spec
    would take every dataset's DAGs away. Caught here, a spec's error breaks its own DAGs
    only (`broken_spec_dags`). Anything raised while building from the spec counts: the
    SpecError of `load_spec` (naming the file and the field), and what Airflow refuses in
    what the spec declares (named by the file and Airflow's own message).

    The real DAGs are registered by the DAG file's globals only (`auto_register=False`), so
    one that failed half-way is not picked up beside its stand-in.
    """
    try:
        dags = build_dags(load_spec(path, checks_cache=checks_cache))
        for dag in dags:
            # What the DagBag checks before it takes a DAG (a schedule croniter cannot
            # read); failing there would be the whole file's import error again
            # (airflow/dag_processing/dagbag.py `process_file`).
            dag.validate()
    except Exception as err:  # one spec's error must not remove the others' DAGs
        if isinstance(err, SpecError):
            error = str(err)
            log.error("lakeprep: %s", error)
        else:
            error = f"{path}: Airflow refuses the DAG built from this spec: {type(err).__name__}: {err}"
            log.exception("lakeprep: %s", error)
        return broken_spec_dags(path, error)
    return dags


def broken_spec_dags(path: Path, error: str) -> list[DAG]:
    """Stand-ins for the two DAGs of the spec at `path` (ids from its file name).

    Each keeps its DAG in the UI with its runs, shows `error` as its docs and description,
    and has one task that fails with it, without retries (`BrokenSpecOperator`). No
    schedule: no run fails for a day while the file is broken, and once it loads the real
    DAG continues from its last run (with `catchup`, the missed days too).
    """
    name = _NOT_IN_DAG_ID.sub("_", path.stem)
    return [_stand_in(f"lakeprep_{name}{suffix}", name, path, error) for suffix in ("", "_train")]


def _stand_in(dag_id: str, name: str, path: Path, error: str) -> DAG:
    with DAG(
        dag_id=dag_id,
        description=f"broken spec: {' '.join(error.replace(str(path), path.name).split())}"[:200],
        doc_md=(
            f"### lakeprep: `{path.name}` does not load\n\nThis DAG stands in for `{dag_id}` until "
            f"the spec loads again; its one task `{BROKEN_SPEC_TASK}` fails with the error. Check "
            f"the file with `python -m lakeprep_airflow.spec_check {path}`.\n\n```\n{error}\n```\n"
        ),
        schedule=None,
        catchup=False,
        max_active_runs=1,
        default_args={"owner": "lakeprep"},
        tags=[pipeline.TAG, name, BROKEN_SPEC_TAG],
        auto_register=False,
    ) as dag:
        BrokenSpecOperator(task_id=BROKEN_SPEC_TASK, spec_path=str(path), error=error)
    return dag


def with_params(dag: DAG, params: dict[str, Param]) -> DAG:
    """`dag` with its trigger-form `params`, declared once its tasks exist.

    A task built inside a DAG that already has params gets a deep copy of them for each
    class of its hierarchy (`BaseOperator`'s `apply_defaults`), and the DAG processor
    resolves each task's copy twice when it serializes the task (serialized_objects.py
    `_is_excluded` compares them, `serialize` prints them; apache/airflow#32434): for 20
    specs about 2,100 schema checks, half the parse (benchmarks/RESULTS.md, section (c)).
    Declared after the tasks, the params live on the DAG alone; a task still sees them at
    run time, where Airflow merges the DAG's params, the task's (none) and the run's conf
    (`process_params`), and the trigger form, the conf check and the scheduler read the
    DAG's. Setting them runs the DAG's own checks (a scheduled DAG's params must resolve).
    """
    dag.params = params
    return dag


def build_dag(spec: DatasetSpec) -> DAG:
    overrides = override_templates()
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
            "retries": spec.data["tasks"]["retries"],
            "retry_delay": timedelta(seconds=spec.data["tasks"]["retry_delay_seconds"]),
        },
        tags=[pipeline.TAG, spec.name],
        auto_register=False,
    ) as dag:
        wait = PartitionSensor(
            task_id="wait_for_partition",
            # Runs the CLI created (`airflow dags trigger --conf`) bypass the api-server's guard.
            pre_execute=refuse_unusable_conf,
            uri=expand(source["uri"], lake_root=LAKE_ROOT_TEMPLATE, ds=RUN_DS_TEMPLATE),
            min_files=source.get("min_files", 1),
            min_bytes=source.get("min_bytes", 0),
            # Deferrable waits in the triggerer; otherwise reschedule frees the worker slot
            # between pokes. Either way no worker is held while the partition is missing.
            deferrable=source.get("deferrable", False),
            ds=RUN_DS_TEMPLATE,
            valid_from=str(start) if start else None,
            valid_to=str(end) if end else None,
            mode="reschedule",
            poke_interval=source.get("poke_interval_seconds", 300),
            timeout=source.get("timeout_seconds", 6 * 3600),
        )
        spec_path = str(spec.path)
        fused = spec.data["spark"]["fuse_stages"]
        daily = _spark_tasks(DAILY_STAGES, FUSED_DAILY_TASK, fused, spec_path, overrides)
        window_cfg = spec.data["window"]
        wait_window = WindowSensor(
            task_id="wait_for_window",
            # The task that commits the sampled partition decides a day of the window.
            sample_task_id=daily[-1].task_id,
            spec_path=spec_path,
            overrides=overrides,
            mode="reschedule",
            poke_interval=window_cfg["poke_interval_seconds"],
            timeout=window_cfg["wait_timeout_seconds"],
        )
        drift = DriftCheckOperator(task_id="check_drift", spec_path=spec_path, overrides=overrides)
        # A successful export's event carries the partition date and manifest URI.
        # Without Spark where the stages need none (fit_transform; a prepared export).
        window = _spark_tasks(
            WINDOW_STAGES,
            FUSED_WINDOW_TASK,
            fused,
            spec_path,
            overrides,
            outlets=[export_asset(spec.name)],
            in_worker=lambda group: runs_in_worker(spec, group),
        )
        handoff = GpuTrainingHandoffOperator(
            task_id="gpu_training_handoff", spec_path=spec_path, overrides=overrides
        )
        # summary.md and report.html (the run page's Report tab): docs/OPERATIONS.md#run-report.
        report = RunReportOperator(task_id="write_report", spec_path=spec_path, overrides=overrides)
        chain(wait, *daily, wait_window, drift, *window, handoff, report)
    return with_params(dag, trigger_params(spec))


def _spark_tasks(
    stages: tuple[str, ...],
    fused_task_id: str,
    fused: bool,
    spec_path: str,
    overrides: dict[str, str],
    outlets: list | None = None,
    in_worker: Callable[[tuple[str, ...]], bool] | None = None,
) -> list[SparkStageOperator | WindowStageOperator]:
    """A task per stage, or one task for all of them when fused; `outlets` on the last one.

    A group `in_worker` says needs no Spark runs as a `WindowStageOperator`.
    """
    groups = [(fused_task_id, stages)] if fused else [(stage, (stage,)) for stage in stages]
    return [
        (WindowStageOperator if in_worker and in_worker(group) else SparkStageOperator)(
            task_id=task_id,
            **({"stages": group} if fused else {"stage": group[0]}),
            spec_path=spec_path,
            overrides=overrides,
            outlets=(outlets or []) if i == len(groups) - 1 else [],
        )
        for i, (task_id, group) in enumerate(groups)
    ]


def build_train_dag(spec: DatasetSpec) -> DAG:
    """`lakeprep_<name>_train`: train on an existing export, on its Asset's events or by hand.

    Runs started by the export's Asset have no logical date: the partition comes from the
    event's extra, or from the form's *Partition date* (`run_ds`) when triggered by hand
    (precedence in `lakeprep_airflow.retrain`). No Spark runs here.
    """
    asset = export_asset(spec.name)
    params = {
        RUN_DS_PARAM: Param(
            None,
            description="The export (dt=YYYY-MM-DD) to train on. Required when triggered by hand; "
            "empty: the date in the triggering export event's extra. Set, it wins over the event.",
            schema=param_schema(
                RUN_DS_PARAM,
                {
                    "type": ["null", "string"],
                    "format": "date",
                    "title": "Partition date",
                    "section": "Partition",
                },
            ),
        ),
        **trigger_params(spec, TRAIN_FORM_SECTION),
    }
    with DAG(
        dag_id=f"{spec.dag_id}_train",
        description=f"Retrain {spec.name} on an existing export (no Spark)",
        doc_md=_train_doc(spec, asset.name),
        schedule=[asset],
        # Off: a DAG enabled late does not replay every export event before it.
        catchup=False,
        max_active_runs=4,
        default_args={
            "owner": spec.data.get("owner", "lakeprep"),
            "retries": spec.data["tasks"]["retries"],
            "retry_delay": timedelta(seconds=spec.data["tasks"]["retry_delay_seconds"]),
        },
        user_defined_macros={PARTITION_MACRO: functools.partial(partition_to_train, asset=asset)},
        tags=[pipeline.TAG, spec.name, "train"],
        auto_register=False,
    ) as dag:
        RetrainHandoffOperator(
            task_id="gpu_training_handoff",
            pre_execute=refuse_unusable_conf,
            spec_path=str(spec.path),
            run_ds=TRAIN_RUN_DS_TEMPLATE,
            overrides=override_templates(TRAIN_FORM_SECTION),
        )
    return with_params(dag, params)


def _train_doc(spec: DatasetSpec, asset_name: str) -> str:
    return (
        f"### lakeprep: retrain `{spec.name}`\n\nTrains on an export of `{spec.dag_id}` without "
        f"re-running Spark. Scheduled on the Asset `{asset_name}` (each successful `export_shards`); "
        "the partition is the form's *Partition date* when set, else the event's `extra.ds`. "
        f"The model goes to `models/{spec.name}/retrain/dt=<ds>/<run id>/`.\n\n"
        f"`{' >> '.join(TRAIN_TASKS)}`\n"
    )


def _doc(spec: DatasetSpec) -> str:
    fused = spec.data["spark"]["fuse_stages"]
    chain_line = " >> ".join(pipeline_tasks(fused))
    fused_line = (
        f"\n`{FUSED_DAILY_TASK}` runs {', '.join(DAILY_STAGES)} and `{FUSED_WINDOW_TASK}` runs "
        f"{', '.join(WINDOW_STAGES)}, each in one task (`spark.fuse_stages`).\n"
        if fused
        else ""
    )
    return (
        f"### lakeprep: `{spec.name}`\n\n{(spec.data.get('description') or '').strip()}\n\n"
        f"Spec: `{spec.path.name}`. Raw partitions: `{spec.source['uri']}`.\n\n`{chain_line}`\n{fused_line}"
    )
