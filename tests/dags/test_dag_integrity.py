from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHAIN = [
    "wait_for_partition",
    "validate",
    "preprocess",
    "sample",
    "wait_for_window",
    "check_drift",
    "fit_transform",
    "export_shards",
    "gpu_training_handoff",
    "write_report",
]
SPARK_STAGES = ["validate", "preprocess", "sample"]
# No Spark job: in the worker (`WindowStageOperator`), for the default, prepared export.
WORKER_STAGES = ["fit_transform", "export_shards"]


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


def test_no_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert "lakeprep_flights" in dagbag.dag_ids


def test_every_spec_has_its_pipeline_and_its_train_dag(dagbag):
    from lakeprep_airflow.spec import discover_specs, load_spec

    names = [load_spec(path).name for path in discover_specs()]
    assert names and set(dagbag.dag_ids) == {f"lakeprep_{n}{s}" for n in names for s in ("", "_train")}


def test_export_shards_publishes_the_asset_the_train_dag_is_scheduled_on(dagbag):
    from airflow.sdk import Asset
    from airflow.sdk.definitions.timetables.assets import AssetTriggeredTimetable

    asset = Asset(name="lakeprep_flights.export_shards", uri="lakeprep://flights/export_shards")
    main = dagbag.dags["lakeprep_flights"]
    assert main.get_task("export_shards").outlets == [asset]
    assert [t.task_id for t in main.tasks if t.outlets] == ["export_shards"]
    train = dagbag.dags["lakeprep_flights_train"]
    assert isinstance(train.timetable, AssetTriggeredTimetable)
    assert list(train.timetable.asset_condition.objects) == [asset]
    assert train.catchup is False


def test_train_dag_retrains_with_the_training_form(dagbag):
    from airflow.sdk.exceptions import ParamValidationError

    from lakeprep_airflow.operators.retrain_handoff import RetrainHandoffOperator

    dag = dagbag.dags["lakeprep_flights_train"]
    [task] = dag.tasks
    assert isinstance(task, RetrainHandoffOperator) and task.task_id == "gpu_training_handoff"
    assert "triggering_asset_events" in task.run_ds and "params" in task.run_ds
    assert task.overrides == {
        "training.backend": "{{ params.training_backend }}",
        "training.epochs": "{{ params.epochs }}",
    }
    assert task.retries == 2 and task.owner == "ml-data"
    assert dag.tags >= {"lakeprep", "flights", "train"}
    assert dag.doc_md and "gpu_training_handoff" in dag.doc_md
    # The partition date (empty: the event's) and the training knobs of the main form only.
    assert {k: dag.params[k] for k in dag.params} == {
        "run_ds": None,
        "training_backend": "local",
        "epochs": 3,
    }
    assert dag.params.get_param("run_ds").schema["format"] == "date"

    def validate(conf):
        params = copy.deepcopy(dag.params)
        params.update(conf)
        return params.validate()

    assert validate({"run_ds": "2013-01-02", "epochs": 9}) == {
        "run_ds": "2013-01-02",
        "training_backend": "local",
        "epochs": 9,
    }
    for bad in ({"run_ds": "2013-02-30"}, {"run_ds": 20130101}, {"epochs": 0}, {"training_backend": "slurm"}):
        with pytest.raises(ParamValidationError):
            validate(bad)


def test_chain_is_the_pipeline_in_order(dagbag):
    dag = dagbag.dags["lakeprep_flights"]
    assert set(dag.task_ids) == set(CHAIN)
    for upstream, downstream in zip(CHAIN, CHAIN[1:], strict=False):
        assert dag.get_task(upstream).downstream_task_ids == {downstream}
    assert dag.get_task(CHAIN[-1]).downstream_task_ids == set()


