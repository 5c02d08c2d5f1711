"""Control requests of a running release (abort, pause, resume), kept beside its checkpoint.

The cockpit and ``modelops release`` write ``canary/<model>/v<N>.control.json``; the canary
operator applies it at its next window and removes it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from modelops.canary.actions import AbortCommand, Event, PauseCommand, ResumeCommand
from modelops.errors import ConfigError, ContractError
from modelops.names import check_model_name

CONTROL_ACTIONS = ("abort", "pause", "resume")


def control_key(model: str, canary_triton_version: int) -> str:
    """Object-store key of a release's pending control request."""
    return f"canary/{check_model_name(model)}/v{canary_triton_version}.control.json"


def write_control(store: Any, model: str, canary_triton_version: int, action: str, by: str,
                  reason: str = "") -> dict[str, Any]:
    """Write a control request (abort, pause, resume) that the operator applies at its next window."""
    if action not in CONTROL_ACTIONS:
        raise ConfigError(f"control action {action!r}: one of {', '.join(CONTROL_ACTIONS)}")
    request = {"id": uuid.uuid4().hex, "action": action, "by": by, "reason": reason, "requested_at": time.time()}
    store.put_bytes(control_key(model, canary_triton_version), json.dumps(request).encode("utf-8"),
                    content_type="application/json")
    return request


def command_of(request: Mapping[str, Any]) -> Event:
    """The state machine's command for a control request."""
    by, reason = str(request.get("by", "operator")), str(request.get("reason", ""))
    action = request.get("action")
    if action == "abort":
        return AbortCommand(by, reason)
    if action == "pause":
        return PauseCommand(by, reason)
    if action == "resume":
        return ResumeCommand(by)
    raise ContractError(f"control request {request!r}: unknown action")


def parse_control(raw: bytes) -> tuple[dict[str, Any], Event, float]:
    """(request, command, requested_at) of a stored control document.

    Raises:
        ContractError: not a JSON object with a known ``action`` and a numeric ``requested_at``.
    """
    example = '(example: {"action": "pause", "by": "alice", "requested_at": 1764540000.0})'
    try:
        request = json.loads(raw.decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ContractError(f"control request: not JSON ({exc}) {example}") from exc
    if not isinstance(request, dict):
        raise ContractError(f"control request: must be a JSON object {example}")
    try:
        requested_at = float(request.get("requested_at", 0.0))
    except (TypeError, ValueError) as exc:
        raise ContractError(f"control request: requested_at must be a Unix time in seconds {example}") from exc
    return request, command_of(request), requested_at
