"""Refuse a lakeprep trigger whose conf the DAG's params do not allow, before the run exists.

Airflow 3.3's `POST /api/v2/dags/{dag_id}/dagRuns` merges the conf into the DAG's params
and validates them (`SerializedDAG.create_dagrun` -> `SerializedParamsDict.validate`): a
value outside a param's schema is refused with HTTP 400, but the message is jsonschema's
dump ("Failed validating 'maximum' in schema: {...}"). A key that is not a param is merged
in as a new param without a schema and passes: `{"sample_fracton": 0.3}` creates a run
that silently uses the default fraction (`SerializedParamsDict.deep_merge`).

`TriggerConfGuard` is an ASGI middleware the api-server installs from the plugin's
`fastapi_root_middlewares` (plugins/lakeprep_airflow_plugin.py). For a trigger request on
a DAG tagged `lakeprep` it checks the conf against that DAG's params as the api-server
has them (the serialized DAG, whose params `dag_factory.trigger_params` builds from the
`form` knobs: the list lives there only) and answers 400 with a `detail` that names the
key and what is allowed. Everything else passes through untouched, and so does a request
that is not authenticated or not allowed to trigger the DAG: Airflow's own route answers
it (401/403), so the guard tells nothing to a caller who may not trigger.

`airflow dags trigger --conf` writes the run to the database without the api-server, so
the middleware never sees it. For those runs (and any other path that bypasses the API)
`refuse_unusable_conf` is the first task's `pre_execute` hook (dag_factory): the same
check on the run's conf against the DAG's params, failing the task without retries and
before any job starts, so nothing downstream runs. A value outside a param's schema
fails earlier still, when Airflow's task runner validates the params (its own message).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lakeprep_contracts import knobs, pipeline

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The tag every DAG of dag_factory carries; other DAGs keep Airflow's behaviour.
LAKEPREP_TAG = pipeline.TAG
# The routes that create runs with a conf: the trigger route (the form's *Single Run* posts
# there: `conf`) and the backfill routes (its *Backfill* tab: `dag_id` and `dag_run_conf`).
TRIGGER_PATH = re.compile(r"/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/?$")
BACKFILL_PATH = re.compile(r"/api/v2/backfills(/dry_run)?/?$")
# A trigger body is a few hundred bytes; a larger one is refused unread.
MAX_BODY_BYTES = 64 * 1024


def allowed_values(schema: Mapping[str, Any]) -> str:
    """What a param's schema allows, in words: `a number > 0 and <= 1`, `one of "local", ...`."""
    bounds = knobs.describe_bounds(dict(schema))
    if "enum" in schema:
        return bounds
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
    words = {"number": "a number", "integer": "an integer", "string": "a string", "boolean": "true or false"}
    kind = " or ".join(words.get(k, k) for k in kinds if k != "null") or "any value"
    if schema.get("format") == "date":
        kind = "a date YYYY-MM-DD"
    if "null" in kinds:
        kind += " (or null)"
    has_range = any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"))
    return f"{kind} {bounds}" if has_range else kind


