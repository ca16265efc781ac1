"""The trigger form of lakeprep_flights in a real browser, against the real services.

Headless Debian chromium driven by Playwright (`executable_path`: Playwright cannot
download its own browser here) logs in through the login page of the `airflow_stack`
fixture, fills the trigger form and triggers; the scheduler runs the day. A second case
enters values the form cannot hold and checks what reaches a run, and what the server
refuses (lakeprep_airflow.trigger_guard). Selectors: ../shared/research/airflow_ui.md.
Screenshots go to test-artifacts/ui-browser/ (git-ignored); the path is printed.

Independent of test_airflow_services (same session stack): other days (2013-01-02 runs,
2013-01-25 is never landed) and their own run ids.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from urllib.parse import urlparse

import pytest
import requests

from lakeprep_airflow.spec import lake_uri
from lakeprep_contracts import layout
from tests.integration.test_airflow_services import _log_tails, _wait_for_run

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
DAG_ID = "lakeprep_flights"
DAY = "2013-01-02"  # landed and run to success
UNLANDED_DAY = "2013-01-25"  # the clamped run: created, checked, then marked failed
RUN_ID = f"ui__{DAY}"
CLAMPED_RUN_ID = f"ui_clamped__{UNLANDED_DAY}"
CHROMIUM = "/usr/bin/chromium"  # Debian's `chromium` (make system-deps)
ARTIFACTS = REPO / "test-artifacts" / "ui-browser"
UI_TIMEOUT_MS = 60_000  # a loaded 2-core machine: the first page load fetches a 7 MB bundle


@pytest.fixture(scope="module")
def artifacts() -> Path:
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    yield ARTIFACTS
    print(f"\nUI screenshots: {ARTIFACTS}")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
        )
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def page(browser, airflow_stack, artifacts):
    """A page logged in through Airflow's login form, on the DAG's page."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(UI_TIMEOUT_MS)
    page = context.new_page()
    airflow_stack["client"].wait_for_dag(DAG_ID)
    page.goto(f"{airflow_stack['base_url']}/dags/{DAG_ID}")
    page.get_by_label("Username").fill(airflow_stack["username"])
    page.get_by_label("Password").fill(airflow_stack["password"])
    page.screenshot(path=artifacts / "00-login.png")
    page.get_by_role("button", name="Sign in").click()
    page.get_by_test_id("trigger-dag-button").wait_for()
    assert urlparse(page.url).path == f"/dags/{DAG_ID}", page.url
    yield page
    context.close()


def _open_trigger_form(page, base_url: str):
    page.goto(f"{base_url}/dags/{DAG_ID}")
    page.get_by_test_id("trigger-dag-button").click()
    dialog = page.get_by_role("dialog").filter(has=page.get_by_test_id("trigger-dag-submit"))
    dialog.wait_for()
    return dialog


def _open_section(dialog, name: str) -> None:
    """The form's sections are an accordion, one open at a time (the spec's `form.section`)."""
    section = dialog.get_by_role("button", name=name, exact=True)
    if section.get_attribute("aria-expanded") != "true":
        section.click()


def _field(dialog, param: str):
    """A param's field: its label, input and description (helper text)."""
    return dialog.locator(
        "[data-scope=field][data-part=root]", has=dialog.page.locator(f"[name=element_{param}]")
    )


def _set_number(dialog, param: str, value: str, shows: str) -> None:
    """Type into a number field and leave it; the field then shows `shows` (polled: it
    clamps on blur, and React re-renders a moment later)."""
    from playwright.sync_api import expect

    box = dialog.locator(f"input[name=element_{param}]")
    box.fill(value)
    box.press("Tab")
    expect(box).to_have_value(shows)


