"""The run report in the Airflow UI: a FastAPI app the api-server mounts (`lakeprep_airflow_plugin`).

    GET /lakeprep-report/<dag_id>/<run_id>/   the run's report.html, from the lake

The run page's *Report* tab (an `external_views` entry on `dag_run`) shows this route in
an iframe. Plugin routes are not behind Airflow's login by default, so the route depends
on Airflow's own check, the one core routes use: `requires_access_dag("GET",
DagAccessEntity.RUN)` (airflow/api_fastapi/core_api/security.py), which reads the JWT from
`Authorization: Bearer` or the UI's `_token` cookie and asks the auth manager whether the
user may read the runs of that `dag_id`. No token: 401; a user without the permission: 403.

A run maps to the partition its tasks wrote: the run's logical date, or the day of its
`run_after` when it has none (`locations.RUN_DS_TEMPLATE`). The path is built from the
`lakeprep_lake_root` Variable, the dataset in the `dag_id` and that date only, each
checked against the lake layout; the `run_id` never reaches the filesystem. Runs of a DAG
without a `write_report` task (the retraining DAG `lakeprep_<name>_train`) have no report,
and the page says so.

Nothing heavy is imported at module level: Airflow loads every file of the plugins folder
in every task process, and Airflow's API security module costs about a second to import.
`LazyApp` builds the FastAPI app on the first request, in the api-server only.
"""

# No `from __future__ import annotations` here: FastAPI reads the route signatures' types
# at runtime, and they are imported inside create_app().
import datetime as dt
import re
from typing import Any

from lakeprep_airflow import lake_fs
from lakeprep_airflow.locations import LAKE_ROOT_VARIABLE, require_lake_root
from lakeprep_airflow.summary import REPORT_HTML
from lakeprep_contracts import layout

URL_PREFIX = "/lakeprep-report"
REPORT_TASK = "write_report"  # the task that writes report.html (dag_factory)
# dag_factory: `lakeprep_<name>`, the name as the spec schema allows it (spec._NAME).
_DAG_ID = re.compile(r"lakeprep_([a-z][a-z0-9_]{0,62})")
_DS = re.compile(r"\d{4}-\d{2}-\d{2}")
# Airflow's own run ids are `<type>__<ISO time>`; any printable id without `/`, `\` or
# `..` is looked up (it is only ever compared in SQL), at most the column's 250 characters.
_RUN_ID = re.compile(r"[^\x00-\x1f\x7f/\\]{1,250}")


class ReportError(Exception):
    """A request the route answers with a page saying why (status, message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def dataset_of(dag_id: str) -> str:
    """The dataset of a lakeprep DAG id, or ReportError(404) for any other DAG."""
    match = _DAG_ID.fullmatch(dag_id)
    if not match:
        raise ReportError(404, f"{dag_id!r} is not a lakeprep DAG (lakeprep_<dataset>): it has no run report")
    return match.group(1)


def check_run_id(run_id: str) -> str:
    if not _RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise ReportError(400, f"run id {run_id!r} is not a valid Airflow run id")
    return run_id


def run_ds(logical_date: dt.datetime | None, run_after: dt.datetime | None) -> str:
    """The partition a run's tasks wrote: `{{ (logical_date or dag_run.run_after) | ds }}`, in UTC."""
    when = logical_date or run_after
    if when is None:
        raise ReportError(404, "the run has neither a logical date nor a run_after: no partition")
    if when.tzinfo is not None:
        when = when.astimezone(dt.UTC)
    return when.date().isoformat()


def report_uri(lake_root: str, dag_id: str, ds: str) -> str:
    """`<lake>/reports/<dataset>/dt=<ds>/report.html`, every part checked against the layout."""
    root = require_lake_root(lake_root)
    if not _DS.fullmatch(ds):
        raise ReportError(400, f"partition date {ds!r} must be YYYY-MM-DD")
    try:
        dt.date.fromisoformat(ds)
    except ValueError as err:
        raise ReportError(400, f"partition date {ds!r} is not a date") from err
    return layout.join(layout.partition_uri(root, layout.REPORTS, dataset_of(dag_id), ds), REPORT_HTML)


def read_report(uri: str) -> bytes | None:
    """report.html's bytes from the lake (file:// or hdfs://), None when it is not there."""
    fs, path = lake_fs.resolve(uri)
    return fs.read_bytes(path) if fs.exists(path) else None


def page(title: str, message: str) -> str:
    import html

    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<title>{html.escape(title)}</title></head><body style="font-family: system-ui, sans-serif">'
        f"<h1>{html.escape(title)}</h1><p>{html.escape(message)}</p></body></html>"
    )


def create_app() -> Any:
    """The FastAPI app with the report route, guarded by Airflow's DAG-run read permission."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.common.db.common import SessionDep
    from airflow.api_fastapi.core_api.security import requires_access_dag
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.sdk import Variable  # the api-server reads env vars, then the metastore
    from fastapi import Depends, FastAPI
    from fastapi.responses import HTMLResponse
    from sqlalchemy import select

    app = FastAPI(title="lakeprep run report", docs_url=None, redoc_url=None, openapi_url=None)
    # Authorised content: never cached, never sniffed into something else.
    headers = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}

    @app.get(
        "/{dag_id}/{run_id}/",
        response_class=HTMLResponse,
        # The dag_id path parameter is what the check authorises (security.requires_access_dag).
        dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.RUN))],
    )
    def run_report(dag_id: str, run_id: str, session: SessionDep) -> HTMLResponse:
        try:
            dataset_of(dag_id)
            check_run_id(run_id)
            run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
            if run is None:
                raise ReportError(404, f"no run {run_id!r} of {dag_id}")
            task_state = session.execute(
                select(TaskInstance.state).where(
                    TaskInstance.dag_id == dag_id,
                    TaskInstance.run_id == run_id,
                    TaskInstance.task_id == REPORT_TASK,
                )
            ).first()
            if task_state is None:
                raise ReportError(
                    404,
                    f"runs of {dag_id} write no run report (no {REPORT_TASK} task: a retraining run "
                    "trains an existing export; the pipeline run of that day has the report)",
                )
            ds = run_ds(run.logical_date, run.run_after)
            lake_root = Variable.get(LAKE_ROOT_VARIABLE, default="")
            try:
                uri = report_uri(lake_root, dag_id, ds)
            except ValueError as err:  # the Variable is unset or not a URI
                raise ReportError(503, str(err)) from err
            body = read_report(uri)
            if body is None:
                raise ReportError(
                    404,
                    f"no report for {dag_id} {ds} yet: {uri} does not exist "
                    f"({REPORT_TASK} of this run is {task_state[0] or 'not started'})",
                )
        except ReportError as err:
            return HTMLResponse(page("No run report", err.message), status_code=err.status, headers=headers)
        return HTMLResponse(body, headers=headers)

    return app


class LazyApp:
    """An ASGI app that builds `create_app()` at its first request (see the module docstring).

    Starlette mounts any ASGI callable (`app.mount` in airflow/api_fastapi/app.py::init_plugins).
    """

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if self._app is None:
            self._app = create_app()
        await self._app(scope, receive, send)
