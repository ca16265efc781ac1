"""The run report in the Airflow UI, on the real services: the plugin's route behind Airflow's login.

The run is the real one (`stack_day_run`: one day of lakeprep_flights through the
scheduler, its `write_report` task writing report.html into the stack's lake). The route
is asked anonymously, with a token from `POST /auth/token`, with the UI's `_token`
cookie, and by a logged-in headless Chromium (Debian's, through Playwright) that opens
the run page's Report tab.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import quote, urlparse

import pytest
import requests

from tests.integration.conftest import STACK_DAY, STACK_RUN_ID
from tests.plugins.test_report import png_of, sections_of

pytestmark = pytest.mark.integration
DAG_ID = "lakeprep_flights"
CHROMIUM = "/usr/bin/chromium"


def report_url(base_url: str, dag_id: str = DAG_ID, run_id: str = STACK_RUN_ID) -> str:
    return f"{base_url}/lakeprep-report/{quote(dag_id, safe='')}/{quote(run_id, safe='')}/"


def login_token(stack: dict) -> str:
    response = requests.post(
        f"{stack['base_url']}/auth/token",
        json={"username": stack["username"], "password": stack["password"]},
        timeout=30,
    )
    assert response.status_code in (200, 201), response.text
    return response.json()["access_token"]


def test_the_api_server_loads_the_plugin(airflow_stack):
    client = airflow_stack["client"]
    plugins = {p["name"]: p for p in client.get("/api/v2/plugins")["plugins"]}
    assert "lakeprep" in plugins, sorted(plugins)
    plugin = plugins["lakeprep"]
    assert [(a["url_prefix"], a["app"]) for a in plugin["fastapi_apps"]] == [
        ("/lakeprep-report", "lakeprep_airflow.report_app.LazyApp")
    ]
    (view,) = [v for v in plugin["external_views"] if v["url_route"] == "lakeprep_report"]
    assert view["destination"] == "dag_run" and view["href"] == "lakeprep-report/{DAG_ID}/{RUN_ID}/"
    assert view["name"] == "Report"
    assert client.get("/api/v2/plugins/importErrors")["import_errors"] == []


def test_anonymous_and_forged_requests_are_refused(airflow_stack, stack_day_run):
    url = report_url(airflow_stack["base_url"])
    anonymous = requests.get(url, timeout=30)
    assert anonymous.status_code == 401, anonymous.text
    assert "data:image/png" not in anonymous.text
    for attempt in ({"headers": {"Authorization": "Bearer not-a-jwt"}}, {"cookies": {"_token": "not-a-jwt"}}):
        forged = requests.get(url, timeout=30, **attempt)
        assert forged.status_code in (401, 403), (attempt, forged.status_code, forged.text)
        assert "data:image/png" not in forged.text


def test_a_logged_in_user_gets_the_runs_report_with_its_plots(airflow_stack, stack_day_run):
    token = login_token(airflow_stack)
    url = report_url(airflow_stack["base_url"])
    response = requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert response.status_code == 200, response.text[:2000]
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["cache-control"] == "no-store"
    # What the run's write_report task wrote into the lake, byte for byte.
    lake = Path(urlparse(airflow_stack["lake_root"]).path)
    written = lake / "reports" / "flights" / f"dt={STACK_DAY}" / "report.html"
    assert response.content == written.read_bytes()
    sections = sections_of(response.text)
    assert set(sections) == {"rows", "quarantine", "class-balance", "drift", "transform", "training"}
    assert STACK_RUN_ID in response.text
    # The day trained a model: its loss curve and bottleneck breakdown are there.
    assert len(sections["training"]["imgs"]) == 2, sections["training"]["text"]
    for section in sections.values():
        for src in section["imgs"]:
            png_of(src)
    # The UI's own cookie is as good as the header (the iframe sends it).
    by_cookie = requests.get(url, cookies={"_token": token}, timeout=60)
    assert by_cookie.status_code == 200 and by_cookie.content == response.content


def test_runs_without_a_report_are_answered_with_the_reason(airflow_stack, stack_day_run):
    token = login_token(airflow_stack)
    headers = {"Authorization": f"Bearer {token}"}
    base, client = airflow_stack["base_url"], airflow_stack["client"]

    unknown = requests.get(report_url(base, run_id="manual__1999-01-01"), headers=headers, timeout=30)
    assert unknown.status_code == 404 and "no run" in unknown.text
    dotted = requests.get(report_url(base, run_id="a..b"), headers=headers, timeout=30)
    assert dotted.status_code == 400 and "not a valid Airflow run id" in dotted.text
    other = requests.get(report_url(base, dag_id="not_lakeprep"), headers=headers, timeout=30)
    assert other.status_code == 404 and "is not a lakeprep DAG" in other.text

    # The export's asset event queued a retraining run: it has no report of its own.
    deadline = time.monotonic() + 120
    while not (runs := client.get(f"/api/v2/dags/{DAG_ID}_train/dagRuns")["dag_runs"]):
        assert time.monotonic() < deadline, "the export's asset event queued no run of the train DAG"
        time.sleep(3)
    train = requests.get(
        report_url(base, dag_id=f"{DAG_ID}_train", run_id=runs[0]["dag_run_id"]), headers=headers, timeout=30
    )
    assert train.status_code == 404 and "write no run report" in train.text, train.text


def test_a_logged_in_browser_sees_the_plots_in_the_run_pages_report_tab(airflow_stack, stack_day_run):
    from playwright.sync_api import expect, sync_playwright

    base = airflow_stack["base_url"]
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(60_000)
            # Anonymous first: the report route itself refuses the browser.
            refused = page.request.get(report_url(base))
            assert refused.status == 401
            page.goto(f"{base}/dags/{DAG_ID}/runs/{quote(STACK_RUN_ID, safe='')}")
            page.get_by_label("Username").fill(airflow_stack["username"])
            page.get_by_label("Password").fill(airflow_stack["password"])
            page.get_by_role("button", name="Sign in").click()
            page.get_by_role("link", name="Report", exact=True).click()
            frame = page.frame_locator("iframe[title='Report']")
            images = frame.locator("section#training img")
            expect(images).to_have_count(2)
            expect(frame.locator("h1")).to_contain_text(f"lakeprep flights {STACK_DAY}")
            widths = frame.locator("img").evaluate_all(
                "imgs => imgs.map(i => i.complete ? i.naturalWidth : 0)"
            )
            served = requests.get(
                report_url(base), cookies={"_token": login_token(airflow_stack)}, timeout=60
            )
            assert len(widths) == sum(len(s["imgs"]) for s in sections_of(served.text).values())
            assert min(widths) > 100, widths  # every plot decoded and drawn
            # For a person to look at: copied to <pytest tmp>/airflow-stack-logs/ with the logs.
            page.screenshot(path=str(Path(airflow_stack["airflow_home"]) / "logs" / "run-report-tab.png"))
        finally:
            browser.close()
