"""lakeprep's Airflow plugin: what the api-server adds to Airflow's UI and API.

Airflow imports every `.py` file of the plugins folder and registers the `AirflowPlugin`
subclasses it finds (airflow/_shared/plugins_manager). The api-server mounts each
`fastapi_apps` entry under its `url_prefix` when it starts: changes here need an
api-server restart. Keep this file light: task processes load it too.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from lakeprep_airflow import report_app
from lakeprep_airflow.trigger_guard import TriggerConfGuard


class LakeprepPlugin(AirflowPlugin):
    name = "lakeprep"

    # --- run report (docs/OPERATIONS.md#run-report) ------------------------------------
    # GET /lakeprep-report/<dag_id>/<run_id>/ serves the run's report.html, behind
    # Airflow's DAG-run read permission (lakeprep_airflow.report_app).
    fastapi_apps = [
        {"app": report_app.LazyApp(), "url_prefix": report_app.URL_PREFIX, "name": "lakeprep run report"}
    ]
    # A "Report" tab on every run page: the UI fills in {DAG_ID} and {RUN_ID} and shows the
    # route in an iframe (url_route makes it a tab). No leading slash: it resolves against
    # the UI's <base href>, so it also works under a sub-path base_url; the trailing slash
    # matches the route.
    external_views = [
        {
            "name": "Report",
            "href": report_app.URL_PREFIX.lstrip("/") + "/{DAG_ID}/{RUN_ID}/",
            "destination": "dag_run",
            "url_route": "lakeprep_report",
        }
    ]
    # --- end run report -----------------------------------------------------------------

    # --- trigger guard (docs/OPERATIONS.md#the-trigger-form) ------------------------------
    # A trigger of a lakeprep DAG whose conf has a key that is not one of the DAG's params,
    # or a value outside a param's range, gets HTTP 400 with a message naming the key and
    # what is allowed, before the run is created (lakeprep_airflow.trigger_guard).
    fastapi_root_middlewares = [
        {"middleware": TriggerConfGuard, "args": [], "kwargs": {}, "name": "lakeprep trigger conf guard"}
    ]
    # --- end trigger guard --------------------------------------------------------------