def conf_refusal(dag_id: str, conf: Any, schemas: Mapping[str, Mapping[str, Any]]) -> str | None:
    """Why `conf` may not trigger `dag_id` (every problem, one sentence each), or None.

    :param schemas: the DAG's params: name -> JSON Schema of its value.
    """
    from jsonschema import FormatChecker
    from jsonschema.validators import validator_for

    if conf is None:
        return None
    if not isinstance(conf, dict):
        return (
            f"the conf of a {dag_id} run must be an object of trigger parameters "
            f"({', '.join(sorted(schemas))}), not {type(conf).__name__}"
        )
    problems = []
    for key, value in conf.items():
        if key not in schemas:
            close = difflib.get_close_matches(key, list(schemas), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(
                f"unknown trigger parameter {key!r}{hint}; {dag_id} accepts: {', '.join(sorted(schemas))}"
            )
            continue
        schema = schemas[key]
        validator = validator_for(schema)(schema, format_checker=FormatChecker())
        if not validator.is_valid(value):
            shown = json.dumps(value)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            problems.append(f"trigger parameter {key!r} = {shown} is not allowed: {allowed_values(schema)}")
    return "; ".join(problems) or None


class TriggerConfGuard:
    """ASGI middleware: 400 with a readable `detail` for a lakeprep trigger the params refuse."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        trigger = TRIGGER_PATH.search(path)
        if scope.get("method") != "POST" or not (trigger or BACKFILL_PATH.search(path)):
            await self.app(scope, receive, send)
            return
        body, more = await _read_body(receive)
        dag_id = trigger["dag_id"] if trigger else None
        refusal = await _refusal(scope, dag_id, body, len(body) > MAX_BODY_BYTES)
        if refusal is None:
            await self.app(scope, _replay(body, more, receive), send)
            return
        from starlette.responses import JSONResponse

        await JSONResponse({"detail": refusal}, status_code=400)(scope, receive, send)


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    """The request body up to past MAX_BODY_BYTES, and whether more of it is still unread."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect
            return b"".join(chunks), False
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        more = message.get("more_body", False)
        if not more or size > MAX_BODY_BYTES:
            return b"".join(chunks), more


def _replay(body: bytes, more: bool, receive: Receive) -> Receive:
    """A `receive` that hands the app the body already read, then the client's later messages."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": more}
        return await receive()

    return replay


async def _refusal(scope: Scope, dag_id: str | None, body: bytes, cut: bool) -> str | None:
    """Why the guard refuses this trigger (`dag_id` None: a backfill's), None to hand it on."""
    conf = None
    if not cut:
        try:
            request = json.loads(body or b"{}")
            conf = request.get("conf") if dag_id else request.get("dag_run_conf")
            dag_id = dag_id or request.get("dag_id")
        except (ValueError, AttributeError):
            return None  # not a JSON object: FastAPI's own 422 says so
        if not conf or not isinstance(dag_id, str):
            return None
    elif dag_id is None:
        return None  # a backfill body too long to name its DAG: Airflow's route decides
    if not await _may_trigger(scope, dag_id):
        return None
    from starlette.concurrency import run_in_threadpool

    schemas = await run_in_threadpool(_lakeprep_param_schemas, scope["app"], dag_id)
    if schemas is None:
        return None
    if cut:
        return f"a trigger request for {dag_id} is at most {MAX_BODY_BYTES} bytes"
    return conf_refusal(dag_id, conf, schemas)


async def _may_trigger(scope: Scope, dag_id: str) -> bool:
    """Whether the caller's token (header, else the UI's cookie) may create runs of `dag_id`."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from starlette.requests import HTTPConnection

    connection = HTTPConnection(scope)
    scheme, _, token = connection.headers.get("authorization", "").partition(" ")
    token = token if scheme.lower() == "bearer" else connection.cookies.get(COOKIE_NAME_JWT_TOKEN)
    if not token:
        return False
    manager = get_auth_manager()
    try:
        user = await manager.get_user_from_token(token)
    except Exception:  # expired or invalid: the route answers 401/403 with Airflow's words
        return False
    return manager.is_authorized_dag(
        method="POST", access_entity=DagAccessEntity.RUN, details=DagDetails(id=dag_id), user=user
    )


def _lakeprep_param_schemas(app: Any, dag_id: str) -> dict[str, Mapping[str, Any]] | None:
    """The params of the DAG's latest serialized version, None if it is not a lakeprep DAG."""
    from airflow.utils.session import create_session

    with create_session() as session:
        dag = app.state.dag_bag.get_latest_version_of_dag(dag_id, session=session)
    if dag is None or LAKEPREP_TAG not in dag.tags:
        return None  # unknown DAG: the route answers 404
    return {name: dag.params.get_param(name).schema for name in dag.params}


def refuse_unusable_conf(context: Any) -> None:
    """`pre_execute` hook: fail the task when the run's conf is one the guard would refuse.

    The run's conf is checked against the params the DAG declares (`context["dag"].params`:
    Airflow merges the conf into a copy for `context["params"]`, so an unknown key is
    there as an extra param with no schema, never in the DAG's own).
    """
    from airflow.sdk.exceptions import AirflowFailException

    dag, run = context["dag"], context["dag_run"]
    schemas = {name: dag.params.get_param(name).schema for name in dag.params}
    refusal = conf_refusal(dag.dag_id, run.conf, schemas)
    if refusal:
        raise AirflowFailException(
            f"run {run.run_id} of {dag.dag_id} was created with a conf its trigger form does not "
            f"allow, so nothing of it runs: {refusal}"
        )
