"""model_release's canary against faults, on the real stack under generated traffic.

Beside ``test_canary_release.py`` (promotion, errors, abort, approval): a version whose
scores collapse to a constant and a version three times slower are rolled back; thin
traffic never promotes nor rolls back but pauses after the inconclusive limit and alerts
once; a scheduler and a triggerer killed mid-canary (SIGKILL of their process groups)
and restarted leave a release that resumes from its checkpoint and ends promoted,
without a step repeated or skipped.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace
from typing import Any

import pytest

from modelops.airflow_client import AirflowClient
from modelops.config import Settings
from modelops.objectstore import ObjectStore
from tests.integration.test_canary_release import (
    CANARY,
    Traffic,
    _checkpoint,
    _note,
    _register,
    _release,
    _routes,
    _serve_stable,
    _states,
    _variant,
    features_published,
    trained,
)
from tests.support import stackops
from tests.support.receiver import NotificationReceiver
from tests.support.releases import ended, explain

pytestmark = pytest.mark.integration

__all__ = ["features_published", "trained"]  # module fixtures shared with test_canary_release


def _canary_version(airflow: AirflowClient, run_id: str, timeout_s: float = 180.0) -> int:
    """The canary's Triton version once the release has published it and started the canary."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return int(airflow.xcom("model_release", run_id, "publish")["triton_version"])
        except Exception:  # not published yet
            assert airflow.run_state("model_release", run_id) in ("queued", "running"), _states(airflow, run_id)
            time.sleep(2)
    raise AssertionError(f"no canary published: {_states(airflow, run_id)}")


def _wait_status(store: ObjectStore, model: str, canary_tv: int, done: Any, timeout_s: float,
                 poll_s: float = 1.0) -> dict[str, Any]:
    """The canary's checkpoint once ``done(status)`` holds (or the last one read, at the timeout)."""
    deadline = time.monotonic() + timeout_s
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            status = _checkpoint(store, model, canary_tv)
        except Exception:  # the canary has not started yet
            status = {}
        if status and done(status):
            break
        time.sleep(poll_s)
    return status


def _canary_titles(notifications: NotificationReceiver, model: str) -> list[str]:
    return [str(m.get("title", "")) for m in notifications.messages if f"canary {model} " in str(m.get("title", ""))]


def _assert_rolled_back(airflow: AirflowClient, store: ObjectStore, model: str, run_id: str, state: str,
                        stable_tv: int, version: str, gate: str) -> dict[str, Any]:
    from modelops.registry.mlflow_registry import MlflowRegistry
    from modelops.serving.api import served_versions

    states = _states(airflow, run_id)
    assert state == "failed" and states["canary_to_approval"] == "failed", states
    canary_tv = int(airflow.xcom("model_release", run_id, "publish")["triton_version"])
    status = _checkpoint(store, model, canary_tv)
    assert status["phase"] == "rolled_back", status
    assert gate in status["reason"], status["reason"]
    # Two failing 5 s windows and the decision; the < 30 s bound of the issue is asserted on the error
    # test, these allow for a loaded machine (both run beside other suites in development).
    assert status["mttr_s"] is not None and 0 < status["mttr_s"] < 45
    failed = [g for g in status["last_analysis"]["gates"] if g["verdict"] == "failed"]
    assert [g["name"] for g in failed] == [gate], failed
    routes = _routes(store, model)
    assert (routes.stable.version, routes.canary, routes.canary_weight) == (stable_tv, None, 0.0)
    assert served_versions(model) == [stable_tv]  # the canary was unloaded
    info = MlflowRegistry.from_settings().get(model, version)
    assert "challenger" not in info.aliases and info.tags[f"modelops.canary.gate.{gate}"].endswith("failed")
    assert "rolled_back" in _note(airflow, run_id)
    return status


def test_a_version_whose_scores_collapse_is_rolled_back(
    airflow: AirflowClient, stack_settings: Settings, object_store: ObjectStore, mlflow_uri: str, trained: Any,
    features_published: None,
) -> None:
    from modelops.example.train import train

    model = f"can_{uuid.uuid4().hex[:6]}"
    stable = _serve_stable(stack_settings, object_store, trained, mlflow_uri, model)
    collapsed = train(replace(trained.spec, variant="collapsed"))
    version = _register(_variant(collapsed, {"variant": "collapsed"}), mlflow_uri, model)
    with Traffic(stack_settings, model):
        run_id = _release(airflow, model, version)
        state = ended(airflow, model, run_id, 230)
    status = _assert_rolled_back(airflow, object_store, model, run_id, state, stable["triton_version"], version,
                                 "score_std")
    std = next(g for g in status["last_analysis"]["gates"] if g["name"] == "score_std")
    assert std["value"] < 0.005 == std["threshold"]


