"""The error gate as a sequential test: evidence accumulates over the windows of one step.

Judging each window alone either lets a canary that fails 5 % of its requests through now
and then (a window of 150 canary requests shows fewer than 3 errors in 2 % of windows,
and a release passes several steps) or needs windows sized by hand for each traffic
rate. Instead, the canary's errors at a step are tested with Wald's sequential
probability ratio test (SPRT) over every window analysed at that step so far:

* acceptable rate ``p0 = max(stable rate, error_rate_floor)`` (the canary is no worse than
  the stable version over the same windows), bad rate ``p1 = max(error_ratio × p0,
  error_rate_limit)``;
* log-likelihood ratio of the canary's ``e`` errors in ``n`` requests,
  ``e·ln(p1/p0) + (n − e)·ln((1 − p1)/(1 − p0))``;
* at or above ``ln((1 − false_promotion_rate)/false_rollback_rate)`` the canary is bad
  (failed: roll back), at or below ``ln(false_promotion_rate/(1 − false_rollback_rate))``
  it is good (passed), in between the step waits for more traffic (pending). (H0 is "the
  canary fails ``p0``": rejecting a true H0 is a false rollback, Wald's α; accepting a
  false one is a false promotion, his β.)

Wald's bounds keep the chance of passing a canary failing ``p1`` of its requests at most
``false_promotion_rate`` and of failing one at ``p0`` at most ``false_rollback_rate``, at
any traffic rate: thin traffic only takes more windows. Pure functions; the evidence is
kept in the canary status and reset when the step changes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from modelops.canary.measurement import Measurement
from modelops.canary.spec import CanarySpec


@dataclass(frozen=True)
class ErrorEvidence:
    """Requests and errors of both versions summed over the windows analysed at the current step."""

    canary_requests: float = 0.0
    canary_errors: float = 0.0
    stable_requests: float = 0.0
    stable_errors: float = 0.0

    def plus(self, m: Measurement) -> ErrorEvidence:
        """This evidence and the window ``m`` (a window with an unmeasured count adds nothing)."""
        counts = (m.canary.requests, m.canary.errors, m.stable.requests, m.stable.errors)
        if any(math.isnan(c) for c in counts):
            return self
        return ErrorEvidence(self.canary_requests + counts[0], self.canary_errors + counts[1],
                             self.stable_requests + counts[2], self.stable_errors + counts[3])

    def plus_counts(self, other: ErrorEvidence) -> ErrorEvidence:
        """This evidence and ``other``'s counts (one with an unmeasured count adds nothing)."""
        counts = (other.canary_requests, other.canary_errors, other.stable_requests, other.stable_errors)
        if any(math.isnan(c) for c in counts):
            return self
        return ErrorEvidence(self.canary_requests + counts[0], self.canary_errors + counts[1],
                             self.stable_requests + counts[2], self.stable_errors + counts[3])

    def to_dict(self) -> dict[str, float]:
        return {"canary_requests": self.canary_requests, "canary_errors": self.canary_errors,
                "stable_requests": self.stable_requests, "stable_errors": self.stable_errors}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> ErrorEvidence:
        raw = raw or {}
        return cls(*(float(raw.get(k, 0.0)) for k in ("canary_requests", "canary_errors", "stable_requests",
                                                        "stable_errors")))


@dataclass(frozen=True)
class SprtDecision:
    """The test's state: ``decision`` is ``"bad"``, ``"good"`` or ``"pending"``."""

    decision: str
    llr: float
    reject_at: float
    accept_at: float
    p0: float
    p1: float

    def detail(self, evidence: ErrorEvidence) -> str:
        return (f"SPRT over the step: canary {evidence.canary_errors:.0f}/{evidence.canary_requests:.0f}, "
                f"stable {evidence.stable_errors:.0f}/{evidence.stable_requests:.0f}; p0={self.p0:.4f} "
                f"p1={self.p1:.4f} llr={self.llr:.2f} in ({self.accept_at:.2f}, {self.reject_at:.2f})")


def rates(spec: CanarySpec, evidence: ErrorEvidence) -> tuple[float, float]:
    """(p0, p1): the acceptable and the bad canary error rate given the stable version's rate."""
    stable = evidence.stable_errors / evidence.stable_requests if evidence.stable_requests > 0 else 0.0
    p0 = min(max(stable, spec.error_rate_floor), 0.5)
    p1 = min(max(spec.error_rate_limit, spec.error_ratio * p0), 0.999)
    if p1 <= p0:  # a spec whose limit is below its floor: keep an indifference zone
        p1 = min(2.0 * p0, 0.999)
    return p0, p1


def bounds(spec: CanarySpec) -> tuple[float, float]:
    """(accept_at, reject_at) on the log-likelihood ratio (Wald's approximations)."""
    alpha = spec.false_rollback_rate  # P(say bad | the canary fails p0): Wald's type I error
    beta = spec.false_promotion_rate  # P(say good | the canary fails p1): his type II error
    return math.log(beta / (1.0 - alpha)), math.log((1.0 - beta) / alpha)


def sprt(spec: CanarySpec, evidence: ErrorEvidence) -> SprtDecision:
    """Decide on the accumulated evidence: bad, good, or pending (more traffic needed)."""
    p0, p1 = rates(spec, evidence)
    errors = min(evidence.canary_errors, evidence.canary_requests)
    llr = errors * math.log(p1 / p0) + (evidence.canary_requests - errors) * math.log((1.0 - p1) / (1.0 - p0))
    accept_at, reject_at = bounds(spec)
    decision = "bad" if llr >= reject_at else "good" if llr <= accept_at else "pending"
    return SprtDecision(decision, llr, reject_at, accept_at, p0, p1)


def requests_to_decide(spec: CanarySpec, error_rate: float, stable_rate: float = 0.0) -> float:
    """Wald's expected number of canary requests before a decision, for a canary failing ``error_rate``.

    ``inf`` when the drift is zero (a canary right between p0 and p1 takes long to decide).
    """
    p0, p1 = rates(spec, ErrorEvidence(1.0, 0.0, 1.0, stable_rate))
    up, down = math.log(p1 / p0), math.log((1.0 - p1) / (1.0 - p0))
    drift = error_rate * up + (1.0 - error_rate) * down
    accept_at, reject_at = bounds(spec)
    if abs(drift) < 1e-12:
        return math.inf
    return (reject_at if drift > 0 else accept_at) / drift


def detection_warnings(spec: CanarySpec, requests_per_s: float, error_rate: float | None = None) -> list[str]:
    """Analysed steps where the error test needs many windows to catch a canary failing ``error_rate``.

    The test sums evidence over a step's windows (this module), so
    thin traffic never promotes a bad canary; it only takes longer. A step whose expected
    number of canary requests to decide (Wald's average sample number for ``error_rate``,
    default ``error_rate_limit``) spans more than 5 windows is reported, since the time to
    roll back grows with it. Steps too thin for ``min_requests`` are left to
    :func:`modelops.canary.spec.traffic_warnings`.
    """
    bad = spec.error_rate_limit if error_rate is None else error_rate
    needed = requests_to_decide(spec, bad)
    warnings = []
    for weight in spec.steps[:-1]:
        canary = weight * requests_per_s * spec.interval_s
        if canary >= spec.min_requests and needed > 5 * canary:
            warnings.append(f"step {weight:.0%}: about {canary:.0f} canary requests per {spec.interval_s:g} s window; "
                            f"the error test needs ~{needed:.0f} to decide on a canary failing {bad:.0%} of them "
                            f"({needed / canary:.0f} windows): raise interval_s or the weights to act sooner")
    return warnings
