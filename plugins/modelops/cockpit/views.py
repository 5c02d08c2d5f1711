"""View models of the cockpit pages, built from the stores' documents (pure).

The builders take parsed documents (routes, release records, canary status, MLflow
version facts) and return small frozen dataclasses the templates render; no I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import quote

from modelops.canary.description import ctr_days, number, seconds, when
from modelops.canary.record import ReleaseRecord, Window
from modelops.canary.status import CanaryStatus
from modelops.cockpit.svg import Series, line_chart
from modelops.documents.routes import Routes

CANARY_COLOR, STABLE_COLOR, THRESHOLD_COLOR = "#7b2cbf", "#2a9d8f", "#e76f51"
#: The charts of the detail page: gate name → title.
CHARTS = {"error_rate": "error rate", "p99_ms": "P99 latency (ms)", "score_std": "score std", "ctr": "CTR"}
SHADOW_CHARTS = {"divergence": "disagreeing share (shadow)", "delta_p95": "|Δ| p95 (shadow)"}
ACTIONS_WHILE = {
    "pause": {"shadow", "progressing", "waiting_approval", "initializing"},
    "resume": {"paused"},
    "abort": {"shadow", "progressing", "waiting_approval", "paused", "initializing"},
}


@dataclass(frozen=True)
class Links:
    """Where the pages link to: the Airflow UI (same origin), the MLflow UI and the cockpit itself."""

    mlflow_ui: str = ""
    cockpit: str = "/modelops"

    def airflow_run(self, dag_id: str, run_id: str) -> str:
        return f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}" if run_id else ""

    def mlflow_version(self, model: str, version: str) -> str:
        if not (self.mlflow_ui and version):
            return ""
        return f"{self.mlflow_ui.rstrip('/')}/#/models/{quote(model, safe='')}/versions/{quote(version, safe='')}"

    def mlflow_run(self, run_id: str) -> str:
        return f"{self.mlflow_ui.rstrip('/')}/#/runs/{quote(run_id, safe='')}" if self.mlflow_ui and run_id else ""

    def detail(self, model: str, canary_version: int) -> str:
        return f"{self.cockpit}/releases/{quote(model, safe='')}/{canary_version}"

    def lineage(self, model: str, mlflow_version: str) -> str:
        return f"{self.cockpit}/lineage/{quote(model, safe='')}/{quote(mlflow_version, safe='')}" \
            if mlflow_version else ""


# ------------------------------------------------------------------ Releases page
@dataclass(frozen=True)
class HistoryRow:
    model: str
    canary_version: int
    stable_version: int
    mlflow_version: str
    started_by: str
    started_at: str
    outcome: str
    reason: str
    mttr: str
    duration: str
    detail_url: str
    run_url: str
    mlflow_version_url: str
    mlflow_run_url: str
    lineage_url: str


@dataclass(frozen=True)
class ModelRow:
    model: str
    stable: str
    stable_sha256: str
    canary: str
    canary_sha256: str
    weight: str
    revision: str
    since: str
    running: str
    running_url: str
    history: tuple[HistoryRow, ...] = ()


def exposure(r: ReleaseRecord) -> str:
    """Whether users saw the candidate: "0 users exposed" for a release that ended (or still is) in shadow."""
    if r.users_exposed:
        return "users exposed" if r.shadow else ""
    detected = f", caught after {seconds(r.detection_s)}" if r.detection_s is not None else ""
    return f"0 users exposed{detected}"


def history_row(r: ReleaseRecord, links: Links) -> HistoryRow:
    outcome = r.phase if r.ended_at is not None else f"running: {r.phase}"
    if r.shadow and not r.users_exposed:
        outcome += f" in shadow ({exposure(r)})"
    return HistoryRow(
        model=r.model, canary_version=r.canary_version, stable_version=r.stable_version,
        mlflow_version=r.mlflow_version, started_by=r.started_by, started_at=when(r.started_at),
        outcome=outcome, reason=r.reason, mttr=seconds(r.mttr_s) if r.mttr_s is not None else "",
        duration=seconds(r.duration_s) if r.duration_s is not None else "",
        detail_url=links.detail(r.model, r.canary_version), run_url=links.airflow_run(r.dag_id, r.run_id),
        mlflow_version_url=links.mlflow_version(r.model, r.mlflow_version),
        mlflow_run_url=links.mlflow_run(r.mlflow_run_id), lineage_url=links.lineage(r.model, r.mlflow_version))


def step_text(r: ReleaseRecord) -> str:
    if r.phase == "shadow" or (r.phase == "waiting_approval" and r.approval_for == "shadow"):
        return f"{r.phase}: answering mirrored requests only, 0 users exposed"
    total = len(r.steps)
    step = f"step {r.step_index + 1} of {total}" if total and r.step_index >= 0 else "starting"
    return f"{r.phase}, {step} at {r.weight:.0%} canary"


def model_row(model: str, routes: Routes | None, releases: Sequence[ReleaseRecord], links: Links) -> ModelRow:
    """One model on the Releases page: what serves now, the running release, the history."""
    running = next((r for r in releases if r.ended_at is None), None)
    since = ""
    if routes is not None:
        promoted = next((r for r in releases if r.phase == "promoted" and r.canary_version == routes.stable.version),
                        None)
        since = when(promoted.ended_at) if promoted is not None else routes.updated_at
    canary = routes.canary if routes is not None else None
    return ModelRow(
        model=model, stable=f"v{routes.stable.version}" if routes else "none",
        stable_sha256=routes.stable.sha256 if routes else "",
        canary=f"v{canary.version}" if canary else "none", canary_sha256=canary.sha256 if canary else "",
        weight=f"{routes.canary_weight:.0%}" if routes and canary else "0%",
        revision=str(routes.revision) if routes else "", since=since,
        running=f"v{running.canary_version}: {step_text(running)}" if running else "",
        running_url=links.detail(model, running.canary_version) if running else "",
        history=tuple(history_row(r, links) for r in releases))


def releases_page(routes: Mapping[str, Routes | None], releases: Mapping[str, Sequence[ReleaseRecord]],
                  links: Links) -> list[ModelRow]:
    """Every model that has routes or releases, by name."""
    names = sorted(set(routes) | set(releases))
    return [model_row(m, routes.get(m), releases.get(m, ()), links) for m in names]


# ------------------------------------------------------------------ release detail
@dataclass(frozen=True)
class TimelineRow:
    at: str
    source: str
    target: str
    reason: str


@dataclass(frozen=True)
class GateCell:
    name: str
    canary: str
    stable: str
    threshold: str
    verdict: str
    detail: str


@dataclass(frozen=True)
class WindowRow:
    index: int
    span: str
    weight: str
    verdict: str
    requests: str
    incident: str
    gates: tuple[GateCell, ...]


@dataclass(frozen=True)
class ShadowView:
    """The shadow phase on the detail page: what was mirrored, the divergence figures, the verdicts."""

    windows: int
    mirrored: str
    dropped: str
    exposure: str
    gates: tuple[GateCell, ...]
    verdict: str


def shadow_view(r: ReleaseRecord) -> ShadowView | None:
    """Totals over the shadow windows and the last shadow window's gates (None: no shadow phase)."""
    windows = [w for w in r.windows if w.shadow]
    if not r.shadow:
        return None
    last = windows[-1] if windows else None
    cells = tuple(GateCell(g.name, number(g.canary), number(g.stable), number(g.threshold), g.verdict, g.detail)
                  for g in (last.gates if last is not None else ()))
    return ShadowView(len(windows), number(sum(w.mirrored or 0.0 for w in windows)),
                      number(sum(w.dropped or 0.0 for w in windows)), exposure(r) or "users exposed", cells,
                      last.verdict if last is not None else "no shadow window yet")


