"""Feedback tokens: round trip, expiry, tampering, other secrets, generated secret."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from modelops.gateway.feedback.tokens import (
    TOKEN_TTL_S,
    TokenClaims,
    TokenExpired,
    TokenInvalid,
    issue_token,
    resolve_secret,
    verify_token,
)

SECRET = b"s3cret"
CLAIMS = TokenClaims("req-1", "recommender", 4, "ab12cd34ef56", 1_764_460_800.25)


def test_round_trip() -> None:
    token = issue_token(SECRET, CLAIMS)
    assert verify_token(SECRET, token, now=CLAIMS.issued_at + 10) == CLAIMS


def test_valid_until_24h_then_expired() -> None:
    token = issue_token(SECRET, CLAIMS)
    assert verify_token(SECRET, token, now=CLAIMS.issued_at + TOKEN_TTL_S - 1).request_id == "req-1"
    with pytest.raises(TokenExpired):
        verify_token(SECRET, token, now=CLAIMS.issued_at + TOKEN_TTL_S + 1)


def test_other_secret_is_refused() -> None:
    with pytest.raises(TokenInvalid, match="signature"):
        verify_token(b"other", issue_token(SECRET, CLAIMS), now=CLAIMS.issued_at)


def test_tampered_claims_are_refused() -> None:
    body, signature = issue_token(SECRET, CLAIMS).split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims["v"] = 5  # claim another version
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    with pytest.raises(TokenInvalid):
        verify_token(SECRET, f"{forged}.{signature}", now=CLAIMS.issued_at)


@pytest.mark.parametrize("token", ["", "abc", "abc.", ".abc", "a.b.c", "é.é", "abc.!!!"])
def test_garbage_is_invalid(token: str) -> None:
    with pytest.raises(TokenInvalid):
        verify_token(SECRET, token, now=CLAIMS.issued_at)


def test_flipped_signature_bit_is_refused() -> None:
    token = issue_token(SECRET, CLAIMS)
    last = "A" if token[-1] != "A" else "B"
    with pytest.raises(TokenInvalid):
        verify_token(SECRET, token[:-1] + last, now=CLAIMS.issued_at)


def test_generated_secret_is_kept_and_shared(tmp_path: Path) -> None:
    first = resolve_secret("", tmp_path)
    assert len(first) == 64
    assert resolve_secret("", tmp_path) == first
    assert (tmp_path / "secrets" / "feedback-secret").stat().st_mode & 0o077 == 0
    assert resolve_secret("configured", tmp_path) == b"configured"
