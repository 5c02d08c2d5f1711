"""Canary gates: pure comparisons of canary with stable over the same window.

Each gate returns a :class:`GateResult` (value, threshold, verdict). Too little traffic
or an unmeasured (NaN) input makes a gate *inconclusive*, never passed and never failed.
:func:`evaluate` combines the gates into one :class:`Analysis` and recognises an
*incident*: the stable version degrading as well (against its own baseline, or beyond the
absolute limits together with the canary), which pauses the release instead of blaming
the canary.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from modelops.canary.measurement import Measurement, VersionWindow
from modelops.canary.sequential import ErrorEvidence, sprt
from modelops.canary.spec import GATES, CanarySpec

NAN = math.nan


class Verdict(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"
    PENDING = "pending"
    """Enough traffic in the window, not yet enough evidence over the step (sequential error test)."""


def _num(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def _float(raw: Any) -> float:
    return NAN if raw is None else float(raw)


@dataclass(frozen=True)
class GateResult:
    """One gate's outcome; ``required`` gates decide the analysis, optional ones only fail it."""

    name: str
    value: float
    threshold: float
    verdict: Verdict
    detail: str = ""
    required: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": _num(self.value), "threshold": _num(self.threshold),
                "verdict": self.verdict.value, "detail": self.detail, "required": self.required}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> GateResult:
        return cls(name=str(raw["name"]), value=_float(raw.get("value")), threshold=_float(raw.get("threshold")),
                   verdict=Verdict(raw["verdict"]), detail=str(raw.get("detail", "")),
                   required=bool(raw.get("required", True)))