@dataclass(frozen=True)
class Detail:
    record: ReleaseRecord
    title: str
    summary: str
    timeline: tuple[TimelineRow, ...]
    windows: tuple[WindowRow, ...]
    charts: tuple[str, ...]
    mttr: str
    mttr_how: str
    contract: str
    contract_url: str
    actions: tuple[str, ...]
    history: HistoryRow
    controls: tuple[TimelineRow, ...] = field(default=())
    shadow: ShadowView | None = None
    gates: str = ""


def gates_text(gates: Sequence[str]) -> str:
    """Which canary gates judged the release, and why the action-rate gate is absent when it is."""
    if not gates:
        return ""
    text = "canary gates: " + ", ".join(gates)
    if "ctr" not in gates:
        text += (" — operational gates only: the model declares no fast outcome action the CTR gate counts "
                 "(a delayed label, or other actions), or its spec's canary.gates leaves it out")
    return text


def _window_row(i: int, w: Window) -> WindowRow:
    span = f"{datetime.fromtimestamp(w.start, UTC):%H:%M:%S}–{datetime.fromtimestamp(w.end, UTC):%H:%M:%S}"
    cells = tuple(GateCell(g.name, number(g.canary), number(g.stable), number(g.threshold), g.verdict, g.detail)
                  for g in w.gates)
    return WindowRow(i + 1, span, f"{w.weight:.0%}", w.verdict,
                     f"{number(w.canary_requests)} / {number(w.stable_requests)}", w.incident, cells)


