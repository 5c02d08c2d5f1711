"""What the outcome job measures per model, version and day: action rates and realized performance.

Pure, typed definitions shared by the Spark job (:mod:`modelops.feedback.outcome_job`), its tests
(``sklearn.metrics`` is the oracle) and the DuckDB anchor of ``bench/feedback.py``. The engines
aggregate sums per ``(model, version, day)`` (:class:`OutcomeSums`); the metrics are finished here.

The rules, for one run over the prediction days ``[start, end)``:

* A prediction belongs to the day of its ``ts`` (UTC). A token's events are matched against its
  earliest prediction (as in :mod:`modelops.feedback.definitions`); events whose token is on no
  prediction of the run are not counted (their prediction belongs to another run's days).
* **Actions** count as in the CTR join: an action event counts when ``0 <= ts - prediction ts <=
  window``; ``acted[a]`` = predictions with at least one such event of action ``a``; its rate is
  ``acted[a] / impressions``. For a version that declares ``click`` and ``purchase``, ``ctr`` and
  ``cvr`` follow :func:`modelops.feedback.definitions.ctr` / ``cvr`` (converted: click and purchase).
* **Labels**: a label event counts when its ``ts`` is not before its prediction's (else it is
  rejected as ``before_prediction``); per prediction the first label counts (earliest ``ts``, then
  ``received_at``), later ones are ``duplicate``. *Labelled* = predictions with a counted label;
  *coverage* = labelled / impressions; the delay is ``label ts - prediction ts`` in seconds, its
  p50 / p90 with linear interpolation (``numpy.percentile``'s default). *Scored* = labelled rows
  whose prediction record holds the prediction (one-row requests; :data:`modelops.records.PREDICTIONS`).
* Metrics over the scored rows, as ``sklearn.metrics`` defines them: binary — ``roc_auc_score``
  (ties count one half; None when one class is missing), ``log_loss`` (probabilities clipped to
  ``[eps, 1 - eps]``, ``eps`` of float64), ``accuracy_score`` of the class with the larger
  probability (1 when ``p > 0.5``), ``brier_score_loss``; multiclass — ``accuracy_score`` of the
  most probable class (the first on ties) and ``log_loss``; numeric — RMSE and MAE.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from modelops.feedback.definitions import ctr, cvr, iso

SCHEMA_VERSION = 1
"""Version of the per-model outcome documents."""
EPS = float(np.finfo(np.float64).eps)
"""The clip of log loss (``sklearn.metrics.log_loss`` on float64 probabilities)."""
DEFAULT_OUTCOME_DAYS = 7
"""Days one run recomputes, ending with its own: labels that arrive later update them on the next runs."""
REJECTED_LABELS: tuple[str, ...] = ("before_prediction", "duplicate", "not_declared")
"""Why a label event of a matched prediction was not counted (``not_declared``: the version declares
no label of that form, e.g. a ``value`` for a binary label)."""


@dataclass(frozen=True)
class OutcomeSums:
    """What an engine aggregates for one ``(model, version, day)``; the metrics follow from these."""

    model: str
    model_version: int
    day: str
    impressions: int
    acted: Mapping[str, int] = field(default_factory=dict)
    converted: int = 0
    labelled: int = 0
    scored: int = 0
    positives: int = 0
    correct: int = 0
    log_loss_sum: float = 0.0
    squared_sum: float = 0.0
    absolute_sum: float = 0.0
    auc_sum: float = 0.0
    delay_p50_s: float | None = None
    delay_p90_s: float | None = None
    rejected: Mapping[str, int] = field(default_factory=dict)


def _mean(total: float, n: int) -> float | None:
    return total / n if n else None


def performance(kind: str, s: OutcomeSums) -> dict[str, float | None]:
    """The realized metrics of a ``kind`` label (see the module docstring) from the sums."""
    n = s.scored
    if kind == "numeric":
        mse = _mean(s.squared_sum, n)
        return {"rmse": None if mse is None else math.sqrt(mse), "mae": _mean(s.absolute_sum, n)}
    if kind == "multiclass":
        return {"accuracy": _mean(s.correct, n), "log_loss": _mean(s.log_loss_sum, n)}
    negatives = n - s.positives
    return {"auc": s.auc_sum / (s.positives * negatives) if s.positives and negatives else None,
            "log_loss": _mean(s.log_loss_sum, n), "accuracy": _mean(s.correct, n), "brier": _mean(s.squared_sum, n)}


def auc_sum(scores: npt.NDArray[np.float64], positive: npt.NDArray[np.bool_]) -> float:
    """``sum over distinct scores of pos(s) * (neg below s + neg(s) / 2)``: AUC times ``P * N`` (Mann-Whitney)."""
    values, inverse = np.unique(scores, return_inverse=True)
    pos = np.bincount(inverse, weights=positive.astype(np.float64), minlength=len(values))
    neg = np.bincount(inverse, weights=(~positive).astype(np.float64), minlength=len(values))
    below = np.concatenate(([0.0], np.cumsum(neg)[:-1]))
    return float(np.dot(pos, below + neg / 2.0))


def binary_log_loss(p: npt.NDArray[np.float64], y: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
    """Per-row log loss of the positive-class probability ``p`` for labels ``y``."""
    chosen = np.where(y, p, 1.0 - p)
    loss: npt.NDArray[np.float64] = -np.log(np.clip(chosen, EPS, 1.0 - EPS))
    return loss


DELAY_QUANTILES = (0.5, 0.9)
"""The label delay quantiles reported (p50, p90)."""


def quantile_from_ranks(ranked: Mapping[int, float], n: int, q: float) -> float | None:
    """The ``q`` quantile of ``n`` sorted values, linearly interpolated, from the values at its two ranks.

    ``ranked`` maps a 0-based rank to the value there; ranks ``floor(q (n-1))`` and ``ceil(q (n-1))``
    must be present (``numpy.percentile``'s default ``linear`` method). None for ``n == 0``.
    """
    if n <= 0:
        return None
    h = q * (n - 1)
    lo, hi = math.floor(h), math.ceil(h)
    return ranked[lo] + (h - lo) * (ranked[hi] - ranked[lo])


def delay_percentiles(delays_s: Sequence[float]) -> tuple[float | None, float | None]:
    """p50 and p90 of the label delays (linear interpolation), None without labels."""
    if not len(delays_s):
        return None, None
    p50, p90 = np.percentile(np.asarray(delays_s, dtype=np.float64), [50, 90])
    return float(p50), float(p90)


def covered_days(day: str, n_days: int) -> tuple[datetime, datetime]:
    """``(start, end)`` (UTC midnights) of the prediction days a run for ``day`` recomputes: ``n_days`` ending with it.

    Raises:
        ValueError: ``n_days`` below 1, or ``day`` not ``YYYY-MM-DD``.
    """
    if n_days < 1:
        raise ValueError(f"outcome days must be >= 1 (example: {DEFAULT_OUTCOME_DAYS}), got {n_days}")
    try:
        last = date.fromisoformat(day)
    except ValueError:
        raise ValueError(f"day must be YYYY-MM-DD (example: 2026-11-01), got {day!r}") from None
    end = datetime(last.year, last.month, last.day, tzinfo=UTC) + timedelta(days=1)
    return end - timedelta(days=n_days), end


def _number(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def version_entry(sums: OutcomeSums, actions: Sequence[str], kind: str | None) -> dict[str, Any]:
    """One version's entry of a day's document: its declared actions' rates and, when labelled, its performance."""
    entry: dict[str, Any] = {
        "model_version": sums.model_version,
        "impressions": sums.impressions,
        "actions": {a: {"count": int(sums.acted.get(a, 0)), "rate": ctr(int(sums.acted.get(a, 0)), sums.impressions)}
                    for a in actions},
    }
    if "click" in actions and "purchase" in actions:
        clicked = int(sums.acted.get("click", 0))
        entry["ctr"], entry["cvr"] = ctr(clicked, sums.impressions), cvr(sums.converted, clicked)
    if kind is not None:
        entry["label"] = {
            "kind": kind, "labelled": sums.labelled, "scored": sums.scored,
            "coverage": ctr(sums.labelled, sums.impressions),
            "delay_p50_s": sums.delay_p50_s, "delay_p90_s": sums.delay_p90_s,
            "metrics": {k: _number(v) for k, v in performance(kind, sums).items()},
            "rejected": {r: int(sums.rejected.get(r, 0)) for r in REJECTED_LABELS},
        }
    return entry


def outcome_document(*, model: str, day: str, entries: Sequence[dict[str, Any]], start: datetime, end: datetime,
                     window_hours: float) -> dict[str, Any]:
    """A model's document for one day (``schema_version`` 1): its versions' entries, ordered by version."""
    return {
        "schema_version": SCHEMA_VERSION,
        "model": model,
        "day": day,
        "run": {"start": iso(start), "end": iso(end), "window_hours": window_hours},
        "versions": sorted(entries, key=lambda e: int(e["model_version"])),
    }
