"""Packing (ts, model, version) into one long: the order of the keys is the order of the predictions."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from modelops.feedback.versions import MAX_KEY, VersionCodes, version_order

START = datetime(2026, 11, 1, tzinfo=UTC)
END = START + timedelta(days=1)
VERSIONS = [("reco", 7), ("ranker", 2), (None, 1), ("ranker", None), ("ranker", 1), ("", 3), (None, None)]


def test_versions_are_numbered_in_spark_struct_order_nulls_first() -> None:
    codes = VersionCodes.of([*VERSIONS, ("ranker", 1)], START, END)
    assert codes.versions == (
        (None, None), (None, 1), ("", 3), ("ranker", None), ("ranker", 1), ("ranker", 2), ("reco", 7)
    )
    assert codes.n == 7
    assert [codes.code(v) for v in codes.versions] == list(range(7))
    assert codes.start_us == 1_793_491_200_000_000
    assert codes.span_us == 86_400_000_000


def test_min_key_is_the_earliest_prediction_then_model_then_version() -> None:
    codes = VersionCodes.of(VERSIONS, START, END)
    rng = random.Random(5)
    for _ in range(200):
        # Few distinct instants, so that ties on ts (broken by model, then version) are common.
        preds = [(codes.start_us + rng.choice((0, 1, 999, codes.span_us - 1)), rng.choice(VERSIONS))
                 for _ in range(rng.randint(1, 6))]
        earliest = min(preds, key=lambda p: (p[0], version_order(p[1])))
        key = min(codes.pack(ts, version) for ts, version in preds)
        assert codes.unpack(key) == earliest


def test_pack_round_trips_and_refuses_what_is_not_in_the_run() -> None:
    codes = VersionCodes.of(VERSIONS, START, END)
    last = codes.start_us + codes.span_us - 1
    assert codes.unpack(codes.pack(last, ("reco", 7))) == (last, ("reco", 7))
    assert codes.pack(last, ("reco", 7)) == codes.span_us * codes.n - 1
    with pytest.raises(ValueError, match="outside the run"):
        codes.pack(codes.start_us + codes.span_us, ("reco", 7))
    with pytest.raises(ValueError, match="outside the run"):
        codes.pack(codes.start_us - 1, ("reco", 7))
    with pytest.raises(KeyError, match=r"\('reco', 8\) is not among the run's versions"):
        codes.code(("reco", 8))


def test_empty_run_still_divides_and_a_too_long_run_is_refused() -> None:
    assert VersionCodes.of([], START, END).n == 1
    century = timedelta(days=36_500)
    limit = (MAX_KEY + 1) // (century // timedelta(microseconds=1))
    assert limit == 2924
    assert VersionCodes.of([("m", v) for v in range(limit)], START, START + century).n == limit
    with pytest.raises(ValueError, match=r"exceeds a 64-bit key \(at most 2924 versions for this run\); split the"):
        VersionCodes.of([("m", v) for v in range(limit + 1)], START, START + century)
    with pytest.raises(ValueError, match="start must be before end"):
        VersionCodes.of(VERSIONS, END, START)