def charts(windows: Sequence[Window]) -> tuple[str, ...]:
    """One chart per gate: canary and stable value per window (and the threshold, dashed)."""
    labels = [f"{w.weight:.0%}" for w in windows]
    out = []
    shadow = any(w.shadow for w in windows)
    for name, title in {**CHARTS, **(SHADOW_CHARTS if shadow else {})}.items():
        rows = [w.gate(name) for w in windows]
        series = [Series("canary", tuple(g.canary if g else None for g in rows), CANARY_COLOR),
                  Series("stable", tuple(g.stable if g else None for g in rows), STABLE_COLOR)]
        if any(g is not None and g.threshold is not None for g in rows):
            series.append(Series("threshold", tuple(g.threshold if g else None for g in rows), THRESHOLD_COLOR,
                                 dashed=True))
        out.append(line_chart(title, series, labels))
    return tuple(out)


def mttr_text(status: CanaryStatus | None, r: ReleaseRecord) -> tuple[str, str]:
    """The MTTR and how it was measured (from the status's clocks)."""
    if r.mttr_s is None:
        return "n/a", "no rollback: MTTR is measured only when a release rolls back"
    how = "from the start of the first failing analysis window to the moment every gateway applied 0 % canary"
    if status is not None and status.aborted:
        how = "from the abort request to the moment every gateway applied 0 % canary"
    if status is not None and status.rollback_applied_at is not None:
        start = status.first_failing_window_start if not status.aborted else status.rollback_requested_at
        how += f" ({when(start)} → {when(status.rollback_applied_at)})"
    return seconds(r.mttr_s), how


def available_actions(r: ReleaseRecord) -> tuple[str, ...]:
    """The buttons the release's phase allows (approve / reject only while it waits for approval)."""
    if r.ended_at is not None or r.stable_version == 0:
        return ()
    acts = [a for a, phases in ACTIONS_WHILE.items() if r.phase in phases]
    if r.phase == "waiting_approval":
        acts = ["approve", "reject", *acts]
    return tuple(acts)


def _pause_hint(status: CanaryStatus | None) -> str:
    """What a paused release waits for (see :func:`modelops.canary.machine.resumes_by_itself`)."""
    from modelops.canary.machine import resumes_by_itself, waits_for_person
    from modelops.canary.report import RESUMES_BY_ITSELF, WAITS_FOR_PERSON

    if resumes_by_itself(status):
        return f" — {RESUMES_BY_ITSELF}"
    if waits_for_person(status):
        return f" — {WAITS_FOR_PERSON}: Resume goes on, Abort rolls back"
    return ""