def _stable_p99_ms(cfg: Settings, model: str, stable_tv: int, seconds: float) -> float:
    """The stable version's p99 over a window of the running traffic, as the canary measures it."""
    from modelops.canary.gates import p99_ms
    from modelops.canary.sources import ScrapeSource

    source = ScrapeSource([f"{cfg.gateway_url}/metrics"], cfg.triton_metrics_url)
    opened = source.open_window(model, time.time())
    time.sleep(seconds)
    m = source.measure(model, stable_tv, stable_tv + 1, opened, time.time())
    assert m.stable.requests >= CANARY["min_requests"], m
    return p99_ms(m.stable)


def test_a_version_three_times_slower_is_rolled_back(
    airflow: AirflowClient, stack_settings: Settings, object_store: ObjectStore, mlflow_uri: str, trained: Any,
    features_published: None,
) -> None:
    """The slow variant sleeps twice its base per batch; the base is the stable's measured p99.

    So the canary's requests take about three times the stable's p99 (more with queueing).
    The SLO sits at twice the stable's p99: the stable stays inside it (no incident), the
    slow canary does not, and its p99 exceeds 1.5 × the stable's.
    """
    model = f"can_{uuid.uuid4().hex[:6]}"
    stable = _serve_stable(stack_settings, object_store, trained, mlflow_uri, model)
    with Traffic(stack_settings, model):
        base_ms = _stable_p99_ms(stack_settings, model, stable["triton_version"], 6.0)
        slow = {"variant": "slow", "slowdown": 3.0, "base_ms": max(base_ms, 5.0)}
        version = _register(_variant(trained, slow), mlflow_uri, model)
        run_id = _release(airflow, model, version, canary_slo_p99_ms=round(2 * max(base_ms, 5.0), 1))
        state = ended(airflow, model, run_id, 230)
    status = _assert_rolled_back(airflow, object_store, model, run_id, state, stable["triton_version"], version,
                                 "p99_ms")
    gate = next(g for g in status["last_analysis"]["gates"] if g["name"] == "p99_ms")
    assert gate["value"] > gate["threshold"] >= 2 * max(base_ms, 5.0) - 0.1, (gate, base_ms)