@dataclass(frozen=True)
class Baseline:
    """The stable version's own health, taken from the first analysis with enough stable traffic.

    ``error_rate`` is the Agresti-Coull centre of that window's errors (see :func:`baseline_of`).
    """

    error_rate: float
    p99_ms: float

    def to_dict(self) -> dict[str, Any]:
        return {"error_rate": _num(self.error_rate), "p99_ms": _num(self.p99_ms)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Baseline:
        return cls(error_rate=_float(raw.get("error_rate")), p99_ms=_float(raw.get("p99_ms")))


@dataclass(frozen=True)
class Analysis:
    """The gates of one window combined.

    ``verdict`` is failed when any gate failed, inconclusive when no gate failed but a
    required gate was inconclusive, pending when the sequential error test needs more
    traffic, passed otherwise. ``incident`` is non-empty when the
    stable version degrades too; the state machine then pauses instead of judging.
    """

    window_start: float
    window_end: float
    verdict: Verdict
    gates: tuple[GateResult, ...]
    incident: str = ""
    canary_requests: float = NAN
    stable_requests: float = NAN

    def gate(self, name: str) -> GateResult | None:
        return next((g for g in self.gates if g.name == name), None)

    def summary(self) -> str:
        """One line: verdict and each gate's value against its threshold."""
        parts = [f"{g.name}={_fmt(g.value)}/{_fmt(g.threshold)}:{g.verdict.value}" for g in self.gates]
        text = f"{self.verdict.value} ({', '.join(parts)})"
        return f"incident: {self.incident}; {text}" if self.incident else text

    def to_dict(self) -> dict[str, Any]:
        return {"window_start": float(self.window_start), "window_end": float(self.window_end),
                "verdict": self.verdict.value,
                "gates": [g.to_dict() for g in self.gates], "incident": self.incident,
                "canary_requests": _num(self.canary_requests), "stable_requests": _num(self.stable_requests)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Analysis:
        return cls(window_start=float(raw["window_start"]), window_end=float(raw["window_end"]),
                   verdict=Verdict(raw["verdict"]), gates=tuple(GateResult.from_dict(g) for g in raw["gates"]),
                   incident=str(raw.get("incident", "")), canary_requests=_float(raw.get("canary_requests")),
                   stable_requests=_float(raw.get("stable_requests")))


def _fmt(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.4g}"


def bucket_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """The q-quantile of a cumulative histogram, as Prometheus' ``histogram_quantile`` does it.

    Linear interpolation inside the bucket that holds the rank; the lowest bucket starts
    at 0; a rank in the ``+Inf`` bucket returns the highest finite bound. NaN when the
    histogram is empty or unmeasured.

    Args:
        q: quantile in [0, 1].
        buckets: (upper bound, cumulative count) pairs; sorted here, the last bound ``inf``.
    """
    if not buckets or not 0.0 <= q <= 1.0:
        return NAN
    ordered = sorted(buckets)
    if any(math.isnan(c) for _, c in ordered) or not math.isinf(ordered[-1][0]):
        return NAN
    # Counters differenced across resets can make cumulative counts dip: keep them monotone.
    counts: list[float] = []
    for _, c in ordered:
        counts.append(max(c, counts[-1]) if counts else c)
    total = counts[-1]
    if total <= 0:
        return NAN
    rank = q * total
    previous_bound, previous_count = 0.0, 0.0
    for (bound, _), count in zip(ordered, counts, strict=True):
        if count >= rank:
            if math.isinf(bound):
                return previous_bound if len(ordered) > 1 else NAN
            if count == previous_count:
                return bound
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / (count - previous_count)
        previous_bound, previous_count = bound, count
    return previous_bound


def p99_ms(window: VersionWindow) -> float:
    return bucket_quantile(0.99, window.latency_buckets) * 1000.0


def _thin(spec: CanarySpec, m: Measurement) -> str:
    for label, window in (("canary", m.canary), ("stable", m.stable)):
        if math.isnan(window.requests):
            return f"{label} requests not measured"
        if window.requests < spec.min_requests:
            return f"thin traffic: {label} {window.requests:.0f} < {spec.min_requests} requests"
    return ""


def error_gate(spec: CanarySpec, m: Measurement, evidence: ErrorEvidence | None = None) -> GateResult:
    """Canary error rate by a sequential test over the step's windows so far plus this one.

    ``evidence``: what the earlier windows of the current step measured (none: this
    window alone). Failed when the canary fails p1 of its requests beyond the spec's
    false-rollback rate, passed when it stays within p0 beyond the false-promotion rate,
    pending in between (see :mod:`modelops.canary.sequential`). The value is the window's
    canary error rate, the threshold p0.
    """
    canary = m.canary.error_rate
    thin = _thin(spec, m)
    if thin or math.isnan(canary) or math.isnan(m.stable.error_rate):
        return GateResult("error_rate", canary, NAN, Verdict.INCONCLUSIVE, thin or "error counts not measured")
    total = (evidence or ErrorEvidence()).plus(m)
    decision = sprt(spec, total)
    verdict = {"bad": Verdict.FAILED, "good": Verdict.PASSED}.get(decision.decision, Verdict.PENDING)
    return GateResult("error_rate", canary, decision.p0, verdict, decision.detail(total))


def latency_gate(spec: CanarySpec, m: Measurement) -> GateResult:
    """Canary p99 (ms) <= max(SLO, latency_ratio × stable p99).

    The histograms hold online answers only (see :data:`modelops.canary.sources.LATENCY_SOURCE`).
    A stable version with enough requests in the window but no online answer in it answered
    every one from its precomputed snapshot (the hourly ``precompute_predictions``): there is
    no online p99 of the stable to scale, so the canary is held to the SLO alone.
    """
    canary, stable = p99_ms(m.canary), p99_ms(m.stable)
    thin = _thin(spec, m)
    if thin or math.isnan(canary):
        threshold = NAN if math.isnan(stable) else max(spec.slo_p99_ms, spec.latency_ratio * stable)
        return GateResult("p99_ms", canary, threshold, Verdict.INCONCLUSIVE, thin or "latency histogram not measured")
    if math.isnan(stable):
        threshold, detail = spec.slo_p99_ms, "stable answered from precomputed scores only: the SLO alone"
    else:
        threshold, detail = max(spec.slo_p99_ms, spec.latency_ratio * stable), f"stable p99 {stable:.1f} ms"
    verdict = Verdict.FAILED if canary > threshold else Verdict.PASSED
    return GateResult("p99_ms", canary, threshold, verdict, detail)


def collapse_gate(spec: CanarySpec, m: Measurement) -> GateResult:
    """Canary score std >= collapse_std_floor (a constant score is a broken model)."""
    std = m.canary.score_std
    thin = _thin(spec, m)
    if thin or math.isnan(std):
        return GateResult("score_std", std, spec.collapse_std_floor, Verdict.INCONCLUSIVE,
                          thin or "score std not measured")
    verdict = Verdict.FAILED if std < spec.collapse_std_floor else Verdict.PASSED
    return GateResult("score_std", std, spec.collapse_std_floor, verdict, f"stable std {m.stable.score_std:.4g}")


def _trials(spec: CanarySpec, window: VersionWindow) -> tuple[float, float]:
    trials = sum(window.feedback.get(a, 0.0) for a in spec.ctr_trial_actions)
    successes = sum(window.feedback.get(a, 0.0) for a in spec.ctr_success_actions)
    return successes, trials


def ctr_gate(spec: CanarySpec, m: Measurement) -> GateResult:
    """Canary CTR not significantly below stable (one-sided two-proportion z-test).

    Optional: inconclusive (and not holding the release) until both versions have
    ``ctr_min_tokens`` feedback trials in the window. Value is the canary CTR, threshold
    the stable CTR; the detail carries z and the one-sided p-value.
    """
    cs, cn = _trials(spec, m.canary)
    ss, sn = _trials(spec, m.stable)
    canary = cs / cn if cn > 0 else NAN
    stable = ss / sn if sn > 0 else NAN
    if any(math.isnan(x) for x in (cs, cn, ss, sn)) or cn < spec.ctr_min_tokens or sn < spec.ctr_min_tokens:
        return GateResult("ctr", canary, stable, Verdict.INCONCLUSIVE,
                          f"feedback trials canary {cn:.0f}, stable {sn:.0f} < {spec.ctr_min_tokens}", required=False)
    pooled = (cs + ss) / (cn + sn)
    se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / cn + 1.0 / sn))
    if se == 0.0:
        return GateResult("ctr", canary, stable, Verdict.PASSED if canary >= stable else Verdict.FAILED,
                          "no variance", required=False)
    z = (canary - stable) / se
    p = NormalDist().cdf(z)
    verdict = Verdict.FAILED if p < spec.ctr_alpha else Verdict.PASSED
    return GateResult("ctr", canary, stable, verdict, f"z={z:.2f} p={p:.4f} alpha={spec.ctr_alpha}", required=False)