def detail(r: ReleaseRecord, status: CanaryStatus | None, links: Links, contract: Mapping[str, str]) -> Detail:
    """The release detail page: timeline, window table, charts, contract result, MTTR, actions."""
    timeline = tuple(TimelineRow(when(t.at), t.source.value, t.target.value, t.reason)
                     for t in (status.transitions if status is not None else ()))
    controls = tuple(TimelineRow(when(c.applied_at), c.action, c.by, f"requested {when(c.requested_at)}"
                                 + (f": {c.reason}" if c.reason else "")) for c in r.controls)
    mttr, how = mttr_text(status, r)
    stable = f"v{r.stable_version}" if r.stable_version else "none (first release)"
    return Detail(
        record=r, title=f"{r.model} v{r.canary_version} (stable {stable})",
        summary=f"{r.phase} at {r.weight:.0%} canary; {r.analyses} analyses, {r.failed_checks} failed"
                + (f"; {exposure(r)}" if exposure(r) else "") + (f"; {r.reason}" if r.reason else "")
                + _pause_hint(status),
        timeline=timeline, windows=tuple(_window_row(i, w) for i, w in enumerate(r.windows)),
        charts=charts(r.windows), mttr=mttr, mttr_how=how,
        contract=contract.get("result", "n/a"), contract_url=contract.get("url", ""),
        actions=available_actions(r), history=history_row(r, links), controls=controls, shadow=shadow_view(r),
        gates=gates_text(r.gates))


# ------------------------------------------------------------------ lineage
@dataclass(frozen=True)
class Lineage:
    model: str
    mlflow_version: str
    stage: str
    aliases: str
    triton_version: str
    sha256: str
    run_id: str
    run_url: str
    version_url: str
    data_range: str
    contract: str
    contract_url: str
    model_info: str
    releases: tuple[HistoryRow, ...]
    drift: str
    drift_report: str
    ctr_by_day: tuple[tuple[str, str, str, str], ...]
    chart: str
    outcome_by_day: tuple[tuple[str, str, str], ...] = ()


def outcome_days(tags: Mapping[str, str]) -> tuple[tuple[str, str, str], ...]:
    """(day, label coverage, realized performance) from the ``modelops.outcome.<day>`` tags of the outcome job."""
    rows = []
    for key in sorted(k for k in tags if k.startswith("modelops.outcome.")):
        pairs = dict(part.partition("=")[::2] for part in tags[key].split())
        coverage = pairs.pop("coverage", "")
        rows.append((key[len("modelops.outcome."):], coverage, ", ".join(f"{k} {v}" for k, v in pairs.items())))
    return tuple(rows)


def lineage(model: str, version: str, stage: str, aliases: Sequence[str], run_id: str,
            tags: Mapping[str, str], model_info: str, releases: Sequence[ReleaseRecord],
            drift: Mapping[str, str], links: Links) -> Lineage:
    """The per-version lineage page from the MLflow version's facts and the release records."""
    days = ctr_days(tags)
    chart = line_chart("CTR / CVR by day", [
        Series("CTR", tuple(c for _, c, _, _ in days), CANARY_COLOR),
        Series("CVR", tuple(v for _, _, v, _ in days), STABLE_COLOR)], [d[5:] for d, _, _, _ in days])
    start, end = tags.get("modelops.data_start", ""), tags.get("modelops.data_end", "")
    return Lineage(
        model=model, mlflow_version=version, stage=stage, aliases=", ".join(aliases) or "none",
        triton_version=tags.get("modelops.triton_version", "not published"), sha256=tags.get("modelops.sha256", ""),
        run_id=run_id, run_url=links.mlflow_run(run_id), version_url=links.mlflow_version(model, version),
        data_range=f"{start} … {end}" if start or end else "unknown",
        contract=tags.get("modelops.contract_result") or tags.get("modelops.contract_passed", "not checked"),
        contract_url=tags.get("modelops.contract_result", ""), model_info=model_info,
        releases=tuple(history_row(r, links) for r in releases if r.mlflow_version == version),
        drift=drift.get("verdict", "no nightly drift run yet"), drift_report=drift.get("report", ""),
        ctr_by_day=tuple((d, number(c), number(v), n) for d, c, v, n in days), chart=chart,
        outcome_by_day=outcome_days(tags))
