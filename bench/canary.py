"""Canary benchmark: detection time, MTTR and wrong decisions over N trials per variant.

What runs: the same :class:`~modelops.canary.runner.Runner` the Airflow ``CanaryOperator``
drives, built by :func:`modelops.canary.operator.wire` with the real adapters (routes in
the object store applied by the gateway, Triton load/unload, MLflow promote/rollback
tags, checkpoint in the object store, :class:`~modelops.canary.sources.ScrapeSource`
over the gateway's and Triton's ``/metrics``), in this process, against a real stack
(object store + MLflow + Triton + gateway; Airflow is not started). The loop is the
operator's: wait out ``interval_s`` (looking at the window so far every ``check_s``, as the
trigger does, and closing it early when the error test already finds the canary bad), close
the window, measure it
(the source's ``measure_between``), ``runner.handle``, until the release
ends; windows are contiguous (the marker that closes one opens the next, as the trigger
does). Airflow adds its hop on top of every window (defer, triggerer, worker pick-up):
``tests/integration/test_canary_release.py`` measures MTTR through Airflow; this bench
measures the canary loop itself with real components.

Setup (not timed): a stack on ports 26xxx in a temporary ``MODELOPS_HOME`` (or the
stack the MODELOPS_* settings point at, with ``--use-running``); one reference model
trained (and a ``collapsed`` one); feature tables published; a stable version registered,
published and routed 100 % through the gateway; generated traffic (``--rate`` req/s,
one :class:`~modelops.traffic.runner.BackgroundTraffic` for the whole run, so every trial
sees the same traffic) warms up for ``--warmup-s`` seconds.

Calibration of the slow variant and of the SLO: during the warm-up the stable version's
end-to-end latency at the gateway is measured from the gateway histogram's deltas over
the warm-up (``_sum / _count``: the mean; the buckets: the p99, interpolated as the
latency gate does). The slow variant's model step sleeps
``(slowdown - 1) × max(own time, base_ms)`` per batch (see
``model_repository/templates/onnx_model.py``); its own time is microseconds, so with
``slowdown`` 3 each request gains ``2 × base_ms``. With ``base_ms`` = the stable's p99
(``--slow-base p99``, the default) the slow version's p99 is about 3× the stable's — 3×
slower end to end at the percentile the latency gate reads. With ``--slow-base mean`` it
is 3× slower on average only, which on this shared machine hides inside the stable's
noisy tail (p99 swings 8–40 ms between windows while the mean is ~4 ms): the p99 gate
cannot see it and the slow version is promoted (measured: 2 of 2 trials promoted). The
table prints, per trial, the canary and stable p99 of the last window, so the factor
actually reached is visible. The SLO (``--slo-p99-ms``) defaults to twice the warm-up
stable p99: the latency gate is ``max(SLO, 1.5 × stable p99 of the window)``, and the
SLO must stay above the stable's own p99 (a stable above the SLO while the canary's
latency gate fails is an *incident*, which pauses the release instead of rolling back).

Trials: ``--trials`` of each variant, interleaved (good, faulty-errors, collapsed, slow,
good, ...) so the machine's noise spreads evenly. Each trial registers a candidate (same
weights, another ``variant.json``: another sha256, so another Triton version), moves it to
Staging, publishes it to Triton, runs the DAG's ``verify_served`` step (which also makes
the version's first inferences, as in a real release), and runs the release with the
default spec's shape: steps 25,50,100 %, one passed analysis per step, ``interval_s`` 5,
``min_requests`` 20 (the integration tests' values). ``faulty-errors`` fails
``--error-rate`` (default 0.05, the issue's "raises on 5 % of requests") of its batches. A
trial longer than ``--trial-cap-s`` ends as ``timeout``; a paused release (inconclusive
windows, or an incident: the stable degrading too) ends as ``paused``; both are then
aborted (rolled back) so the next trial starts from the stable alone, and count as
undecided, not as wrong. A promoted (good) version becomes the new stable, as in
production (MLflow forbids Archived → Production, so the original cannot come back), and
the previous stable is unloaded from Triton; every stable is the same weights with
``variant: good``, so trials stay comparable. A faulty version promoted (a wrong decision)
is routed away again at once (routes back to the previous stable, the faulty one unloaded;
MLflow keeps it as Production, which only this bench's throw-away model sees), so one
wrong decision does not poison later trials.

Per trial: decision, detection time (start of the first failing window → the rollback
decision, i.e. the ``rolling_back`` transition), MTTR (``status.mttr_s``: first failing
window start → every gateway applied 0 % canary), trial duration. Wrong decisions: a good
version rolled back, a faulty one promoted. Exit code 1 when there is any. The detection
clock is the machine's: a passed window ends a run of failures, so fail, pass, fail
detects in one window (the failures still add up to ``failure_limit``).

5 % errors is thin at this traffic: at 25 % a 5 s window holds ~50 canary requests, ~2.5
expected errors. When each window was judged alone (a window failed from 3 errors), 1 of 5
such releases was promoted with steps 25,50,100. The error gate is now a sequential test
over the windows of a step (:mod:`modelops.canary.sequential`): a step passes only once the
evidence says the canary fails at most p0 = max(stable rate, 1 %) of its requests, and a
canary failing p1 = 5 % is rolled back once the evidence says so, with false-promotion and
false-rollback rates of 1 % each at any traffic rate.

Goal: no wrong decision in 20 trials at 40 req/s including 5 % faulty, MTTR median <= 10 s
(the MTTR clock starts at the first window that did not pass, a pending one included, so the
time the sequential test spends gathering evidence counts); the reference design this
platform grew from promised MTTR < 90 s. The last line is the ratio of the MTTR median to
the 10 s goal.

    .venv/bin/python bench/canary.py --trials 1          # quick (~4 min with stack start)
    .venv/bin/python bench/canary.py --trials 5          # the issue's run (11-18 min on 2 busy cores)
    .venv/bin/python bench/canary.py --use-running --variants good,slow --verbose
    .venv/bin/python bench/canary.py --shadow-sim --trials 10   # the shadow phase (simulated stream, seconds)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from modelops.config import stack_port_env  # after the path: runnable without the install
from modelops.modelspec.recommender import recommender_features

PORT_BASE = 26000  # beside the integration suites (24xxx, 27xxx) and a developer's stack
BENCH_ENV = {
    **stack_port_env(PORT_BASE),
    "MODELOPS_FEEDBACK_SECRET": "modelops-bench-canary-feedback-secret",
    "MODELOPS_NOTIFY_URLS": "",
    "MODELOPS_OBSERVABILITY": "off",  # the bench stack runs no Prometheus/Pushgateway
}
VARIANTS = ("good", "faulty-errors", "collapsed", "slow")
GOAL_MTTR_S = 10.0
REFERENCE_MTTR_S = 90.0
LATENCY = "modelops_gateway_request_duration_seconds"


@dataclass(frozen=True)
class Trial:
    """One release and how it ended."""

    variant: str
    canary_version: int
    decision: str  # promoted | rolled_back | paused | timeout
    detection_s: float | None
    mttr_s: float | None
    duration_s: float
    analyses: int
    reason: str
    canary_p99_ms: float | None = None
    stable_p99_ms: float | None = None

    @property
    def wrong(self) -> bool:
        if self.variant == "good":
            return self.decision == "rolled_back"
        return self.decision == "promoted"


# ------------------------------------------------------------------ setup
@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Keep MLflow's and the trainer's chatter (run links, progress bars) off the report; shown on failure."""
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            yield
    except BaseException:
        sys.stderr.write(sink.getvalue())
        raise