def test_thin_traffic_never_decides_and_pauses_after_the_inconclusive_limit(
    airflow: AirflowClient, stack_settings: Settings, object_store: ObjectStore, mlflow_uri: str, trained: Any,
    features_published: None, notifications: NotificationReceiver, capsys: pytest.CaptureFixture[str],
) -> None:
    """Started with ``modelops release start``, which reports the pause at once (exit 3), not at its timeout."""
    import argparse

    from modelops.registry.mlflow_registry import MlflowRegistry
    from modelops.release.commands import PAUSED_EXIT, add_commands

    model = f"can_{uuid.uuid4().hex[:6]}"
    stable = _serve_stable(stack_settings, object_store, trained, mlflow_uri, model)
    version = _register(_variant(trained, {"variant": "good"}), mlflow_uri, model)
    interval = CANARY["analysis_interval_s"]
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command"))
    # The spec's default inconclusive_limit (3) and the CANARY release options.
    args = parser.parse_args(["release", "start", "--model", model, "--version", version, "--steps", "25,50,100",
                              "--interval-s", str(interval), "--min-requests", str(CANARY["min_requests"]),
                              "--grace-s", "4", "--timeout-s", "400"])
    capsys.readouterr()
    # 2 req/s: about 2.5 canary and 7.5 stable requests per 5 s window at 25 %, far below 20.
    with Traffic(stack_settings, model, rate=2.0):
        code = args.func(args)
        returned_at = time.time()
        printed = capsys.readouterr().out
        run_id = printed.split("model_release run ", 1)[1].split()[0]
        canary_tv = _canary_version(airflow, run_id)
        status = _checkpoint(object_store, model, canary_tv)
        assert code == PAUSED_EXIT and status.get("phase") == "paused", (code, printed, status)
        paused_at = status["transitions"][-1]["at"]
        assert returned_at - paused_at <= interval, f"reported {returned_at - paused_at:.1f} s after the pause"
        assert "paused at 25%" in printed and "waits for a person" in printed, printed
        # The run and the canary task say so too, where people look in the Airflow UI (set by the task just
        # after it saved the paused status, which the CLI may have read first).
        note = stackops.wait_for(lambda: "waits for a person" in _note(airflow, run_id) and _note(airflow, run_id),
                                 15, "the run's note names the pause")
        assert "3 inconclusive analyses in a row" in note, note
        canary_ti = airflow.request("GET", f"/api/v2/dags/model_release/dagRuns/{run_id}/taskInstances/"
                                    "canary_to_approval")
        assert canary_ti["state"] == "deferred" and canary_ti.get("note") == note, canary_ti
        # It stays paused at its first weight for more windows: nothing promoted, nothing rolled back.
        time.sleep(3 * interval)
        status = _checkpoint(object_store, model, canary_tv)
        assert (status["phase"], status["weight"], status["failed_checks"]) == ("paused", 0.25, 0)
        assert status["analyses"] == 3 and "3 inconclusive analyses in a row" in status["reason"]
        assert "thin traffic: canary" in status["reason"], status["reason"]
        assert [t["to"] for t in status["transitions"]] == ["progressing", "paused"]
        assert all(g["verdict"] == "inconclusive" for g in status["last_analysis"]["gates"])
        assert _routes(object_store, model).canary_weight == 0.25
        assert MlflowRegistry.from_settings().get(model, version).stage != "Production"
        assert airflow.run_state("model_release", run_id) == "running"
        # Alerted once at the pause (and once at the start), not once per window.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(t.endswith(": paused") for t in
                                                      _canary_titles(notifications, model)):
            time.sleep(0.5)
        titles = _canary_titles(notifications, model)
        assert sorted(t.rsplit(": ", 1)[1] for t in titles) == ["paused", "started"], titles
        # End it: an abort from the control DAG rolls the paused release back.
        control = airflow.trigger("model_release_control", {"model": model, "version": canary_tv,
                                                            "action": "abort", "reason": "thin traffic"},
                                  run_id=f"test-abort-{uuid.uuid4().hex[:8]}")
        assert airflow.wait("model_release_control", control, timeout_s=120) == "success"
        assert airflow.wait("model_release", run_id, timeout_s=120) == "failed"
    status = _checkpoint(object_store, model, canary_tv)
    assert status["phase"] == "aborted" and status["reason"] == "aborted by airflow-ui: thin traffic"
    routes = _routes(object_store, model)
    assert (routes.stable.version, routes.canary, routes.canary_weight) == (stable["triton_version"], None, 0.0)


