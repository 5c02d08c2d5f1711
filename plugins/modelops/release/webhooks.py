"""MLflow webhook deliveries, checked (pure): signature, timestamp window, replay, payload.

MLflow 3.17 signs a delivery as ``mlflow/webhooks/delivery.py`` does (Standard Webhooks style):

- headers ``X-MLflow-Delivery-Id`` (a UUID per delivery), ``X-MLflow-Timestamp`` (Unix
  seconds) and ``X-MLflow-Signature`` = ``v1,`` + base64(HMAC-SHA256(secret,
  ``<delivery id>.<timestamp>.<body>``)), the body being the exact bytes posted;
- a body ``{"entity", "action", "timestamp", "data"}``; for ``model_version_alias.created``
  ``data`` is ``{"name", "alias", "version"}``.

:func:`check_delivery` refuses an unsigned or forged delivery (:class:`Refused`, 401), one whose
timestamp is outside the window or whose id was seen already (400). The timestamp is inside the
signed content, so a captured delivery cannot be re-dated; the id memory
(:class:`ReplayGuard`) only needs to last as long as the window.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SIGNATURE_HEADER = "X-MLflow-Signature"
TIMESTAMP_HEADER = "X-MLflow-Timestamp"
DELIVERY_ID_HEADER = "X-MLflow-Delivery-Id"
SIGNATURE_VERSION = "v1"
ALIAS_CREATED = ("model_version_alias", "created")
_EXAMPLE_SIGNATURE = "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="


class Refused(Exception):
    """A delivery the receiver does not act on: HTTP ``status``, a counted ``reason``, and why."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Delivery:
    """A delivery whose signature, timestamp and id were checked."""

    delivery_id: str
    timestamp: int
    body: bytes


@dataclass(frozen=True)
class AliasEvent:
    """``model_version_alias.created``: ``alias`` was set on ``model``/``version``."""

    model: str
    alias: str
    version: str


def sign(secret: str, delivery_id: str, timestamp: str, body: bytes) -> str:
    """The ``X-MLflow-Signature`` value MLflow sends for this delivery."""
    signed = delivery_id.encode() + b"." + timestamp.encode() + b"." + body
    digest = hmac.new(secret.encode("utf-8"), signed, hashlib.sha256).digest()
    return f"{SIGNATURE_VERSION},{base64.b64encode(digest).decode()}"


def _header(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name) or headers.get(name.lower()) or ""
    return value.strip()


def check_signature(headers: Mapping[str, str], body: bytes, secrets: Sequence[str]) -> tuple[str, int]:
    """(delivery id, timestamp) of a delivery signed with one of ``secrets``.

    ``secrets`` holds the current secret and, right after a rotation, the previous one.

    Raises:
        Refused: 400 when a header is missing or malformed, 401 when unsigned or forged.
    """
    delivery_id = _header(headers, DELIVERY_ID_HEADER)
    if not delivery_id:
        raise Refused(400, "malformed", f"{DELIVERY_ID_HEADER}: required (example: "
                                        "3f1c2a9e-8d4b-4e55-9a1f-0c2d3e4f5a6b)")
    raw_ts = _header(headers, TIMESTAMP_HEADER)
    if not raw_ts.isdigit():
        raise Refused(400, "malformed", f"{TIMESTAMP_HEADER}={raw_ts!r}: must be Unix seconds (example: 1767225600)")
    offered = _header(headers, SIGNATURE_HEADER)
    if not offered:
        raise Refused(401, "unsigned", f"{SIGNATURE_HEADER}: missing (example: {_EXAMPLE_SIGNATURE}); the MLflow "
                                       "webhook has no secret (run `modelops webhook register`)")
    candidates = [part for part in offered.split() if part.startswith(f"{SIGNATURE_VERSION},")]
    if not candidates:
        raise Refused(401, "forged", f"{SIGNATURE_HEADER}: must be {SIGNATURE_VERSION},<base64 HMAC-SHA256> "
                                     f"(example: {_EXAMPLE_SIGNATURE})")
    for secret in secrets:
        expected = sign(secret, delivery_id, raw_ts, body)
        if any(hmac.compare_digest(expected.encode(), c.encode()) for c in candidates):
            return delivery_id, int(raw_ts)
    raise Refused(401, "forged", f"{SIGNATURE_HEADER}: does not match the body under the webhook's secret "
                                 "(a forged delivery, or MLflow holds another secret: run `modelops webhook register`)")


