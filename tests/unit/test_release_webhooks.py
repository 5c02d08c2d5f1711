"""The receiver's checks of an MLflow webhook delivery: signature, timestamp window, replay, payload.

The known-good deliveries are made by MLflow's own sender (``mlflow.webhooks.delivery``), with a
session that captures what it would post instead of posting it.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from modelops.release.webhooks import (
    DELIVERY_ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Refused,
    ReplayGuard,
    alias_event,
    check_delivery,
    check_signature,
    parse_event,
    sign,
)

SECRET = "s3cret-of-the-webhook"


class _Capture:
    """A requests session that keeps the request MLflow's sender makes."""

    def __init__(self) -> None:
        self.sent: dict[str, Any] = {}

    def post(self, url: str, *, data: bytes, headers: dict[str, str], timeout: float) -> object:
        self.sent = {"url": url, "body": data, "headers": headers}
        return object()


def mlflow_delivery(monkeypatch: pytest.MonkeyPatch, *, name: str = "churn", alias: str = "challenger",
                    version: str = "3", secret: str = SECRET) -> tuple[dict[str, str], bytes]:
    """(headers, body) exactly as MLflow 3.17 sends ``model_version_alias.created``."""
    from mlflow.entities.webhook import Webhook, WebhookEvent
    from mlflow.webhooks.delivery import _send_webhook_request
    from mlflow.webhooks.types import ModelVersionAliasCreatedPayload

    monkeypatch.setenv("MLFLOW_WEBHOOK_ALLOWED_SCHEMES", "http,https")
    monkeypatch.setenv("MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS", "true")
    event = WebhookEvent.from_str("model_version_alias.created")
    hook = Webhook(webhook_id="w1", name="modelops-release", url="http://127.0.0.1:9/modelops-webhooks/mlflow",
                   events=[event], creation_timestamp=0, last_updated_timestamp=0, secret=secret)
    capture = _Capture()
    _send_webhook_request(hook, ModelVersionAliasCreatedPayload(name=name, alias=alias, version=version), event,
                          capture)  # type: ignore[arg-type]
    return capture.sent["headers"], capture.sent["body"]


def test_a_delivery_signed_by_mlflow_passes_and_its_event_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    headers, body = mlflow_delivery(monkeypatch)
    delivery = check_delivery(headers, body, [SECRET], ReplayGuard(300), time.time())
    assert delivery.delivery_id == headers[DELIVERY_ID_HEADER]
    event, data = parse_event(delivery.body)
    assert event == ("model_version_alias", "created")
    parsed = alias_event(data)
    assert (parsed.model, parsed.alias, parsed.version) == ("churn", "challenger", "3")


def test_our_signature_is_mlflows_signature() -> None:
    from mlflow.webhooks.delivery import _generate_hmac_signature

    body = json.dumps({"entity": "model_version_alias", "action": "created", "data": {"name": "ü"}})
    assert sign(SECRET, "d-1", "1767225600", body.encode()) == _generate_hmac_signature(SECRET, "d-1", "1767225600",
                                                                                       body)


def test_a_tampered_body_is_refused_as_forged(monkeypatch: pytest.MonkeyPatch) -> None:
    headers, body = mlflow_delivery(monkeypatch, version="3")
    tampered = body.replace(b'"version": "3"', b'"version": "4"')
    assert tampered != body
    with pytest.raises(Refused) as refused:
        check_signature(headers, tampered, [SECRET])
    assert (refused.value.status, refused.value.reason) == (401, "forged")
    assert SIGNATURE_HEADER in str(refused.value)


def test_a_delivery_signed_with_another_secret_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    headers, body = mlflow_delivery(monkeypatch, secret="not-our-secret")
    with pytest.raises(Refused) as refused:
        check_signature(headers, body, [SECRET])
    assert refused.value.status == 401 and "modelops webhook register" in str(refused.value)


