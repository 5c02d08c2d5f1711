"""The release cockpit (the plugin's pages on Airflow's API server) against the real stack.

One model of its own, under generated traffic: a version that fails 30 % of its requests
is rolled back, and a good version's release is left running (it asks for approval at its
last step). The API tests read them as the admin, refuse anonymous callers (401) and a
viewer's actions (403); the browser test logs in through Airflow's login page in headless
Chromium, reads the pages, pauses and resumes the running release, approves it (promoted),
reads who did it in the history, checks the promotion through the API too, and saves the
README's screenshots.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from modelops.airflow_client import AirflowClient
from modelops.config import Settings
from modelops.objectstore import ObjectStore
from tests.integration import test_canary_release as canary
from tests.integration.test_canary_release import features_published, trained  # noqa: F401 (fixtures)
from tests.support.browser import Browser

pytestmark = pytest.mark.integration

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
#: The running release: long enough at each step for a person to pause and resume it.
USERNAME, PASSWORD = "input[name=username]", "input[name=password]"
RUNNING = {"canary_steps": "25,50,100", "canary_analyses_per_step": 3, "require_approval": True}


def _publish_version(airflow: AirflowClient, run_id: str) -> int:
    return int(airflow.xcom("model_release", run_id, "publish")["triton_version"])


def _phase(store: ObjectStore, model: str, version: int) -> str:
    from modelops.canary.record_store import load_record

    record = load_record(store, model, version)
    return record.phase if record else ""


@pytest.fixture(scope="module")
def released(airflow: AirflowClient, stack_settings: Settings, object_store: ObjectStore, mlflow_uri: str,
             trained: Any, features_published: None) -> Iterator[dict[str, Any]]:  # noqa: F811
    model = f"cockpit_{uuid.uuid4().hex[:6]}"
    stable = canary._serve_stable(stack_settings, object_store, trained, mlflow_uri, model)
    bad = canary._register(canary._variant(trained, {"variant": "faulty-errors", "error_rate": 0.3}), mlflow_uri,
                           model)
    good = canary._register(canary._variant(trained, {"variant": "good"}), mlflow_uri, model)
    with canary.Traffic(stack_settings, model):
        rolled_run = canary._release(airflow, model, bad, canary_steps="50,100")
        assert airflow.wait("model_release", rolled_run, timeout_s=420) == "failed", \
            canary._states(airflow, rolled_run)
        running_run = canary._release(airflow, model, good, **RUNNING)
        deadline = time.monotonic() + 300
        while not airflow_xcom_ready(airflow, running_run) and time.monotonic() < deadline:
            time.sleep(1)
        running = _publish_version(airflow, running_run)
        while _phase(object_store, model, running) != "progressing" and time.monotonic() < deadline:
            time.sleep(1)
        assert _phase(object_store, model, running) == "progressing", canary._states(airflow, running_run)
        yield {"model": model, "stable": stable, "bad": bad, "good": good,
               "rolled_back": _publish_version(airflow, rolled_run), "rolled_run": rolled_run,
               "running": running, "running_run": running_run}
        if airflow.run_state("model_release", running_run) not in ("success", "failed"):  # a failed test: end it
            airflow.trigger("model_release_control", {"model": model, "version": running, "action": "abort",
                                                      "requested_by": "tests"})
            try:
                airflow.wait("model_release", running_run, timeout_s=240)
            except Exception as exc:  # the test already failed; the session's teardown stops the stack
                print(f"the running release did not end after the abort: {exc}")


def airflow_xcom_ready(airflow: AirflowClient, run_id: str) -> bool:
    from modelops.airflow_client import AirflowError

    try:
        _publish_version(airflow, run_id)
        return True
    except (AirflowError, KeyError, TypeError):
        return False


def _token(cfg: Settings, user: str, password: str) -> str:
    response = requests.post(f"{cfg.airflow_api_url}/auth/token", json={"username": user, "password": password},
                             timeout=30)
    assert response.status_code in (200, 201), response.text
    return str(response.json()["access_token"])


@pytest.fixture(scope="module")
def admin(stack_settings: Settings) -> dict[str, str]:
    from modelops.credentials import airflow_password

    token = _token(stack_settings, stack_settings.airflow_user, airflow_password(stack_settings))
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def viewer(stack_settings: Settings) -> dict[str, str]:
    from modelops.credentials import VIEWER_USER, airflow_viewer_password

    token = _token(stack_settings, VIEWER_USER, airflow_viewer_password(stack_settings))
    return {"Authorization": f"Bearer {token}"}


def test_the_cockpit_refuses_anonymous_callers(stack_settings: Settings) -> None:
    base = f"{stack_settings.airflow_api_url}/modelops"
    for path in ("/api/releases", "/releases", "/releases/any/1", "/lineage/any/1"):
        response = requests.get(base + path, timeout=30)
        assert response.status_code == 401, (path, response.status_code, response.text[:200])
    response = requests.post(f"{base}/releases/any/1/pause", data={"csrf": "x"}, timeout=30)
    assert response.status_code == 401


def test_the_api_shows_the_rollback_and_the_running_release(stack_settings: Settings, released: dict[str, Any],
                                                            admin: dict[str, str]) -> None:
    base = f"{stack_settings.airflow_api_url}/modelops"
    model = released["model"]
    overview = requests.get(f"{base}/api/releases", headers=admin, timeout=30)
    assert overview.status_code == 200, overview.text[:300]
    entry = overview.json()["models"][model]
    assert entry["routes"]["stable"] == released["stable"]["triton_version"]
    assert entry["routes"]["canary"] == released["running"]
    rows = {r["canary_version"]: r for r in entry["releases"]}
    rolled, running = rows[released["rolled_back"]], rows[released["running"]]
    assert (rolled["phase"], rolled["mlflow_version"], rolled["run_id"]) == \
        ("rolled_back", released["bad"], released["rolled_run"])
    assert "error_rate" in rolled["reason"] and rolled["ended_at"] is not None
    assert rolled["mttr_s"] is not None and 0 < rolled["mttr_s"] < 60
    assert rolled["stable_version"] == released["stable"]["triton_version"]
    assert running["ended_at"] is None and running["started_by"] == "airflow-ui"
    # The rolled-back release's detail: every window with each gate's canary and stable values and threshold.
    detail = requests.get(f"{base}/api/releases/{model}/{released['rolled_back']}", headers=admin, timeout=30).json()
    assert detail["windows"], detail
    failed = [g for w in detail["windows"] for g in w["gates"] if g["verdict"] == "failed"]
    assert any(g["name"] == "error_rate" and g["canary"] > g["threshold"] for g in failed), detail["windows"]
    error_rows = [w["gates"][0] for w in detail["windows"]]
    assert all(g["name"] == "error_rate" and g["stable"] is not None for g in error_rows), error_rows
    assert [t["target"] for t in detail["timeline"]][-2:] == ["rolling_back", "rolled_back"]
    assert "first failing analysis window" in detail["mttr_how"]
    assert detail["contract"]["result"] == "passed" and "features_validation.html" in detail["contract"]["url"]
    assert detail["actions"] == []
    assert requests.get(f"{base}/api/releases/{model}/{released['running']}", headers=admin,
                        timeout=30).json()["actions"][-2:] == ["pause", "abort"]
    # The run tab of the Airflow run page leads to the same release.
    tab = requests.get(f"{base}/runs/model_release/{released['rolled_run']}", headers=admin, timeout=30,
                       allow_redirects=False)
    assert tab.status_code == 303 and tab.headers["location"].endswith(f"/{model}/{released['rolled_back']}")


def test_a_viewer_reads_the_cockpit_but_may_not_act(stack_settings: Settings, released: dict[str, Any],
                                                   viewer: dict[str, str], object_store: ObjectStore) -> None:
    base = f"{stack_settings.airflow_api_url}/modelops"
    model, version = released["model"], released["running"]
    assert requests.get(f"{base}/api/releases", headers=viewer, timeout=30).status_code == 200
    for action in ("pause", "abort", "approve"):
        response = requests.post(f"{base}/releases/{model}/{version}/{action}", headers=viewer, timeout=30)
        assert response.status_code == 403, (action, response.text)
        assert f"viewer may not {action}" in response.json()["detail"]
    from modelops.canary.control import control_key

    assert not object_store.exists(control_key(model, version))


def test_the_browser_shows_the_pages_and_pauses_resumes_and_approves(
    stack_settings: Settings, released: dict[str, Any], airflow: AirflowClient, admin: dict[str, str],
) -> None:
    from modelops.credentials import airflow_password

    base = stack_settings.airflow_api_url
    model, running, user = released["model"], released["running"], stack_settings.airflow_user
    with Browser(width=1200, height=820, timeout_s=60) as page:
        login(page, base, user, airflow_password(stack_settings))
        # The rolled-back release on the Releases page, with its reason; its detail: the gate table.
        page.open(f"{base}/modelops/releases")
        text = page.text(f"table.history[data-model='{model}']")
        assert f"v{released['rolled_back']}" in text and "rolled_back" in text and "failed gates: error_rate" in text
        page.open(f"{base}/modelops/runs/model_release/{released['rolled_run']}")  # the run page's tab
        gates = page.text("#gates")
        assert "error_rate" in gates and "failed" in gates and "p99_ms" in gates, gates
        assert page.js("document.querySelectorAll('.charts svg').length") == 4
        page.screenshot(SCREENSHOTS / "cockpit-release-rolled-back.png")
        # Inside Airflow's UI: the nav entry's page frames the cockpit.
        page.open(f"{base}/plugin/modelops-releases")
        page.wait_for("[...document.querySelectorAll('iframe')].some(f => f.src.includes('/modelops/releases'))",
                      what="the Releases iframe in Airflow's UI")
        # The running release: Pause, see it paused, Resume, Approve; the history names who did it.
        detail = f"{base}/modelops/releases/{model}/{running}"
        for action, phase in (("pause", "paused"), ("resume", "progressing")):
            page.open(detail)
            page.click(f"#action-{action}")
            page.wait_for("document.querySelector('#flash') !== null", what=f"the {action} message")
            assert f"{action} requested" in page.text("#flash"), page.text("body")
            _wait_phase(page, detail, phase)
        _wait_phase(page, detail, "waiting_approval", timeout_s=180)
        _wait_phase(page, detail, "waiting_approval", button="#action-approve")  # the Required Action is open
        page.screenshot(SCREENSHOTS / "cockpit-release-approval.png")
        page.click("#action-approve")
        page.wait_for("document.querySelector('#flash') !== null", what="the approve message")
        assert "approve recorded" in page.text("#flash"), page.text("body")
        _wait_phase(page, detail, "promoted", timeout_s=180)
        history, timeline = page.text("#history"), page.text("#timeline")
        for action in ("pause", "resume", "approve"):
            assert f"{action}\t{user}" in history, history
        assert f"paused by {user}" in timeline and f"resumed by {user}" in timeline and \
            f"approved by {user}" in timeline, timeline
        # The Releases page now shows the promoted and the rolled-back versions with their reasons.
        page.open(f"{base}/modelops/releases")
        text = page.text(f"table.history[data-model='{model}']")
        assert f"v{running}" in text and "promoted" in text and "rolled_back" in text, text
        page.open(f"{base}/plugin/modelops-releases")  # as people see it: framed in Airflow's UI
        page.wait_for(f"[...document.querySelectorAll('iframe')].some(f => f.contentDocument && "
                      f"f.contentDocument.body.innerText.includes('{model}'))", what="the framed Releases page")
        page.screenshot(SCREENSHOTS / "cockpit-releases.png")
        # The lineage page of the promoted version.
        page.open(f"{base}/modelops/lineage/{model}/{released['good']}")
        assert str(running) in page.text("#lineage")
        page.screenshot(SCREENSHOTS / "cockpit-lineage.png")
    # The promotion through the API as well: what serves now, and the release's row.
    entry = requests.get(f"{base}/modelops/api/releases", headers=admin, timeout=30).json()["models"][model]
    assert (entry["routes"]["stable"], entry["routes"]["canary"]) == (running, None)
    promoted = next(r for r in entry["releases"] if r["canary_version"] == running)
    assert (promoted["phase"], promoted["mttr_s"]) == ("promoted", None) and promoted["ended_at"] is not None
    assert [c["action"] for c in promoted["controls"]] == ["pause", "resume", "approve"]
    assert {c["by"] for c in promoted["controls"]} == {user}
    for name in ("releases", "release-rolled-back", "release-approval", "lineage"):
        assert (SCREENSHOTS / f"cockpit-{name}.png").stat().st_size > 10_000


def login(page: Browser, base: str, user: str, password: str) -> None:
    """Log in on Airflow's own login page (the simple auth manager's form)."""
    page.open(f"{base}/auth/login/")
    page.type_into(USERNAME, user)
    page.type_into(PASSWORD, password)
    page.click("button[type=submit]")
    page.wait_for("document.cookie.includes('_token=')", what="the session cookie after the login")


def _wait_phase(page: Browser, url: str, phase: str, timeout_s: float = 60, button: str = "") -> None:
    """Reload the detail page until the release is in ``phase`` (and shows ``button``, when given)."""
    deadline = time.monotonic() + timeout_s
    condition = "document.querySelector('#summary').className === " + repr(phase)
    if button:
        condition += f" && document.querySelector({button!r}) !== null"
    while time.monotonic() < deadline:
        page.open(url)
        if page.js(condition):
            return
        time.sleep(1.5)
    raise AssertionError(f"the release did not reach {phase} {button}: {page.text('body')[:600]}")
