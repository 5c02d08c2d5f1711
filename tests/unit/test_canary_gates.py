"""Canary gates: bucket quantile, each gate's verdict, thin traffic, NaN, incidents."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from modelops.canary.gates import Baseline, Verdict, bucket_quantile, evaluate, p99_ms
from modelops.canary.measurement import VersionWindow
from modelops.canary.spec import CanarySpec
from modelops.canary.testing import histogram, measurement, window
from modelops.errors import ConfigError

SPEC = CanarySpec(min_requests=100, slo_p99_ms=250.0, ctr_min_tokens=200)
NAN = math.nan


def test_bucket_quantile_interpolates_like_prometheus() -> None:
    buckets = ((0.1, 50.0), (0.2, 100.0), (math.inf, 100.0))
    assert bucket_quantile(0.5, buckets) == pytest.approx(0.1)
    assert bucket_quantile(0.75, buckets) == pytest.approx(0.15)
    assert bucket_quantile(0.99, buckets) == pytest.approx(0.198)
    # a rank in +Inf returns the highest finite bound
    assert bucket_quantile(0.99, ((0.1, 10.0), (math.inf, 100.0))) == pytest.approx(0.1)
    assert math.isnan(bucket_quantile(0.99, ()))
    assert math.isnan(bucket_quantile(0.99, ((0.1, 0.0), (math.inf, 0.0))))
    assert math.isnan(bucket_quantile(0.99, ((0.1, NAN), (math.inf, 3.0))))
    assert math.isnan(bucket_quantile(0.99, ((0.1, 3.0), (0.2, 3.0))))  # no +Inf bucket


def test_bucket_quantile_is_close_to_the_sample_quantile() -> None:
    rng = random.Random(5)
    bounds = tuple(0.001 * 1.2**i for i in range(60))
    values = [rng.lognormvariate(-4.0, 0.6) for _ in range(20_000)]
    exact = float(np.quantile(values, 0.99))
    assert bucket_quantile(0.99, histogram(values, bounds)) == pytest.approx(exact, rel=0.1)


def test_bucket_quantile_tolerates_unsorted_and_dipping_counts() -> None:
    buckets = ((math.inf, 100.0), (0.2, 99.0), (0.1, 100.0))  # reset noise: 0.2 dips below 0.1
    assert bucket_quantile(0.5, buckets) == pytest.approx(0.05)


@pytest.mark.parametrize(("name", "canary", "stable", "gate", "verdict"), [
    ("good", window(), window(), "error_rate", Verdict.PASSED),
    ("0 vs 1 error is no 2x breach", window(errors=1), window(errors=0), "error_rate", Verdict.PASSED),
    ("5% errors vs 0", window(errors=50), window(errors=0), "error_rate", Verdict.FAILED),
    ("3% vs 2%: one window is not enough evidence", window(errors=30), window(errors=20), "error_rate",
     Verdict.PENDING),
    ("2% vs 2% is as good as stable", window(errors=20), window(errors=20), "error_rate", Verdict.PASSED),
    ("1 error in 100: not enough evidence yet", window(requests=100, errors=1), window(), "error_rate",
     Verdict.PENDING),
    ("5% vs 2% is over 2x", window(errors=50), window(errors=20), "error_rate", Verdict.FAILED),
    ("thin canary", window(requests=50, errors=25), window(), "error_rate", Verdict.INCONCLUSIVE),
    ("thin stable", window(errors=500), window(requests=10), "error_rate", Verdict.INCONCLUSIVE),
    ("NaN errors", window(errors=NAN), window(), "error_rate", Verdict.INCONCLUSIVE),
    ("NaN requests", window(requests=NAN), window(), "error_rate", Verdict.INCONCLUSIVE),
    ("latency same", window(latency_s=0.02), window(latency_s=0.02), "p99_ms", Verdict.PASSED),
    ("3x slower but under SLO", window(latency_s=0.06), window(latency_s=0.02), "p99_ms", Verdict.PASSED),
    ("3x slower over SLO", window(latency_s=0.6), window(latency_s=0.2), "p99_ms", Verdict.FAILED),
    ("slow tail over SLO", window(slow_share=0.05, slow_latency_s=2.0), window(), "p99_ms", Verdict.FAILED),
    ("no histogram", VersionWindow(requests=1000, errors=0), window(), "p99_ms",
     Verdict.INCONCLUSIVE),
    ("thin latency", window(requests=10, latency_s=5.0), window(), "p99_ms", Verdict.INCONCLUSIVE),
    # the stable answered all from its precomputed snapshot (no online histogram): the SLO alone
    ("stable all precomputed, canary under SLO", window(latency_s=0.06), VersionWindow(requests=1000, errors=0),
     "p99_ms", Verdict.PASSED),
    ("stable all precomputed, canary over SLO", window(latency_s=0.6), VersionWindow(requests=1000, errors=0),
     "p99_ms", Verdict.FAILED),
    ("stable all precomputed but thin", window(latency_s=0.06), VersionWindow(requests=10, errors=0), "p99_ms",
     Verdict.INCONCLUSIVE),
    ("std fine", window(std=0.1), window(), "score_std", Verdict.PASSED),
    ("collapsed", window(std=0.0001), window(), "score_std", Verdict.FAILED),
    ("std unknown", window(std=NAN), window(), "score_std", Verdict.INCONCLUSIVE),
    ("ctr too few tokens", window(feedback={"click": 10, "skip": 10}), window(), "ctr", Verdict.INCONCLUSIVE),
    ("ctr same", window(feedback={"click": 100, "skip": 900}), window(feedback={"click": 100, "skip": 900}),
     "ctr", Verdict.PASSED),
    ("ctr worse", window(feedback={"click": 50, "skip": 950}), window(feedback={"click": 100, "skip": 900}),
     "ctr", Verdict.FAILED),
    ("ctr better", window(feedback={"click": 150, "skip": 850}), window(feedback={"click": 100, "skip": 900}),
     "ctr", Verdict.PASSED),
    ("ctr slightly worse is not significant", window(feedback={"click": 95, "skip": 905}),
     window(feedback={"click": 100, "skip": 900}), "ctr", Verdict.PASSED),
])
def test_gate_table(name: str, canary: VersionWindow, stable: VersionWindow, gate: str, verdict: Verdict) -> None:
    analysis = evaluate(SPEC, measurement(canary, stable))
    result = analysis.gate(gate)
    assert result is not None
    assert result.verdict is verdict, (name, result)


def test_thresholds_are_reported() -> None:
    stable = window(errors=20, latency_s=0.2)
    analysis = evaluate(SPEC, measurement(window(errors=50, latency_s=0.6), stable))
    errors, latency = analysis.gate("error_rate"), analysis.gate("p99_ms")
    assert errors is not None and latency is not None
    assert errors.value == pytest.approx(0.05) and errors.threshold == pytest.approx(0.02)  # p0: stable's rate
    assert 200.0 < p99_ms(stable) < 250.0  # 0.2 s interpolated inside the (0.1, 0.25] bucket
    assert latency.threshold == pytest.approx(max(250.0, 1.5 * p99_ms(stable)))
    assert analysis.verdict is Verdict.FAILED
    assert "error_rate=0.05/0.02:failed" in analysis.summary()


def test_a_stable_answered_from_precomputed_scores_holds_the_canary_to_the_slo() -> None:
    analysis = evaluate(SPEC, measurement(window(latency_s=0.06), VersionWindow(requests=1000, errors=0)))
    latency = analysis.gate("p99_ms")
    assert latency is not None and latency.threshold == SPEC.slo_p99_ms
    assert "precomputed" in latency.detail and analysis.verdict is not Verdict.INCONCLUSIVE


@pytest.mark.parametrize(("name", "canary", "stable", "verdict"), [
    ("all pass, ctr inconclusive", window(), window(), Verdict.PASSED),
    ("one fails", window(std=0.0), window(), Verdict.FAILED),
    ("required inconclusive", window(std=NAN), window(), Verdict.INCONCLUSIVE),
    ("fail beats inconclusive", window(std=NAN, errors=100), window(), Verdict.FAILED),
    ("thin traffic everywhere", window(requests=20), window(requests=2000), Verdict.INCONCLUSIVE),
])
def test_analysis_verdict(name: str, canary: VersionWindow, stable: VersionWindow, verdict: Verdict) -> None:
    assert evaluate(SPEC, measurement(canary, stable)).verdict is verdict, name


def test_unreachable_target_is_inconclusive_even_with_failing_numbers() -> None:
    analysis = evaluate(SPEC, measurement(window(errors=500), window(), unreachable=("http://gw:1/metrics",)))
    assert analysis.verdict is Verdict.INCONCLUSIVE
    assert all(g.verdict is Verdict.INCONCLUSIVE for g in analysis.gates)
    assert "unreachable" in analysis.gates[0].detail


@pytest.mark.parametrize(("name", "canary", "stable", "baseline", "incident"), [
    ("stable errors up vs baseline", window(errors=80), window(errors=60), Baseline(0.001, 20.0), "stable error"),
    ("stable latency up vs baseline", window(latency_s=0.6), window(latency_s=0.6), Baseline(0.0, 20.0),
     "stable p99"),
    ("both beyond error limit", window(errors=300), window(errors=100), None, "both versions fail"),
    ("both beyond SLO", window(latency_s=2.0), window(latency_s=0.5), None, "both versions fail"),
    ("both collapsed", window(std=0.0), window(std=0.0), None, "both versions collapse"),
    ("canary alone bad", window(errors=100), window(errors=2), Baseline(0.002, 20.0), ""),
    ("stable thin: no judgement", window(), window(requests=5, errors=5), Baseline(0.0, 20.0), ""),
])
def test_incident(name: str, canary: VersionWindow, stable: VersionWindow, baseline: Baseline | None,
                  incident: str) -> None:
    analysis = evaluate(SPEC, measurement(canary, stable), baseline)
    assert analysis.incident.startswith(incident) if incident else analysis.incident == "", (name, analysis.incident)


def test_spec_validation_names_the_field() -> None:
    with pytest.raises(ConfigError, match="steps"):
        CanarySpec(steps=(0.05, 0.01, 1.0))
    with pytest.raises(ConfigError, match=r"last must be 1\.0"):
        CanarySpec(steps=(0.05, 0.5))
    with pytest.raises(ConfigError, match="failure_limit"):
        CanarySpec(failure_limit=0)
    with pytest.raises(ConfigError, match="ctr_success_actions"):
        CanarySpec(ctr_success_actions=("purchase",))


def test_spec_json_round_trip() -> None:
    spec = CanarySpec(steps=(0.1, 0.5, 1.0), interval_s=5, require_approval=True, ctr_trial_actions=("click", "skip"))
    assert CanarySpec.from_json(spec.to_json()) == spec
    assert CanarySpec.from_dict({"interval_s": 5}).interval_s == 5
    with pytest.raises(ConfigError, match="unknown field"):
        CanarySpec.from_dict({"intervall_s": 5})
    with pytest.raises(ConfigError, match="schema_version"):
        CanarySpec.from_dict({"schema_version": 9})


def test_traffic_warnings_name_the_thin_steps() -> None:
    from modelops.canary.spec import traffic_warnings

    spec = CanarySpec(interval_s=5, min_requests=50)
    warnings = traffic_warnings(spec, 20.0)  # 100 requests per window in all
    assert [w.split(":")[0] for w in warnings] == ["step 1%", "step 5%", "step 25%"]
    assert traffic_warnings(spec, 1000.0) == []


def test_detection_warnings_name_the_steps_where_the_error_test_needs_many_windows() -> None:
    from modelops.canary.sequential import detection_warnings, requests_to_decide

    spec = CanarySpec(steps=(0.05, 0.5, 1.0), interval_s=5, min_requests=5)
    needed = requests_to_decide(spec, spec.error_rate_limit)
    assert 50 < needed < 80  # Wald's average sample number at p1 = 5 % vs p0 = 0.5 %, alpha = beta = 1 %
    # 40 req/s: ~10 canary requests per window at 5 % (> 5 windows to decide), ~100 at 50 %.
    warnings = detection_warnings(spec, 40.0)
    assert [w.split(":")[0] for w in warnings] == ["step 5%"]
    assert "windows" in warnings[0]
    assert detection_warnings(spec, 400.0) == []
    assert detection_warnings(spec, 0.5) == []  # too thin for min_requests: traffic_warnings' business


@pytest.mark.parametrize(("k", "mean"), [(0, 3.0), (1, 0.0), (3, 0.1), (10, 4.5), (40, 20.0), (2100, 2000.0)])
def test_poisson_tail_matches_scipy(k: int, mean: float) -> None:
    from scipy.stats import poisson

    from modelops.canary.gates import poisson_at_least

    expected = 1.0 if k <= 0 else float(poisson.sf(k - 1, mean))
    assert poisson_at_least(k, mean) == pytest.approx(expected, rel=0.05, abs=1e-12)


# ------------------------------------------------------------------ gates per model
OPERATIONAL = CanarySpec(min_requests=100, ctr_min_tokens=200, gates=("error_rate", "p99_ms", "score_std"))


def test_only_the_specs_gates_run_and_decide() -> None:
    worse_ctr = measurement(window(feedback={"click": 50, "skip": 950}), window(feedback={"click": 100, "skip": 900}))
    assert evaluate(SPEC, worse_ctr).verdict is Verdict.FAILED  # the default spec counts clicks
    analysis = evaluate(OPERATIONAL, worse_ctr)
    assert [g.name for g in analysis.gates] == ["error_rate", "p99_ms", "score_std"]
    assert analysis.gate("ctr") is None and analysis.verdict is Verdict.PASSED
    collapsed = measurement(window(std=0.0), window())
    assert evaluate(OPERATIONAL, collapsed).verdict is Verdict.FAILED  # the operational gates still judge
    only_errors = CanarySpec(gates=("error_rate",))
    slow = measurement(window(latency_s=2.0), window())
    assert [g.name for g in evaluate(only_errors, slow).gates] == ["error_rate"]
    assert evaluate(only_errors, slow).verdict is Verdict.PASSED
    unreachable = evaluate(OPERATIONAL, measurement(unreachable=("gateway-1",)))
    assert [g.name for g in unreachable.gates] == ["error_rate", "p99_ms", "score_std"]
    assert unreachable.verdict is Verdict.INCONCLUSIVE


def test_operational_gates_stay_inconclusive_on_thin_traffic() -> None:
    thin = measurement(window(requests=20, errors=10), window(requests=20))
    analysis = evaluate(OPERATIONAL, thin)
    assert analysis.verdict is Verdict.INCONCLUSIVE
    assert all(g.verdict is Verdict.INCONCLUSIVE for g in analysis.gates)


@pytest.mark.parametrize("gates", [(), ("error_rate", "error_rate"), ("auc",), "error_rate"])
def test_gates_must_be_known_distinct_and_some(gates: object) -> None:
    with pytest.raises(ConfigError, match=r"gates=.*distinct names among"):
        CanarySpec.from_dict({"gates": gates})
