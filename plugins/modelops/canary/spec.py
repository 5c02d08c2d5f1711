"""The canary release spec: steps and thresholds as data (every field is a DAG param).

A spec is frozen and JSON round-trips (``schema_version`` 1), so the release DAG can take
it from the trigger form and the runner can persist it beside the status.

Steps are canary weights as fractions of traffic (0–1), strictly increasing; every step
below 1.0 is analysed; the last step must be 1.0 and means *promote* (at 100 % the stable
version receives no traffic, so nothing is left to compare against).
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from modelops.errors import ConfigError

SPEC_SCHEMA_VERSION = 1
#: The canary's gates, by the names their results carry: the operational ones (errors, p99 latency, a
#: collapsed score) and the rate of a declared fast outcome action (the recommender's click-through).
GATES: tuple[str, ...] = ("error_rate", "p99_ms", "score_std", "ctr")
OPERATIONAL_GATES: tuple[str, ...] = ("error_rate", "p99_ms", "score_std")


@dataclass(frozen=True)
class CanarySpec:
    """How a canary progresses and when it fails.

    Attributes:
        steps: canary weights (0–1], strictly increasing, the last one 1.0 (= promotion).
        interval_s: length of one analysis window in seconds.
        check_s: how often within a window the error test looks at the traffic so far; a canary
            it already finds bad is rolled back at once, without waiting for the window's end
            (0: only at the window's end).
        analyses_per_step: passed analyses needed at a step before the next one.
        min_requests: requests per version per window below which a gate is inconclusive.
        failure_limit: failed analyses (over the whole release) that trigger a rollback.
        inconclusive_limit: consecutive inconclusive analyses that pause the release.
        require_approval: a person approves before the 100 % step.
        slo_p99_ms: p99 latency service-level objective in milliseconds.
        latency_ratio: canary p99 may not exceed max(SLO, ratio × stable p99).
        error_ratio: the error gate's sequential test (evidence summed over the windows of a
            step) holds a canary failing p1 = max(ratio × p0, error_rate_limit) of its requests
            bad, one failing p0 = max(stable rate, error_rate_floor) good.
        error_rate_floor: absolute error-rate floor of p0, the acceptable canary error rate
            while the stable version shows none (0 vs 1 error is no breach; 0.5 %: ten times the
            99.95 % availability SLO's budget, and a canary failing 5 % is caught in ~60 requests).
        error_min_errors: fewer stable errors than this in a window never count as the stable
            version degrading (incident check).
        error_rate_limit: lowest bad canary error rate p1 of the sequential test, and the
            absolute rate beyond which both versions failing is an incident.
        false_promotion_rate: at most this share of canaries failing p1 of their requests
            pass a step's error test (Wald's SPRT bound).
        false_rollback_rate: at most this share of canaries failing p0 of their requests are
            rolled back by the error test.
        collapse_std_floor: canary score std below this is a collapsed model.
        ctr_min_tokens: feedback trials per version per window for the CTR gate to decide.
        ctr_alpha: one-sided significance level of the CTR two-proportion z-test.
        ctr_success_actions: feedback actions that count as a success (click-through).
        ctr_trial_actions: feedback actions that count as a trial (a token with an outcome).
        shadow: run a shadow phase before the first step: users are answered by the stable version
            alone while the gateway mirrors ``shadow_share`` of its requests to the candidate after
            answering them, and the paired gates (``modelops.canary.shadow``) judge the candidate's
            answers on the same requests; it fails with no user exposed, or goes on to the steps.
        shadow_share: share of the stable's requests mirrored to the candidate in the shadow phase
            (0.1–1; the candidate's servers take this share of the stable's load).
        shadow_top_k: the ranked items whose order is compared (the recommender): a request whose
            candidate top-k order differs from the stable's disagrees.
        shadow_max_delta_median: the median of |candidate − stable| over the mirrored answers' scores
            (per item, per row of a classifier's probability; relative |Δ| for a regressor) may not
            exceed this.
        shadow_max_delta_p95: the 95th percentile of the same may not exceed this.
        shadow_disagreement_rate: acceptable share of disagreeing answers (a ranked request whose top-k
            order changed, a row whose predicted class changed, a regressor's row off by more than
            ``shadow_rel_tolerance``): p0 of the disagreement's sequential test.
        shadow_disagreement_limit: share of disagreeing answers that fails the candidate (p1 of the
            sequential test, with the false rates of the error test).
        shadow_rel_tolerance: a regressor's row disagrees when its relative |Δ| exceeds this (read at
            the gateway histogram's bucket bounds: 0.01, 0.025, 0.05, 0.1, 0.25, 0.5 … are exact).
        shadow_approval: a candidate failing only the divergence gates (an intended change of
            behaviour) waits for a person at the end of the shadow phase (approve: on to the steps;
            reject: rolled back) instead of being rolled back; errors and latency still roll back.
        gates: the gates that judge this release's canary windows (names: error_rate, p99_ms, score_std,
            ctr); the others are not run. A model whose spec declares no fast outcome action among
            ``ctr_success_actions`` (a model with a delayed label only) runs on the operational gates alone
            (error_rate, p99_ms, score_std), chosen from its model spec unless its ``canary:`` names them.
        pause_alert_s: a pause that waits for a person (thin traffic, a person's pause, an
            incident beyond the automatic resumptions) alerts after this many seconds
            (``ModelopsReleasePaused``); an incident the release resumes from by itself does not.
    """

    steps: tuple[float, ...] = (0.01, 0.05, 0.25, 0.5, 1.0)
    interval_s: float = 60.0
    check_s: float = 1.0
    analyses_per_step: int = 1
    min_requests: int = 100
    failure_limit: int = 2
    inconclusive_limit: int = 3
    require_approval: bool = False
    slo_p99_ms: float = 250.0
    latency_ratio: float = 1.5
    error_ratio: float = 2.0
    error_rate_floor: float = 0.005
    error_min_errors: int = 3
    error_rate_limit: float = 0.05
    false_promotion_rate: float = 0.01
    false_rollback_rate: float = 0.01
    collapse_std_floor: float = 0.005
    ctr_min_tokens: int = 200
    ctr_alpha: float = 0.01
    ctr_success_actions: tuple[str, ...] = ("click",)
    ctr_trial_actions: tuple[str, ...] = ("click", "skip")
    shadow: bool = False
    shadow_share: float = 1.0
    shadow_top_k: int = 5
    shadow_max_delta_median: float = 0.01
    shadow_max_delta_p95: float = 0.05
    shadow_disagreement_rate: float = 0.05
    shadow_disagreement_limit: float = 0.2
    shadow_rel_tolerance: float = 0.1
    shadow_approval: bool = False
    gates: tuple[str, ...] = GATES
    pause_alert_s: float = 900.0
    schema_version: int = SPEC_SCHEMA_VERSION

    def __post_init__(self) -> None:
        problems = spec_problems(self)
        if problems:
            raise ConfigError("canary spec: " + "; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CanarySpec:
        """Build from a mapping; unknown keys are an error, missing keys take defaults."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"canary spec: unknown field(s) {unknown} (known: {sorted(known)})")
        version = raw.get("schema_version", SPEC_SCHEMA_VERSION)
        if version != SPEC_SCHEMA_VERSION:
            raise ConfigError(f"canary spec: schema_version={version!r} is not supported "
                              f"(this code reads {SPEC_SCHEMA_VERSION})")
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
        if "steps" in values:
            values["steps"] = tuple(float(s) for s in values["steps"])
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> CanarySpec:
        return cls.from_dict(json.loads(text))