def poisson_at_least(k: float, mean: float) -> float:
    """P(X >= k) for X ~ Poisson(mean)."""
    if k <= 0:
        return 1.0
    if mean <= 0:
        return 0.0
    if mean > 500.0:  # exp(-mean) underflows; the normal approximation is close there
        return 1.0 - NormalDist(mean, math.sqrt(mean)).cdf(k - 0.5)
    term = math.exp(-mean)
    below = 0.0
    for i in range(math.ceil(k)):
        below += term
        term *= mean / (i + 1)
    return max(0.0, 1.0 - below)


def _stable_degraded(spec: CanarySpec, m: Measurement, baseline: Baseline | None) -> str:
    if baseline is None or math.isnan(m.stable.requests) or m.stable.requests < spec.min_requests:
        return ""
    rate = m.stable.error_rate
    if not math.isnan(baseline.error_rate) and not math.isnan(rate) and m.stable.errors >= spec.error_min_errors:
        # Degraded beyond noise: more errors than error_ratio x its baseline (at least the floor) would
        # give by chance, at the spec's false-rollback rate (a baseline from one window is itself noisy).
        reference = max(baseline.error_rate, spec.error_rate_floor)
        expected = spec.error_ratio * reference * m.stable.requests
        chance = poisson_at_least(m.stable.errors, expected)
        if rate > spec.error_ratio * reference and chance < spec.false_rollback_rate:
            return f"stable error rate {rate:.4f} vs its baseline {baseline.error_rate:.4f}"
    p99 = p99_ms(m.stable)
    if not math.isnan(baseline.p99_ms) and not math.isnan(p99) \
            and p99 > max(spec.slo_p99_ms, spec.latency_ratio * baseline.p99_ms):
        return f"stable p99 {p99:.1f} ms vs its baseline {baseline.p99_ms:.1f} ms"
    return ""