def test_scheduler_and_triggerer_killed_mid_canary_resume_and_end_correctly(
    airflow: AirflowClient, stack_settings: Settings, object_store: ObjectStore, mlflow_uri: str, trained: Any,
    features_published: None, notifications: NotificationReceiver,
) -> None:
    from modelops.registry.mlflow_registry import MlflowRegistry
    from modelops.stack import launcher

    model = f"can_{uuid.uuid4().hex[:6]}"
    stable = _serve_stable(stack_settings, object_store, trained, mlflow_uri, model)
    version = _register(_variant(trained, {"variant": "good"}), mlflow_uri, model)
    with Traffic(stack_settings, model):
        run_id = _release(airflow, model, version)
        canary_tv = _canary_version(airflow, run_id)
        # Kill right after the canary task deferred following its first analysis (at 25 %), so the
        # release sits in the triggerer, between two windows, when both components die.
        deadline = time.monotonic() + 120
        killed_at: dict[str, Any] | None = None
        previous = ""
        while time.monotonic() < deadline and killed_at is None:
            state = _states(airflow, run_id).get("canary_to_approval", "")
            try:
                status = _checkpoint(object_store, model, canary_tv)
            except Exception:  # the canary has not started yet
                status = {}
            if state == "deferred" and previous != "deferred" and status.get("weight") == 0.5:
                stackops.kill_services(stack_settings, ("airflow-scheduler", "airflow-triggerer"))
                killed_at = status
            previous = state
            time.sleep(0.2)
        assert killed_at is not None, (_states(airflow, run_id), previous)
        assert killed_at["phase"] == "progressing"
        killed = time.time()
        time.sleep(3)  # down for a while (the window ends meanwhile)
        states = {s.name: s.state for s in launcher.up(stack_settings, progress=lambda line: None,
                                                       only=("airflow-scheduler", "airflow-triggerer"))}
        assert states["airflow-scheduler"] == states["airflow-triggerer"] == "healthy", states
        state = ended(airflow, model, run_id, 300)
    assert state == "success", explain(airflow, model, run_id)
    status = _checkpoint(object_store, model, canary_tv)
    assert status["phase"] == "promoted" and status["failed_checks"] == 0
    # Neither repeated nor skipped: 50 % analysed after the restart, then promoted; the routes were
    # written four times in all (stable 100 %, 25 %, 50 %, promotion).
    assert status["analyses"] >= 2 and status["last_analysis"]["window_end"] > killed, status
    assert [t["to"] for t in status["transitions"]] == ["progressing", "promoting", "promoted"]
    assert _routes(object_store, model).revision == 4
    titles = _canary_titles(notifications, model)
    assert sorted(t.rsplit(": ", 1)[1] for t in titles) == ["promoted", "started"], titles
    assert MlflowRegistry.from_settings().get(model, version).stage == "Production"
    assert MlflowRegistry.from_settings().get(model, stable["version"]).stage == "Archived"
    assert json.dumps(status).count('"rolling_back"') == 0


def test_a_killed_gateway_pauses_the_release_and_it_resumes_by_itself_once_the_gateway_is_back(
    airflow: AirflowClient, stack_settings: Settings, object_store: ObjectStore, mlflow_uri: str, trained: Any,
    features_published: None, notifications: NotificationReceiver,
) -> None:
    """A canary that cannot be measured is never promoted: it pauses (an incident: the serving layer is down,
    not the canary judged) and alerts; the first window measured again resumes it, no person needed."""
    from modelops.stack import launcher

    model = f"can_{uuid.uuid4().hex[:6]}"
    _serve_stable(stack_settings, object_store, trained, mlflow_uri, model)
    version = _register(_variant(trained, {"variant": "good"}), mlflow_uri, model)
    with Traffic(stack_settings, model):
        run_id = _release(airflow, model, version, canary_inconclusive_limit=2,
                          canary_steps="25,50,75,100")
        canary_tv = _canary_version(airflow, run_id)
        status = _wait_status(object_store, model, canary_tv, lambda s: s["weight"] == 0.5, 120, poll_s=0.5)
        assert status.get("weight") == 0.5, (status, _states(airflow, run_id))
        stackops.kill_services(stack_settings, ("gateway",))
        try:
            status = _wait_status(object_store, model, canary_tv, lambda s: s["phase"] == "paused", 90)
            assert status.get("phase") == "paused", status
            assert "unreachable" in status["reason"] and status["failed_checks"] == 0, status["reason"]
            assert status["reason"].startswith("incident, not the canary's fault"), status["reason"]
            assert status["weight"] == 0.5 and _routes(object_store, model).canary_weight == 0.5
            # The task sets the run's note just after it saved the paused status read above.
            note = stackops.wait_for(lambda: _note(airflow, run_id), 15, "the run's note names the pause")
            assert "resumes by itself" in note, note
        finally:
            states = {s.name: s.state for s in launcher.up(stack_settings, progress=lambda line: None,
                                                           only=("gateway",))}
        assert states["gateway"] == "healthy", states
        state = ended(airflow, model, run_id, 240)
    assert state == "success", explain(airflow, model, run_id)
    status = _checkpoint(object_store, model, canary_tv)
    assert status["phase"] == "promoted"
    assert [t["to"] for t in status["transitions"]] == ["progressing", "paused", "progressing", "promoting",
                                                        "promoted"]
    assert status["transitions"][2]["reason"] == "resumed: the incident cleared", status["transitions"]
    titles = _canary_titles(notifications, model)
    assert sorted(t.rsplit(": ", 1)[1] for t in titles) == ["incident", "promoted", "resumed", "started"], titles
