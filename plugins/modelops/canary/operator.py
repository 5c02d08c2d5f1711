"""The canary as Airflow runs it: a deferrable operator over :class:`~modelops.canary.runner.Runner`.

:class:`CanaryOperator` (``execute``) builds the :class:`CanarySpec` from the DAG params,
starts the release or resumes it from its checkpoint (``canary/<model>/v<N>.json`` in
the object store), opens a metrics window and defers to :class:`CanaryIntervalTrigger`;
the triggerer waits out the interval (no worker slot held) and ``execute_window`` measures
the window, feeds it to the runner (advance + actions + checkpoint), logs the analysis
table, applies a pending control request (``canary/<model>/v<N>.control.json``: abort,
pause, resume) and defers again, or ends: promoted → success; rolled back / aborted →
:class:`AirflowFailException` so the run shows failed. Either way the run's note is set
to the summary (phase, final weight, reason, MTTR) through the REST API.

With ``stage="to_approval"`` the operator also returns when the release waits for
approval at its last analysed step; :class:`~modelops.canary.approval.ReleaseApproval`
(the standard provider's ``ApprovalOperator``) asks a person, and ``stage="finish"``
applies the approval and takes the release to its end.

After a promotion :class:`modelops.canary.retire.RetirePreviousStable` retires the previous
stable version after its grace period.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from modelops.canary.actions import ApproveCommand
from modelops.canary.control import control_key, parse_control
from modelops.canary.metrics_source import metrics_source
from modelops.canary.notes import note_progress, set_run_note
from modelops.canary.params import spec_from_params
from modelops.canary.recording import record_first_release, record_release, responder
from modelops.canary.runner import Release, Runner, VersionRef
from modelops.canary.sequential import detection_warnings
from modelops.canary.shadow_stage import (
    PREVIOUS_STAGE,
    SHADOW_APPROVAL_TASK,
    in_shadow,
    model_overrides,
    skip_shadow,
    with_shadow,
)
from modelops.canary.spec import CanarySpec, traffic_warnings
from modelops.canary.status import CanaryStatus, Phase
from modelops.canary.trigger import CanaryIntervalTrigger
from modelops.errors import ContractError


# ------------------------------------------------------------------ wiring
@dataclass
class Wiring:
    """The runner of one release and what the operator needs beside it."""

    runner: Runner | None  # None: nothing to canary (first release, or the version already serves)
    store: Any
    model: str
    canary_version: int
    source: Any
    gateway_urls: tuple[str, ...] = ()


def _stable_mlflow_version(model: str, triton_version: int) -> str:
    from modelops.registry.mlflow_registry import MlflowRegistry

    registry = MlflowRegistry.from_settings()
    for info in registry.versions(model):
        if info.tags.get("modelops.triton_version") == str(triton_version):
            return info.version
    champion = registry.by_alias(model, "champion")
    return champion.version if champion else ""


def wire(candidate: Mapping[str, Any], published: Mapping[str, Any], spec: CanarySpec,
         gateway_urls: Sequence[str] | None = None, release_dict: Mapping[str, Any] | None = None) -> Wiring:
    """Build the runner with the real adapters.

    The stable version is the one the routes serve now, unless ``release_dict`` (what an
    earlier window resolved, carried through the deferral) says which it is.
    """
    from modelops.canary.adapters import (
        MlflowRegistryPort,
        ObjectStoreRoutes,
        ObjectStoreStatusStore,
        TritonServing,
        checkpoint_key,
        current_routes,
    )
    from modelops.canary.release_phase import PhasePushingStore
    from modelops.config import settings
    from modelops.notify.apprise_notifier import default_notifier
    from modelops.objectstore import ObjectStore
    from modelops.registry.mlflow_registry import MlflowRegistry

    cfg = settings()
    urls = tuple(gateway_urls or cfg.gateway_url_list)
    store = ObjectStore.from_settings(cfg)
    model = str(published["model"])
    canary = VersionRef(int(published["triton_version"]), str(published["sha256"]), str(candidate["version"]))
    source = metrics_source(cfg, urls)
    if release_dict is not None:
        release = Release.from_dict(release_dict)
    else:
        current = current_routes(store, model)
        if current is None or current.stable.version == canary.triton_version:
            return Wiring(None, store, model, canary.triton_version, source, urls)
        stable = VersionRef(current.stable.version, current.stable.sha256,
                            _stable_mlflow_version(model, current.stable.version))
        release = Release(model, stable, canary, released_by=str(candidate.get("started_by") or "modelops"))
    routes = ObjectStoreRoutes(store, urls, salted=cfg.canary_sticky_salt == "per_release")
    runner = Runner(spec=spec, release=release, routes=routes, serving=TritonServing(cfg),
                    registry=MlflowRegistryPort(MlflowRegistry.from_settings(cfg)), notifier=default_notifier(),
                    store=PhasePushingStore(ObjectStoreStatusStore(store, checkpoint_key(
                        model, release.canary.triton_version)), pause_alert_s=spec.pause_alert_s))  # and pushed
    return Wiring(runner, store, model, release.canary.triton_version, source, urls)


def summary_dict(status: CanaryStatus) -> dict[str, Any]:
    """What the canary tasks return (XCom) and the CLI shows."""
    from modelops.canary.report import summary

    return {"model": status.model, "stable_version": status.stable_version, "canary_version": status.canary_version,
            "phase": status.phase.value, "weight": status.weight, "reason": status.reason, "mttr_s": status.mttr_s,
            "analyses": status.analyses, "failed_checks": status.failed_checks, "ended_at": status.updated_at,
            "summary": summary(status)}


class CanaryOperator(BaseOperator):
    """Runs a canary release window by window, deferring between windows.

    Args:
        candidate: the ``resolve_candidate`` result (model, MLflow version, started_by).
        published: the ``publish`` result (model, triton_version, sha256).
        stage: ``"to_approval"`` returns at ``waiting_approval``; ``"finish"`` approves first.
        gateway_urls: gateways to route and scrape (default: ``MODELOPS_GATEWAY_URLS`` or the stack's one).
    """

    template_fields = ("candidate", "published")
    ui_color = "#f0e4ff"

    def __init__(self, *, candidate: Any, published: Any,
                 stage: Literal["shadow", "to_approval", "finish"] = "to_approval",
                 gateway_urls: Sequence[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.candidate = candidate
        self.published = published
        self.stage = stage
        self.gateway_urls = list(gateway_urls) if gateway_urls else None

    # ---------------------------------------------------------------- Airflow entry points
    def execute(self, context: Any) -> dict[str, Any]:
        previous = PREVIOUS_STAGE.get(self.stage)
        if previous is not None:
            before = context["ti"].xcom_pull(task_ids=previous) or {}
            if before.get("phase") in {p.value for p in Phase if p.terminal}:
                self.log.info("the release already ended in %s: %s", previous, before.get("phase"))
                return dict(before)
        spec = spec_from_params(context["params"], model_overrides(self.published))
        wiring = wire(self.candidate, self.published, spec, self.gateway_urls)
        if self.stage == "shadow":
            skip_shadow(spec, wiring)  # no shadow phase asked for, or a first release: the next stage goes on
        if wiring.runner is None:
            # A retried try of a release that already ended (promoted: the routes now serve the canary
            # as the stable version) ends from its checkpoint, not as a first release.
            ended = _ended_in_this_run(context, wiring)
            if ended is not None:
                self.log.info("canary %s v%d already ended in an earlier try: %s", wiring.model,
                              wiring.canary_version, ended.phase.value)
                return self._finish(context, ended)
            return self._first_release(context, wiring)
        runner = wiring.runner
        saved = runner.store.load()
        run_start = context["dag_run"].start_date
        if saved is not None and saved.status.phase.terminal and run_start is not None \
                and saved.status.started_at < run_start.timestamp():
            self.log.info("canary %s v%s: an earlier release of this version ended (%s); starting afresh",
                          wiring.model, wiring.canary_version, saved.status.phase.value)
            start_afresh(wiring, runner)
            saved = None
        if saved is None:
            self.log.info("canary spec: %s", spec.to_json())
            for warning in _traffic_hint(spec):
                self.log.info(warning)
        status = runner.begin()
        self.log.info("canary %s: v%d vs stable v%d, %s at %.0f%%", wiring.model, wiring.canary_version,
                      status.stable_version, status.phase.value, status.weight * 100)
        control = None
        if self.stage == "finish":
            status, control = self._approve(context, runner, status)
        elif self.stage == "to_approval" and status.approval_for == "shadow":  # answered by approve_shadow
            status, control = self._approve(context, runner, status, SHADOW_APPROVAL_TASK)
        record_release(context, wiring, self.candidate, status, control=control, log=self.log)
        if status.phase is Phase.PAUSED:  # a retried or resumed try of a paused release says so again
            note_progress(context, status, self.log)
        return self._next(context, wiring, status)

    def execute_window(self, context: Any, event: Mapping[str, Any] | None = None,
                       opened: Mapping[str, Any] | None = None,
                       release: Mapping[str, Any] | None = None) -> dict[str, Any]:
        now = time.time()
        spec = spec_from_params(context["params"], model_overrides(self.published))
        wiring = wire(self.candidate, self.published, spec, self.gateway_urls, release)
        if wiring.runner is None:
            raise AirflowFailException(f"canary {wiring.model} v{wiring.canary_version}: routes changed under the "
                                       "release (no stable version to compare with)")
        runner = wiring.runner
        r = runner.release
        closed = (event or {}).get("closed")
        end = closed
        m = None
        if opened is not None and end is None:  # the window ends now: its marker before anything touches the clock
            end = wiring.source.open_window(wiring.model, time.time())
        if opened is not None and end is not None:  # closed on time by the trigger, or now by the worker
            m = wiring.source.measure_between(wiring.model, r.stable.triton_version, r.canary.triton_version,
                                              opened, end)
        self.log.info("window [%s] analysed %.1f s after the trigger fired",
                      ("closed early by the error test" if (event or {}).get("early") else "closed by the trigger")
                      if closed is not None else "closed by the worker",
                      now - float((event or {}).get("fired_at", now)))
        status = runner.resume()
        if m is not None and opened is not None and end is not None and in_shadow(status):  # its mirrored answers
            m = with_shadow(wiring.source, m, wiring.model, r.canary.triton_version, opened, end)
        before = status.phase
        status, control = apply_control(wiring, status, self.log)
        window = None
        if not status.phase.terminal and m is not None:
            analysed, weight = status.analyses, status.weight
            status = runner.handle(m)
            if status.analyses > analysed and status.last_analysis is not None:
                from modelops.canary.record import window_of
                from modelops.canary.report import analysis_table

                self.log.info("\n%s", analysis_table(status.last_analysis, weight))
                window = window_of(status.last_analysis, weight, m)
            self.log.info("canary %s v%d: %s at %.0f%% (%d analyses, %d failed)", wiring.model,
                          wiring.canary_version, status.phase.value, status.weight * 100, status.analyses,
                          status.failed_checks)
        record_release(context, wiring, self.candidate, status, window=window, control=control, log=self.log)
        if status.phase is not before and not status.phase.terminal:
            note_progress(context, status, self.log)
        return self._next(context, wiring, status, opened=closed)

    # ---------------------------------------------------------------- internals
    def _approve(self, context: Any, runner: Runner, status: CanaryStatus,
                 task: str = "approve_full_rollout") -> tuple[CanaryStatus, Any]:
        """Apply the approval ``task`` answered; returns the status and the cockpit's record of who approved."""
        from modelops.canary.record import Control

        pending = task == SHADOW_APPROVAL_TASK or not status.approved  # the shadow's is asked before users see it
        if status.phase in (Phase.WAITING_APPROVAL, Phase.PAUSED, Phase.PROGRESSING) and pending:
            answer = context["ti"].xcom_pull(task_ids=task, key="return_value")
            by, at = responder(answer)
            self.log.info("canary: approved by %s", by)
            status = runner.handle(ApproveCommand(by=by))
            return status, Control("approve", by, at or time.time(), time.time())
        return status, None

    def _next(self, context: Any, wiring: Wiring, status: CanaryStatus,
              opened: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """End, return for approval, or defer to the next window (opened by ``opened`` when contiguous)."""
        if status.phase.terminal:
            return self._finish(context, status)
        if self.stage == "shadow" and not in_shadow(status):  # on to the steps, or the shadow's approval
            self.log.info("canary %s v%d: the shadow phase ended: %s", wiring.model, wiring.canary_version,
                          status.phase.value)
            return summary_dict(status)
        if status.phase is Phase.WAITING_APPROVAL and self.stage == "to_approval":
            self.log.info("canary %s v%d waits for approval at %.0f%%", wiring.model, wiring.canary_version,
                          status.weight * 100)
            return summary_dict(status)
        spec = spec_from_params(context["params"], model_overrides(self.published))
        if opened is None:
            opened = wiring.source.open_window(wiring.model, time.time())
        release = wiring.runner.release if wiring.runner is not None else None
        self.defer(trigger=CanaryIntervalTrigger.for_window(spec, status, release, wiring.model, wiring.canary_version,
                                                            wiring.gateway_urls, opened),
                   method_name="execute_window",
                   kwargs={"opened": opened, "release": None if release is None else release.to_dict()})

    def _finish(self, context: Any, status: CanaryStatus) -> dict[str, Any]:
        return finish(context, status, self.log)

    def _first_release(self, context: Any, wiring: Wiring) -> dict[str, Any]:
        """No routes yet (the model's first release) or the version already serves: route it 100 %, promote."""
        from modelops.canary.adapters import ObjectStoreRoutes, current_routes
        from modelops.registry.mlflow_registry import MlflowRegistry

        ref = VersionRef(int(self.published["triton_version"]), str(self.published["sha256"]),
                         str(self.candidate["version"]))
        if current_routes(wiring.store, wiring.model) is None:
            ObjectStoreRoutes(wiring.store, wiring.gateway_urls).apply(wiring.model, ref, None, 0.0, "modelops")
            note = f"{wiring.model} v{ref.triton_version}: first release, routed 100% (no stable version to compare)"
        else:
            note = f"{wiring.model} v{ref.triton_version}: already the stable version, nothing to canary"
        MlflowRegistry.from_settings().promote(wiring.model, ref.mlflow_version)
        self.log.info(note)
        record_first_release(context, wiring, self.candidate, ref, note, self.log)
        try:
            set_run_note(context["dag"].dag_id, context["dag_run"].run_id, note)
        except Exception as exc:
            self.log.warning("could not set the run note: %s", exc)
        return {"model": wiring.model, "canary_version": ref.triton_version, "phase": "promoted", "weight": 1.0,
                "reason": note, "mttr_s": None, "summary": note}


def start_afresh(wiring: Wiring, runner: Runner) -> None:
    """Forget an earlier run's ended release of this version; serve it and stage it again before traffic.

    The earlier release's rollback unloaded the version and archived it in MLflow (CI of 2026-12-07,
    a chaos test's re-run). Routed at once, the version failed every request until the reconciler
    had loaded it back, and the error gate rolled the re-run back on those failures; had it passed,
    its promotion would have been refused (Archived -> Production). Loading raises when the version
    cannot serve, so the re-run fails before any user meets it, still archived.
    """
    from modelops.canary.adapters import checkpoint_key

    wiring.store.delete(checkpoint_key(wiring.model, wiring.canary_version))
    runner.serving.load(wiring.model, wiring.canary_version)
    runner.registry.restage(wiring.model, runner.release.canary.mlflow_version)


def _ended_in_this_run(context: Any, wiring: Wiring, *, promoting_wait_s: float = 60.0,
                       poll_s: float = 1.0) -> CanaryStatus | None:
    """The status of this run's release of the canary version when it has already ended, else None.

    A checkpoint of this run still ``promoting`` means another try of this task is finishing the
    promotion: Airflow can start a new try while the old one still runs (it took the old one for
    dead under load; CI of 2026-12-03). The routes already serve the canary as the stable, so this
    try must not take it for a first release (its result would name no previous stable, and the
    replaced version would never be retired): it waits up to ``promoting_wait_s`` for the end.
    """
    from modelops.canary.adapters import ObjectStoreStatusStore, checkpoint_key

    checkpoints = ObjectStoreStatusStore(wiring.store, checkpoint_key(wiring.model, wiring.canary_version))
    run_start = context["dag_run"].start_date
    deadline = time.monotonic() + promoting_wait_s
    while True:
        saved = checkpoints.load()
        if saved is None or run_start is None or saved.status.started_at < run_start.timestamp():
            return None
        if saved.status.phase.terminal:
            return saved.status
        if saved.status.phase is not Phase.PROMOTING or time.monotonic() >= deadline:
            return None
        time.sleep(poll_s)


def _traffic_hint(spec: CanarySpec) -> list[str]:
    return [f"at {rate:g} req/s: {w}" for rate in (10.0, 100.0)
            for w in (*traffic_warnings(spec, rate), *detection_warnings(spec, rate))][:6]


def apply_control(wiring: Wiring, status: CanaryStatus, log: Any) -> tuple[CanaryStatus, Any]:
    """Apply (and remove) the release's pending control request; returns the status and the cockpit's
    record of it (or None). A canary window applies it; so does a rejection at approval (an abort
    requested while the release waited for approval is what answered it)."""
    from modelops.canary.record import Control

    assert wiring.runner is not None
    key = control_key(wiring.model, wiring.canary_version)
    if not wiring.store.exists(key):
        return status, None
    raw = wiring.store.get_bytes(key)
    wiring.store.delete(key)
    try:
        request, command, requested_at = parse_control(raw)
    except ContractError as exc:
        # Refused, not retried: one bad document must not fail every later window of the release.
        log.error("control request %s refused and removed: %s; it was %r", key, exc, raw[:500])
        return status, None
    if requested_at < status.started_at:
        log.info("control request %s predates this release: ignored", request)
        return status, None
    log.info("control request: %s", request)
    status = wiring.runner.handle(command)
    return status, Control(str(request.get("action")), str(request.get("by", "operator")),
                           float(request.get("requested_at", 0.0)), time.time(), str(request.get("reason", "")))


def finish(context: Any, status: CanaryStatus, log: Any) -> dict[str, Any]:
    """The release ended: set the run note; a rollback or an abort fails the task."""
    result = summary_dict(status)
    log.info("canary release ended:\n%s", result["summary"])
    try:
        set_run_note(context["dag"].dag_id, context["dag_run"].run_id, result["summary"])
    except Exception as exc:  # the note is a courtesy; the release has ended either way
        log.warning("could not set the run note: %s", exc)
    if status.phase in (Phase.ROLLED_BACK, Phase.ABORTED):
        raise AirflowFailException(f"canary {status.phase.value}: {status.reason}")
    return result
