"""The side-effect half of the canary: carries out what :func:`modelops.canary.machine.advance` decides.

The runner takes ports (routes, serving, registry, notifier, status store) so it is
tested with in-memory fakes; :mod:`modelops.canary.adapters` holds the real ones.

Resilience: before carrying out any action the runner saves a :class:`Checkpoint`
(the new status and the actions still to do); after each action it saves again with
that action removed. A restarted runner (:meth:`Runner.resume`) finishes the pending
actions and goes on, so a step is neither repeated nor skipped. Routes writes are
idempotent (the same weight again is harmless); notifications carry a key and the
checkpoint remembers the keys sent, so a replay does not notify twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from modelops.canary.actions import (
    Action,
    Event,
    FinishRollback,
    Notify,
    Pause,
    Promote,
    PromotionApplied,
    RequestApproval,
    Rollback,
    RollbackApplied,
    SetShadow,
    SetWeight,
    actions_from_list,
    actions_to_list,
)
from modelops.canary.machine import advance, start
from modelops.canary.spec import CanarySpec
from modelops.canary.status import CanaryStatus
from modelops.errors import ContractError
from modelops.notify.message import Message, Severity

CHECKPOINT_SCHEMA_VERSION = 1

_SEVERITY: dict[str, Severity] = {"started": "info", "promoted": "success", "rolled_back": "failure",
                                  "aborted": "warning", "paused": "warning", "incident": "failure",
                                  "approval_needed": "info", "resumed": "info"}


@dataclass(frozen=True)
class VersionRef:
    """A served version: Triton's integer folder, the model file's sha256 and the MLflow version."""

    triton_version: int
    sha256: str
    mlflow_version: str


@dataclass(frozen=True)
class Release:
    """What is released: the model, its stable version and the canary."""

    model: str
    stable: VersionRef
    canary: VersionRef
    released_by: str = "modelops"

    def to_dict(self) -> dict[str, Any]:
        def ref(v: VersionRef) -> dict[str, Any]:
            return {"triton_version": v.triton_version, "sha256": v.sha256, "mlflow_version": v.mlflow_version}

        return {"model": self.model, "stable": ref(self.stable), "canary": ref(self.canary),
                "released_by": self.released_by}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Release:
        def ref(r: Mapping[str, Any]) -> VersionRef:
            return VersionRef(int(r["triton_version"]), str(r["sha256"]), str(r["mlflow_version"]))

        return cls(str(raw["model"]), ref(raw["stable"]), ref(raw["canary"]), str(raw.get("released_by", "modelops")))


# ------------------------------------------------------------------ ports
@dataclass(frozen=True)
class ShadowRef:
    """The candidate as the stable's shadow: the share of the stable's requests mirrored, the top-k compared."""

    version: VersionRef
    share: float
    top_k: int = 5


class RoutesPort(Protocol):
    def apply(self, model: str, stable: VersionRef, canary: VersionRef | None, weight: float, by: str,
              *, shadow: ShadowRef | None = None) -> float:
        """Write the routes and wait until every gateway reports the new revision; return that moment."""


class ServingPort(Protocol):
    def load(self, model: str, triton_version: int) -> None: ...

    def unload(self, model: str, triton_version: int) -> None: ...


class RegistryPort(Protocol):
    def promote(self, model: str, mlflow_version: str) -> None: ...

    def mark_rollback(self, model: str, mlflow_version: str, reason: str) -> None: ...

    def restage(self, model: str, mlflow_version: str) -> None: ...

    def set_tags(self, model: str, mlflow_version: str, tags: Mapping[str, str]) -> None: ...


class NotifierPort(Protocol):
    def send(self, message: Message) -> bool: ...


@dataclass(frozen=True)
class Checkpoint:
    """What is persisted: the status, the actions not yet carried out, the notification keys sent."""

    status: CanaryStatus
    pending: tuple[Action, ...] = ()
    sent: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps({"schema_version": CHECKPOINT_SCHEMA_VERSION, "status": self.status.to_dict(),
                           "pending": actions_to_list(self.pending), "sent": list(self.sent)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Checkpoint:
        raw = json.loads(text)
        if raw.get("schema_version") != CHECKPOINT_SCHEMA_VERSION:
            raise ContractError(f"canary checkpoint: schema_version={raw.get('schema_version')!r} is not supported")
        return cls(CanaryStatus.from_dict(raw["status"]), actions_from_list(raw["pending"]), tuple(raw["sent"]))


class StatusStore(Protocol):
    def load(self) -> Checkpoint | None: ...

    def save(self, checkpoint: Checkpoint) -> None: ...


@dataclass
class FileStatusStore:
    """A checkpoint in a local JSON file, replaced atomically."""

    path: Path

    def load(self) -> Checkpoint | None:
        return Checkpoint.from_json(self.path.read_text()) if self.path.exists() else None

    def save(self, checkpoint: Checkpoint) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(checkpoint.to_json())
        tmp.replace(self.path)


@dataclass
class MemoryStatusStore:
    """A checkpoint kept in memory, as its JSON (so tests exercise the round trip)."""

    text: str | None = None
    saves: int = 0

    def load(self) -> Checkpoint | None:
        return None if self.text is None else Checkpoint.from_json(self.text)

    def save(self, checkpoint: Checkpoint) -> None:
        self.text = checkpoint.to_json()
        self.saves += 1


def message_of(notify: Notify) -> Message:
    """The notification message of a Notify action."""
    facts = notify.facts_dict()
    title = f"modelops canary {facts.get('model', '')} v{facts.get('canary', '')}: {notify.kind.replace('_', ' ')}"
    return Message(title=title, body=notify.message, severity=_SEVERITY.get(notify.kind, "info"), key=notify.key,
                   facts=facts)


@dataclass
class Runner:
    """Carries out the state machine's actions through the ports and persists every step."""

    spec: CanarySpec
    release: Release
    routes: RoutesPort
    serving: ServingPort
    registry: RegistryPort
    notifier: NotifierPort
    store: StatusStore
    clock: Callable[[], float] = time.time
    log: list[str] = field(default_factory=list)

    def begin(self) -> CanaryStatus:
        """Start the release, or resume it when the store already holds one."""
        saved = self.store.load()
        if saved is not None:
            return self._drain(saved)
        r = self.release
        status, actions = start(self.spec, r.model, r.stable.triton_version, r.canary.triton_version, self.clock())
        return self._drain(Checkpoint(status, actions))

    def resume(self) -> CanaryStatus:
        """Finish what a previous runner left pending (after a restart)."""
        saved = self.store.load()
        if saved is None:
            raise ContractError(f"canary {self.release.model}: no saved status to resume")
        return self._drain(saved)

    def handle(self, event: Event) -> CanaryStatus:
        """Feed one event (a measurement or a command) and carry out the resulting actions."""
        saved = self.store.load()
        if saved is None:
            raise ContractError(f"canary {self.release.model}: not started")
        if saved.pending:
            self._drain(saved)
            saved = self.store.load() or saved
        status, actions = advance(self.spec, saved.status, event, self.clock())
        return self._drain(Checkpoint(status, actions, saved.sent))

    # ---------------------------------------------------------------- internals
    def _drain(self, checkpoint: Checkpoint) -> CanaryStatus:
        self.store.save(checkpoint)
        status, pending, sent = checkpoint.status, list(checkpoint.pending), checkpoint.sent
        while pending:
            action = pending.pop(0)
            follow_up = self._carry_out(action, sent)
            if isinstance(action, Notify):
                sent = (*sent, action.key)
            if follow_up is not None:
                status, more = advance(self.spec, status, follow_up, self.clock())
                pending.extend(more)
            self.store.save(Checkpoint(status, tuple(pending), sent))
        return status

    def _carry_out(self, action: Action, sent: Sequence[str]) -> Event | None:
        r = self.release
        self.log.append(type(action).__name__)
        if isinstance(action, SetWeight):
            self.routes.apply(r.model, r.stable, r.canary, action.weight, r.released_by)
            return None
        if isinstance(action, SetShadow):
            self.routes.apply(r.model, r.stable, None, 0.0, r.released_by,
                              shadow=ShadowRef(r.canary, action.share, action.top_k))
            return None
        if isinstance(action, Rollback):
            applied_at = self.routes.apply(r.model, r.stable, None, 0.0, r.released_by)
            return RollbackApplied(applied_at)
        if isinstance(action, Promote):
            applied_at = self.routes.apply(r.model, r.canary, None, 0.0, r.released_by)
            self.registry.promote(r.model, r.canary.mlflow_version)
            self.registry.set_tags(r.model, r.canary.mlflow_version, {
                "modelops.canary.previous_version": r.stable.mlflow_version,
                "modelops.canary.promoted_from_triton_version": str(r.stable.triton_version)})
            return PromotionApplied(applied_at)
        if isinstance(action, FinishRollback):
            self.serving.unload(r.model, r.canary.triton_version)
            self.registry.mark_rollback(r.model, r.canary.mlflow_version, action.reason)
            tags = {"modelops.canary.mttr_s": "" if action.mttr_s is None else f"{action.mttr_s:.3f}"}
            tags.update({f"modelops.canary.{k.replace(' ', '.')}": v for k, v in action.facts
                         if k.startswith("gate ")})
            self.registry.set_tags(r.model, r.canary.mlflow_version, tags)
            return None
        if isinstance(action, Notify):
            if action.key not in sent:
                self.notifier.send(message_of(action))
            return None
        if isinstance(action, (Pause, RequestApproval)):
            return None  # the status says so; the DAG's approval task / the control DAG act on it
        raise TypeError(f"unknown action {action!r}")  # pragma: no cover - the union is closed


def restarted(runner: Runner, **changes: Any) -> Runner:
    """A fresh runner over the same store (what a restarted worker builds)."""
    return replace(runner, log=[], **changes)
