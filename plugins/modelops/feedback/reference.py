"""The whole feedback join in plain Python over small lists: the yardstick for the engines.

Slow and obvious on purpose: tests run it and the Spark job on the same generated data
and compare the counts and the quarantine exactly. The rules are in
:mod:`modelops.feedback.definitions`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from modelops.feedback.definitions import (
    Reason,
    TokenOutcome,
    VersionCounts,
    check_interval,
    in_run,
    is_well_formed,
    rejected_counts,
    utc,
    verdict,
    version_sort_key,
    window_micros,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Prediction:
    """The columns of a prediction-log row the join needs."""

    feedback_token: str | None
    ts: datetime | None
    model: str | None
    model_version: int | None


@dataclass(frozen=True)
class FeedbackEvent:
    """A feedback-log row (any field may be missing or wrong in bad input)."""

    feedback_token: str | None
    action: str | None
    ts: datetime | None
    received_at: datetime | None = None


@dataclass(frozen=True)
class ReferenceResult:
    """Per-version rows (sorted), rejected counts by reason and the quarantined events."""

    rows: tuple[VersionCounts, ...]
    rejected: dict[str, int]
    quarantine: tuple[tuple[FeedbackEvent, Reason], ...]


def _order(when: datetime | None) -> tuple[bool, datetime]:
    """Sort key of a timestamp: by UTC instant, nulls last."""
    return (when is None, _EPOCH if when is None else utc(when))


def reference_join(
    predictions: Iterable[Prediction],
    events: Iterable[FeedbackEvent],
    start: datetime,
    end: datetime,
    *,
    window_hours: float = 24.0,
) -> ReferenceResult:
    """Join the run's predictions with the feedback events and count, by the definitions.

    Args:
        predictions: prediction rows (any time; only ``start <= ts < end`` are used).
        events: every feedback event read for this run.
        start: inclusive start of the run.
        end: exclusive end of the run.
        window_hours: how long after its prediction an event still counts.
    """
    start, end = check_interval(start, end)
    window_us = window_micros(window_hours)

    impressions: Counter[tuple[str | None, int | None]] = Counter()
    first: dict[str, Prediction] = {}
    for p in predictions:
        if not in_run(p.ts, start, end):
            continue
        impressions[(p.model, p.model_version)] += 1
        if p.feedback_token is None:
            continue
        known = first.get(p.feedback_token)
        if known is None or (_order(p.ts), p.model or "", p.model_version or 0) < (
            _order(known.ts), known.model or "", known.model_version or 0
        ):
            first[p.feedback_token] = p

    verdicts: list[tuple[FeedbackEvent, Reason | None]] = []
    candidates: dict[tuple[str, str], list[int]] = defaultdict(list)
    for e in events:
        well_formed = is_well_formed(e.feedback_token, e.action, e.ts)
        prediction = first.get(e.feedback_token) if well_formed and e.feedback_token is not None else None
        reason = verdict(
            well_formed=well_formed,
            prediction_ts=prediction.ts if prediction else None,
            event_ts=e.ts,
            window_us=window_us,
            earlier_valid_copy=False,
        )
        if reason is None:
            candidates[(str(e.feedback_token), str(e.action))].append(len(verdicts))
        verdicts.append((e, reason))

    outcomes: dict[str, TokenOutcome] = {}
    for (token, action), indexes in candidates.items():
        ordered = sorted(indexes, key=lambda i: (_order(verdicts[i][0].ts), _order(verdicts[i][0].received_at)))
        for i in ordered[1:]:
            verdicts[i] = (verdicts[i][0], Reason.DUPLICATE)
        outcome = outcomes.get(token, TokenOutcome())
        outcomes[token] = TokenOutcome(
            click=outcome.click or action == "click",
            purchase=outcome.purchase or action == "purchase",
            skip=outcome.skip or action == "skip",
        )

    kept: dict[tuple[str | None, int | None], Counter[str]] = defaultdict(Counter)
    for token, outcome in outcomes.items():
        p = first[token]
        counts = kept[(p.model, p.model_version)]
        counts["clicked"] += outcome.click
        counts["converted"] += outcome.converted
        counts["skipped"] += outcome.skip
        counts["purchase_without_click"] += outcome.purchase_without_click

    rows = tuple(
        sorted(
            (
                VersionCounts(
                    model=model,
                    model_version=version,
                    impressions=n,
                    clicked=kept[(model, version)]["clicked"],
                    converted=kept[(model, version)]["converted"],
                    skipped=kept[(model, version)]["skipped"],
                    purchase_without_click=kept[(model, version)]["purchase_without_click"],
                )
                for (model, version), n in impressions.items()
            ),
            key=version_sort_key,
        )
    )
    quarantine = tuple((e, r) for e, r in verdicts if r is not None)
    rejected = rejected_counts(Counter(r.value for _, r in quarantine))
    return ReferenceResult(rows=rows, rejected=rejected, quarantine=quarantine)
