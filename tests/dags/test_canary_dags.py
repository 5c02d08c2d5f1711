"""The canary's Airflow wiring without servers: task graph, form, spec from params, trigger, control requests."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(scope="module")
def dags():  # type: ignore[no-untyped-def]
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    return bag.dags


def test_the_canary_follows_verify_served_with_approval_between_its_two_tasks(dags) -> None:  # type: ignore[no-untyped-def]
    from airflow.providers.standard.operators.hitl import ApprovalOperator

    dag = dags["model_release"]
    graph = {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks}
    assert graph["verify_served"] == ["shadow"]  # the shadow phase (skipped without one), then its approval
    assert graph["shadow"] == ["approve_shadow"] and graph["approve_shadow"] == ["canary_to_approval"]
    assert isinstance(dag.get_task("approve_shadow"), ApprovalOperator)
    # A skipped shadow or shadow approval must not skip the canary steps.
    assert dag.get_task("canary_to_approval").trigger_rule == "none_failed"
    assert graph["canary_to_approval"] == ["approve_full_rollout"]
    assert graph["approve_full_rollout"] == ["canary_finish"]
    assert graph["canary_finish"] == ["retire_previous_stable"]
    assert graph["retire_previous_stable"] == []
    assert isinstance(dag.get_task("approve_full_rollout"), ApprovalOperator)
    # Skipped approval (no approval asked) must not skip the end of the release.
    assert dag.get_task("canary_finish").trigger_rule == "none_failed"
    # A retried canary task resumes from the checkpoint (needed when a loaded scheduler fails a resumed try).
    assert dag.get_task("canary_to_approval").retries >= 1 and dag.get_task("canary_finish").retries >= 1


def test_every_canary_threshold_is_a_documented_release_param(dags) -> None:  # type: ignore[no-untyped-def]
    from modelops.canary.params import extra_param_names
    from modelops.canary.spec import describe

    params = dags["model_release"].params
    fields = describe()
    for param, name in extra_param_names().items():
        assert params[param] == (list(fields[name][0]) if isinstance(fields[name][0], tuple) else fields[name][0])
        assert params.get_param(param).description == fields[name][1] != ""


def test_the_previous_stable_is_retired_after_a_documented_grace_period(dags) -> None:  # type: ignore[no-untyped-def]
    from modelops.canary.retire import DEFAULT_STABLE_GRACE_S, RetirePreviousStable

    dag = dags["model_release"]
    assert isinstance(dag.get_task("retire_previous_stable"), RetirePreviousStable)
    # Deferrable too: a loaded scheduler can fail a try whose short deferral fired early; the retry resumes.
    assert dag.get_task("retire_previous_stable").retries >= 1
    assert dag.params["stable_grace_s"] == DEFAULT_STABLE_GRACE_S > 0
    assert "loaded" in dag.params.get_param("stable_grace_s").description


def test_routed_versions_are_the_stable_and_the_canary() -> None:
    from modelops.documents.routes import Routes, VersionRef, routed_versions

    def routes(canary: VersionRef | None) -> Routes:
        return Routes(model="m", revision=3, stable=VersionRef(4, "a" * 64), canary=canary,
                      canary_weight=0.25 if canary else 0.0, updated_at="2026-11-29T00:00:00+00:00",
                      updated_by="t")

    assert routed_versions(None) == set()
    assert routed_versions(routes(None)) == {4}
    assert routed_versions(routes(VersionRef(7, "b" * 64))) == {4, 7}


def test_the_form_defaults_are_the_spec_defaults(dags) -> None:  # type: ignore[no-untyped-def]
    from modelops.canary.params import spec_from_params
    from modelops.canary.spec import CanarySpec

    params = dags["model_release"].params
    assert spec_from_params({k: params[k] for k in params}) == CanarySpec()


def test_control_form_offers_abort_pause_resume(dags) -> None:  # type: ignore[no-untyped-def]
    params = dags["model_release_control"].params
    assert params.get_param("action").schema["enum"] == ["abort", "pause", "resume"]
    assert [t.task_id for t in dags["model_release_control"].tasks] == ["request_control"]


def test_spec_from_params_reads_percent_steps_and_thresholds() -> None:
    from modelops.canary.params import spec_from_params

    spec = spec_from_params({"canary_steps": "25, 50,100", "analysis_interval_s": 5, "min_requests": 20,
                             "require_approval": True, "canary_failure_limit": 3, "canary_ctr_trial_actions":
                             ["click", "skip"], "model": "m"})
    assert spec.steps == (0.25, 0.5, 1.0)
    assert (spec.interval_s, spec.min_requests, spec.require_approval, spec.failure_limit) == (5, 20, True, 3)


def test_spec_from_params_rejects_bad_steps() -> None:
    from modelops.canary.params import spec_from_params
    from modelops.errors import ConfigError

    with pytest.raises(ConfigError, match="steps"):
        spec_from_params({"canary_steps": "50,25,100"})
    with pytest.raises(ConfigError, match="canary_steps"):
        spec_from_params({"canary_steps": "five,100"})


def test_the_interval_trigger_round_trips_and_fires_after_its_due_time() -> None:
    from modelops.canary.trigger import CanaryIntervalTrigger

    due = time.time() + 0.3
    path, kwargs = CanaryIntervalTrigger(due, "m", 4).serialize()
    assert path == "modelops.canary.trigger.CanaryIntervalTrigger"
    trigger = CanaryIntervalTrigger(**json.loads(json.dumps(kwargs)))

    async def first() -> Any:
        async for event in trigger.run():
            return event
        return None

    event = asyncio.run(first())
    assert event.payload["due"] == due and event.payload["fired_at"] >= due


def test_a_canary_trigger_closes_the_window_when_it_fires_and_the_marker_measures_it() -> None:
    """The closing marker is taken in the triggerer at the due time; here no gateway answers (port 9)."""
    from modelops.canary.metrics_source import metrics_source
    from modelops.canary.trigger import CanaryIntervalTrigger
    from modelops.config import settings

    urls = ["http://127.0.0.1:9"]
    opened = metrics_source(settings(), urls).open_window("m", time.time())
    due = time.time() + 0.3
    _, kwargs = CanaryIntervalTrigger(due, "m", 4, gateway_urls=urls).serialize()
    trigger = CanaryIntervalTrigger(**json.loads(json.dumps(kwargs)))

    async def first() -> Any:
        async for event in trigger.run():
            return event
        return None

    closed = asyncio.run(first()).payload["closed"]
    assert closed["at"] >= due and closed["targets"]["http://127.0.0.1:9/metrics"] is None
    m = metrics_source(settings(), urls).measure_between("m", 3, 4, opened, closed)
    assert (m.window_start, m.window_end) == (opened["at"], closed["at"])
    assert "http://127.0.0.1:9/metrics" in m.unreachable  # so the analysis is inconclusive, never passed


class _FailingCanarySource:
    """Traffic since the window opened: 10 canary requests a second, half of them failing; 30 stable, none."""

    def open_window(self, model: str, now: float) -> dict[str, Any]:
        return {"at": now}

    def measure_between(self, model: str, stable_version: int, canary_version: int, opened: Any, closed: Any) -> Any:
        from modelops.canary.measurement import Measurement, VersionWindow

        seconds = float(closed["at"]) - float(opened["at"])
        buckets = ((0.025, 1e9), (float("inf"), 1e9))
        canary = VersionWindow(requests=10 * seconds, errors=5 * seconds, latency_buckets=buckets, score_std=0.1)
        stable = VersionWindow(requests=30 * seconds, errors=0.0, latency_buckets=buckets, score_std=0.1)
        return Measurement(float(opened["at"]), float(closed["at"]), canary, stable)


@pytest.mark.parametrize("check_s", [0.5, 0.0])
def test_the_trigger_looks_inside_the_window_and_fires_early_on_a_bad_canary(
    monkeypatch: pytest.MonkeyPatch, check_s: float,
) -> None:
    import modelops.canary.metrics_source as metrics_source
    from modelops.canary.spec import CanarySpec
    from modelops.canary.trigger import CanaryIntervalTrigger

    monkeypatch.setattr(metrics_source, "metrics_source", lambda cfg, urls: _FailingCanarySource())
    spec = CanarySpec(steps=(0.25, 0.5, 1.0), interval_s=10.0, check_s=check_s and 0.5, min_requests=2)
    opened = {"at": time.time()}
    due = opened["at"] + spec.interval_s
    _, kwargs = CanaryIntervalTrigger(due, "m", 4, gateway_urls=["http://127.0.0.1:9"], opened=opened,
                                      stable_version=3, spec=spec.to_dict(), evidence={}).serialize()
    trigger = CanaryIntervalTrigger(**json.loads(json.dumps(kwargs)))

    async def first() -> Any:
        async for event in trigger.run():
            return event
        return None

    payload = asyncio.run(first()).payload
    if check_s:  # half the canary's requests fail: bad at one of the first looks, long before the window's end
        assert payload["early"] is True and payload["closed"]["at"] < due - 5.0
    else:  # not looking inside: the window closes at its end
        assert "early" not in payload and payload["closed"]["at"] >= due


def test_the_next_window_is_looked_inside_only_while_the_release_is_analysed() -> None:
    import dataclasses

    from modelops.canary.machine import start
    from modelops.canary.runner import Release, VersionRef
    from modelops.canary.sequential import ErrorEvidence
    from modelops.canary.spec import CanarySpec
    from modelops.canary.status import Phase
    from modelops.canary.trigger import CanaryIntervalTrigger

    spec = CanarySpec(steps=(0.25, 0.5, 1.0), interval_s=5.0)
    release = Release("m", VersionRef(3, "a" * 64, "7"), VersionRef(4, "b" * 64, "8"))
    status, _ = start(spec, "m", 3, 4, 100.0)
    status = dataclasses.replace(status, error_evidence=ErrorEvidence(50.0, 1.0, 150.0, 0.0))
    opened = {"at": 200.0, "targets": {}}
    trigger = CanaryIntervalTrigger.for_window(spec, status, release, "m", 4, ("http://gw",), opened)
    _, kwargs = trigger.serialize()
    assert kwargs["due"] == 205.0 and kwargs["opened"] == opened and kwargs["stable_version"] == 3
    assert CanarySpec.from_dict(kwargs["spec"]) == spec
    assert ErrorEvidence.from_dict(kwargs["evidence"]) == status.error_evidence
    assert CanaryIntervalTrigger(**json.loads(json.dumps(kwargs)))._check_s() == spec.check_s
    paused = dataclasses.replace(status, phase=Phase.PAUSED)
    for no_look in (CanaryIntervalTrigger.for_window(spec, paused, release, "m", 4, ("http://gw",), opened),
                    CanaryIntervalTrigger.for_window(spec, status, None, "m", 4, ("http://gw",), opened)):
        assert no_look._check_s() == 0.0 and no_look.due == 205.0


class _Blobs:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def put_bytes(self, key: str, data: bytes, *, content_type: str = "") -> str:
        self.data[key] = data
        return key


def test_a_control_request_is_written_beside_the_checkpoint_and_maps_to_a_command() -> None:
    from modelops.canary.actions import AbortCommand, PauseCommand, ResumeCommand
    from modelops.canary.control import command_of, control_key, write_control
    from modelops.errors import ConfigError

    blobs = _Blobs()
    request = write_control(blobs, "m", 7, "abort", "alice", "looks wrong")
    assert json.loads(blobs.data[control_key("m", 7)]) == request
    assert control_key("m", 7) == "canary/m/v7.control.json"
    assert command_of(request) == AbortCommand("alice", "looks wrong")
    assert command_of({"action": "pause", "by": "b"}) == PauseCommand("b", "")
    assert command_of({"action": "resume", "by": "b"}) == ResumeCommand("b")
    with pytest.raises(ConfigError):
        write_control(blobs, "m", 7, "promote", "alice")


def test_a_stored_control_document_that_is_not_a_request_is_refused_with_the_rule() -> None:
    from modelops.canary.actions import PauseCommand
    from modelops.canary.control import parse_control
    from modelops.errors import ContractError

    request, command, at = parse_control(b'{"action": "pause", "by": "bo", "requested_at": 12.5}')
    assert (request["by"], command, at) == ("bo", PauseCommand("bo", ""), 12.5)
    for raw, rule in ((b"{not json", "not JSON"), (b"[1, 2]", "must be a JSON object"),
                      (b"\xff\xfe", "not JSON"), (b'{"action": "pause", "requested_at": "soon"}', "Unix time"),
                      (b'{"action": "promote"}', "unknown action")):
        with pytest.raises(ContractError, match=rule):
            parse_control(raw)


def test_release_cli_parses_start_and_control_commands() -> None:
    from modelops.release.commands import add_commands, progress_line

    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["release", "start", "--model", "m", "--version", "3", "--steps", "25,50,100",
                              "--interval-s", "5", "--approve"])
    assert (args.model, args.version, args.steps, args.interval_s, args.approve) == ("m", "3", "25,50,100", 5, True)
    args = parser.parse_args(["release", "abort", "--model", "m", "--version", "4"])
    assert (args.action, args.version) == ("abort", 4)
    status = {"canary_version": 4, "stable_version": 3, "phase": "progressing", "weight": 0.25, "analyses": 1,
              "failed_checks": 0, "last_analysis": {"verdict": "passed", "gates": [
                  {"name": "error_rate", "verdict": "passed"}]}, "mttr_s": None}
    assert progress_line("running", status) == ("run running | canary v4 vs v3: progressing at 25%, 1 analyses, "
                                                "0 failed | last: passed (error_rate passed)")


class _StoredBlobs(_Blobs):
    def exists(self, key: str) -> bool:
        return key in self.data

    def get_bytes(self, key: str) -> bytes:
        return self.data[key]


def test_a_retried_try_finds_the_release_that_ended_in_this_run() -> None:
    """After a promotion the routes serve the canary as stable; a retry must end from the checkpoint."""
    import dataclasses
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from modelops.canary.adapters import ObjectStoreStatusStore, checkpoint_key
    from modelops.canary.operator import Wiring, _ended_in_this_run
    from modelops.canary.runner import Checkpoint
    from modelops.canary.status import CanaryStatus, Phase

    store = _StoredBlobs()
    wiring = Wiring(None, store, "m", 2, None, ("http://gw",))
    context = {"dag_run": SimpleNamespace(start_date=datetime.fromtimestamp(1000.0, UTC))}
    assert _ended_in_this_run(context, wiring) is None  # no checkpoint: a first release
    status = CanaryStatus(model="m", stable_version=1, canary_version=2, started_at=1005.0, updated_at=1005.0)
    checkpoints = ObjectStoreStatusStore(store, checkpoint_key("m", 2))
    checkpoints.save(Checkpoint(dataclasses.replace(status, phase=Phase.PROGRESSING)))
    assert _ended_in_this_run(context, wiring) is None  # still running: not ended
    checkpoints.save(Checkpoint(dataclasses.replace(status, phase=Phase.PROMOTED)))
    ended = _ended_in_this_run(context, wiring)
    assert ended is not None and (ended.phase, ended.stable_version) == (Phase.PROMOTED, 1)
    checkpoints.save(Checkpoint(dataclasses.replace(status, phase=Phase.PROMOTED, started_at=900.0)))
    assert _ended_in_this_run(context, wiring) is None  # an earlier run's release
    # Another try still promoting (Airflow started this one while it ran): waited for, not a first release.
    checkpoints.save(Checkpoint(dataclasses.replace(status, phase=Phase.PROMOTING)))
    assert _ended_in_this_run(context, wiring, promoting_wait_s=0.2, poll_s=0.05) is None  # never ended: as before
    load = checkpoints.load
    calls = []

    def promoted_on_the_third_read() -> Any:
        calls.append(1)
        if len(calls) == 3:
            checkpoints.save(Checkpoint(dataclasses.replace(status, phase=Phase.PROMOTED)))
        return load()

    checkpoints_of = ObjectStoreStatusStore.load
    try:
        ObjectStoreStatusStore.load = lambda self: promoted_on_the_third_read()  # type: ignore[method-assign]
        ended = _ended_in_this_run(context, wiring, promoting_wait_s=5.0, poll_s=0.01)
    finally:
        ObjectStoreStatusStore.load = checkpoints_of  # type: ignore[method-assign]
    assert ended is not None and (ended.phase, ended.stable_version) == (Phase.PROMOTED, 1) and len(calls) == 3


def test_a_rerun_after_a_rollback_serves_the_version_again_before_routing_traffic() -> None:
    """Starting afresh forgets the ended release, loads the (rolled back: unloaded, archived) version, restages it."""
    from types import SimpleNamespace

    from modelops.canary.adapters import checkpoint_key
    from modelops.canary.operator import Wiring, start_afresh
    from modelops.errors import ServingError

    class _Deletable(_StoredBlobs):
        def delete(self, key: str) -> None:
            self.data.pop(key, None)

    calls: list[tuple[str, str, int | str]] = []

    class _Serving:
        def __init__(self, fails: bool = False) -> None:
            self.fails = fails

        def load(self, model: str, triton_version: int) -> None:
            calls.append(("load", model, triton_version))
            if self.fails:
                raise ServingError(f"loading {model} version {triton_version} failed")

        def unload(self, model: str, triton_version: int) -> None:
            calls.append(("unload", model, triton_version))

    class _Registry:
        def restage(self, model: str, mlflow_version: str) -> None:
            calls.append(("restage", model, mlflow_version))

    def runner(serving: _Serving) -> Any:
        release = SimpleNamespace(canary=SimpleNamespace(triton_version=4, mlflow_version="7"))
        return SimpleNamespace(serving=serving, registry=_Registry(), release=release)

    store = _Deletable()
    store.put_bytes(checkpoint_key("m", 4), b"{}")
    wiring = Wiring(None, store, "m", 4, None, ("http://gw",))
    start_afresh(wiring, runner(_Serving()))
    assert checkpoint_key("m", 4) not in store.data
    assert calls == [("load", "m", 4), ("restage", "m", "7")]  # served first, then staged again (promotable)
    calls.clear()
    with pytest.raises(ServingError, match="loading m version 4 failed"):  # the re-run fails before any traffic
        start_afresh(wiring, runner(_Serving(fails=True)))
    assert calls == [("load", "m", 4)], "a version that cannot serve stays archived"
