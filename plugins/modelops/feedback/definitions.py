"""What the feedback join counts: validity rules, rejection reasons and the CTR/CVR maths.

Pure, typed definitions shared by the Spark job (:mod:`modelops.feedback.job`), the
pure-Python reference (:mod:`modelops.feedback.reference`) and the DuckDB anchor of
``bench/feedback.py``. Every engine must agree with these, row for row.

The rules, for one run over the window ``[start, end)``:

* A *prediction* belongs to the run when ``start <= ts < end``. Impressions count those
  rows. If several of them carry the same ``feedback_token`` (a re-logged request), the
  token's events are matched against its earliest one (smallest ``ts``, then ``model``,
  then ``model_version``), so every event gets exactly one verdict.
* Every feedback event read gets exactly one verdict: kept, or rejected for one
  :class:`Reason`, tested in this precedence (the first that applies wins):

  1. ``malformed`` — the token is null or the empty string, the action is not exactly
     one of :data:`~modelops.records.ACTIONS` (case-sensitive), or ``ts`` is null / not
     a timestamp;
  2. ``unknown_token`` — the token is not on any prediction of this run. A token of a
     prediction outside ``[start, end)`` is unknown *to this run* (that prediction is
     counted by the run that covers its hour);
  3. ``outside_window`` — ``event.ts - prediction.ts`` is negative or larger than the
     window (both ends inclusive: 0 and exactly ``window_hours`` are inside);
  4. ``duplicate`` — another valid event with the same ``(token, action)`` comes first
     (earlier ``ts``, then earlier ``received_at``, nulls last). The first is kept; the
     extra copies are rejected, so repeats count once.

* Per ``(model, model_version)``: ``impressions`` = predictions; ``clicked`` = predictions
  with a kept click; ``converted`` = predictions with a kept click *and* a kept purchase
  (in any order); ``skipped`` = predictions with a kept skip;
  ``purchase_without_click`` = predictions with a kept purchase and no kept click;
  ``ctr = clicked / impressions``; ``cvr = converted / clicked`` (``None`` when nothing
  was clicked).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from modelops.records import ACTIONS

SCHEMA_VERSION = 1
"""Version of ``ctr_cvr.json`` and of the ``ctr_cvr.parquet`` rows."""

DEFAULT_WINDOW_HOURS = 24.0
"""How long after a prediction its feedback still counts."""


class Reason(StrEnum):
    """Why a feedback event was rejected; the declaration order is the precedence."""

    MALFORMED = "malformed"
    UNKNOWN_TOKEN = "unknown_token"
    OUTSIDE_WINDOW = "outside_window"
    DUPLICATE = "duplicate"


REASON_PRECEDENCE: tuple[Reason, ...] = tuple(Reason)
"""Reasons in the order they are tested: the first that applies is the event's reason."""


def window_micros(window_hours: float) -> int:
    """The window in whole microseconds (the resolution of the logs' timestamps).

    Raises:
        ValueError: when the window is not a positive number of hours.
    """
    if not window_hours > 0:
        raise ValueError(f"window_hours must be > 0 (example: 24), got {window_hours!r}")
    return round(window_hours * 3_600_000_000)


