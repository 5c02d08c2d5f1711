"""The feedback join's definitions and its pure-Python reference, on hand-made cases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from modelops.feedback.definitions import (
    REASON_PRECEDENCE,
    Reason,
    VersionCounts,
    check_interval,
    ctr,
    cvr,
    in_window,
    is_well_formed,
    iso,
    parse_iso,
    rejected_counts,
    result_document,
    verdict,
    window_micros,
)
from modelops.feedback.reference import FeedbackEvent, Prediction, reference_join

T0 = datetime(2026, 11, 1, tzinfo=UTC)
START, END = T0, T0 + timedelta(days=1)
HOUR, SECOND = timedelta(hours=1), timedelta(seconds=1)


def pred(token: str | None, at: timedelta, model: str = "ranker", version: int = 1) -> Prediction:
    return Prediction(token, T0 + at, model, version)


def event(
    token: str | None, action: str | None, at: timedelta | None, received: timedelta | None = None
) -> FeedbackEvent:
    ts = None if at is None else T0 + at
    return FeedbackEvent(token, action, ts, None if received is None else T0 + received)


def run(preds: list[Prediction], events: list[FeedbackEvent], **kw: float):  # type: ignore[no-untyped-def]
    return reference_join(preds, events, START, END, **kw)


def reasons_of(result) -> dict[str, int]:  # type: ignore[no-untyped-def]
    return {k: v for k, v in result.rejected.items() if v}


# --- the pieces -------------------------------------------------------------------------


def test_precedence_is_the_documented_order() -> None:
    assert [r.value for r in REASON_PRECEDENCE] == ["malformed", "unknown_token", "outside_window", "duplicate"]


def test_window_micros_is_exact_and_rejects_non_positive() -> None:
    assert window_micros(24) == 86_400_000_000
    assert window_micros(0.5) == 1_800_000_000
    with pytest.raises(ValueError, match="window_hours must be > 0"):
        window_micros(0)


@pytest.mark.parametrize(
    ("token", "action", "ts", "ok"),
    [
        ("t", "click", T0, True),
        (None, "click", T0, False),
        ("", "click", T0, False),
        ("t", "Click", T0, False),
        ("t", "like", T0, False),
        ("t", None, T0, False),
        ("t", "skip", None, False),
        ("t", "skip", "2026-11-01T00:00:00Z", False),
    ],
)
def test_well_formed(token: object, action: object, ts: object, ok: bool) -> None:
    assert is_well_formed(token, action, ts) is ok


def test_window_bounds_are_inclusive() -> None:
    w = window_micros(24)
    assert in_window(T0, T0, w)
    assert in_window(T0, T0 + timedelta(hours=24), w)
    assert not in_window(T0, T0 + timedelta(hours=24, microseconds=1), w)
    assert not in_window(T0, T0 - timedelta(microseconds=1), w)


def test_verdict_takes_the_first_reason_that_applies() -> None:
    w = window_micros(1)
    base = {"prediction_ts": T0, "event_ts": T0 + 2 * HOUR, "window_us": w, "earlier_valid_copy": True}
    assert verdict(well_formed=False, **base) is Reason.MALFORMED  # type: ignore[arg-type]
    assert verdict(well_formed=True, **{**base, "prediction_ts": None}) is Reason.UNKNOWN_TOKEN  # type: ignore[arg-type]
    assert verdict(well_formed=True, **base) is Reason.OUTSIDE_WINDOW  # type: ignore[arg-type]
    inside = {**base, "event_ts": T0 + HOUR}
    assert verdict(well_formed=True, **inside) is Reason.DUPLICATE  # type: ignore[arg-type]
    assert verdict(well_formed=True, **{**inside, "earlier_valid_copy": False}) is None  # type: ignore[arg-type]


def test_rates() -> None:
    assert ctr(3, 4) == 0.75
    assert ctr(0, 0) is None
    assert cvr(1, 4) == 0.25
    assert cvr(0, 0) is None


def test_rejected_counts_lists_every_reason_and_refuses_unknown_ones() -> None:
    assert rejected_counts({"duplicate": 2}) == {
        "malformed": 0, "unknown_token": 0, "outside_window": 0, "duplicate": 2,
    }
    with pytest.raises(ValueError, match="unknown rejection reasons"):
        rejected_counts({"late": 1})


def test_interval_and_iso() -> None:
    assert parse_iso("2026-11-01T00:00:00Z") == T0
    assert parse_iso("2026-11-01T01:00:00+01:00") == T0
    assert parse_iso("2026-11-01T00:00:00") == T0  # naive means UTC
    with pytest.raises(ValueError, match="example: 2026-11-01T00:00:00Z"):
        parse_iso("yesterday")
    with pytest.raises(ValueError, match="start must be before end"):
        check_interval(END, START)
    assert iso(T0) == "2026-11-01T00:00:00Z"


def test_result_document_shape() -> None:
    rows = (
        VersionCounts("ranker", 2, 10, 0, 0, 1, 0),
        VersionCounts("ranker", 1, 4, 2, 1, 0, 1),
    )
    doc = result_document(start=START, end=END, window_hours=24, rows=rows, rejected={"malformed": 1})
    assert doc["schema_version"] == 1
    assert (doc["start"], doc["end"], doc["window_hours"]) == ("2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z", 24)
    assert [r["model_version"] for r in doc["by_version"]] == [1, 2]
    assert doc["by_version"][0] == {
        "model": "ranker", "model_version": 1, "impressions": 4, "clicked": 2, "converted": 1,
        "skipped": 0, "purchase_without_click": 1, "ctr": 0.5, "cvr": 0.5,
    }
    assert doc["by_version"][1]["cvr"] is None
    assert doc["rejected"] == {"malformed": 1, "unknown_token": 0, "outside_window": 0, "duplicate": 0}


# --- the whole join on hand-made cases --------------------------------------------------


def test_counts_and_rates_per_version() -> None:
    preds = [pred("a", HOUR), pred("b", HOUR), pred("c", HOUR), pred("d", HOUR), pred("e", HOUR, version=2)]
    events = [
        event("a", "click", 2 * HOUR),
        event("a", "purchase", 3 * HOUR),  # converted
        event("b", "purchase", 2 * HOUR),
        event("b", "click", 3 * HOUR),  # converted: purchase before click still counts
        event("c", "click", 2 * HOUR),
        event("d", "purchase", 2 * HOUR),  # purchase without click
        event("e", "skip", 2 * HOUR),
    ]
    result = run(preds, events)
    assert result.rows == (
        VersionCounts("ranker", 1, 4, 3, 2, 0, 1),
        VersionCounts("ranker", 2, 1, 0, 0, 1, 0),
    )
    assert result.rows[0].ctr == 0.75
    assert result.rows[0].cvr == pytest.approx(2 / 3)
    assert result.rows[1].cvr is None
    assert reasons_of(result) == {}


def test_duplicates_count_once_and_the_earliest_copy_is_kept() -> None:
    preds = [pred("a", HOUR)]
    events = [
        event("a", "click", 3 * HOUR, received=3 * HOUR),
        event("a", "click", 2 * HOUR, received=5 * HOUR),  # earliest ts: kept
        event("a", "click", 2 * HOUR, received=6 * HOUR),  # same ts, later received_at
        event("a", "skip", 2 * HOUR),  # another action is not a duplicate
    ]
    result = run(preds, events)
    assert result.rows == (VersionCounts("ranker", 1, 1, 1, 0, 1, 0),)
    assert reasons_of(result) == {"duplicate": 2}
    dropped = sorted((e.ts, e.received_at) for e, r in result.quarantine if r is Reason.DUPLICATE)
    assert dropped == [(T0 + 2 * HOUR, T0 + 6 * HOUR), (T0 + 3 * HOUR, T0 + 3 * HOUR)]


def test_one_second_inside_and_outside_the_window() -> None:
    preds = [pred("a", HOUR), pred("b", HOUR)]
    events = [
        event("a", "click", HOUR + 24 * HOUR - SECOND),
        event("b", "click", HOUR + 24 * HOUR + SECOND),
    ]
    result = run(preds, events)
    assert result.rows[0].clicked == 1
    assert reasons_of(result) == {"outside_window": 1}
    assert result.quarantine[0][0].feedback_token == "b"


def test_window_hours_changes_the_window() -> None:
    preds = [pred("a", HOUR)]
    events = [event("a", "click", 3 * HOUR)]
    assert run(preds, events, window_hours=1).rejected["outside_window"] == 1
    assert run(preds, events, window_hours=2).rows[0].clicked == 1


def test_event_before_its_prediction_is_outside_the_window() -> None:
    result = run([pred("a", HOUR)], [event("a", "click", HOUR - SECOND)])
    assert result.rows[0].clicked == 0
    assert reasons_of(result) == {"outside_window": 1}


def test_unknown_token_including_a_prediction_outside_the_run() -> None:
    preds = [pred("a", HOUR), pred("old", -HOUR), pred("late", 24 * HOUR)]
    events = [event("zzz", "click", 2 * HOUR), event("old", "click", 0 * HOUR), event("late", "click", 25 * HOUR)]
    result = run(preds, events)
    assert result.rows == (VersionCounts("ranker", 1, 1, 0, 0, 0, 0),)  # only "a" is in [start, end)
    assert reasons_of(result) == {"unknown_token": 3}


@pytest.mark.parametrize(
    "bad",
    [
        event(None, "click", 2 * HOUR),
        event("", "click", 2 * HOUR),
        event("a", "like", 2 * HOUR),
        event("a", None, 2 * HOUR),
        event("a", "click", None),
    ],
)
def test_malformed_rows_are_quarantined_and_not_counted(bad: FeedbackEvent) -> None:
    result = run([pred("a", HOUR)], [bad])
    assert result.rows[0].clicked == 0
    assert reasons_of(result) == {"malformed": 1}
    assert result.quarantine == ((bad, Reason.MALFORMED),)


def test_precedence_between_reasons() -> None:
    preds = [pred("a", HOUR)]
    events = [
        event("a", "click", 2 * HOUR),  # kept
        event("a", "click", 30 * HOUR),  # a copy, but outside the window: outside_window wins
        event("zz", "click", 2 * HOUR),
        event("zz", "click", 2 * HOUR),  # both unknown, never duplicate
        event("a", "Click", 2 * HOUR),  # malformed, not duplicate
    ]
    result = run(preds, events)
    assert reasons_of(result) == {"malformed": 1, "unknown_token": 2, "outside_window": 1}


def test_every_event_gets_exactly_one_verdict() -> None:
    preds = [pred(f"t{i}", i * HOUR) for i in range(12)]
    events = [event(f"t{i % 14}", ("click", "purchase", "skip", "x")[i % 4], (i % 30) * HOUR) for i in range(60)]
    result = run(preds, events)
    kept = sum(r.clicked + r.skipped + r.converted + r.purchase_without_click for r in result.rows)
    assert sum(result.rejected.values()) == len(result.quarantine)
    assert len(result.quarantine) + kept == len(events)


def test_re_logged_prediction_token_is_matched_to_its_earliest_row() -> None:
    preds = [pred("a", 3 * HOUR, version=2), pred("a", HOUR, version=1)]
    result = run(preds, [event("a", "click", 2 * HOUR)])
    assert result.rows == (
        VersionCounts("ranker", 1, 1, 1, 0, 0, 0),
        VersionCounts("ranker", 2, 1, 0, 0, 0, 0),
    )


def test_prediction_bounds_start_inclusive_end_exclusive() -> None:
    preds = [pred("s", timedelta(0)), pred("e", timedelta(days=1))]
    result = run(preds, [])
    assert result.rows == (VersionCounts("ranker", 1, 1, 0, 0, 0, 0),)