def describe() -> dict[str, tuple[Any, str]]:
    """Every spec field with its default and its documentation (for DAG params and the README).

    Taken from the Attributes section of :class:`CanarySpec`'s docstring, so the two
    cannot drift apart.
    """
    docs: dict[str, str] = {}
    current = ""
    in_attributes = False
    for line in (CanarySpec.__doc__ or "").splitlines():
        text = line.strip()
        if text == "Attributes:":
            in_attributes = True
            continue
        if not in_attributes or not text:
            continue
        name, sep, rest = text.partition(": ")
        if sep and name.isidentifier() and line.startswith(" " * 8) and not line.startswith(" " * 9):
            current = name
            docs[current] = rest
        elif current:
            docs[current] += " " + text
    defaults = CanarySpec()
    return {f.name: (getattr(defaults, f.name), docs.get(f.name, "")) for f in fields(CanarySpec)
            if f.name != "schema_version"}


def traffic_warnings(spec: CanarySpec, requests_per_s: float) -> list[str]:
    """Steps whose canary or stable share cannot reach ``min_requests`` in one interval at this rate.

    A window carries about ``weight × rate × interval`` canary requests and
    ``(1 − weight) × rate × interval`` stable ones; below ``min_requests`` every analysis
    at that step is inconclusive and the release pauses there.
    """
    warnings = []
    for weight in spec.steps[:-1]:
        canary = weight * requests_per_s * spec.interval_s
        stable = (1.0 - weight) * requests_per_s * spec.interval_s
        if min(canary, stable) < spec.min_requests:
            warnings.append(f"step {weight:.0%}: about {canary:.0f} canary / {stable:.0f} stable requests per "
                            f"{spec.interval_s:g} s window at {requests_per_s:g} req/s, below min_requests="
                            f"{spec.min_requests}: raise interval_s or the first weights, or lower min_requests")
    return warnings