def test_house_rules(dagbag):
    dag = dagbag.dags["lakeprep_flights"]
    assert dag.tags >= {"lakeprep", "flights"}
    assert dag.catchup is False
    assert dag.start_date.isoformat().startswith("2013-01-01")
    assert dag.doc_md and " >> ".join(CHAIN) in dag.doc_md
    for task in dag.tasks:
        assert task.retries == 2, task.task_id
        assert task.owner == "ml-data"
    sensor = dag.get_task("wait_for_partition")
    assert sensor.mode == "reschedule" and sensor.deferrable is False
    assert sensor.timeout == 21600
    assert "{{" in sensor.uri and "raw/flights/dt=" in sensor.uri
    window = dag.get_task("wait_for_window")
    assert window.mode == "reschedule" and window.timeout == 6 * 3600


def test_stage_tasks_are_spark_submits_with_the_form_overrides(dagbag):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from lakeprep_airflow.operators.window_stage import WindowStageOperator

    dag = dagbag.dags["lakeprep_flights"]
    for task_id in SPARK_STAGES:
        task = dag.get_task(task_id)
        assert isinstance(task, SparkSubmitOperator)
        assert task.stage == task_id
        assert task.overrides["stages.sample.seed"] == "{{ params.seed }}"
    for task_id in WORKER_STAGES:
        task = dag.get_task(task_id)
        assert isinstance(task, WindowStageOperator) and not isinstance(task, SparkSubmitOperator)
        assert task.stages == (task_id,) and task.overrides["stages.sample.seed"] == "{{ params.seed }}"


@pytest.mark.parametrize(
    ("edit", "spark"),
    [
        ({}, False),
        ({"stages": {"export_shards": {"shards": "encoded"}}}, True),
        ({"stages": {"balance": {"augment": "smote"}}}, False),  # applied by the loader
        ({"stages": {"balance": {"augment": "jitter"}}}, False),
    ],
)
def test_the_export_runs_in_spark_only_when_it_writes_encoded_shards(tmp_path, edit, spark):
    """fit_transform never needs Spark; the export does when it materialises features
    (augmentation is the loader's, at read)."""
    import yaml
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from lakeprep_airflow.dag_factory import build_dag
    from lakeprep_airflow.spec import load_spec

    data = yaml.safe_load((REPO / "pipelines" / "flights.yaml").read_text())
    for section, values in edit.get("stages", {}).items():
        data["stages"].setdefault(section, {}).update(values)
    path = tmp_path / "flights.yaml"
    path.write_text(yaml.safe_dump(data))
    dag = build_dag(load_spec(path))
    assert not isinstance(dag.get_task("fit_transform"), SparkSubmitOperator)
    assert isinstance(dag.get_task("export_shards"), SparkSubmitOperator) is spark


def test_trigger_form_validates_values(dagbag):
    from airflow.sdk.exceptions import ParamValidationError

    dag = dagbag.dags["lakeprep_flights"]
    defaults = {k: dag.params[k] for k in ("sample_fraction", "seed", "epochs", "training_backend")}
    assert defaults == {"sample_fraction": 1.0, "seed": 7, "epochs": 3, "training_backend": "local"}
    assert dag.params.get_param("training_backend").schema["enum"] == ["local", "spark", "kubernetes"]
    # Each field states its allowed range (from the knob declaration).
    assert "Allowed: > 0 and <= 1" in dag.params.get_param("sample_fraction").description
    assert "Allowed: >= 1 and <= 1000" in dag.params.get_param("epochs").description

    def validate(conf):
        params = copy.deepcopy(dag.params)
        params.update(conf)
        return params.validate()

    assert validate({"sample_fraction": 0.3, "seed": 1})["sample_fraction"] == 0.3
    assert validate({"training_backend": "spark"})["training_backend"] == "spark"
    for bad in (
        {"sample_fraction": 0},
        {"sample_fraction": 1.5},
        {"seed": -1},
        {"epochs": "many"},
        {"training_backend": "slurm"},
    ):
        with pytest.raises(ParamValidationError):
            validate(bad)