def _set_logical_date(page, dialog, day: str) -> None:
    dialog.get_by_test_id("datetime-input").click()
    popover = page.locator("[data-scope=popover][data-part=content][data-state=open]")
    popover.get_by_placeholder("YYYY/MM/DD").fill(day.replace("-", "/"))
    popover.get_by_placeholder("HH:mm").fill("00:00")
    dialog.get_by_text("Logical Date", exact=True).click()  # closes the popover, not the dialog
    shown = dt.date.fromisoformat(day).strftime("%b %d, %Y 00:00")
    assert dialog.get_by_test_id("datetime-input").inner_text().strip() == shown


def _select(page, dialog, param: str, option: str) -> None:
    dialog.locator(f"#element_{param}").click()
    page.get_by_role("option", name=option, exact=True).click()
    assert dialog.locator(f"input[name=element_{param}]").input_value() == option


def _set_run_id(dialog, run_id: str) -> None:
    _open_section(dialog, "Advanced Options")
    dialog.get_by_label("Run ID").fill(run_id)


def _toast(page, title: str):
    return page.locator("[data-scope=toast][data-part=title]", has_text=title).first


def test_each_field_states_its_range_and_a_filled_form_runs_the_day(page, airflow_stack, artifacts):
    from lakeprep_airflow.demo_data import land

    client, lake_root = airflow_stack["client"], airflow_stack["lake_root"]
    land(lake_root, dt.date.fromisoformat(DAY), dt.date.fromisoformat(DAY))
    params = client.get(f"/api/v2/dags/{DAG_ID}/details")["params"]
    dialog = _open_trigger_form(page, airflow_stack["base_url"])

    # Every field's description, as the UI shows it, names what it allows.
    for name, param in params.items():
        _open_section(dialog, param["schema"]["section"])
        helper = _field(dialog, name).locator("[data-part=helper-text]")
        helper.wait_for(state="visible")
        assert "Allowed: " in helper.inner_text(), (name, helper.inner_text())
    _open_section(dialog, "Sampling")
    expected = {"sample_fraction": "Allowed: > 0 and <= 1.", "seed": "Allowed: >= 0 and <= 2147483647."}
    for name, allowed in expected.items():
        assert allowed in _field(dialog, name).locator("[data-part=helper-text]").inner_text()
    page.screenshot(path=artifacts / "01-form-sampling.png")

    _set_logical_date(page, dialog, DAY)
    _set_number(dialog, "sample_fraction", "0.8", shows="0.8")
    _set_number(dialog, "seed", "3", shows="3")
    _open_section(dialog, "Training")
    _select(page, dialog, "training_backend", "local")
    _set_number(dialog, "epochs", "1", shows="1")
    _set_run_id(dialog, RUN_ID)
    page.screenshot(path=artifacts / "02-form-filled.png")
    dialog.get_by_test_id("trigger-dag-submit").click()
    _toast(page, "Dag Run Triggered").wait_for()
    page.wait_for_url(f"**/dags/{DAG_ID}/runs/{RUN_ID}**")

    run, tis = _wait_for_run(client, airflow_stack["airflow_home"], RUN_ID)
    states = {ti["task_id"]: ti["state"] for ti in tis}
    logs = _log_tails(client, airflow_stack["airflow_home"], RUN_ID, tis)
    assert run["state"] == "success", f"run {RUN_ID} is {run['state']}; tasks {states}\n{logs}"
    assert run["logical_date"].startswith(f"{DAY}T00:00:00") and run["triggered_by"] == "ui"
    assert run["conf"] == {
        "sample_fraction": 0.8,
        "seed": 3,
        "training_backend": "local",
        "epochs": 1,
        "spark_log_level": params["spark_log_level"]["value"],
    }
    # The form's fraction reached the Spark job (the spec says 1.0).
    sample = json.loads(
        (Path(urlparse(lake_uri(lake_root, "sample", "flights", DAY)).path) / layout.REPORT).read_text()
    )
    assert sample["rows_sampled_out"] == pytest.approx(0.2 * sample["rows_in"], abs=10), sample
    page.reload()
    page.get_by_test_id("trigger-dag-button").wait_for()
    page.screenshot(path=artifacts / "03-run-succeeded.png")


