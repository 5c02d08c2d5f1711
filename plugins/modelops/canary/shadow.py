"""The shadow phase's gates: the candidate's answers judged against the stable's on the same requests (pure).

In the shadow phase no user sees the candidate: the gateway answers every request with the stable
version and then mirrors a share of them to the candidate (:mod:`modelops.gateway.shadow.mirror`),
comparing the two answers. The gates read what the gateway counted over a window
(:class:`~modelops.canary.measurement.ShadowWindow`):

* ``shadow_error_rate``: the candidate's failed mirrored calls, by the error test's sequential test
  (:mod:`modelops.canary.sequential`: p0 = max(stable rate, floor), the stable's rate over the same
  window), evidence summed over the shadow phase;
* ``shadow_p99_ms``: the candidate's Triton call p99 on the mirrored requests against
  max(SLO, ``latency_ratio`` × the stable's call p99 on the same requests);
* ``divergence``: the share of answers that disagree — a ranked request whose top-k order changed
  (the recommender), a row whose predicted class changed (a classifier: argmax of its
  probabilities), a regressor's row whose relative |Δ| exceeds ``shadow_rel_tolerance`` — by a
  sequential test of its own (Wald's SPRT, p0 = ``shadow_disagreement_rate``, p1 =
  ``shadow_disagreement_limit``, the spec's false rates), evidence summed over the shadow phase;
* ``delta_median`` / ``delta_p95``: the median and 95th percentile of |candidate − stable| per
  score over the window (relative |Δ| for a regressor) against their thresholds.

Only this last group can tell a *silently different* candidate — as fast, as error-free, with the
same score spread as the stable, but answering differently (a wrong input order, a feature's sign
flipped) — from a good one; the canary's own gates judge each version alone and pass it. The three
are the *divergence* gates: an intended change of behaviour passes them by its declared thresholds,
or (``shadow_approval``) by a person's approval at the end of the shadow phase.

A window with fewer than ``min_requests`` mirrored answers (or stable requests) leaves every gate
*inconclusive*, never passed or failed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from modelops.canary.gates import Analysis, GateResult, Verdict, bucket_quantile
from modelops.canary.measurement import Buckets, Measurement, ShadowWindow
from modelops.canary.sequential import ErrorEvidence, SprtDecision, bounds, sprt
from modelops.canary.spec import CanarySpec

NAN = math.nan
DIVERGENCE_GATES = frozenset({"divergence", "delta_median", "delta_p95"})
"""The gates an intended change of behaviour may fail (approvable with ``shadow_approval``)."""
DECISIVE_GATES = frozenset({"shadow_error_rate", "divergence"})
"""Sequential tests: a failure is a decision at once (no ``failure_limit`` to wait for)."""
#: The stable rate of an early look is shrunk to (errors + 2) / (requests + 4), as in modelops.canary.early.
_AC_ERRORS, _AC_REQUESTS = 2.0, 4.0


@dataclass(frozen=True)
class ShadowEvidence:
    """Compared and disagreeing answers summed over the shadow phase (the divergence test's evidence).

    ``measure`` names what was compared: ``topk`` (ranked requests), ``class`` (classified rows),
    ``rel`` (a regressor's rows), or ``""`` before anything was.
    """

    compared: float = 0.0
    disagreed: float = 0.0
    measure: str = ""

    def plus(self, spec: CanarySpec, window: ShadowWindow | None) -> ShadowEvidence:
        """This evidence and one window's (a window without comparable answers adds nothing)."""
        if window is None:
            return self
        measure, compared, disagreed = disagreement(spec, window)
        if not measure or compared <= 0:
            return self
        return ShadowEvidence(self.compared + compared, self.disagreed + disagreed, measure)

    def to_dict(self) -> dict[str, Any]:
        return {"compared": self.compared, "disagreed": self.disagreed, "measure": self.measure}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> ShadowEvidence:
        raw = raw or {}
        return cls(float(raw.get("compared", 0.0)), float(raw.get("disagreed", 0.0)), str(raw.get("measure", "")))


def _total(buckets: Buckets) -> float:
    return max((c for _, c in buckets), default=0.0) if buckets else 0.0


def count_above(buckets: Buckets, x: float) -> float:
    """How many observations of a cumulative histogram exceed ``x`` (exact at a bucket bound, else
    interpolated linearly inside the bucket, as :func:`~modelops.canary.gates.bucket_quantile` does)."""
    if not buckets:
        return 0.0
    ordered = sorted(buckets)
    total = ordered[-1][1]
    previous_bound, previous_count = 0.0, 0.0
    for bound, count in ordered:
        if x <= bound:
            if x == bound:
                return max(0.0, total - count)
            if math.isinf(bound):  # above the highest finite bound: the +Inf bucket counts as above
                return max(0.0, total - previous_count)
            below = previous_count + (count - previous_count) * (x - previous_bound) / (bound - previous_bound)
            return max(0.0, total - below)
        previous_bound, previous_count = bound, count
    return 0.0


def disagreement(spec: CanarySpec, window: ShadowWindow) -> tuple[str, float, float]:
    """(measure, compared, disagreeing) of one window: top-k orders, classes, or a regressor's rows."""
    if window.topk_compared > 0:
        return "topk", window.topk_compared, window.topk_changed
    if window.class_compared > 0:
        return "class", window.class_compared, window.class_changed
    rows = _total(window.rel_buckets)
    if rows > 0:
        return "rel", rows, count_above(window.rel_buckets, spec.shadow_rel_tolerance)
    return "", 0.0, 0.0


def disagreement_sprt(spec: CanarySpec, evidence: ShadowEvidence) -> SprtDecision:
    """Wald's SPRT on the disagreeing share: bad at p1 = ``shadow_disagreement_limit``, good at p0."""
    p0, p1 = spec.shadow_disagreement_rate, spec.shadow_disagreement_limit
    k = min(evidence.disagreed, evidence.compared)
    llr = k * math.log(p1 / p0) + (evidence.compared - k) * math.log((1.0 - p1) / (1.0 - p0))
    accept_at, reject_at = bounds(spec)
    decision = "bad" if llr >= reject_at else "good" if llr <= accept_at else "pending"
    return SprtDecision(decision, llr, reject_at, accept_at, p0, p1)


def _thin(spec: CanarySpec, m: Measurement, shadow: ShadowWindow) -> str:
    if math.isnan(shadow.requests) or math.isnan(m.stable.requests):
        return "mirrored or stable requests not measured"
    if shadow.requests < spec.min_requests:
        return f"thin traffic: {shadow.requests:.0f} mirrored answers < {spec.min_requests}"
    if m.stable.requests < spec.min_requests:
        return f"thin traffic: stable {m.stable.requests:.0f} < {spec.min_requests} requests"
    return ""


def shadow_errors(m: Measurement, shadow: ShadowWindow) -> ErrorEvidence:
    """One window as the error test's evidence: the candidate's mirrored calls beside the stable's requests."""
    return ErrorEvidence(shadow.requests, shadow.errors, m.stable.requests, m.stable.errors)


def error_gate(spec: CanarySpec, m: Measurement, shadow: ShadowWindow, thin: str,
               evidence: ErrorEvidence) -> GateResult:
    rate = shadow.errors / shadow.requests if shadow.requests > 0 else NAN
    if thin or math.isnan(m.stable.errors):
        return GateResult("shadow_error_rate", rate, NAN, Verdict.INCONCLUSIVE, thin or "stable errors not measured")
    total = ErrorEvidence(evidence.canary_requests + shadow.requests, evidence.canary_errors + shadow.errors,
                          evidence.stable_requests + m.stable.requests, evidence.stable_errors + m.stable.errors)
    decision = sprt(spec, total)
    verdict = {"bad": Verdict.FAILED, "good": Verdict.PASSED}.get(decision.decision, Verdict.PENDING)
    return GateResult("shadow_error_rate", rate, decision.p0, verdict, decision.detail(total))


def latency_gate(spec: CanarySpec, shadow: ShadowWindow, thin: str) -> GateResult:
    candidate = bucket_quantile(0.99, shadow.candidate_buckets) * 1000.0
    stable = bucket_quantile(0.99, shadow.stable_buckets) * 1000.0
    threshold = spec.slo_p99_ms if math.isnan(stable) else max(spec.slo_p99_ms, spec.latency_ratio * stable)
    if thin or math.isnan(candidate):
        return GateResult("shadow_p99_ms", candidate, threshold, Verdict.INCONCLUSIVE,
                          thin or "the candidate's call latency not measured")
    verdict = Verdict.FAILED if candidate > threshold else Verdict.PASSED
    return GateResult("shadow_p99_ms", candidate, threshold, verdict,
                      f"Triton call p99 on the same requests: stable {stable:.1f} ms")


def divergence_gate(spec: CanarySpec, shadow: ShadowWindow, thin: str, evidence: ShadowEvidence) -> GateResult:
    measure, compared, disagreed = disagreement(spec, shadow)
    share = disagreed / compared if compared > 0 else NAN
    p0 = spec.shadow_disagreement_rate
    if thin or not measure:
        return GateResult("divergence", share, p0, Verdict.INCONCLUSIVE, thin or "no comparable answers")
    total = dataclasses.replace(evidence.plus(spec, shadow), measure=measure)
    decision = disagreement_sprt(spec, total)
    verdict = {"bad": Verdict.FAILED, "good": Verdict.PASSED}.get(decision.decision, Verdict.PENDING)
    what = {"topk": f"requests whose top-{spec.shadow_top_k} order changed", "class": "rows whose class changed",
            "rel": f"rows off by more than {spec.shadow_rel_tolerance:g} relative"}[measure]
    return GateResult("divergence", share, p0, verdict,
                      f"SPRT over the shadow phase: {total.disagreed:.0f}/{total.compared:.0f} {what}; "
                      f"p0={decision.p0:.3f} p1={decision.p1:.3f} llr={decision.llr:.2f} in "
                      f"({decision.accept_at:.2f}, {decision.reject_at:.2f})")


def delta_gates(spec: CanarySpec, shadow: ShadowWindow, thin: str, measure: str) -> tuple[GateResult, GateResult]:
    relative = measure == "rel"
    buckets = shadow.rel_buckets if relative else shadow.abs_buckets
    what = "relative |Δ| per row" if relative else "|Δ| per score"
    out = []
    for name, q, threshold in (("delta_median", 0.5, spec.shadow_max_delta_median),
                               ("delta_p95", 0.95, spec.shadow_max_delta_p95)):
        value = bucket_quantile(q, buckets)
        if thin or math.isnan(value):
            out.append(GateResult(name, value, threshold, Verdict.INCONCLUSIVE, thin or f"{what} not measured"))
            continue
        verdict = Verdict.FAILED if value > threshold else Verdict.PASSED
        out.append(GateResult(name, value, threshold, verdict, f"{what}, {_total(buckets):.0f} values"))
    return out[0], out[1]


def evaluate_shadow(spec: CanarySpec, m: Measurement, errors: ErrorEvidence | None = None,
                    divergence: ShadowEvidence | None = None) -> Analysis:
    """Every shadow gate over one window, combined as :func:`modelops.canary.gates.evaluate` combines its own.

    ``errors`` / ``divergence``: the evidence of the shadow phase's earlier windows.
    """
    shadow = m.shadow
    if m.unreachable or shadow is None:
        reason = ("unreachable: " + ", ".join(m.unreachable)) if m.unreachable else "shadow answers not measured"
        gates = tuple(GateResult(name, NAN, NAN, Verdict.INCONCLUSIVE, reason)
                      for name in ("shadow_error_rate", "shadow_p99_ms", "divergence", "delta_median", "delta_p95"))
        return Analysis(m.window_start, m.window_end, Verdict.INCONCLUSIVE, gates,
                        canary_requests=NAN if shadow is None else shadow.requests, stable_requests=m.stable.requests)
    thin = _thin(spec, m, shadow)
    measure = disagreement(spec, shadow)[0]
    gates = (error_gate(spec, m, shadow, thin, errors or ErrorEvidence()), latency_gate(spec, shadow, thin),
             divergence_gate(spec, shadow, thin, divergence or ShadowEvidence()),
             *delta_gates(spec, shadow, thin, measure))
    if any(g.verdict is Verdict.FAILED for g in gates):
        verdict = Verdict.FAILED
    elif any(g.verdict is Verdict.INCONCLUSIVE for g in gates):
        verdict = Verdict.INCONCLUSIVE
    elif any(g.verdict is Verdict.PENDING for g in gates):
        verdict = Verdict.PENDING
    else:
        verdict = Verdict.PASSED
    return Analysis(m.window_start, m.window_end, verdict, gates, canary_requests=shadow.requests,
                    stable_requests=m.stable.requests)


def decisive(analysis: Analysis) -> bool:
    """A sequential test failed: decided at once."""
    return any(g.verdict is Verdict.FAILED and g.name in DECISIVE_GATES for g in analysis.gates)


def approvable(analysis: Analysis) -> bool:
    """Only divergence gates failed: an intended change of behaviour a person may approve."""
    failed = {g.name for g in analysis.gates if g.verdict is Verdict.FAILED}
    return bool(failed) and failed <= DIVERGENCE_GATES


def shadow_fails_early(spec: CanarySpec, errors: ErrorEvidence, divergence: ShadowEvidence,
                       partial: Measurement) -> bool:
    """True when the shadow phase's evidence plus the window so far already fails a sequential test.

    The divergence test's p0 is the spec's, so its look is the window end's; the error test's looks take
    the stable's rate shrunk to its Agresti–Coull centre, as :func:`modelops.canary.early.fails_early` does.
    """
    if partial.unreachable or partial.shadow is None:
        return False
    analysis = evaluate_shadow(spec, partial, errors, divergence)
    failed = {g.name for g in analysis.gates if g.verdict is Verdict.FAILED}
    if "divergence" in failed:
        return True
    if "shadow_error_rate" not in failed:
        return False
    total = ErrorEvidence(errors.canary_requests + partial.shadow.requests,
                          errors.canary_errors + partial.shadow.errors,
                          errors.stable_requests + partial.stable.requests + _AC_REQUESTS,
                          errors.stable_errors + partial.stable.errors + _AC_ERRORS)
    return sprt(spec, total).decision == "bad"
