"""Shadow-phase benchmark: detection time and wrong decisions of the shadow gates, simulated.

What runs: the pure state machine (:func:`modelops.canary.machine.advance`) and the shadow's gates
(:mod:`modelops.canary.shadow`) exactly as the Airflow operator and trigger drive them — windows of
``interval_s``, an early look every ``check_s`` that closes a window as soon as a sequential test
fails (:func:`~modelops.canary.shadow.shadow_fails_early`) — fed a **simulated metrics stream**
instead of a live stack: every second, Poisson(``rate``) requests of 2–6 items answered by the stable
version (scores ~ Beta(2, 8): mean 0.2, std 0.12, like the reference recommender's 0.11), each
mirrored (``shadow_share``) to a candidate whose answer, latency and errors the variant sets, and
counted the way the gateway counts them (:mod:`modelops.gateway.shadow.divergence`: |Δ| per item into the
same histogram bounds, top-k order changes per request, call time histograms). A live run per trial
(publish, Airflow, ≥ 60 s windows) would take 2–5 minutes; the simulation runs a trial in well under
a second, so every variant gets many trials. What it leaves out is the live stack's noise (the
integration tests, ``tests/integration/test_shadow_release.py``, run the same gates on the real one).

Variants: ``good`` (the same answers), ``better`` (an intended change: every score moved by N(0, 0.04),
released with the allowance it declares: disagreement rate 0.9 / limit 0.99, |Δ| median 0.1, p95 0.3),
``faulty-errors`` (5 % of its calls fail), ``slow`` (3× the stable's call time), ``collapsed`` (a
constant score), ``permuted`` (each request's item scores reversed: silently different). The spec is
the default one with ``shadow`` on, except ``slo_p99_ms``, set (as ``bench/canary.py`` does) to twice
the stable's simulated call p99 so that a 3× slower candidate is beyond it.

Per variant: decisions (rolled back in shadow / passed to the first step / undecided at the cap),
detection time (release start → rollback decision) median and max, wrong decisions (a good or better
candidate rolled back, a faulty one passed). Goal: 0 wrong, the silently different one caught in ≥ 9
of 10 within 60 s at 40 req/s. The last line is the ratio of its median detection time to 60 s.

    .venv/bin/python bench/canary.py --shadow-sim --trials 20
    .venv/bin/python bench/canary_shadow.py --trials 20 --rate 10
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from modelops.canary.actions import Rollback, RollbackApplied
from modelops.canary.machine import advance, start
from modelops.canary.measurement import Measurement, ShadowWindow, VersionWindow
from modelops.canary.shadow import shadow_fails_early
from modelops.canary.spec import CanarySpec
from modelops.canary.status import Phase
from modelops.canary.testing import DIVERGENCE_BOUNDS, LATENCY_BUCKETS_S

VARIANTS = ("good", "better", "faulty-errors", "slow", "collapsed", "permuted")
FAULTY = frozenset({"faulty-errors", "slow", "collapsed", "permuted"})
ALLOWANCE = {"shadow_disagreement_rate": 0.9, "shadow_disagreement_limit": 0.99, "shadow_max_delta_median": 0.1,
             "shadow_max_delta_p95": 0.3}
STABLE_MEDIAN_S, STABLE_SIGMA = 0.004, 0.5  # the stable's Triton call time: lognormal, p99 ~13 ms
STABLE_ERROR_RATE = 0.001
GOAL_S = 60.0


@dataclass
class Counts:
    """One window's counters so far, as the gateway's shadow series would show them."""

    requests: int = 0
    stable_errors: int = 0
    answered: int = 0
    errors: int = 0
    candidate: np.ndarray = field(default_factory=lambda: np.zeros(len(LATENCY_BUCKETS_S) + 1))
    stable: np.ndarray = field(default_factory=lambda: np.zeros(len(LATENCY_BUCKETS_S) + 1))
    diffs: np.ndarray = field(default_factory=lambda: np.zeros(len(DIVERGENCE_BOUNDS) + 1))
    compared: int = 0
    changed: int = 0

    def window(self, start: float, end: float) -> Measurement:
        def cumulative(bounds: tuple[float, ...], counts: np.ndarray) -> tuple[tuple[float, float], ...]:
            running = np.cumsum(counts)
            return (*((b, float(c)) for b, c in zip(bounds, running[:-1], strict=True)), (math.inf, float(running[-1])))

        shadow = ShadowWindow(mirrored=self.answered + self.errors, dropped=0.0, answered=self.answered,
                              errors=self.errors, candidate_buckets=cumulative(LATENCY_BUCKETS_S, self.candidate),
                              stable_buckets=cumulative(LATENCY_BUCKETS_S, self.stable),
                              abs_buckets=cumulative(DIVERGENCE_BOUNDS, self.diffs),
                              topk_compared=self.compared, topk_changed=self.changed)
        return Measurement(start, end, VersionWindow(requests=0.0, errors=0.0),
                           VersionWindow(requests=self.requests, errors=self.stable_errors), shadow=shadow)


def _order(scores: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-scores, kind="stable")[:k]


def one_second(counts: Counts, variant: str, rate: float, top_k: int, rng: np.random.Generator) -> None:
    """Add one second of traffic, mirrored, to ``counts``."""
    for _ in range(rng.poisson(rate)):
        counts.requests += 1
        if rng.random() < STABLE_ERROR_RATE:
            counts.stable_errors += 1
            continue  # a failed stable answer is not mirrored
        items = int(rng.integers(2, 7))
        stable = rng.beta(2.0, 8.0, size=items)
        stable_s = float(rng.lognormal(math.log(STABLE_MEDIAN_S), STABLE_SIGMA))
        counts.stable[np.searchsorted(LATENCY_BUCKETS_S, stable_s)] += 1
        candidate_s = stable_s * (3.0 if variant == "slow" else float(rng.lognormal(0.0, 0.1)))
        counts.candidate[np.searchsorted(LATENCY_BUCKETS_S, candidate_s)] += 1
        if variant == "faulty-errors" and rng.random() < 0.05:
            counts.errors += 1
            continue
        counts.answered += 1
        if variant == "better":
            candidate = np.clip(stable + rng.normal(0.0, 0.04, size=items), 0.0, 1.0)
        elif variant == "collapsed":
            candidate = np.full(items, 0.2)
        elif variant == "permuted":
            candidate = stable[::-1]
        else:
            candidate = stable
        np.add.at(counts.diffs, np.searchsorted(DIVERGENCE_BOUNDS, np.abs(candidate - stable)), 1)
        counts.compared += 1
        counts.changed += int(not np.array_equal(_order(stable, top_k), _order(candidate, top_k)))


@dataclass(frozen=True)
class Trial:
    variant: str
    decision: str  # rolled_back | passed | undecided
    detection_s: float | None
    windows: int

    @property
    def wrong(self) -> bool:
        return (self.decision == "passed") == (self.variant in FAULTY) and self.decision != "undecided"


def trial(variant: str, spec: CanarySpec, rate: float, seed: int, cap_s: float) -> Trial:
    """One release in shadow, second by second, until it leaves the shadow phase or ``cap_s``."""
    rng = np.random.default_rng(seed)
    status, _ = start(spec, "bench", 1, 2, 0.0)
    now, opened, counts = 0.0, 0.0, Counts()
    while now < cap_s:
        one_second(counts, variant, rate, spec.shadow_top_k, rng)
        now += 1.0
        due = now >= opened + spec.interval_s
        early = spec.check_s > 0 and not due and shadow_fails_early(
            spec, status.error_evidence, status.shadow_evidence, counts.window(opened, now))
        if not (due or early):
            continue
        status, actions = advance(spec, status, counts.window(opened, now), now)
        opened, counts = now, Counts()
        if any(isinstance(a, Rollback) for a in actions):
            status, _ = advance(spec, status, RollbackApplied(now), now)
            return Trial(variant, "rolled_back", status.detection_s, status.analyses)
        if status.phase is Phase.PROGRESSING:
            return Trial(variant, "passed", None, status.analyses)
        if status.phase is Phase.PAUSED:
            break
    return Trial(variant, "undecided", None, status.analyses)


def stable_p99_ms() -> float:
    return 1000.0 * STABLE_MEDIAN_S * math.exp(2.326 * STABLE_SIGMA)


def run(trials: int, rate: float, variants: list[str], cap_s: float) -> int:
    base = CanarySpec(shadow=True, slo_p99_ms=round(2 * stable_p99_ms(), 1))
    print(f"spec: default with shadow on, slo_p99_ms {base.slo_p99_ms} (2 x the stable's call p99); "
          f"{rate:g} req/s mirrored {base.shadow_share:.0%}; windows {base.interval_s:g} s, early looks every "
          f"{base.check_s:g} s; {trials} trials per variant (simulated metrics stream through the pure machine)")
    print(f"{'variant':<14} {'rolled back':>11} {'passed':>6} {'undecided':>9} {'wrong':>5} "
          f"{'detect med/max s':>16} {'caught <= 60 s':>14}")
    wrong_total, permuted_median = 0, math.nan
    for variant in variants:
        spec = dataclasses.replace(base, **ALLOWANCE) if variant == "better" else base
        rows = [trial(variant, spec, rate, seed=1000 * k + VARIANTS.index(variant), cap_s=cap_s)
                for k in range(trials)]
        detections = [t.detection_s for t in rows if t.detection_s is not None]
        wrong = sum(t.wrong for t in rows)
        wrong_total += wrong
        caught = sum(1 for d in detections if d <= GOAL_S)
        text = f"{statistics.median(detections):.1f}/{max(detections):.1f}" if detections else "-"
        print(f"{variant:<14} {sum(t.decision == 'rolled_back' for t in rows):>11} "
              f"{sum(t.decision == 'passed' for t in rows):>6} {sum(t.decision == 'undecided' for t in rows):>9} "
              f"{wrong:>5} {text:>16} {caught:>9}/{trials:<4}")
        if variant == "permuted" and detections:
            permuted_median = statistics.median(detections)
    print(f"wrong decisions: {wrong_total}")
    print(f"silently different (permuted) detection median / {GOAL_S:g} s goal: ratio {permuted_median / GOAL_S:.2f}")
    return 1 if wrong_total else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--rate", type=float, default=40.0, help="stable requests per second (default 40)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--cap-s", type=float, default=600.0, help="a trial still in shadow by then is undecided")
    args = parser.parse_args(argv)
    return run(args.trials, args.rate, [v for v in args.variants.split(",") if v], args.cap_s)


if __name__ == "__main__":
    sys.exit(main())
