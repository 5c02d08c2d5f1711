"""Routes documents: parse/validate/serialize, and the sticky canary assignment."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from modelops.documents.routes import (
    Routes,
    VersionRef,
    choose_version,
    load_routes,
    model_from_key,
    parse_routes,
    routes_key,
    serialize_routes,
    user_fraction,
)
from modelops.errors import ContractError

STABLE = VersionRef(3, "a" * 64)
CANARY = VersionRef(4, "b" * 64)
DOC: dict[str, Any] = {"schema_version": 1, "model": "recommender", "revision": 7,
                       "stable": {"version": 3, "sha256": "a" * 64},
                       "canary": {"version": 4, "sha256": "b" * 64}, "canary_weight": 0.05,
                       "updated_at": "2026-11-29T21:00:00Z", "updated_by": "model_release"}
USERS = [f"u_{k:06d}" for k in range(20000)]


def _routes(weight: float) -> Routes:
    return Routes("recommender", 1, STABLE, CANARY if weight else None, weight, "", "")


def test_round_trip() -> None:
    routes = parse_routes(DOC)
    assert routes.canary == CANARY and routes.canary_weight == 0.05 and routes.revision == 7
    assert load_routes(serialize_routes(routes)) == routes
    assert routes.stable.label == "aaaaaaaaaaaa/3"


def test_keys() -> None:
    assert routes_key("recommender") == "routes/recommender.json"
    assert model_from_key("routes/recommender.json") == "recommender"
    assert model_from_key("routes/x/y.txt") is None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"schema_version": 2}, "schema_version"),
        ({"model": ""}, "model"),
        ({"revision": -1}, "revision"),
        ({"revision": "7"}, "revision"),
        ({"stable": None}, "stable"),
        ({"stable": {"version": 0, "sha256": "a" * 64}}, "stable.version"),
        ({"stable": {"version": 3, "sha256": "A" * 64}}, "stable.sha256"),
        ({"canary": {"version": 3, "sha256": "b" * 64}}, "canary.version"),
        ({"canary_weight": 1.5}, "canary_weight"),
        ({"canary_weight": True}, "canary_weight"),
        ({"canary": None}, "canary_weight"),
    ],
)
def test_invalid_documents_name_the_field(change: dict[str, Any], field: str) -> None:
    doc = copy.deepcopy(DOC)
    doc.update(change)
    with pytest.raises(ContractError, match=rf"routes\.{field}"):
        parse_routes(doc)


def test_not_json_is_refused() -> None:
    with pytest.raises(ContractError, match="JSON"):
        load_routes(b"{nope")


def test_user_fraction_is_stable_and_uniform() -> None:
    values = [user_fraction(u) for u in USERS]
    assert values == [user_fraction(u) for u in USERS]
    assert all(0.0 <= v < 1.0 for v in values)
    assert abs(sum(values) / len(values) - 0.5) < 0.01


@pytest.mark.parametrize("weight", [0.01, 0.05, 0.25, 0.5])
def test_canary_share_is_the_weight(weight: float) -> None:
    share = sum(choose_version(_routes(weight), u) == CANARY for u in USERS) / len(USERS)
    tolerance = 4 * (weight * (1 - weight) / len(USERS)) ** 0.5  # 4 binomial standard deviations
    assert abs(share - weight) < tolerance


def test_raising_the_weight_keeps_canary_users() -> None:
    previous: set[str] = set()
    for weight in (0.01, 0.05, 0.25, 0.5, 1.0):
        current = {u for u in USERS if choose_version(_routes(weight), u) == CANARY}
        assert previous <= current
        assert len(current) > len(previous)
        previous = current
    assert len(previous) == len(USERS)


def test_no_canary_means_stable_for_everyone() -> None:
    assert {choose_version(_routes(0.0), u) for u in USERS[:500]} == {STABLE}


def test_each_release_salt_draws_a_different_cohort_and_keeps_it_across_steps() -> None:
    import dataclasses

    def cohort(salt: str, weight: float) -> set[str]:
        routes = dataclasses.replace(_routes(weight), canary_salt=salt)
        return {u for u in USERS if choose_version(routes, u) == CANARY}

    first, second = cohort("b" * 16, 0.25), cohort("c" * 16, 0.25)
    overlap = len(first & second) / len(USERS)
    assert abs(overlap - 0.25 * 0.25) < 0.02  # independent draws, not the same users (overlap would be 0.25)
    assert first <= cohort("b" * 16, 0.5)  # within one release, raising the weight keeps the cohort
    assert cohort("", 0.25) == {u for u in USERS if user_fraction(u) < 0.25}  # unsalted: the old split


def test_the_salt_round_trips_and_is_validated() -> None:
    doc = {**DOC, "canary_salt": "0123456789abcdef"}
    routes = parse_routes(doc)
    assert routes.canary_salt == "0123456789abcdef"
    assert parse_routes(json.loads(serialize_routes(routes))) == routes
    assert "canary_salt" not in json.loads(serialize_routes(parse_routes(DOC)))  # unsalted documents unchanged
    with pytest.raises(ContractError, match="canary_salt"):
        parse_routes({**DOC, "canary_salt": "a b"})


def test_the_release_writes_the_canary_sha_prefix_as_salt_unless_disabled() -> None:
    from datetime import UTC, datetime

    from modelops.canary.adapters import next_routes
    from modelops.canary.runner import VersionRef as ReleaseRef

    stable, canary = ReleaseRef(3, "a" * 64, "7"), ReleaseRef(4, "b" * 64, "8")
    now = datetime(2026, 11, 30, tzinfo=UTC)
    step1 = next_routes(None, "recommender", stable, canary, 0.25, "t", now)
    step2 = next_routes(step1, "recommender", stable, canary, 0.5, "t", now)
    assert step1.canary_salt == step2.canary_salt == "b" * 16
    assert next_routes(step2, "recommender", canary, None, 0.0, "t", now).canary_salt == ""
    assert next_routes(None, "recommender", stable, canary, 0.25, "t", now, salted=False).canary_salt == ""
