"""What the state machine asks the runner to do (actions) and what it reacts to (events).

Both are small frozen dataclasses. Actions JSON round-trip, so a runner can persist the
actions it has not yet carried out next to the status and finish them after a restart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from modelops.canary.measurement import Measurement
from modelops.errors import ContractError

Facts = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class SetWeight:
    """Write the routes with this canary weight and wait until every gateway applied it."""

    weight: float


@dataclass(frozen=True)
class SetShadow:
    """Write the routes with the candidate as the stable's shadow (no user weight) and wait until every
    gateway applied them: ``share`` of the stable's requests mirrored, top-``top_k`` orders compared."""

    share: float
    top_k: int = 5


@dataclass(frozen=True)
class Promote:
    """Route 100 % to the canary (it becomes stable) and promote it in the registry."""

    canary_version: int
    stable_version: int


@dataclass(frozen=True)
class Rollback:
    """Route 0 % to the canary and wait until every gateway applied it; report the moment."""

    reason: str


@dataclass(frozen=True)
class FinishRollback:
    """After the routes are back on stable: unload the canary, tag the registry version."""

    canary_version: int
    reason: str
    mttr_s: float | None
    facts: Facts = ()


@dataclass(frozen=True)
class Pause:
    """Stop advancing; keep the current weight until a person resumes or aborts."""

    reason: str


@dataclass(frozen=True)
class RequestApproval:
    """Ask a person to approve the 100 % step."""

    weight: float


@dataclass(frozen=True)
class Notify:
    """Send one notification; ``key`` is unique per event, so a replay can be de-duplicated."""

    kind: str
    key: str
    message: str
    facts: Facts = ()

    def facts_dict(self) -> dict[str, str]:
        return dict(self.facts)


Action = SetWeight | SetShadow | Promote | Rollback | FinishRollback | Pause | RequestApproval | Notify

_ACTIONS: dict[str, type[Any]] = {cls.__name__: cls for cls in
                                  (SetWeight, SetShadow, Promote, Rollback, FinishRollback, Pause, RequestApproval,
                                   Notify)}


def action_to_dict(action: Action) -> dict[str, Any]:
    body = {k: [list(p) for p in v] if k == "facts" else v for k, v in vars(action).items()}
    return {"type": type(action).__name__, **body}


def action_from_dict(raw: Mapping[str, Any]) -> Action:
    values = dict(raw)
    kind = values.pop("type", None)
    cls = _ACTIONS.get(str(kind))
    if cls is None:
        raise ContractError(f"canary action type={kind!r}: unknown (known: {sorted(_ACTIONS)})")
    if "facts" in values:
        values["facts"] = tuple((str(k), str(v)) for k, v in values["facts"])
    action: Action = cls(**values)
    return action


def actions_to_list(actions: Sequence[Action]) -> list[dict[str, Any]]:
    return [action_to_dict(a) for a in actions]


def actions_from_list(raw: Sequence[Mapping[str, Any]]) -> tuple[Action, ...]:
    return tuple(action_from_dict(a) for a in raw)


# ---------------------------------------------------------------- events (inputs)
@dataclass(frozen=True)
class AbortCommand:
    """A person asks to roll back now."""

    by: str = "operator"
    reason: str = ""


@dataclass(frozen=True)
class PauseCommand:
    by: str = "operator"
    reason: str = ""


@dataclass(frozen=True)
class ResumeCommand:
    by: str = "operator"


@dataclass(frozen=True)
class ApproveCommand:
    by: str = "operator"


@dataclass(frozen=True)
class RollbackApplied:
    """The runner confirms every gateway applied 0 % canary at ``at`` (epoch seconds)."""

    at: float


@dataclass(frozen=True)
class PromotionApplied:
    """The runner confirms the promotion (routes and registry) at ``at``."""

    at: float


Event = Measurement | AbortCommand | PauseCommand | ResumeCommand | ApproveCommand | RollbackApplied | PromotionApplied
