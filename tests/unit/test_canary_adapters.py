"""Canary adapters with in-memory fakes: routes writing and the wait for every gateway, checkpoints."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from modelops.canary.adapters import (
    GatewayDown,
    ObjectStoreRoutes,
    ObjectStoreStatusStore,
    RoutesNotApplied,
    checkpoint_key,
    next_routes,
)
from modelops.canary.machine import start
from modelops.canary.runner import Checkpoint, VersionRef
from modelops.canary.spec import CanarySpec
from modelops.documents.routes import load_routes, routes_key
from modelops.errors import ContractError

STABLE = VersionRef(3, "a" * 64, "7")
CANARY = VersionRef(4, "b" * 64, "8")


@dataclass
class FakeStore:
    blobs: dict[str, bytes] = field(default_factory=dict)

    def exists(self, key: str) -> bool:
        return key in self.blobs

    def get_bytes(self, key: str) -> bytes:
        return self.blobs[key]

    def put_bytes(self, key: str, data: bytes, *, content_type: str = "application/octet-stream") -> str:
        self.blobs[key] = data
        return ""


@dataclass
class FakeGateways:
    """Gateways that pick up the stored routes after ``lag`` polls; one may be down."""

    store: FakeStore
    lag: int = 2
    down: set[str] = field(default_factory=set)
    unreachable: set[str] = field(default_factory=set)
    polls: dict[str, int] = field(default_factory=dict)
    applied_at: str = "2026-11-29T21:00:05+00:00"

    def __call__(self, url: str) -> Any:
        gateway = url.removesuffix("/v1/routes")
        if gateway in self.down:
            raise GatewayDown("refused")
        if gateway in self.unreachable:
            raise ConnectionError("timed out")
        self.polls[gateway] = self.polls.get(gateway, 0) + 1
        routes = load_routes(self.store.blobs[routes_key("rec")])
        revision = routes.revision if self.polls[gateway] > self.lag else routes.revision - 1
        return {"models": {"rec": {"revision": revision, "applied_at": self.applied_at}}}


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_next_routes_increments_the_revision() -> None:
    now = datetime(2026, 11, 29, tzinfo=UTC)
    first = next_routes(None, "rec", STABLE, CANARY, 0.05, "ann", now)
    assert (first.revision, first.canary_weight, first.canary and first.canary.version) == (1, 0.05, 4)
    back = next_routes(first, "rec", STABLE, None, 0.7, "ann", now)
    assert (back.revision, back.canary, back.canary_weight) == (2, None, 0.0)


def test_routes_written_and_every_gateway_waited_for() -> None:
    store, clock = FakeStore(), Clock(1000.0)
    gateways = FakeGateways(store)
    routes = ObjectStoreRoutes(store, ["http://gw1", "http://gw2"], get_json=gateways, clock=clock,
                               sleep=clock.sleep, poll_s=0.5)
    applied = routes.apply("rec", STABLE, CANARY, 0.05, "ann")
    assert applied == datetime.fromisoformat(gateways.applied_at).timestamp()
    assert gateways.polls == {"http://gw1": 3, "http://gw2": 3}
    doc = load_routes(store.blobs["routes/rec.json"])
    assert (doc.revision, doc.canary_weight, doc.updated_by) == (1, 0.05, "ann")
    routes.apply("rec", STABLE, None, 0.0, "ann")
    assert load_routes(store.blobs["routes/rec.json"]).revision == 2


def test_a_version_the_routes_drop_is_held_for_the_grace_before_the_routes_change() -> None:
    import json

    from modelops.serving.holds import hold_key

    store, clock = FakeStore(), Clock(1000.0)
    routes = ObjectStoreRoutes(store, ["http://gw1"], get_json=FakeGateways(store, lag=0), clock=clock,
                               sleep=clock.sleep, grace_s=120.0)
    routes.apply("rec", STABLE, CANARY, 0.25, "ann")
    assert not [k for k in store.blobs if k.startswith("holds/")]  # nothing dropped yet
    routes.apply("rec", CANARY, None, 0.0, "ann")  # promotion: the old stable leaves the routes
    hold = json.loads(store.blobs[hold_key("rec", STABLE.triton_version)])
    assert hold["version"] == STABLE.triton_version and "dropped from the routes by ann" in hold["why"]
    assert hold["expires_at"] == pytest.approx(time.time() + 120.0, abs=5.0)
    assert hold_key("rec", CANARY.triton_version) not in store.blobs


def test_a_gateway_that_answers_with_an_old_revision_times_out() -> None:
    store, clock = FakeStore(), Clock(0.0)
    gateways = FakeGateways(store, lag=10**6)  # answers, never applies
    routes = ObjectStoreRoutes(store, ["http://gw1", "http://gw2"], get_json=gateways, clock=clock,
                               sleep=clock.sleep, timeout_s=5.0, poll_s=1.0)
    with pytest.raises(RoutesNotApplied, match=r"not applied within 5 s by \['http://gw1', 'http://gw2'\]"):
        routes.apply("rec", STABLE, CANARY, 0.01, "ann")
    assert clock.now == pytest.approx(5.0)


def test_a_gateway_that_refuses_connections_is_down_and_not_waited_for() -> None:
    """A down gateway serves nothing: the others' confirmation is enough once it has refused for a while."""
    store, clock = FakeStore(), Clock(0.0)
    gateways = FakeGateways(store, lag=0, down={"http://gw2"})
    routes = ObjectStoreRoutes(store, ["http://gw1", "http://gw2"], get_json=gateways, clock=clock,
                               sleep=clock.sleep, timeout_s=30.0, poll_s=1.0, down_after_s=5.0)
    applied = routes.apply("rec", STABLE, CANARY, 0.01, "ann")
    assert applied == datetime.fromisoformat(gateways.applied_at).timestamp()
    assert routes.last_down == ("http://gw2",) and clock.now == pytest.approx(5.0)
    # Every gateway down: no traffic is served at all; the newest routes load when they start.
    gateways.down = {"http://gw1", "http://gw2"}
    assert routes.apply("rec", STABLE, None, 0.0, "ann") == pytest.approx(clock.now)
    assert routes.last_down == ("http://gw1", "http://gw2")


def test_a_gateway_that_times_out_may_still_serve_and_is_waited_for() -> None:
    store, clock = FakeStore(), Clock(0.0)
    gateways = FakeGateways(store, lag=0, unreachable={"http://gw2"})
    routes = ObjectStoreRoutes(store, ["http://gw1", "http://gw2"], get_json=gateways, clock=clock,
                               sleep=clock.sleep, timeout_s=10.0, poll_s=1.0, down_after_s=2.0)
    with pytest.raises(RoutesNotApplied, match=r"by \['http://gw2'\].*timed out"):
        routes.apply("rec", STABLE, CANARY, 0.01, "ann")
    assert clock.now == pytest.approx(10.0)


def test_checkpoint_in_the_object_store() -> None:
    store = FakeStore()
    key = checkpoint_key("rec", 4)
    checkpoints = ObjectStoreStatusStore(store, key)
    assert key == "canary/rec/v4.json" and checkpoints.load() is None
    status, actions = start(CanarySpec(), "rec", 3, 4, 10.0)
    checkpoints.save(Checkpoint(status, actions))
    loaded = checkpoints.load()
    assert loaded is not None and loaded.pending == actions and loaded.status.to_json() == status.to_json()
    store.blobs[key] = b"{not json"
    with pytest.raises(ContractError, match="unreadable"):
        checkpoints.load()
