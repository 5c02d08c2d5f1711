"""The canary runner with in-memory fakes of its ports: promotion, rollback, abort, crash and resume."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from modelops.canary.actions import AbortCommand, ApproveCommand
from modelops.canary.measurement import Measurement, VersionWindow
from modelops.canary.runner import (
    Checkpoint,
    FileStatusStore,
    MemoryStatusStore,
    Release,
    Runner,
    VersionRef,
    restarted,
)
from modelops.canary.spec import CanarySpec
from modelops.canary.status import Phase
from modelops.canary.testing import window
from modelops.errors import ContractError, ObjectStoreError
from modelops.notify.message import Message

STABLE = VersionRef(3, "a" * 64, "7")
CANARY = VersionRef(4, "b" * 64, "8")
RELEASE = Release("rec", STABLE, CANARY, released_by="ann")
SPEC = CanarySpec(interval_s=5, failure_limit=2)
GOOD = (window(), window())
BAD = (window(errors=100), window())
SLOW = (window(latency_s=2.0), window(latency_s=0.02))


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeRoutes:
    """Keeps the routes document per model; every gateway 'applies' it ``lag_s`` after the write."""

    clock: Clock
    lag_s: float = 1.5
    fail_next: int = 0
    revision: int = 0
    history: list[tuple[int, int | None, float]] = field(default_factory=list)

    def apply(self, model: str, stable: VersionRef, canary: VersionRef | None, weight: float, by: str) -> float:
        if self.fail_next:
            self.fail_next -= 1
            raise ObjectStoreError("object store unreachable")
        self.revision += 1
        self.history.append((stable.triton_version, None if canary is None else canary.triton_version, weight))
        return self.clock.now + self.lag_s


@dataclass
class FakeServing:
    loaded: set[int] = field(default_factory=lambda: {3, 4})

    def load(self, model: str, triton_version: int) -> None:
        self.loaded.add(triton_version)

    def unload(self, model: str, triton_version: int) -> None:
        self.loaded.discard(triton_version)


@dataclass
class FakeRegistry:
    stages: dict[str, str] = field(default_factory=lambda: {"7": "Production", "8": "Staging"})
    tags: dict[str, dict[str, str]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    fail_next: int = 0

    def promote(self, model: str, mlflow_version: str) -> None:
        self.calls.append(f"promote {mlflow_version}")
        for version, stage in self.stages.items():
            if stage == "Production":
                self.stages[version] = "Archived"
        self.stages[mlflow_version] = "Production"

    def mark_rollback(self, model: str, mlflow_version: str, reason: str) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise ConnectionError("mlflow down")
        self.calls.append(f"rollback {mlflow_version}")
        self.stages[mlflow_version] = "Archived"
        self.tags.setdefault(mlflow_version, {})["reason"] = reason

    def set_tags(self, model: str, mlflow_version: str, tags: Mapping[str, str]) -> None:
        self.tags.setdefault(mlflow_version, {}).update(tags)


@dataclass
class FakeNotifier:
    sent: list[Message] = field(default_factory=list)

    def send(self, message: Message) -> bool:
        self.sent.append(message)
        return True

    def kinds(self) -> list[str]:
        return [m.title.rsplit(": ", 1)[1] for m in self.sent]


def make(store: MemoryStatusStore | FileStatusStore | None = None, spec: CanarySpec = SPEC) -> Runner:
    clock = Clock()
    return Runner(spec, RELEASE, FakeRoutes(clock), FakeServing(), FakeRegistry(), FakeNotifier(),
                  store or MemoryStatusStore(), clock)


def feed(runner: Runner, pair: tuple[VersionWindow, VersionWindow]) -> None:
    clock = runner.clock
    assert isinstance(clock, Clock)
    start = clock.now
    clock.now += 5.0
    runner.handle(Measurement(start, clock.now, *pair))


def test_good_release_is_promoted() -> None:
    runner = make()
    runner.begin()
    for _ in range(4):
        feed(runner, GOOD)
    routes, registry, notifier = runner.routes, runner.registry, runner.notifier
    assert isinstance(routes, FakeRoutes) and isinstance(registry, FakeRegistry)
    assert isinstance(notifier, FakeNotifier)
    assert routes.history == [(3, 4, 0.01), (3, 4, 0.05), (3, 4, 0.25), (3, 4, 0.5), (4, None, 0.0)]
    assert registry.stages == {"7": "Archived", "8": "Production"}
    assert registry.tags["8"]["modelops.canary.previous_version"] == "7"
    assert notifier.kinds() == ["started", "promoted"]
    status = runner.store.load()
    assert status is not None and status.status.phase is Phase.PROMOTED and status.pending == ()


def test_faulty_release_is_rolled_back_with_mttr() -> None:
    runner = make()
    runner.begin()
    feed(runner, GOOD)   # [1000, 1005) -> 5 %
    feed(runner, BAD)    # [1005, 1010) first failing window: the error test decides, gateways applied at 1011.5
    saved = runner.store.load()
    assert saved is not None
    status = saved.status
    assert status.phase is Phase.ROLLED_BACK and status.mttr_s == pytest.approx(1011.5 - 1005.0)
    routes, serving, registry, notifier = runner.routes, runner.serving, runner.registry, runner.notifier
    assert isinstance(routes, FakeRoutes) and isinstance(serving, FakeServing)
    assert isinstance(registry, FakeRegistry) and isinstance(notifier, FakeNotifier)
    assert routes.history[-1] == (3, None, 0.0)
    assert serving.loaded == {3}
    assert registry.stages["8"] == "Archived" and registry.stages["7"] == "Production"
    assert registry.tags["8"]["modelops.canary.mttr_s"] == "6.500"
    assert registry.tags["8"]["modelops.canary.gate.error_rate"].endswith("failed")
    assert notifier.kinds() == ["started", "rolled back"]
    assert notifier.sent[-1].facts["mttr_s"] == "6.5" and notifier.sent[-1].severity == "failure"


def test_abort_from_a_command() -> None:
    runner = make()
    runner.begin()
    feed(runner, GOOD)
    status = runner.handle(AbortCommand("bob", "wrong model"))
    assert status.phase is Phase.ABORTED and status.reason == "aborted by bob: wrong model"
    notifier = runner.notifier
    assert isinstance(notifier, FakeNotifier) and notifier.kinds() == ["started", "aborted"]


def test_crash_during_rollback_is_finished_by_a_restarted_runner_once() -> None:
    store = MemoryStatusStore()
    runner = make(store)
    runner.begin()
    feed(runner, SLOW)  # one failed analysis, below failure_limit
    routes = runner.routes
    assert isinstance(routes, FakeRoutes)
    routes.fail_next = 1
    with pytest.raises(ObjectStoreError):
        feed(runner, BAD)
    saved = store.load()
    assert saved is not None and saved.status.phase is Phase.ROLLING_BACK
    assert [type(a).__name__ for a in saved.pending] == ["Rollback"]
    # the worker restarts: same store, same ports (the outside world), a fresh runner object
    second = restarted(runner)
    registry = second.registry
    assert isinstance(registry, FakeRegistry)
    registry.fail_next = 1  # and MLflow hiccups once on the way
    with pytest.raises(ConnectionError):
        second.resume()
    third = restarted(runner)
    status = third.resume()
    assert status.phase is Phase.ROLLED_BACK
    assert registry.calls == ["rollback 8"]
    notifier = third.notifier
    assert isinstance(notifier, FakeNotifier) and notifier.kinds() == ["started", "rolled back"]
    assert third.resume().phase is Phase.ROLLED_BACK and notifier.kinds() == ["started", "rolled back"]


def test_restart_between_analyses_neither_repeats_nor_skips(tmp_path: Path) -> None:
    store = FileStatusStore(tmp_path / "canary" / "rec-4.json")
    runner = make(store)
    runner.begin()
    feed(runner, GOOD)
    feed(runner, GOOD)
    again = restarted(runner)
    assert again.begin().weight == 0.25  # begin() on a saved release resumes it, it does not restart it
    feed(again, GOOD)
    feed(again, GOOD)
    routes = again.routes
    assert isinstance(routes, FakeRoutes)
    assert [w for _, _, w in routes.history] == [0.01, 0.05, 0.25, 0.5, 0.0]
    saved = store.load()
    assert saved is not None and saved.status.phase is Phase.PROMOTED
    assert Checkpoint.from_json(saved.to_json()).to_json() == saved.to_json()


def test_approval_through_the_runner() -> None:
    runner = make(spec=CanarySpec(require_approval=True))
    runner.begin()
    for _ in range(6):
        feed(runner, GOOD)
    saved = runner.store.load()
    assert saved is not None and saved.status.phase is Phase.WAITING_APPROVAL
    assert runner.handle(ApproveCommand("ann")).phase is Phase.PROMOTED
    notifier = runner.notifier
    assert isinstance(notifier, FakeNotifier) and notifier.kinds() == ["started", "approval needed", "promoted"]


def test_handle_before_begin_and_resume_without_state() -> None:
    runner = make()
    with pytest.raises(ContractError, match="not started"):
        runner.handle(AbortCommand())
    with pytest.raises(ContractError, match="no saved status"):
        runner.resume()
