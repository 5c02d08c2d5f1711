"""modelops.canary: the canary release as a pure state machine, its gates, metrics sources and runner.

Pure (no I/O): :mod:`~modelops.canary.spec` (steps and thresholds),
:mod:`~modelops.canary.measurement` (one window, canary vs stable),
:mod:`~modelops.canary.gates` (error rate, p99, score collapse, CTR; incidents),
:mod:`~modelops.canary.status` (the persisted record), :mod:`~modelops.canary.actions`
and :mod:`~modelops.canary.machine` (``start`` / ``advance``),
:mod:`~modelops.canary.promtext` (Prometheus text parser), :mod:`~modelops.canary.report`.

Side effects: :mod:`~modelops.canary.sources` (scrape / Prometheus API),
:mod:`~modelops.canary.runner` (carries out actions through ports, checkpoints),
:mod:`~modelops.canary.adapters` (object-store routes and checkpoints, Triton, MLflow),
:mod:`~modelops.canary.record` and :mod:`~modelops.canary.record_store` (the release record the
cockpit reads), :mod:`~modelops.canary.description` (the MLflow version's description).

Typical loop (a runner per release, one event per interval)::

    runner.begin()                                  # 1 %, "started" notification
    opened = source.open_window(model, now)
    ... wait spec.interval_s ...
    m = source.measure(model, stable, canary, opened, now)
    status = runner.handle(m)                       # advance + carry out + persist
"""

from __future__ import annotations

from modelops.canary.actions import (
    AbortCommand,
    ApproveCommand,
    PauseCommand,
    PromotionApplied,
    ResumeCommand,
    RollbackApplied,
)
from modelops.canary.gates import Analysis, GateResult, Verdict, bucket_quantile, evaluate
from modelops.canary.machine import abort, advance, approve, pause, resume, start
from modelops.canary.measurement import Measurement, VersionWindow
from modelops.canary.spec import CanarySpec
from modelops.canary.status import CanaryStatus, Phase

__all__ = [
    "AbortCommand", "Analysis", "ApproveCommand", "CanarySpec", "CanaryStatus", "GateResult", "Measurement",
    "PauseCommand", "Phase", "PromotionApplied", "ResumeCommand", "RollbackApplied", "Verdict", "VersionWindow",
    "abort", "advance", "approve", "bucket_quantile", "evaluate", "pause", "resume", "start",
]