def _register(trained: Any, mlflow_uri: str, name: str) -> str:
    from modelops.example.tracking import log_trained_model

    logged = log_trained_model(trained, mlflow_uri, register_name=name, experiment="modelops-bench-canary")
    if logged.registered_version is None:
        raise RuntimeError(f"{name}: the model was logged but not registered")
    return str(logged.registered_version)


def _with_variant(trained: Any, document: dict[str, Any]) -> Any:
    """The same weights with another variant.json (another sha256, so another Triton version)."""
    return replace(trained, variant_json=json.dumps({**document, "nonce": uuid.uuid4().hex}).encode())


def _publish_candidate(trained: Any, mlflow_uri: str, model: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Register, move to Staging, publish to Triton: the ``candidate`` and ``published`` XComs of the DAG."""
    from modelops.registry.mlflow_registry import MlflowRegistry
    from modelops.serving.publisher import publish_version

    with _quiet():
        version = _register(trained, mlflow_uri, model)
        MlflowRegistry.from_settings().to_staging(model, version, contract_passed=True, contract_result="passed")
        result = publish_version(model, version)
        candidate = {"model": model, "version": version, "started_by": "bench-canary"}
        published = {"model": model, "triton_version": result.triton_version, "sha256": result.sha256}
        _verify_served(candidate, published)
    return candidate, published


def _verify_served(candidate: dict[str, Any], published: dict[str, Any], tries: int = 3) -> None:
    """The DAG's ``verify_served`` step (inferences straight to Triton; retried as the DAG task is).

    Besides checking, it is the new version's first inferences, as in a real release.
    """
    from modelops.release.steps import verify

    for attempt in range(1, tries + 1):
        try:
            verify(candidate, published)
            return
        except Exception:  # the faulty-errors variant may fail the check's batch: the DAG task retries
            if attempt == tries:
                raise


def _serve_stable(cfg: Any, store: Any, trained: Any, model: str) -> dict[str, Any]:
    """v1 published, Production + champion, routed 100 % through the gateway (as the integration tests do)."""
    import requests

    from modelops.documents.routes import Routes, VersionRef, routes_key, serialize_routes
    from modelops.registry.mlflow_registry import MlflowRegistry

    candidate, published = _publish_candidate(_with_variant(trained, {"variant": "good"}), cfg.mlflow_uri, model)
    MlflowRegistry.from_settings().promote(model, candidate["version"])
    routes = Routes(model=model, revision=1, stable=VersionRef(published["triton_version"], published["sha256"]),
                    canary=None, canary_weight=0.0, updated_at=datetime.now(UTC).isoformat(),
                    updated_by="bench-canary")
    store.put_bytes(routes_key(model), serialize_routes(routes))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        health = requests.get(f"{cfg.gateway_url}/healthz", timeout=5).json()
        if model in health.get("models", []) and health.get("feature_snapshot"):
            return {**published, "version": candidate["version"]}
        time.sleep(0.5)
    raise RuntimeError(f"the gateway never served {model}")


def _publish_features(store: Any) -> None:
    from modelops.example.synthetic import WorldSpec, generate_tables
    from modelops.example.tables import publish_feature_tables

    features = recommender_features()
    users, items = generate_tables(features, replace(WorldSpec(), seed=7, n_users=400, n_items=400))
    publish_feature_tables(store, f"bench-canary-{uuid.uuid4().hex[:6]}", users, items, features=features)


def _traffic(cfg: Any, model: str, rate: float) -> Any:
    from modelops.traffic.runner import BackgroundTraffic
    from modelops.traffic.simulation import Behaviour, TrafficSpec

    spec = TrafficSpec(model=model, rate=rate, max_requests=10**8, max_seconds=6 * 3600.0, n_users=400,
                       n_items=400, items_per_request=(2, 6), id_width=6, default=Behaviour(0.3, 0.4, 0.2),
                       per_version={}, concurrency=8, seed=3)
    return BackgroundTraffic(spec, cfg.gateway_url)


def _latency_totals(gateway_url: str, model: str, version: int) -> tuple[float, float, dict[float, float]]:
    """The gateway's latency histogram of one version: ``_sum`` (s), ``_count`` and cumulative buckets."""
    import math

    from modelops.canary.promtext import parse
    from modelops.canary.sources import http_fetch

    total, count = 0.0, 0.0
    buckets: dict[float, float] = {}
    for sample in parse(http_fetch()(f"{gateway_url.rstrip('/')}/metrics")):
        labels = dict(sample.labels)
        if labels.get("model") == model and labels.get("version") == str(version):
            if sample.name == f"{LATENCY}_sum":
                total += sample.value
            elif sample.name == f"{LATENCY}_count":
                count += sample.value
            elif sample.name == f"{LATENCY}_bucket":
                le = labels.get("le", "+Inf")
                bound = math.inf if le in {"+Inf", "Inf"} else float(le)
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return total, count, buckets


# ------------------------------------------------------------------ one trial
def _run_trial(variant: str, trained: Any, cfg: Any, model: str, spec: Any,
               cap_s: float, verbose: bool = False) -> Trial:
    from modelops.canary.actions import AbortCommand
    from modelops.canary.adapters import ObjectStoreRoutes, TritonServing
    from modelops.canary.early import wait_window
    from modelops.canary.gates import p99_ms
    from modelops.canary.operator import wire
    from modelops.canary.status import Phase

    candidate, published = _publish_candidate(trained, cfg.mlflow_uri, model)
    wiring = wire(candidate, published, spec)
    if wiring.runner is None:
        raise RuntimeError(f"{model}: no stable version to compare with")
    runner, source = wiring.runner, wiring.source
    stable_tv, canary_tv = runner.release.stable.triton_version, runner.release.canary.triton_version
    started = time.time()
    status = runner.begin()
    p99: tuple[float, float] | None = None
    # The operator's loop: contiguous windows, the marker that closes one opens the next.
    opened = source.open_window(model, time.time())
    while not status.phase.terminal and status.phase is not Phase.PAUSED and time.time() - started < cap_s:
        # The trigger's wait: the error test looks at the window so far every check_s (early: rolled back).
        closed, _early = wait_window(source, model, stable_tv, canary_tv, opened, spec, status.error_evidence,
                                     baseline=status.baseline)
        weight = status.weight
        m = source.measure_between(model, stable_tv, canary_tv, opened, closed)
        status = runner.handle(m)
        opened = closed
        p99 = (p99_ms(m.canary), p99_ms(m.stable))  # what the latency gate compared in the last window
        if verbose and status.last_analysis is not None:
            print(f"      {variant} v{canary_tv} at {weight:.0%}: {status.last_analysis.summary()}", flush=True)
    decision = status.phase.value if status.phase.terminal else (
        "paused" if status.phase is Phase.PAUSED else "timeout")
    duration = time.time() - started
    if not status.phase.terminal:  # undecided: roll back so the next trial starts from the stable alone
        runner.handle(AbortCommand("bench-canary", f"trial ended undecided ({decision})"))
    detection = None
    if status.rollback_requested_at is not None and status.first_failing_window_start is not None \
            and status.phase is Phase.ROLLED_BACK:
        detection = status.rollback_requested_at - status.first_failing_window_start
    if status.phase is Phase.PROMOTED and variant == "good":  # the new stable; the old one leaves Triton
        TritonServing(cfg).unload(model, stable_tv)
    elif status.phase is Phase.PROMOTED:  # a wrong promotion: back to the previous stable, or it would
        # be the stable of the next trials (and every later comparison would be against a faulty version)
        ObjectStoreRoutes(wiring.store, wiring.gateway_urls).apply(model, runner.release.stable, None, 0.0,
                                                                   "bench-canary")
        TritonServing(cfg).unload(model, canary_tv)
    return Trial(variant, canary_tv, decision, detection,
                 status.mttr_s if status.phase is Phase.ROLLED_BACK else None, duration, status.analyses,
                 status.reason, *(p99 or (None, None)))


# ------------------------------------------------------------------ report
def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def _p99_ratio(rows: list[Trial]) -> str:
    """Median over trials of canary p99 / stable p99 in each trial's last window."""
    ratios = [t.canary_p99_ms / t.stable_p99_ms for t in rows
              if t.canary_p99_ms and t.stable_p99_ms and t.canary_p99_ms == t.canary_p99_ms]
    return f"{statistics.median(ratios):.1f}x" if ratios else "-"


def _print_report(trials: list[Trial]) -> int:
    print("\nper variant (detection = first failing window start -> rollback decided; "
          "MTTR = -> 0 % canary applied by the gateway):")
    print(f"  {'variant':14} {'n':>2} {'promoted':>8} {'rolled_back':>11} {'other':>5}  "
          f"{'detect med/max s':>16}  {'MTTR med/max s':>14}  {'duration med s':>14}  {'p99 canary/stable':>17}")
    for variant in VARIANTS:
        rows = [t for t in trials if t.variant == variant]
        if not rows:
            continue
        det = [t.detection_s for t in rows if t.detection_s is not None]
        mttr = [t.mttr_s for t in rows if t.mttr_s is not None]
        promoted = sum(t.decision == "promoted" for t in rows)
        rolled = sum(t.decision == "rolled_back" for t in rows)
        det_text = f"{statistics.median(det):.1f} / {max(det):.1f}" if det else "-"
        mttr_text = f"{statistics.median(mttr):.1f} / {max(mttr):.1f}" if mttr else "-"
        print(f"  {variant:14} {len(rows):>2} {promoted:>8} {rolled:>11} {len(rows) - promoted - rolled:>5}  "
              f"{det_text:>16}  {mttr_text:>14}  {statistics.median(t.duration_s for t in rows):>14.1f}  "
              f"{_p99_ratio(rows):>17}")
    faulty = [t for t in trials if t.variant != "good"]
    det_all = [t.detection_s for t in faulty if t.detection_s is not None]
    mttr_all = [t.mttr_s for t in faulty if t.mttr_s is not None]
    wrong = [t for t in trials if t.wrong]
    undecided = [t for t in trials if t.decision in ("paused", "timeout")]
    good_rolled = sum(t.variant == "good" and t.decision == "rolled_back" for t in trials)
    print(f"\nwrong decisions: {len(wrong)} (good rolled back: {good_rolled}, "
          f"faulty promoted: {len(wrong) - good_rolled}); undecided (paused/timeout, aborted): {len(undecided)}")
    for t in wrong:
        print(f"  WRONG: {t.variant} v{t.canary_version} {t.decision}: {t.reason}")
    if det_all:
        print(f"faulty trials rolled back: {len(mttr_all)}/{len(faulty)}; detection median "
              f"{statistics.median(det_all):.1f} s, max {max(det_all):.1f} s; MTTR median "
              f"{statistics.median(mttr_all):.1f} s, max {max(mttr_all):.1f} s")
    if mttr_all:
        median = statistics.median(mttr_all)
        print(f"MTTR median / {GOAL_MTTR_S:g} s goal = {median / GOAL_MTTR_S:.2f} "
              f"(reference design: {REFERENCE_MTTR_S:g} s → ratio {median / REFERENCE_MTTR_S:.2f})")
    else:
        print(f"MTTR median / {GOAL_MTTR_S:g} s goal = n/a (no faulty trial was rolled back)")
    return 1 if wrong else 0


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5, help="trials per variant (default 5; 1 for a quick run)")
    parser.add_argument("--rate", type=float, default=40.0, help="generated traffic, requests/s (default 40)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"subset of {','.join(VARIANTS)}")
    parser.add_argument("--error-rate", type=float, default=0.05, help="faulty-errors: share of failed batches")
    parser.add_argument("--slowdown", type=float, default=3.0, help="slow: end-to-end slowdown (default 3)")
    parser.add_argument("--slow-base", choices=("p99", "mean"), default="p99",
                        help="slow: base_ms = the stable's warm-up p99 (default) or mean end-to-end latency")
    parser.add_argument("--slo-p99-ms", type=float, default=0.0,
                        help="p99 SLO; the latency gate is max(SLO, 1.5 x stable p99) (default 0: twice the "
                             "stable's warm-up p99)")
    parser.add_argument("--interval-s", type=float, default=5.0)
    parser.add_argument("--min-requests", type=int, default=20)
    parser.add_argument("--steps", default="25,50,100", help="canary weights in percent (default: 25,50,100)")
    parser.add_argument("--analyses-per-step", type=int, default=1, help="passed analyses needed per step")
    parser.add_argument("--warmup-s", type=float, default=15.0, help="stable-only traffic before the trials")
    parser.add_argument("--trial-cap-s", type=float, default=90.0, help="a trial longer than this is a timeout")
    parser.add_argument("--use-running", action="store_true",
                        help="use the stack the MODELOPS_* settings point at (not started nor stopped here)")
    parser.add_argument("--verbose", action="store_true", help="print every window's analysis")
    parser.add_argument("--shadow-sim", action="store_true",
                        help="the shadow phase's variants instead (bench/canary_shadow.py: the pure machine fed a "
                             "simulated metrics stream; --trials, --rate and --variants from its own list)")
    args = parser.parse_args(argv)
    if args.shadow_sim:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from canary_shadow import VARIANTS as SHADOW_VARIANTS
        from canary_shadow import run as run_shadow

        chosen = args.variants if args.variants != ",".join(VARIANTS) else ",".join(SHADOW_VARIANTS)
        return run_shadow(args.trials, args.rate, [v for v in chosen.split(",") if v], 600.0)
    variants = [v for v in args.variants.split(",") if v]
    if not set(variants) <= set(VARIANTS) or args.trials < 1:
        parser.error(f"--variants: a subset of {','.join(VARIANTS)}; --trials >= 1")

    print("load average at start (1/5/15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)
    home: str | None = None
    if not args.use_running:
        home = tempfile.mkdtemp(prefix="modelops-bench-canary-")
        os.environ.update(BENCH_ENV)
        os.environ["MODELOPS_HOME"] = home
        for key in ("MODELOPS_S3_ENDPOINT_URL", "MODELOPS_MLFLOW_TRACKING_URI", "MODELOPS_TRITON_URL",
                    "MODELOPS_AIRFLOW_URL", "MODELOPS_GATEWAY_URLS", "MODELOPS_CANARY_METRICS",
                    "MODELOPS_PROMETHEUS_URL"):
            os.environ.pop(key, None)
    from modelops.canary.params import spec_from_params
    from modelops.config import settings
    from modelops.objectstore import ObjectStore
    from modelops.stack import launcher

    settings.cache_clear()
    cfg = settings()
    finished = False
    try:
        if home is not None:
            print(f"starting object store, MLflow, Triton, gateway on ports {PORT_BASE}+ (home {home}) ...",
                  flush=True)
            launcher.up(cfg, progress=lambda line: None, only=("gateway", "mlflow"))
        code = _bench(args, variants, cfg, ObjectStore.from_settings(cfg), spec_from_params)
        finished = True
        return code
    finally:
        if home is not None:
            launcher.down(cfg, progress=lambda line: None)
            if finished:
                shutil.rmtree(home, ignore_errors=True)
            else:
                print(f"stack stopped; its state and logs are kept in {home}", file=sys.stderr)


def _bench(args: argparse.Namespace, variants: list[str], cfg: Any, store: Any, spec_from_params: Any) -> int:
    from modelops.canary.gates import bucket_quantile
    from modelops.example.synthetic import WorldSpec
    from modelops.example.train import TrainSpec, train

    store.ensure_bucket()
    model = f"benchcan_{uuid.uuid4().hex[:6]}"
    print(f"setup: training the reference model (and a collapsed one), stable version of {model} ...", flush=True)
    train_spec = TrainSpec(world=replace(WorldSpec(), n_requests=1500), hidden=(16,), max_iter=25)
    with _quiet():
        trained = train(train_spec)
        collapsed = train(replace(train_spec, variant="collapsed")) if "collapsed" in variants else None
        _publish_features(store)
    stable = _serve_stable(cfg, store, trained, model)
    trials: list[Trial] = []
    with _traffic(cfg, model, args.rate):
        before = _latency_totals(cfg.gateway_url, model, stable["triton_version"])
        time.sleep(args.warmup_s)
        after = _latency_totals(cfg.gateway_url, model, stable["triton_version"])
        answered = after[1] - before[1]
        mean_ms = (after[0] - before[0]) / answered * 1000.0 if answered > 0 else float("nan")
        stable_p99 = bucket_quantile(0.99, [(b, after[2][b] - before[2].get(b, 0.0)) for b in after[2]]) * 1000
        base_ms = round(stable_p99 if args.slow_base == "p99" else mean_ms, 2)
        slo_ms = args.slo_p99_ms or round(2.0 * stable_p99, 1)
        print(f"warm-up {args.warmup_s:g} s: stable v{stable['triton_version']} answered "
              f"{answered / args.warmup_s:.1f} req/s, end-to-end mean {mean_ms:.1f} ms, p99 {stable_p99:.1f} ms "
              f"at the gateway "
              f"-> slow variant base_ms {base_ms:g} ({args.slow_base}), slowdown {args.slowdown:g}", flush=True)
        spec = spec_from_params({"canary_steps": args.steps, "analysis_interval_s": args.interval_s,
                                 "min_requests": args.min_requests, "canary_slo_p99_ms": slo_ms,
                                 "canary_analyses_per_step": args.analyses_per_step})
        documents: dict[str, dict[str, Any]] = {
            "good": {"variant": "good"},
            "faulty-errors": {"variant": "faulty-errors", "error_rate": args.error_rate},
            "slow": {"variant": "slow", "slowdown": args.slowdown, "base_ms": base_ms},
            "collapsed": {"variant": "collapsed"},
        }
        print(f"spec: steps {args.steps} %, interval {spec.interval_s:g} s, min_requests {spec.min_requests}, "
              f"check_s {spec.check_s:g}, error_rate_floor {spec.error_rate_floor:g}, "
              f"analyses_per_step {spec.analyses_per_step}, slo_p99_ms {spec.slo_p99_ms:g}, "
              f"failure_limit {spec.failure_limit}; "
              f"{args.trials} trial(s) x {len(variants)} variants at {args.rate:g} req/s\n", flush=True)
        print(f"  {'#':>3} {'variant':14} {'canary':>6} {'decision':12} {'detect s':>8} {'MTTR s':>7} "
              f"{'total s':>7} {'wins':>4} {'p99 c/s ms':>13}  reason")
        for _ in range(args.trials):
            for variant in variants:
                base = collapsed if variant == "collapsed" else trained
                trial = _run_trial(variant, _with_variant(base, documents[variant]), cfg, model, spec,
                                   args.trial_cap_s, args.verbose)
                trials.append(trial)
                p99 = "-" if trial.canary_p99_ms is None else \
                    f"{trial.canary_p99_ms:.1f}/{trial.stable_p99_ms:.1f}"
                print(f"  {len(trials):>3} {variant:14} v{trial.canary_version:<5} {trial.decision:12} "
                      f"{_fmt(trial.detection_s):>8} {_fmt(trial.mttr_s):>7} {trial.duration_s:>7.1f} "
                      f"{trial.analyses:>4} {p99:>13}  {trial.reason[:90]}"
                      f"{'  <-- WRONG' if trial.wrong else ''}", flush=True)
    print("\nload average at end (1/5/15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return _print_report(trials)


if __name__ == "__main__":
    sys.exit(main())