def test_parsing_imports_no_heavy_libraries():
    code = (
        "import runpy, sys; runpy.run_path(sys.argv[1]);"
        "heavy = [m for m in ('pyspark', 'torch', 'pandas', 'pyarrow') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(REPO / "dags" / "lakeprep_datasets.py")],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ,
    )
    assert out.stdout.strip().splitlines()[-1:] in ([], [""])


def _bag_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, specs: dict[str, str]):
    """A DagBag of the DAG file over a pipelines folder holding `specs` (file name -> text)."""
    from airflow.dag_processing.dagbag import DagBag

    pipelines = tmp_path / "pipelines"
    pipelines.mkdir(exist_ok=True)
    for name, text in specs.items():
        (pipelines / name).write_text(text)
    shutil.copy(REPO / "dags" / "lakeprep_datasets.py", tmp_path / "lakeprep_datasets.py")
    monkeypatch.setenv("LAKEPREP_PIPELINES_DIR", str(pipelines))
    return DagBag(dag_folder=str(tmp_path / "lakeprep_datasets.py"))


def _refusal(dag) -> str:
    """What the stand-in's one task fails with (without retries)."""
    from airflow.sdk.exceptions import AirflowFailException

    from lakeprep_airflow.dag_factory import BROKEN_SPEC_TASK

    [task] = dag.tasks
    assert task.task_id == BROKEN_SPEC_TASK and task.retries == 0
    with pytest.raises(AirflowFailException) as err:
        task.execute({})
    return str(err.value)


def test_a_broken_spec_breaks_only_its_own_dags(tmp_path, monkeypatch):
    """Three good specs and a broken one: the good ones' DAGs all load; the broken one's ids
    are stand-ins that name the file and the field, and no import error hides the others."""
    from lakeprep_airflow.dag_factory import BROKEN_SPEC_TAG

    flights = (REPO / "pipelines" / "flights.yaml").read_text()
    assert "name: flights\n" in flights and "  days: 30" in flights
    bag = _bag_over(
        tmp_path,
        monkeypatch,
        {
            "flights.yaml": flights,
            "penguins.yaml": (REPO / "tests" / "data" / "pipelines" / "penguins.yaml").read_text(),
            "flights_jfk.yaml": flights.replace("name: flights\n", "name: flights_jfk\n"),
            "trips.yaml": flights.replace("name: flights\n", "name: trips\n").replace(
                "  days: 30", "  days: 0"
            ),
        },
    )
    assert bag.import_errors == {}
    good = {f"lakeprep_{n}{s}" for n in ("flights", "penguins", "flights_jfk") for s in ("", "_train")}
    assert set(bag.dag_ids) == good | {"lakeprep_trips", "lakeprep_trips_train"}
    for dag_id in good:
        assert BROKEN_SPEC_TAG not in bag.dags[dag_id].tags, dag_id
    assert set(bag.dags["lakeprep_flights_jfk"].task_ids) == set(CHAIN)
    for dag_id in ("lakeprep_trips", "lakeprep_trips_train"):
        dag = bag.dags[dag_id]
        assert dag.tags >= {"lakeprep", "trips", BROKEN_SPEC_TAG}
        assert type(dag.timetable).__name__ == "NullTimetable"  # no run fails while the file is broken
        for shown in (dag.doc_md, dag.description, _refusal(dag)):
            assert "trips.yaml" in shown, (dag_id, shown)
            assert "window.days: 0 is less than the minimum of 1" in shown, (dag_id, shown)
    # What the DAG processor stores and the UI shows: the stand-in survives serialization.
    from airflow.serialization.serialized_objects import DagSerialization

    served = DagSerialization.from_dict(DagSerialization.to_dict(bag.dags["lakeprep_trips"]))
    assert "window.days: 0" in served.doc_md


def test_a_spec_whose_file_name_is_not_its_name_stands_in_under_the_file_name(tmp_path, monkeypatch):
    flights = (REPO / "pipelines" / "flights.yaml").read_text()
    bag = _bag_over(tmp_path, monkeypatch, {"flights.yaml": flights, "my flights.yaml": flights})
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {f"lakeprep_{n}{s}" for n in ("flights", "my_flights") for s in ("", "_train")}
    assert "file name must match name 'flights'" in _refusal(bag.dags["lakeprep_my_flights"])
    assert set(bag.dags["lakeprep_flights"].task_ids) == set(CHAIN)


