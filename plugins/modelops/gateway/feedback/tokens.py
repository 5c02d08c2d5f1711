"""Feedback tokens: HMAC-SHA256 signed claims that tie a user action to the prediction.

Format: ``<base64url(claims JSON)>.<base64url(HMAC-SHA256(secret, first part))>``. The
claims carry the request id, the model, its Triton version and sha256 prefix, and the
issue time (epoch seconds), so a feedback event is attributed to a version without a
lookup. A token is valid for :data:`TOKEN_TTL_S` (24 h) after issue unless its model says
otherwise: the validity is decided from the issue time in the claims, so the gateway first
checks the signature (:func:`verify_token` with ``ttl_s=None``), looks up the version's spec
(``outcomes.token_ttl_s``, :meth:`modelops.modelspec.spec.Outcomes.validity_s`) and then
checks the age (:func:`check_age`). Tokens issued before a model changed its validity need
no re-issue: nothing about the validity is signed into them.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import msgspec

from modelops.errors import ModelopsError

TOKEN_TTL_S = 24 * 3600
_CLOCK_SKEW_S = 300  # a token "issued" a little in the future (another gateway's clock) is still fine
SECRET_FILE_NAME = "feedback-secret"  # the same file the embedded stack creates


class TokenError(ModelopsError):
    """A feedback token was refused."""


class TokenInvalid(TokenError):
    """Malformed token or failed signature (HTTP 401)."""


class TokenExpired(TokenError):
    """A well-signed token older than its validity (HTTP 410)."""


@dataclass(frozen=True)
class TokenClaims:
    """What a feedback token says about its prediction."""

    request_id: str
    model: str
    model_version: int
    model_sha256: str
    issued_at: float


_ENCODE = msgspec.json.Encoder().encode


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue_token(secret: bytes, claims: TokenClaims) -> str:
    """Sign ``claims`` into a token."""
    payload = _ENCODE({"r": claims.request_id, "m": claims.model, "v": claims.model_version,
                       "s": claims.model_sha256, "t": round(claims.issued_at, 3)})  # compact JSON, as json.dumps gave
    body = _b64(payload)
    signature = hmac.digest(secret, body.encode("ascii"), "sha256")  # one-shot: no HMAC object per token
    return f"{body}.{_b64(signature)}"


def verify_token(secret: bytes, token: str, *, now: float, ttl_s: float | None = TOKEN_TTL_S) -> TokenClaims:
    """Check a token's signature and age and return its claims.

    Args:
        secret: the feedback secret.
        token: the token as the client sent it.
        now: the current time, epoch seconds.
        ttl_s: the validity; None checks the signature only (the caller decides the validity per
            model afterwards with :func:`check_age`).

    Raises:
        TokenInvalid: malformed, the signature does not match (tampered or another secret), or
            issued in the future (beyond the clock skew).
        TokenExpired: correctly signed but issued more than ``ttl_s`` seconds before ``now``.
    """
    body, dot, signature = token.partition(".")
    if not dot or not body or not signature:
        raise TokenInvalid("feedback_token: not a token (expected <claims>.<signature>)")
    try:
        expected = hmac.digest(secret, body.encode("ascii"), "sha256")
        given = _unb64(signature)
    except (UnicodeEncodeError, binascii.Error, ValueError) as exc:
        raise TokenInvalid("feedback_token: not a token (bad encoding)") from exc
    if not hmac.compare_digest(expected, given):
        raise TokenInvalid("feedback_token: signature does not match")
    try:
        raw = json.loads(_unb64(body))
        claims = TokenClaims(str(raw["r"]), str(raw["m"]), int(raw["v"]), str(raw["s"]), float(raw["t"]))
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise TokenInvalid("feedback_token: claims are unreadable") from exc
    if claims.issued_at - now > _CLOCK_SKEW_S:
        raise TokenInvalid("feedback_token: issued in the future")
    if ttl_s is not None:
        check_age(claims, now=now, ttl_s=ttl_s)
    return claims


def check_age(claims: TokenClaims, *, now: float, ttl_s: float) -> None:
    """Refuse a token issued more than ``ttl_s`` seconds before ``now``.

    Raises:
        TokenExpired: naming the token's age and its validity.
    """
    if now - claims.issued_at > ttl_s:
        raise TokenExpired(f"feedback_token: expired (issued {now - claims.issued_at:.0f} s ago, valid {ttl_s:.0f} s)")


def resolve_secret(configured: str, home: Path) -> bytes:
    """The feedback secret: the configured one, else one generated once and kept in ``home``.

    Several gateway workers (and restarts) must share the secret, so the generated one is
    written once with ``O_EXCL`` (0600) and read by everyone after.
    """
    if configured:
        return configured.encode()
    path = home / "secrets" / SECRET_FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32))
            handle.flush()
            os.fsync(handle.fileno())
    for _ in range(100):  # another process may be between O_EXCL create and write
        text = path.read_text().strip()
        if text:
            return text.encode()
        import time

        time.sleep(0.01)
    raise TokenError(f"feedback secret file {path} stays empty")