def test_what_the_form_cannot_hold_is_clamped_or_refused(page, airflow_stack, artifacts):
    client, base_url = airflow_stack["client"], airflow_stack["base_url"]
    dialog = _open_trigger_form(page, base_url)
    _set_logical_date(page, dialog, UNLANDED_DAY)
    _open_section(dialog, "Sampling")

    # Not a number: the field does not take it and keeps the spec's default (1.0).
    _set_number(dialog, "sample_fraction", "abc", shows="1")
    # 0: the field's lower bound is exclusive, which the number input does not enforce, so
    # the form sends it; the server refuses it with the range in words, and no run exists.
    _set_number(dialog, "sample_fraction", "0", shows="0")
    _set_run_id(dialog, CLAMPED_RUN_ID)
    dialog.get_by_test_id("trigger-dag-submit").click()
    refusal = "trigger parameter 'sample_fraction' = 0 is not allowed: a number > 0 and <= 1"
    dialog.get_by_text(refusal).wait_for()
    dialog.get_by_text(refusal).scroll_into_view_if_needed()
    _toast(page, "Failed to Trigger Dag").wait_for()
    page.screenshot(path=artifacts / "04-zero-refused.png")
    assert client.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{CLAMPED_RUN_ID}").status_code == 404

    # 5: clamped to the maximum on blur, so what reaches the run is 1, a valid value.
    _open_section(dialog, "Sampling")
    _set_number(dialog, "sample_fraction", "5", shows="1")
    page.screenshot(path=artifacts / "05-five-clamped.png")
    dialog.get_by_test_id("trigger-dag-submit").click()
    _toast(page, "Dag Run Triggered").wait_for()
    run = client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{CLAMPED_RUN_ID}")
    assert run["conf"]["sample_fraction"] == 1, run["conf"]
    # Its day has no data: stop it instead of letting its sensor wait.
    stopped = client.patch(f"/api/v2/dags/{DAG_ID}/dagRuns/{CLAMPED_RUN_ID}", {"state": "failed"})
    assert stopped["state"] == "failed"


def test_the_server_refuses_a_mistyped_key_naming_the_allowed_ones(airflow_stack):
    from lakeprep_airflow.dag_factory import form_overrides

    client, run_id = airflow_stack["client"], f"rest_mistyped__{UNLANDED_DAY}"
    body = {
        "dag_run_id": run_id,
        "logical_date": f"{UNLANDED_DAY}T00:00:00Z",
        "conf": {"sample_fracton": 0.3},
    }
    refused = client.request("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", json=body)
    assert refused.status_code == 400, refused.text
    detail = refused.json()["detail"]
    assert "unknown trigger parameter 'sample_fracton' (did you mean 'sample_fraction'?)" in detail
    assert detail.endswith(f"{DAG_ID} accepts: {', '.join(sorted(form_overrides()))}"), detail
    assert client.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}").status_code == 404

    # A value out of range gets words, not jsonschema's dump.
    body["conf"] = {"seed": -1}
    out_of_range = client.request("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", json=body)
    assert out_of_range.status_code == 400 and out_of_range.json()["detail"] == (
        "trigger parameter 'seed' = -1 is not allowed: an integer >= 0 and <= 2147483647"
    )
    # The form's Backfill tab posts the conf to the backfill routes: checked the same way.
    backfill = {"dag_id": DAG_ID, "from_date": body["logical_date"], "to_date": body["logical_date"]}
    refused = client.request(
        "POST", "/api/v2/backfills/dry_run", json={**backfill, "dag_run_conf": {"sample_fracton": 0.3}}
    )
    assert refused.status_code == 400 and "'sample_fracton'" in refused.json()["detail"], refused.text
    # A caller who may not trigger learns nothing about the params: Airflow's 401 first.
    anonymous = requests.post(
        f"{airflow_stack['base_url']}/api/v2/dags/{DAG_ID}/dagRuns", json=body, timeout=30
    )
    assert anonymous.status_code == 401 and "accepts" not in anonymous.text