def test_what_airflow_refuses_in_a_spec_stands_in_too(tmp_path, monkeypatch):
    """Not only SpecError: what the DAG constructor refuses (a schedule the schema lets
    through, and Airflow's DagBag checks before it takes the DAG) breaks that spec's DAGs
    alone, naming the file and the error."""
    flights = (REPO / "pipelines" / "flights.yaml").read_text()
    assert 'schedule: "@daily"' in flights
    bag = _bag_over(
        tmp_path,
        monkeypatch,
        {
            "flights.yaml": flights,
            "trips.yaml": flights.replace("name: flights\n", "name: trips\n").replace(
                'schedule: "@daily"', 'schedule: "every day at noon"'
            ),
        },
    )
    assert bag.import_errors == {}
    assert set(bag.dags["lakeprep_flights"].task_ids) == set(CHAIN)
    refusal = _refusal(bag.dags["lakeprep_trips"])
    assert "trips.yaml: Airflow refuses the DAG built from this spec: AirflowTimetableInvalid" in refusal


def test_spec_can_make_the_sensor_deferrable(tmp_path, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    text = (REPO / "pipelines" / "flights.yaml").read_text()
    (pipelines / "flights.yaml").write_text(
        text.replace("  min_files: 1\n", "  min_files: 1\n  deferrable: true\n")
    )
    shutil.copy(REPO / "dags" / "lakeprep_datasets.py", tmp_path / "lakeprep_datasets.py")
    monkeypatch.setenv("LAKEPREP_PIPELINES_DIR", str(pipelines))
    bag = DagBag(dag_folder=str(tmp_path / "lakeprep_datasets.py"))
    assert bag.import_errors == {}
    assert bag.dags["lakeprep_flights"].get_task("wait_for_partition").deferrable is True


FUSED_CHAIN = [
    "wait_for_partition",
    "prepare_day",
    "wait_for_window",
    "check_drift",
    "fit_and_export",
    "gpu_training_handoff",
    "write_report",
]


def test_a_fused_spec_runs_each_kind_of_stage_in_one_spark_submit(monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    # penguins (tests/data/pipelines) sets spark.fuse_stages; flights (above) does not.
    monkeypatch.setenv("LAKEPREP_PIPELINES_DIR", str(REPO / "tests" / "data" / "pipelines"))
    bag = DagBag(dag_folder=str(REPO / "dags" / "lakeprep_datasets.py"))
    assert bag.import_errors == {}
    dag = bag.dags["lakeprep_penguins"]
    assert set(dag.task_ids) == set(FUSED_CHAIN)
    for upstream, downstream in zip(FUSED_CHAIN, FUSED_CHAIN[1:], strict=False):
        assert dag.get_task(upstream).downstream_task_ids == {downstream}
    assert dag.doc_md and " >> ".join(FUSED_CHAIN) in dag.doc_md
    daily, window = dag.get_task("prepare_day"), dag.get_task("fit_and_export")
    assert (daily.stages, daily.fused) == (("validate", "preprocess", "sample"), True)
    assert (window.stages, window.fused) == (("fit_transform", "export_shards"), True)
    assert daily.overrides["stages.sample.seed"] == "{{ params.seed }}"
    # The window waits on the task that commits the sampled partition; the export's Asset
    # is published by the task that runs export_shards.
    assert dag.get_task("wait_for_window").sample_task_id == "prepare_day"
    assert [t.task_id for t in dag.tasks if t.outlets] == ["fit_and_export"]
    assert [o.name for o in window.outlets] == ["lakeprep_penguins.export_shards"]
    assert dag.get_task("wait_for_partition").pre_execute is not None  # the run conf guard stays first
    assert all(t.retries == 2 for t in dag.tasks)


def test_separate_stages_wait_on_the_sample_task():
    from lakeprep_airflow.dag_factory import build_dag
    from lakeprep_airflow.spec import load_spec

    dag = build_dag(load_spec(REPO / "pipelines" / "flights.yaml"))
    assert dag.get_task("wait_for_window").sample_task_id == "sample"
    assert all(not dag.get_task(s).fused for s in SPARK_STAGES + WORKER_STAGES)


def _parse_in_a_fresh_process(code: str, env: dict[str, str]) -> str:
    """Run `code` after the DAG processor's pre-import of the DAG file; its last output line."""
    prelude = (
        "import sys, structlog\n"
        "from airflow.dag_processing.processor import _pre_import_airflow_modules\n"
        "dag_file = sys.argv[1]\n"
        "_pre_import_airflow_modules(dag_file, structlog.get_logger())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", prelude + code, str(REPO / "dags" / "lakeprep_datasets.py")],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=120,
    )
    return out.stdout.strip().splitlines()[-1]


def test_the_dag_file_names_the_airflow_modules_a_parse_imports():
    # The DAG processor imports these once in its parent, not in every parse's child: what
    # the operators build on, and what Airflow's serializer looks for in every DAG.
    code = (
        "from pathlib import Path\n"
        "from airflow.dag_processing.dagbag import BundleDagBag\n"
        "from airflow.dag_processing.processor import _serialize_dags\n"
        "before = set(sys.modules)\n"
        "bag = BundleDagBag(dag_folder=dag_file, bundle_path=Path(dag_file).parent, bundle_name='b')\n"
        "assert not bag.import_errors and bag.dags, bag.import_errors\n"
        "_serialize_dags(bag, structlog.get_logger())\n"
        "named = ('airflow.providers.apache.spark', 'airflow.providers.standard', 'airflow.sdk.bases')\n"
        "new = set(sys.modules) - before\n"
        "print(sorted(m for m in new if m.startswith(named) or m in ('requests', 'urllib3')))\n"
    )
    assert _parse_in_a_fresh_process(code, os.environ.copy()) == "[]"


def test_a_parse_after_the_first_does_not_check_expressions_again(tmp_path):
    env = {**os.environ, "LAKEPREP_CACHE_DIR": str(tmp_path / "cache")}
    code = (
        "import runpy\n"
        "dags = [k for k in runpy.run_path(dag_file) if k.startswith('lakeprep_')]\n"
        "print(len(dags), 'sqlglot' in sys.modules)\n"
    )
    assert _parse_in_a_fresh_process(code, env) == "2 True"  # checked, and recorded
    assert _parse_in_a_fresh_process(code, env) == "2 False"  # the next process finds the record


def test_a_broken_expression_is_refused_after_good_parses(tmp_path, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    spec = pipelines / "flights.yaml"
    text = (REPO / "pipelines" / "flights.yaml").read_text()
    spec.write_text(text)
    shutil.copy(REPO / "dags" / "lakeprep_datasets.py", tmp_path / "lakeprep_datasets.py")
    monkeypatch.setenv("LAKEPREP_PIPELINES_DIR", str(pipelines))
    monkeypatch.setenv("LAKEPREP_CACHE_DIR", str(tmp_path / "cache"))
    for _ in range(2):
        assert DagBag(dag_folder=str(tmp_path / "lakeprep_datasets.py")).import_errors == {}
    assert "arr_delay > 15" in text
    spec.write_text(text.replace("arr_delay > 15", "arrival_delay > 15"))
    for _ in range(2):
        bag = DagBag(dag_folder=str(tmp_path / "lakeprep_datasets.py"))
        assert bag.import_errors == {}
        error = _refusal(bag.dags["lakeprep_flights"])
        assert "flights.yaml" in error
        assert "derived.delayed:" in error and "refers to ['arrival_delay']" in error


def _probe_values(schema: dict) -> list:
    keys = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
    bounds = [schema[k] for k in keys if k in schema]
    near = [b + d for b in bounds for d in (-1, -0.5, 0, 0.5, 1)]
    return [
        *near,
        *schema.get("enum", []),
        *[str(v) for v in schema.get("enum", [])],
        None,
        True,
        False,
        0,
        1,
        0.5,
        "",
        "local ",
        "2013-01-02",
        "2013-02-30",
        [],
        {},
    ]


def test_trigger_form_params_are_draft_7_and_validate_as_2020_12_would(dagbag):
    from jsonschema import Draft7Validator, Draft202012Validator, FormatChecker

    from lakeprep_airflow.dag_factory import PARAM_SCHEMA_DRAFT, param_schema

    for dag_id in ("lakeprep_flights", "lakeprep_flights_train"):
        dag = dagbag.dags[dag_id]
        for name in dag.params:
            schema = dag.params.get_param(name).schema
            assert schema["$schema"] == PARAM_SCHEMA_DRAFT, (dag_id, name)
            plain = {k: v for k, v in schema.items() if k != "$schema"}
            draft7 = Draft7Validator(schema, format_checker=FormatChecker())
            draft2020 = Draft202012Validator(plain, format_checker=FormatChecker())
            values = [dag.params[name], *_probe_values(plain)]
            verdicts = {repr(v): (draft7.is_valid(v), draft2020.is_valid(v)) for v in values}
            assert all(a == b for a, b in verdicts.values()), (dag_id, name, verdicts)
            assert any(a for a, _ in verdicts.values()) and not all(a for a, _ in verdicts.values())
    # A keyword whose meaning differs between the drafts is refused, not silently ignored.
    with pytest.raises(ValueError, match=r"trigger form field x: schema keywords \['prefixItems'\]"):
        param_schema("x", {"type": "array", "prefixItems": [{"type": "integer"}]})
    with pytest.raises(ValueError, match=r"x\.items: schema keywords \['unevaluatedProperties'\]"):
        param_schema("x", {"type": "array", "items": {"unevaluatedProperties": False}})


def test_trigger_form_survives_serialization(dagbag):
    from airflow.serialization.serialized_objects import DagSerialization

    for dag_id in ("lakeprep_flights", "lakeprep_flights_train"):
        dag = dagbag.dags[dag_id]
        served = DagSerialization.from_dict(DagSerialization.to_dict(dag))
        assert list(served.params) == list(dag.params)
        for name in dag.params:
            assert served.params.get_param(name).schema == dag.params.get_param(name).schema
        assert served.params.validate() == {k: dag.params[k] for k in dag.params}


def test_the_form_params_live_on_the_dag_and_every_task_sees_them_at_run_time(dagbag):
    """No task carries a copy of the DAG's params (each copy costs the DAG processor two
    schema checks a param when it serializes the task); Airflow's run-time merge gives each
    task the DAG's params with the run's conf applied."""
    from airflow.sdk.definitions.param import process_params
    from airflow.sdk.exceptions import ParamValidationError
    from airflow.serialization.serialized_objects import DagSerialization

    for dag_id, conf in (("lakeprep_flights", {"seed": 3}), ("lakeprep_flights_train", {"epochs": 2})):
        dag = dagbag.dags[dag_id]
        defaults = {k: dag.params[k] for k in dag.params}
        assert len(defaults) >= 3 and set(conf) < set(defaults)
        serialized = DagSerialization.to_dict(dag)["dag"]
        assert [name for name, _ in serialized["params"]] == list(defaults)
        tasks = {t["__var"]["task_id"]: t["__var"] for t in serialized["tasks"]}
        for task in dag.tasks:
            assert not task.params and "params" not in tasks[task.task_id], task.task_id
            assert process_params(dag, task, conf, suppress_exception=False) == {**defaults, **conf}
        with pytest.raises(ParamValidationError, match="seed|epochs"):
            process_params(dag, dag.tasks[0], {next(iter(conf)): -1}, suppress_exception=False)