def spec_problems(spec: CanarySpec) -> list[str]:
    """Every rule the spec breaks, each naming the field, the rule and an example."""
    problems: list[str] = []
    steps = spec.steps
    if not steps or any(not (0.0 < s <= 1.0) or math.isnan(s) for s in steps):
        problems.append(f"steps={list(steps)}: each weight must be in (0, 1] (example: [0.01, 0.05, 0.25, 0.5, 1.0])")
    elif any(b <= a for a, b in itertools.pairwise(steps)):
        problems.append(f"steps={list(steps)}: weights must increase strictly (example: [0.05, 0.5, 1.0])")
    elif steps[-1] != 1.0 or len(steps) < 2:
        problems.append(f"steps={list(steps)}: need at least one analysed step and the last must be 1.0 "
                        "(example: [0.1, 1.0])")
    positive = {"interval_s": spec.interval_s, "slo_p99_ms": spec.slo_p99_ms, "pause_alert_s": spec.pause_alert_s,
                "latency_ratio": spec.latency_ratio, "error_ratio": spec.error_ratio}
    for name, value in positive.items():
        if not value > 0 or math.isinf(value):
            problems.append(f"{name}={value!r}: must be a finite number > 0 (example: 1.5)")
    if not (spec.check_s == 0 or spec.check_s >= 0.5) or math.isinf(spec.check_s):
        problems.append(f"check_s={spec.check_s!r}: must be 0 (look only at a window's end) or a finite number "
                        ">= 0.5 (each look measures every gateway or queries Prometheus; example: 1.0)")
    at_least_one = {"analyses_per_step": spec.analyses_per_step, "min_requests": spec.min_requests,
                    "failure_limit": spec.failure_limit, "inconclusive_limit": spec.inconclusive_limit,
                    "ctr_min_tokens": spec.ctr_min_tokens}
    for name, count in at_least_one.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            problems.append(f"{name}={count!r}: must be an integer >= 1 (example: 3)")
    if isinstance(spec.error_min_errors, bool) or not isinstance(spec.error_min_errors, int) \
            or spec.error_min_errors < 0:
        problems.append(f"error_min_errors={spec.error_min_errors!r}: must be an integer >= 0 (example: 3)")
    fractions = {"error_rate_floor": spec.error_rate_floor, "error_rate_limit": spec.error_rate_limit,
                 "collapse_std_floor": spec.collapse_std_floor}
    for name, value in fractions.items():
        if not 0.0 <= value <= 1.0:
            problems.append(f"{name}={value!r}: must be in [0, 1] (example: 0.01)")
    for name, value in (("false_promotion_rate", spec.false_promotion_rate),
                        ("false_rollback_rate", spec.false_rollback_rate)):
        if not 0.0 < value < 0.5:
            problems.append(f"{name}={value!r}: must be in (0, 0.5) (example: 0.01)")
    if not spec.error_rate_floor > 0.0:
        problems.append(f"error_rate_floor={spec.error_rate_floor!r}: must be > 0, the error test's "
                        "acceptable rate (example: 0.01)")
    if not 0.0 < spec.ctr_alpha < 0.5:
        problems.append(f"ctr_alpha={spec.ctr_alpha!r}: must be in (0, 0.5) (example: 0.01)")
    problems += _shadow_problems(spec)
    if not spec.gates or len(set(spec.gates)) != len(spec.gates) or not set(spec.gates) <= set(GATES):
        problems.append(f"gates={list(spec.gates)}: distinct names among {list(GATES)}, at least one "
                        "(example: ['error_rate', 'p99_ms', 'score_std'])")
    if not spec.ctr_success_actions or not set(spec.ctr_success_actions) <= set(spec.ctr_trial_actions):
        problems.append(f"ctr_success_actions={list(spec.ctr_success_actions)}: must be a non-empty subset of "
                        f"ctr_trial_actions={list(spec.ctr_trial_actions)} (example: ['click'] of "
                        "['click', 'skip'])")
    return problems


def _shadow_problems(spec: CanarySpec) -> list[str]:
    problems: list[str] = []
    if not 0.1 <= spec.shadow_share <= 1.0:
        problems.append(f"shadow_share={spec.shadow_share!r}: must be in [0.1, 1] (example: 0.5)")
    if isinstance(spec.shadow_top_k, bool) or not isinstance(spec.shadow_top_k, int) or spec.shadow_top_k < 1:
        problems.append(f"shadow_top_k={spec.shadow_top_k!r}: must be an integer >= 1 (example: 5)")
    for name in ("shadow_max_delta_median", "shadow_max_delta_p95", "shadow_rel_tolerance"):
        value = getattr(spec, name)
        if not value >= 0 or math.isinf(value):
            problems.append(f"{name}={value!r}: must be a finite number >= 0 (example: 0.05)")
    p0, p1 = spec.shadow_disagreement_rate, spec.shadow_disagreement_limit
    if not 0.0 < p0 < p1 < 1.0:
        problems.append(f"shadow_disagreement_rate={p0!r}, shadow_disagreement_limit={p1!r}: need 0 < rate < limit "
                        "< 1 (example: 0.05 and 0.2)")
    return problems
