"""The release record: what a release writes for the cockpit beside its checkpoint (pure).

One document per release of a canary version, ``canary/<model>/v<N>.release.json``
(``schema_version`` 1): the release's identity and links (Airflow run, MLflow versions),
its current phase, every analysis window with each gate's canary value, stable value,
threshold and verdict, and the control requests applied (who asked, when, when applied).
Its summary (the same without the windows) is kept in the model's release index,
``cockpit/<model>.json``, newest first, which is all the Releases page reads.

The canary task is the only writer of both (a release's tasks run one after another).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from modelops.canary.gates import Analysis, bucket_quantile, p99_ms
from modelops.canary.measurement import Measurement
from modelops.canary.status import CanaryStatus, Phase
from modelops.errors import ContractError

RECORD_SCHEMA_VERSION = 1
INDEX_PREFIX = "cockpit/"
INDEX_LIMIT = 200  # releases kept per model in the index (the records themselves stay)


def record_key(model: str, canary_version: int) -> str:
    """Object-store key of the release record of a canary version."""
    return f"canary/{model}/v{canary_version}.release.json"


def index_key(model: str) -> str:
    """Object-store key of a model's release index."""
    return f"{INDEX_PREFIX}{model}.json"


def _num(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


@dataclass(frozen=True)
class GateRow:
    """One gate in one window: the canary's value, the stable version's, the threshold, the verdict."""

    name: str
    canary: float | None
    stable: float | None
    threshold: float | None
    verdict: str
    detail: str = ""


@dataclass(frozen=True)
class Window:
    """One analysis window at a canary weight."""

    start: float
    end: float
    weight: float
    verdict: str
    gates: tuple[GateRow, ...]
    incident: str = ""
    canary_requests: float | None = None
    stable_requests: float | None = None
    mirrored: float | None = None
    """Shadow windows only: requests mirrored to the candidate, and those dropped (in-flight budget spent)."""
    dropped: float | None = None

    @property
    def shadow(self) -> bool:
        return self.mirrored is not None

    def gate(self, name: str) -> GateRow | None:
        return next((g for g in self.gates if g.name == name), None)


@dataclass(frozen=True)
class Control:
    """A person's control request (pause, resume, abort, approve, reject) as the release applied it."""

    action: str
    by: str
    requested_at: float
    applied_at: float
    reason: str = ""


@dataclass(frozen=True)
class ReleaseRecord:
    """A release as the cockpit shows it. Times are epoch seconds; ``ended_at`` is None while it runs.

    ``stable_version`` is 0 for a first release (nothing to compare with, routed 100 % at once).
    """

    model: str
    canary_version: int
    stable_version: int
    canary_sha256: str
    stable_sha256: str
    mlflow_version: str
    stable_mlflow_version: str
    started_by: str
    started_at: float
    dag_id: str
    run_id: str
    phase: str
    weight: float
    mlflow_run_id: str = ""
    step_index: int = -1
    steps: tuple[float, ...] = ()
    reason: str = ""
    mttr_s: float | None = None
    updated_at: float = 0.0
    ended_at: float | None = None
    analyses: int = 0
    failed_checks: int = 0
    windows: tuple[Window, ...] = ()
    controls: tuple[Control, ...] = ()
    schema_version: int = RECORD_SCHEMA_VERSION
    shadow: bool = False
    """The release began with a shadow phase."""
    users_exposed: bool = True
    """Whether any user was answered by the candidate (False: it ended in shadow, or waits there)."""
    detection_s: float | None = None
    """Rolled back in shadow: from the release's start to the rollback decision."""
    approval_for: str = ""
    gates: tuple[str, ...] = ()
    """The canary gates the release ran (its spec's ``gates``; empty in records written before they were chosen)."""

    @property
    def duration_s(self) -> float | None:
        return None if self.ended_at is None else max(0.0, self.ended_at - self.started_at)

    def to_dict(self, *, windows: bool = True) -> dict[str, Any]:
        raw = dataclasses.asdict(self)
        raw["steps"] = list(self.steps)
        raw["gates"] = list(self.gates)
        if not windows:
            raw.pop("windows")
        return raw

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ReleaseRecord:
        if raw.get("schema_version") != RECORD_SCHEMA_VERSION:
            raise ContractError(f"release record: schema_version={raw.get('schema_version')!r} is not supported "
                                f"(this code reads {RECORD_SCHEMA_VERSION})")
        try:
            values = dict(raw)
            values["steps"] = tuple(float(s) for s in raw.get("steps", ()))
            values["gates"] = tuple(str(g) for g in raw.get("gates", ()))
            values["windows"] = tuple(
                Window(**{**w, "gates": tuple(GateRow(**g) for g in w["gates"])}) for w in raw.get("windows", ()))
            values["controls"] = tuple(Control(**c) for c in raw.get("controls", ()))
            return cls(**values)
        except (KeyError, TypeError, ValueError) as exc:
            raise ContractError(f"release record: unreadable document ({type(exc).__name__}: {exc})") from exc


def window_of(analysis: Analysis, weight: float, measurement: Measurement) -> Window:
    """The window record of one analysis: each gate with the stable version's value beside the canary's.

    The CTR gate compares with the stable CTR itself (a one-sided test), so its threshold is none.
    """
    stable = measurement.stable
    shadow = measurement.shadow
    stable_call = math.nan if shadow is None else bucket_quantile(0.99, shadow.stable_buckets) * 1e3
    stable_values = {"error_rate": stable.error_rate, "p99_ms": p99_ms(stable), "score_std": stable.score_std,
                     "shadow_error_rate": stable.error_rate, "shadow_p99_ms": stable_call}
    rows = []
    for g in analysis.gates:
        if g.name == "ctr":
            rows.append(GateRow(g.name, _num(g.value), _num(g.threshold), None, g.verdict.value, g.detail))
        else:
            rows.append(GateRow(g.name, _num(g.value), _num(stable_values.get(g.name)), _num(g.threshold),
                                g.verdict.value, g.detail))
    return Window(start=analysis.window_start, end=analysis.window_end, weight=float(weight),
                  verdict=analysis.verdict.value, gates=tuple(rows), incident=analysis.incident,
                  canary_requests=_num(analysis.canary_requests), stable_requests=_num(analysis.stable_requests),
                  mirrored=None if shadow is None else _num(shadow.mirrored) or 0.0,
                  dropped=None if shadow is None else _num(shadow.dropped) or 0.0)


@dataclass(frozen=True)
class ReleaseRef:
    """What a release is, independent of how far it got (the operator knows it from its XComs)."""

    model: str
    canary_version: int
    canary_sha256: str
    mlflow_version: str
    started_by: str
    dag_id: str
    run_id: str
    steps: tuple[float, ...] = ()
    stable_version: int = 0
    stable_sha256: str = ""
    stable_mlflow_version: str = ""
    mlflow_run_id: str = ""
    gates: tuple[str, ...] = ()


def updated(previous: ReleaseRecord | None, ref: ReleaseRef, status: CanaryStatus,
            window: Window | None = None, control: Control | None = None) -> ReleaseRecord:
    """The record after ``status``, with ``window`` / ``control`` appended.

    A previous record of an earlier release of the same version (another ``started_at``) is
    replaced, not extended. A window already recorded (same end) is not added twice.
    """
    same = previous is not None and previous.started_at == status.started_at and previous.run_id == ref.run_id
    windows = previous.windows if same and previous is not None else ()
    controls = previous.controls if same and previous is not None else ()
    if window is not None and all(w.end != window.end for w in windows):
        windows = (*windows, window)
    if control is not None:
        controls = (*controls, control)
    terminal = status.phase.terminal
    return ReleaseRecord(
        model=ref.model, canary_version=ref.canary_version, stable_version=status.stable_version,
        canary_sha256=ref.canary_sha256, stable_sha256=ref.stable_sha256, mlflow_version=ref.mlflow_version,
        stable_mlflow_version=ref.stable_mlflow_version, started_by=ref.started_by, started_at=status.started_at,
        dag_id=ref.dag_id, run_id=ref.run_id, phase=status.phase.value, weight=status.weight,
        mlflow_run_id=ref.mlflow_run_id, step_index=status.step_index, steps=ref.steps, reason=status.reason,
        mttr_s=status.mttr_s,
        updated_at=status.updated_at, ended_at=status.updated_at if terminal else None,
        analyses=status.analyses, failed_checks=status.failed_checks, windows=windows, controls=controls,
        shadow=any(t.target is Phase.SHADOW for t in status.transitions), users_exposed=status.users_exposed,
        detection_s=status.detection_s, approval_for=status.approval_for, gates=ref.gates)


def first_release(ref: ReleaseRef, at: float, reason: str) -> ReleaseRecord:
    """The record of a release with nothing to compare with: routed 100 % and promoted at once."""
    return ReleaseRecord(
        model=ref.model, canary_version=ref.canary_version, stable_version=0, canary_sha256=ref.canary_sha256,
        stable_sha256="", mlflow_version=ref.mlflow_version, stable_mlflow_version="", started_by=ref.started_by,
        started_at=at, dag_id=ref.dag_id, run_id=ref.run_id, phase="promoted", weight=1.0, reason=reason,
        mlflow_run_id=ref.mlflow_run_id,
        updated_at=at, ended_at=at)


def index_with(rows: Sequence[Mapping[str, Any]], record: ReleaseRecord) -> list[dict[str, Any]]:
    """The model's index rows with ``record``'s summary in place of its earlier one, newest first."""
    summary = record.to_dict(windows=False)
    kept = [dict(r) for r in rows if not (r.get("canary_version") == record.canary_version
                                          and r.get("started_at") == record.started_at)]
    return sorted([summary, *kept], key=lambda r: -float(r.get("started_at", 0.0)))[:INDEX_LIMIT]


def index_document(model: str, rows: Sequence[Mapping[str, Any]]) -> bytes:
    return json.dumps({"schema_version": RECORD_SCHEMA_VERSION, "model": model, "releases": list(rows)},
                      sort_keys=True).encode("utf-8")


def index_rows(body: bytes) -> list[ReleaseRecord]:
    """The release summaries of an index document, newest first."""
    raw = json.loads(body)
    if raw.get("schema_version") != RECORD_SCHEMA_VERSION:
        raise ContractError(f"release index: schema_version={raw.get('schema_version')!r} is not supported")
    return [ReleaseRecord.from_dict(r) for r in raw.get("releases", ())]