def _both_beyond_limits(spec: CanarySpec, m: Measurement, gates: Sequence[GateResult]) -> str:
    failed = {g.name for g in gates if g.verdict is Verdict.FAILED}
    canary_rate, stable_rate, stable_p99 = m.canary.error_rate, m.stable.error_rate, p99_ms(m.stable)
    # Errors: both beyond the absolute limit is an incident whatever the ratio says (stable at
    # 20 % makes any canary under 40 % "pass"). Latency and collapse: only when the canary's
    # gate failed too, so a stable version that always sits above the SLO does not block releases.
    if not (math.isnan(canary_rate) or math.isnan(stable_rate)) and m.stable.requests >= spec.min_requests \
            and m.canary.requests >= spec.min_requests \
            and min(canary_rate, stable_rate) > spec.error_rate_limit:
        return (f"both versions fail: error rates canary {canary_rate:.4f}, stable {stable_rate:.4f} "
                f"> limit {spec.error_rate_limit}")
    if "p99_ms" in failed and not math.isnan(stable_p99) and stable_p99 > spec.slo_p99_ms:
        return f"both versions fail: stable p99 {stable_p99:.1f} ms > SLO {spec.slo_p99_ms} ms"
    if "score_std" in failed and not math.isnan(m.stable.score_std) and m.stable.score_std < spec.collapse_std_floor:
        return f"both versions collapse: stable score std {m.stable.score_std:.4g}"
    return ""


def baseline_of(spec: CanarySpec, m: Measurement) -> Baseline | None:
    """The stable version's health in this window, if it has enough traffic and is within limits."""
    if m.unreachable or math.isnan(m.stable.requests) or m.stable.requests < spec.min_requests:
        return None
    rate, p99 = m.stable.error_rate, p99_ms(m.stable)
    if math.isnan(rate) or math.isnan(p99) or rate > spec.error_rate_limit or p99 > spec.slo_p99_ms:
        return None
    # One window's rate is itself noisy (a stable failing 1 % shows 0 errors in a third of 100-request
    # windows, and a later window with 6 would then look like an incident): the baseline is the
    # Agresti-Coull centre (errors + 2) / (requests + 4).
    return Baseline((m.stable.errors + 2.0) / (m.stable.requests + 4.0), p99)


def evaluate(spec: CanarySpec, m: Measurement, baseline: Baseline | None = None,
             evidence: ErrorEvidence | None = None) -> Analysis:
    """Run the spec's gates (``spec.gates``) over one window and combine them (see :class:`Analysis`).

    ``evidence``: the error counts of the earlier windows at the current step (the error
    gate tests them together with this window).
    """
    if m.unreachable:
        reason = "unreachable: " + ", ".join(m.unreachable)
        gates = tuple(GateResult(name, NAN, NAN, Verdict.INCONCLUSIVE, reason, required=name != "ctr")
                      for name in spec.gates)
        return Analysis(m.window_start, m.window_end, Verdict.INCONCLUSIVE, gates,
                        canary_requests=m.canary.requests, stable_requests=m.stable.requests)
    run: dict[str, Callable[[], GateResult]] = {
        "error_rate": lambda: error_gate(spec, m, evidence), "p99_ms": lambda: latency_gate(spec, m),
        "score_std": lambda: collapse_gate(spec, m), "ctr": lambda: ctr_gate(spec, m)}
    gates = tuple(run[name]() for name in GATES if name in spec.gates)  # the spec's gates, in a fixed order
    if any(g.verdict is Verdict.FAILED for g in gates):
        verdict = Verdict.FAILED
    elif any(g.required and g.verdict is Verdict.INCONCLUSIVE for g in gates):
        verdict = Verdict.INCONCLUSIVE
    elif any(g.verdict is Verdict.PENDING for g in gates):
        verdict = Verdict.PENDING
    else:
        verdict = Verdict.PASSED
    incident = _stable_degraded(spec, m, baseline) or _both_beyond_limits(spec, m, gates)
    return Analysis(m.window_start, m.window_end, verdict, gates, incident,
                    canary_requests=m.canary.requests, stable_requests=m.stable.requests)