def utc(when: datetime) -> datetime:
    """``when`` as an aware UTC datetime; a naive datetime is taken to be UTC already."""
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def check_interval(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """Both bounds in UTC, checked so that ``start < end``.

    Raises:
        ValueError: naming both bounds when the interval is empty.
    """
    start_utc, end_utc = utc(start), utc(end)
    if not start_utc < end_utc:
        raise ValueError(
            f"start must be before end (example: --start 2026-11-01T00:00:00Z --end 2026-11-02T00:00:00Z), "
            f"got start={start_utc.isoformat()} end={end_utc.isoformat()}"
        )
    return start_utc, end_utc


def in_run(prediction_ts: datetime | None, start: datetime, end: datetime) -> bool:
    """Whether a prediction at ``prediction_ts`` belongs to the run ``[start, end)``."""
    return prediction_ts is not None and start <= prediction_ts < end


def is_well_formed(token: object, action: object, ts: object) -> bool:
    """Whether an event's fields parse: non-empty string token, known action, timestamp ts."""
    return (
        isinstance(token, str)
        and token != ""
        and isinstance(action, str)
        and action in ACTIONS
        and isinstance(ts, datetime)
    )


def micros_between(earlier: datetime, later: datetime) -> int:
    """``later - earlier`` in whole microseconds (exact integer arithmetic)."""
    delta = utc(later) - utc(earlier)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def in_window(prediction_ts: datetime, event_ts: datetime, window_us: int) -> bool:
    """``0 <= event_ts - prediction_ts <= window``, both ends inclusive."""
    return 0 <= micros_between(prediction_ts, event_ts) <= window_us


def verdict(
    *,
    well_formed: bool,
    prediction_ts: datetime | None,
    event_ts: datetime | None,
    window_us: int,
    earlier_valid_copy: bool,
) -> Reason | None:
    """One event's verdict: ``None`` when kept, otherwise the first reason that applies.

    Args:
        well_formed: the result of :func:`is_well_formed` for the event.
        prediction_ts: ts of the run's prediction carrying the token, ``None`` when none does.
        event_ts: the event's ts (ignored when not well formed).
        window_us: the window from :func:`window_micros`.
        earlier_valid_copy: whether a valid event with the same (token, action) comes first.
    """
    if not well_formed or event_ts is None:
        return Reason.MALFORMED
    if prediction_ts is None:
        return Reason.UNKNOWN_TOKEN
    if not in_window(prediction_ts, event_ts, window_us):
        return Reason.OUTSIDE_WINDOW
    if earlier_valid_copy:
        return Reason.DUPLICATE
    return None


def ctr(clicked: int, impressions: int) -> float | None:
    """Click-through rate ``clicked / impressions``; ``None`` without impressions."""
    return clicked / impressions if impressions else None


def cvr(converted: int, clicked: int) -> float | None:
    """Conversion rate ``converted / clicked``; ``None`` when nothing was clicked."""
    return converted / clicked if clicked else None


@dataclass(frozen=True)
class TokenOutcome:
    """Which actions a prediction kept (at most one kept event per action)."""

    click: bool = False
    purchase: bool = False
    skip: bool = False

    @property
    def converted(self) -> bool:
        return self.click and self.purchase

    @property
    def purchase_without_click(self) -> bool:
        return self.purchase and not self.click


@dataclass(frozen=True)
class VersionCounts:
    """The counts and rates of one ``(model, model_version)`` over one run."""

    model: str | None
    model_version: int | None
    impressions: int
    clicked: int
    converted: int
    skipped: int
    purchase_without_click: int

    @property
    def ctr(self) -> float | None:
        return ctr(self.clicked, self.impressions)

    @property
    def cvr(self) -> float | None:
        return cvr(self.converted, self.clicked)

    def to_json(self) -> dict[str, Any]:
        """The row as it appears in ``by_version`` (and in the Parquet output)."""
        return {
            "model": self.model,
            "model_version": self.model_version,
            "impressions": self.impressions,
            "clicked": self.clicked,
            "converted": self.converted,
            "skipped": self.skipped,
            "purchase_without_click": self.purchase_without_click,
            "ctr": self.ctr,
            "cvr": self.cvr,
        }


def version_sort_key(row: VersionCounts) -> tuple[bool, str, bool, int]:
    """Rows ordered by model then version, nulls last."""
    return (row.model is None, row.model or "", row.model_version is None, row.model_version or 0)


def rejected_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """Counts for every reason, in precedence order (zero when absent).

    Raises:
        ValueError: for a key that is not a :class:`Reason`.
    """
    unknown = set(counts) - {r.value for r in Reason}
    if unknown:
        raise ValueError(f"unknown rejection reasons {sorted(unknown)}; expected {[r.value for r in Reason]}")
    return {r.value: int(counts.get(r.value, 0)) for r in REASON_PRECEDENCE}


def result_document(
    *,
    start: datetime,
    end: datetime,
    window_hours: float,
    rows: tuple[VersionCounts, ...],
    rejected: Mapping[str, int],
) -> dict[str, Any]:
    """The ``ctr_cvr.json`` document (``schema_version`` 1)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "start": iso(start),
        "end": iso(end),
        "window_hours": window_hours,
        "by_version": [row.to_json() for row in sorted(rows, key=version_sort_key)],
        "rejected": rejected_counts(rejected),
    }


def iso(when: datetime) -> str:
    """``2026-11-01T00:00:00Z``-style text for a UTC instant (microseconds when present)."""
    return utc(when).isoformat().replace("+00:00", "Z")


def parse_iso(text: str) -> datetime:
    """Parse an ISO-8601 instant (``Z`` or an offset; naive means UTC).

    Raises:
        ValueError: naming the text and an example.
    """
    try:
        return utc(datetime.fromisoformat(text.strip()))
    except ValueError:
        raise ValueError(f"not an ISO-8601 instant: {text!r} (example: 2026-11-01T00:00:00Z)") from None


def hour_floor(when: datetime) -> datetime:
    """The start of ``when``'s UTC hour (the ``hour=HH`` partition it falls in)."""
    return utc(when).replace(minute=0, second=0, microsecond=0)


PARTITION_SLACK = timedelta(hours=1)
"""Extra hour partitions read on each side of the run when pruning ``dt=/hour=`` folders.

A log partitioned by write time rather than by ``ts`` can put a row a little after its
own hour; the ``ts`` filter removes what the slack lets in.
"""
