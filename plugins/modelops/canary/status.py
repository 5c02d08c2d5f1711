"""The canary status record: persisted at every transition.

Frozen and JSON round-trips with ``schema_version`` 1, so a restarted scheduler,
triggerer or worker resumes a release from the stored status. Times are epoch seconds.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from modelops.canary.gates import Analysis, Baseline
from modelops.canary.sequential import ErrorEvidence
from modelops.canary.shadow import ShadowEvidence
from modelops.errors import ContractError

STATUS_SCHEMA_VERSION = 1


class Phase(enum.StrEnum):
    INITIALIZING = "initializing"
    SHADOW = "shadow"
    """Users are answered by the stable version; the candidate answers mirrored requests only."""
    PROGRESSING = "progressing"
    WAITING_APPROVAL = "waiting_approval"
    PAUSED = "paused"
    PROMOTING = "promoting"
    PROMOTED = "promoted"
    ROLLING_BACK = "rolling_back"
    ROLLED_BACK = "rolled_back"
    ABORTED = "aborted"

    @property
    def terminal(self) -> bool:
        return self in {Phase.PROMOTED, Phase.ROLLED_BACK, Phase.ABORTED}


@dataclass(frozen=True)
class Transition:
    """A phase change: when, from, to and why."""

    at: float
    source: Phase
    target: Phase
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"at": float(self.at), "from": self.source.value, "to": self.target.value, "reason": self.reason}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Transition:
        return cls(float(raw["at"]), Phase(raw["from"]), Phase(raw["to"]), str(raw.get("reason", "")))


def _opt(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


@dataclass(frozen=True)
class CanaryStatus:
    """Where a release stands.

    Attributes:
        model: model name; stable_version / canary_version: Triton versions.
        phase: the state; weight: canary weight the routes should carry (0–1).
        step_index: index into ``spec.steps`` of the current weight.
        passed_at_step: passed analyses at the current step.
        failed_checks: failed analyses over the whole release (rollback at the limit).
        inconclusive_count: consecutive inconclusive analyses (pause at the limit).
        analyses: analyses taken into account.
        last_analysis: the latest analysis (per gate: value, threshold, verdict).
        baseline: the stable version's own health, for telling an incident from a bad canary.
        started_at: start of the release; updated_at: time of the latest event.
        transitions: every phase change with its time and reason.
        reason: why the release is in its phase (pause, rollback, abort reasons).
        approved: a person approved the 100 % step (possibly ahead of time).
        aborted: the rollback was asked for by a person (ends in ``aborted``).
        paused_from: the phase a pause interrupted, resumed into.
        first_failing_window_start: start of the earliest window of the current run of
            failed analyses (a passed analysis ends the run); the MTTR clock.
        rollback_requested_at: when the rollback decision was taken.
        rollback_applied_at: when every gateway reported 0 % canary.
        mttr_s: rollback_applied_at − first_failing_window_start (abort: − the abort time).
        last_window_end: end of the latest window consumed; an older or equal window is
            ignored, so a replayed measurement after a restart never counts twice.
        error_evidence: both versions' requests and errors over the windows analysed at the
            current step (the sequential error test's evidence; reset at each step; in the shadow
            phase, the candidate's mirrored calls beside the stable's requests).
        shadow_evidence: compared and disagreeing answers over the shadow phase (the divergence test).
        approval_for: what a ``waiting_approval`` release waits for: ``"shadow"`` (its divergence
            at the end of the shadow phase) or ``"promotion"`` (the 100 % step).
        exposed_at: when users were first routed to the candidate (its first step); None while none
            has been: a release rolled back in the shadow phase exposed no user.
    """

    model: str
    stable_version: int
    canary_version: int
    phase: Phase = Phase.INITIALIZING
    weight: float = 0.0
    step_index: int = -1
    passed_at_step: int = 0
    failed_checks: int = 0
    inconclusive_count: int = 0
    analyses: int = 0
    last_analysis: Analysis | None = None
    baseline: Baseline | None = None
    started_at: float = 0.0
    updated_at: float = 0.0
    transitions: tuple[Transition, ...] = ()
    reason: str = ""
    approved: bool = False
    aborted: bool = False
    paused_from: Phase | None = None
    first_failing_window_start: float | None = None
    rollback_requested_at: float | None = None
    rollback_applied_at: float | None = None
    mttr_s: float | None = None
    last_window_end: float | None = None
    error_evidence: ErrorEvidence = field(default_factory=ErrorEvidence)
    shadow_evidence: ShadowEvidence = field(default_factory=ShadowEvidence)
    approval_for: str = ""
    exposed_at: float | None = None
    schema_version: int = STATUS_SCHEMA_VERSION

    @property
    def users_exposed(self) -> bool:
        """Whether any user was ever answered by the candidate (False for a release that ended in shadow)."""
        return self.exposed_at is not None

    @property
    def detection_s(self) -> float | None:
        """A release rolled back before any user saw the candidate: its start to the rollback decision."""
        if self.exposed_at is not None or self.rollback_requested_at is None or self.aborted:
            return None
        return max(0.0, self.rollback_requested_at - self.started_at)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version, "model": self.model, "stable_version": self.stable_version,
            "canary_version": self.canary_version, "phase": self.phase.value, "weight": float(self.weight),
            "step_index": self.step_index, "passed_at_step": self.passed_at_step,
            "failed_checks": self.failed_checks, "inconclusive_count": self.inconclusive_count,
            "analyses": self.analyses,
            "last_analysis": self.last_analysis.to_dict() if self.last_analysis else None,
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "started_at": float(self.started_at), "updated_at": float(self.updated_at),
            "transitions": [t.to_dict() for t in self.transitions], "reason": self.reason,
            "approved": self.approved, "aborted": self.aborted,
            "paused_from": self.paused_from.value if self.paused_from else None,
            "first_failing_window_start": _opt(self.first_failing_window_start),
            "rollback_requested_at": _opt(self.rollback_requested_at),
            "rollback_applied_at": _opt(self.rollback_applied_at), "mttr_s": _opt(self.mttr_s),
            "last_window_end": _opt(self.last_window_end), "error_evidence": self.error_evidence.to_dict(),
            "shadow_evidence": self.shadow_evidence.to_dict(), "approval_for": self.approval_for,
            "exposed_at": _opt(self.exposed_at),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> CanaryStatus:
        version = raw.get("schema_version")
        if version != STATUS_SCHEMA_VERSION:
            raise ContractError(f"canary status: schema_version={version!r} is not supported "
                                f"(this code reads {STATUS_SCHEMA_VERSION})")

        def opt(key: str) -> float | None:
            value = raw.get(key)
            return None if value is None else float(value)

        try:
            return cls(
                model=str(raw["model"]), stable_version=int(raw["stable_version"]),
                canary_version=int(raw["canary_version"]), phase=Phase(raw["phase"]), weight=float(raw["weight"]),
                step_index=int(raw["step_index"]), passed_at_step=int(raw["passed_at_step"]),
                failed_checks=int(raw["failed_checks"]), inconclusive_count=int(raw["inconclusive_count"]),
                analyses=int(raw["analyses"]),
                last_analysis=Analysis.from_dict(raw["last_analysis"]) if raw.get("last_analysis") else None,
                baseline=Baseline.from_dict(raw["baseline"]) if raw.get("baseline") else None,
                started_at=float(raw["started_at"]), updated_at=float(raw["updated_at"]),
                transitions=tuple(Transition.from_dict(t) for t in raw["transitions"]),
                reason=str(raw.get("reason", "")), approved=bool(raw.get("approved", False)),
                aborted=bool(raw.get("aborted", False)),
                paused_from=Phase(raw["paused_from"]) if raw.get("paused_from") else None,
                first_failing_window_start=opt("first_failing_window_start"),
                rollback_requested_at=opt("rollback_requested_at"), rollback_applied_at=opt("rollback_applied_at"),
                mttr_s=opt("mttr_s"), last_window_end=opt("last_window_end"),
                error_evidence=ErrorEvidence.from_dict(raw.get("error_evidence")),
                shadow_evidence=ShadowEvidence.from_dict(raw.get("shadow_evidence")),
                approval_for=str(raw.get("approval_for", "")),
                # a status written before the shadow phase existed: its canary had users from its start
                exposed_at=opt("exposed_at") if "exposed_at" in raw else (
                    float(raw["started_at"]) if raw.get("step_index", -1) >= 0 else None),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ContractError(f"canary status: unreadable document ({type(exc).__name__}: {exc})") from exc

    @classmethod
    def from_json(cls, text: str) -> CanaryStatus:
        return cls.from_dict(json.loads(text))