class ReplayGuard:
    """Delivery ids seen within the timestamp window (per process; thread-safe).

    An id is remembered until its timestamp leaves the window, after which the timestamp
    check refuses it anyway. :meth:`forget` lets MLflow's retry of a delivery that failed
    for a transient reason (it resends the same id) come through.
    """

    def __init__(self, max_age_s: float, *, capacity: int = 100_000) -> None:
        self.max_age_s = max_age_s
        self.capacity = capacity
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def admit(self, delivery_id: str, timestamp: int, now: float) -> None:
        """Accept a fresh, first-seen delivery.

        Raises:
            Refused: 400 when the timestamp is outside the window or the id was seen.
        """
        skew = now - timestamp
        if abs(skew) > self.max_age_s:
            when = f"{skew:.0f} s old" if skew > 0 else f"{-skew:.0f} s in the future"
            raise Refused(400, "stale", f"{TIMESTAMP_HEADER}={timestamp}: {when}; deliveries are accepted within "
                                        f"{self.max_age_s:.0f} s of the receiver's clock "
                                        "(MODELOPS_RELEASE_WEBHOOK_MAX_AGE_S)")
        with self._lock:
            if len(self._seen) >= 64:  # drop ids whose timestamps left the window
                self._seen = {k: expiry for k, expiry in self._seen.items() if expiry >= now}
            if delivery_id in self._seen:
                raise Refused(400, "replayed", f"{DELIVERY_ID_HEADER}={delivery_id}: already received (a replay)")
            if len(self._seen) >= self.capacity:
                raise Refused(429, "overloaded", f"more than {self.capacity} deliveries within "
                                                 f"{self.max_age_s:.0f} s; try again later")
            self._seen[delivery_id] = timestamp + self.max_age_s

    def forget(self, delivery_id: str) -> None:
        with self._lock:
            self._seen.pop(delivery_id, None)


def check_delivery(headers: Mapping[str, str], body: bytes, secrets: Sequence[str], guard: ReplayGuard,
                   now: float) -> Delivery:
    """Signature, then timestamp window and replay; the checked :class:`Delivery`."""
    delivery_id, timestamp = check_signature(headers, body, secrets)
    guard.admit(delivery_id, timestamp, now)
    return Delivery(delivery_id, timestamp, body)


def parse_event(body: bytes) -> tuple[tuple[str, str], Mapping[str, Any]]:
    """((entity, action), data) of a delivery body.

    Raises:
        Refused: 400 naming the field when the body is not MLflow's envelope.
    """
    try:
        envelope = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise Refused(400, "malformed", f"body: must be JSON ({exc})") from exc
    if not isinstance(envelope, dict):
        raise Refused(400, "malformed", 'body: must be a JSON object (example: {"entity": "model_version_alias", '
                                        '"action": "created", "data": {...}})')
    entity, action, data = envelope.get("entity"), envelope.get("action"), envelope.get("data")
    if not isinstance(entity, str) or not isinstance(action, str) or not isinstance(data, dict):
        raise Refused(400, "malformed", "body: needs entity and action (strings) and data (an object) (example: "
                                        '{"entity": "model_version_alias", "action": "created", "data": {...}})')
    return (entity, action), data


def alias_event(data: Mapping[str, Any]) -> AliasEvent:
    """The ``data`` of ``model_version_alias.created``.

    Raises:
        Refused: 400 naming the field.
    """
    fields = {}
    for name in ("name", "alias", "version"):
        value = data.get(name)
        if not isinstance(value, str | int) or isinstance(value, bool) or not str(value).strip():
            raise Refused(400, "malformed", f"data.{name}: required, a string "
                                            '(example: {"name": "recommender", "alias": "challenger", "version": "3"})')
        fields[name] = str(value).strip()
    if not fields["version"].isdigit():
        raise Refused(400, "malformed", f"data.version={fields['version']!r}: must be a version number (example: 3)")
    return AliasEvent(fields["name"], fields["alias"], fields["version"])
