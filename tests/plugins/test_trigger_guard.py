"""The trigger guard: messages from the DAGs' own params, and the middleware's refusal before the app."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakeprep_airflow import trigger_guard
from lakeprep_airflow.dag_factory import build_dag, build_train_dag
from lakeprep_airflow.spec import load_spec

REPO = Path(__file__).resolve().parents[2]


def _schemas(dag) -> dict[str, dict]:
    return {name: dag.params.get_param(name).schema for name in dag.params}


@pytest.fixture(scope="module")
def flights_params() -> dict[str, dict]:
    return _schemas(build_dag(load_spec(REPO / "pipelines" / "flights.yaml")))


@pytest.fixture(scope="module")
def train_params() -> dict[str, dict]:
    return _schemas(build_train_dag(load_spec(REPO / "pipelines" / "flights.yaml")))


def test_a_conf_within_the_params_passes(flights_params):
    conf = {"sample_fraction": 0.8, "seed": 3, "training_backend": "local", "epochs": 2}
    assert trigger_guard.conf_refusal("lakeprep_flights", conf, flights_params) is None
    assert trigger_guard.conf_refusal("lakeprep_flights", None, flights_params) is None
    assert trigger_guard.conf_refusal("lakeprep_flights", {}, flights_params) is None


def test_an_unknown_key_names_the_close_match_and_every_allowed_key(flights_params):
    message = trigger_guard.conf_refusal("lakeprep_flights", {"sample_fracton": 0.3}, flights_params)
    assert message is not None
    assert "unknown trigger parameter 'sample_fracton' (did you mean 'sample_fraction'?)" in message
    accepted = message.split("accepts: ", 1)[1].split(", ")
    assert accepted == sorted(flights_params) and "sample_fraction" in accepted


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        ({"sample_fraction": 5}, "'sample_fraction' = 5 is not allowed: a number > 0 and <= 1"),
        ({"sample_fraction": 0}, "'sample_fraction' = 0 is not allowed: a number > 0 and <= 1"),
        ({"sample_fraction": "abc"}, "'sample_fraction' = \"abc\" is not allowed: a number > 0"),
        ({"seed": 1.5}, "'seed' = 1.5 is not allowed: an integer >= 0 and <= 2147483647"),
        ({"seed": True}, "'seed' = true is not allowed: an integer"),
        ({"epochs": 0}, "'epochs' = 0 is not allowed: an integer >= 1 and <= 1000"),
        # Enums: nothing free-form reaches an argv or a Spark conf.
        (
            {"training_backend": "local --conf spark.driver.extraJavaOptions=x"},
            'is not allowed: one of "local", "spark", "kubernetes"',
        ),
        (
            {"spark_log_level": "WARN; rm -rf /"},
            "'spark_log_level' = \"WARN; rm -rf /\" is not allowed: one of",
        ),
    ],
)
def test_a_value_out_of_its_schema_names_the_key_and_the_range(flights_params, conf, expected):
    message = trigger_guard.conf_refusal("lakeprep_flights", conf, flights_params)
    assert message is not None and expected in message, message
    assert "Failed validating" not in message  # not jsonschema's dump


def test_every_problem_is_named_and_a_non_object_conf_is_refused(flights_params):
    message = trigger_guard.conf_refusal(
        "lakeprep_flights", {"sample_fraction": 2, "sede": 1}, flights_params
    )
    assert "'sample_fraction' = 2" in message and "'sede'" in message
    refused = trigger_guard.conf_refusal("lakeprep_flights", [0.5], flights_params)
    assert "must be an object of trigger parameters" in refused and "not list" in refused


@pytest.mark.parametrize("run_ds", ["../../etc", "2013-01-01/../x", "2013-13-45", "hdfs://nn/x"])
def test_the_train_dags_free_string_is_a_date_only(train_params, run_ds):
    assert train_params["run_ds"]["type"] == ["null", "string"]  # the one string param
    message = trigger_guard.conf_refusal("lakeprep_flights_train", {"run_ds": run_ds}, train_params)
    assert message is not None and "a date YYYY-MM-DD (or null)" in message
    assert (
        trigger_guard.conf_refusal("lakeprep_flights_train", {"run_ds": "2013-01-02"}, train_params) is None
    )


def test_only_the_pipeline_dags_strings_are_enums(flights_params):
    free = [name for name, schema in flights_params.items() if "enum" not in schema and "type" not in schema]
    strings = [name for name, schema in flights_params.items() if schema.get("type") == "string"]
    assert free == [] and strings == []


def _app_with_guard(monkeypatch, schemas):
    """The middleware around an app that records what reaches it."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    reached = []

    async def trigger(request: Request):
        reached.append(await request.json())
        return JSONResponse({"dag_run_id": "created"})

    async def may_trigger(scope, dag_id):
        return True

    monkeypatch.setattr(trigger_guard, "_may_trigger", may_trigger)
    monkeypatch.setattr(trigger_guard, "_lakeprep_param_schemas", lambda app, dag_id: schemas.get(dag_id))
    routes = [
        Route("/api/v2/dags/{dag_id}/dagRuns", trigger, methods=["POST"]),
        Route("/api/v2/backfills", trigger, methods=["POST"]),
        Route("/api/v2/backfills/dry_run", trigger, methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(trigger_guard.TriggerConfGuard)
    return TestClient(app), reached


def test_the_middleware_refuses_before_the_route_and_passes_the_rest_through(monkeypatch, flights_params):
    client, reached = _app_with_guard(monkeypatch, {"lakeprep_flights": flights_params})
    refused = client.post("/api/v2/dags/lakeprep_flights/dagRuns", json={"conf": {"sample_fracton": 0.3}})
    assert refused.status_code == 400 and "'sample_fracton'" in refused.json()["detail"]
    assert reached == []

    body = {"logical_date": None, "conf": {"sample_fraction": 0.5}}
    assert client.post("/api/v2/dags/lakeprep_flights/dagRuns", json=body).status_code == 200
    # Not a lakeprep DAG (no schemas): Airflow's behaviour, whatever the conf.
    other = {"conf": {"anything": 1}}
    assert client.post("/api/v2/dags/someone_elses/dagRuns", json=other).status_code == 200
    assert reached == [body, other]


def test_the_middleware_refuses_an_absurd_body_for_a_lakeprep_dag_only(monkeypatch, flights_params):
    client, reached = _app_with_guard(monkeypatch, {"lakeprep_flights": flights_params})
    huge = json.dumps({"conf": {"seed": 1, "pad": "x" * (trigger_guard.MAX_BODY_BYTES + 10)}})
    refused = client.post("/api/v2/dags/lakeprep_flights/dagRuns", content=huge)
    assert refused.status_code == 400 and "at most 65536 bytes" in refused.json()["detail"]
    assert client.post("/api/v2/dags/someone_elses/dagRuns", content=huge).status_code == 200
    assert len(reached) == 1 and len(reached[0]["conf"]["pad"]) == trigger_guard.MAX_BODY_BYTES + 10


@pytest.mark.parametrize("path", ["/api/v2/backfills", "/api/v2/backfills/dry_run"])
def test_the_middleware_checks_a_backfills_run_conf_too(monkeypatch, flights_params, path):
    client, reached = _app_with_guard(monkeypatch, {"lakeprep_flights": flights_params})
    body = {
        "dag_id": "lakeprep_flights",
        "from_date": "2013-01-01T00:00:00Z",
        "to_date": "2013-01-05T00:00:00Z",
    }
    refused = client.post(path, json={**body, "dag_run_conf": {"sample_fraction": 5}})
    assert refused.status_code == 400 and "'sample_fraction' = 5 is not allowed" in refused.json()["detail"]
    assert client.post(path, json={**body, "dag_run_conf": {"seed": 3}}).status_code == 200
    assert (
        client.post(path, json={**body, "dag_id": "someone_elses", "dag_run_conf": {"x": 1}}).status_code
        == 200
    )
    assert [r["dag_run_conf"] for r in reached] == [{"seed": 3}, {"x": 1}]


@pytest.mark.parametrize("builder", [build_dag, build_train_dag])
def test_the_first_task_refuses_a_conf_that_bypassed_the_api_server(builder):
    """`airflow dags trigger --conf` writes the run without the guard: its first task refuses it."""
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException

    dag = builder(load_spec(REPO / "pipelines" / "flights.yaml"))
    first = [t for t in dag.tasks if not t.upstream_list]
    assert len(first) == 1 and first[0]._pre_execute_hook is trigger_guard.refuse_unusable_conf

    def context(conf):
        return {"dag": dag, "dag_run": SimpleNamespace(run_id="manual__x", conf=conf)}

    trigger_guard.refuse_unusable_conf(context({"epochs": 2}))
    trigger_guard.refuse_unusable_conf(context(None))
    with pytest.raises(
        AirflowFailException,
        match=r"manual__x .*unknown trigger parameter 'epoch' \(did you mean 'epochs'\?\)",
    ):
        trigger_guard.refuse_unusable_conf(context({"epoch": 2}))