def test_the_previous_secret_is_accepted_beside_the_current_one(monkeypatch: pytest.MonkeyPatch) -> None:
    headers, body = mlflow_delivery(monkeypatch, secret="old-secret")
    assert check_signature(headers, body, ["new-secret", "old-secret"])[0] == headers[DELIVERY_ID_HEADER]


def test_a_re_dated_delivery_no_longer_matches_its_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    headers, body = mlflow_delivery(monkeypatch)
    redated = {**headers, TIMESTAMP_HEADER: str(int(headers[TIMESTAMP_HEADER]) + 1)}
    with pytest.raises(Refused) as refused:
        check_signature(redated, body, [SECRET])
    assert refused.value.status == 401


@pytest.mark.parametrize(("drop", "status", "reason"), [
    (SIGNATURE_HEADER, 401, "unsigned"), (TIMESTAMP_HEADER, 400, "malformed"), (DELIVERY_ID_HEADER, 400, "malformed"),
])
def test_missing_headers_are_named(monkeypatch: pytest.MonkeyPatch, drop: str, status: int, reason: str) -> None:
    headers, body = mlflow_delivery(monkeypatch)
    del headers[drop]
    with pytest.raises(Refused) as refused:
        check_signature(headers, body, [SECRET])
    assert (refused.value.status, refused.value.reason) == (status, reason)
    assert drop in str(refused.value) and "example" in str(refused.value)


def test_a_stale_delivery_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    headers, body = mlflow_delivery(monkeypatch)
    sent = int(headers[TIMESTAMP_HEADER])
    with pytest.raises(Refused) as refused:
        check_delivery(headers, body, [SECRET], ReplayGuard(300), now=sent + 301)
    assert (refused.value.status, refused.value.reason) == (400, "stale")
    assert "301 s old" in str(refused.value) and "MODELOPS_RELEASE_WEBHOOK_MAX_AGE_S" in str(refused.value)
    with pytest.raises(Refused, match="in the future"):
        check_delivery(headers, body, [SECRET], ReplayGuard(300), now=sent - 400)
    assert check_delivery(headers, body, [SECRET], ReplayGuard(300), now=sent + 299).timestamp == sent


def test_a_replayed_delivery_is_refused_until_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    headers, body = mlflow_delivery(monkeypatch)
    guard, now = ReplayGuard(300), float(headers[TIMESTAMP_HEADER])
    check_delivery(headers, body, [SECRET], guard, now)
    with pytest.raises(Refused) as refused:
        check_delivery(headers, body, [SECRET], guard, now + 1)
    assert (refused.value.status, refused.value.reason) == (400, "replayed")
    guard.forget(headers[DELIVERY_ID_HEADER])  # the first try failed transiently: MLflow's retry may come through
    check_delivery(headers, body, [SECRET], guard, now + 2)


def test_the_replay_memory_lasts_only_as_long_as_the_window() -> None:
    guard = ReplayGuard(10)
    for i in range(200):
        guard.admit(f"old-{i}", timestamp=1000, now=1000)
    guard.admit("new", timestamp=2000, now=2000)  # the old ids expired: the memory is pruned
    assert len(guard._seen) == 1


@pytest.mark.parametrize(("body", "field"), [
    (b"not json", "body: must be JSON"),
    (b"[1]", "body: must be a JSON object"),
    (b'{"entity": "model_version_alias", "action": "created"}', "needs entity and action"),
])
def test_a_malformed_body_is_refused_naming_what_is_wrong(body: bytes, field: str) -> None:
    with pytest.raises(Refused, match=field) as refused:
        parse_event(body)
    assert refused.value.status == 400


@pytest.mark.parametrize(("data", "field"), [
    ({"alias": "challenger", "version": "3"}, "data.name"),
    ({"name": "churn", "alias": "challenger", "version": "three"}, "data.version"),
    ({"name": "churn", "alias": True, "version": "3"}, "data.alias"),
])
def test_an_alias_event_without_its_fields_is_refused(data: dict[str, Any], field: str) -> None:
    with pytest.raises(Refused, match=field):
        alias_event(data)
