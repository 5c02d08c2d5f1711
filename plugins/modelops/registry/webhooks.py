"""The platform's MLflow webhook: registered once, with a generated secret that can be rotated.

MLflow (3.17) posts ``model_version_alias.created`` to the release receiver
(:mod:`modelops.release.webhook_app`) signed with the webhook's secret. This module keeps
exactly one webhook named :data:`WEBHOOK_NAME` in step with the settings
(:func:`ensure_release_webhook`: created, or updated in place; extra copies deleted; disabled
when ``MODELOPS_RELEASE_WEBHOOKS=off``) and owns the secret both sides use.

The secret is ``MODELOPS_RELEASE_WEBHOOK_SECRET`` when configured, else generated once into
``HOME/secrets/mlflow-webhook-secret`` (0600). :func:`rotate_secret` keeps the replaced one as
``…secret.previous``, which the receiver still accepts for :data:`ROTATION_GRACE_S` (MLflow
caches a webhook with its secret for ``MLFLOW_WEBHOOK_CACHE_TTL``, and a delivery may be in
flight). MLflow stores secrets encrypted with ``MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY``; without
it each server process draws its own key and cannot read what another wrote.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from modelops.config import Settings
from modelops.errors import ConfigError, RegistryError
from modelops.secretfiles import generated_secret, write_private

T = TypeVar("T")

WEBHOOK_NAME = "modelops-release"
EVENTS = ("model_version_alias.created",)
SECRET_FILE = "mlflow-webhook-secret"
ROTATION_GRACE_S = 600.0
DESCRIPTION = "modelops: a version given the alias challenger starts its model_release run (managed by modelops)"


@dataclass(frozen=True)
class WebhookState:
    """The platform's webhook in MLflow after a registration step."""

    action: str  # created | updated | disabled | absent
    webhook_id: str = ""
    url: str = ""
    status: str = ""
    events: tuple[str, ...] = ()
    removed_duplicates: int = 0


# ------------------------------------------------------------------ the secret
def secret_path(cfg: Settings) -> Path:
    return cfg.home / "secrets" / SECRET_FILE


def _previous_path(cfg: Settings) -> Path:
    return secret_path(cfg).with_name(SECRET_FILE + ".previous")


def current_secret(cfg: Settings) -> str:
    """The secret MLflow signs with (configured, or generated once under HOME/secrets)."""
    return cfg.release_webhook_secret or generated_secret(secret_path(cfg), lambda: secrets.token_urlsafe(32))


def accepted_secrets(cfg: Settings, *, now: float | None = None) -> list[str]:
    """The secrets a delivery may be signed with: the current one, and the previous one during the grace."""
    accepted = [current_secret(cfg)]
    previous = _previous_path(cfg)
    if not cfg.release_webhook_secret and previous.exists():
        age = (time.time() if now is None else now) - previous.stat().st_mtime
        if age <= ROTATION_GRACE_S:
            accepted.append(previous.read_text().strip())
    return accepted


def rotate_secret(cfg: Settings) -> str:
    """Replace the generated secret (the old one stays accepted for the grace period); returns the new one.

    Raises:
        ConfigError: the secret is configured (MODELOPS_RELEASE_WEBHOOK_SECRET): change it there.
    """
    if cfg.release_webhook_secret:
        raise ConfigError("MODELOPS_RELEASE_WEBHOOK_SECRET is set: rotate by setting a new value for the receiver "
                          "(the Airflow API server) and running `modelops webhook register` with it "
                          "(example: MODELOPS_RELEASE_WEBHOOK_SECRET=$(openssl rand -base64 32))")
    old = current_secret(cfg)
    write_private(_previous_path(cfg), old)
    new = secrets.token_urlsafe(32)
    write_private(secret_path(cfg), new)
    return new


# ------------------------------------------------------------------ MLflow
@contextmanager
def _errors(uri: str, action: str) -> Iterator[None]:
    from mlflow.exceptions import MlflowException

    try:
        yield
    except MlflowException as exc:
        raise RegistryError(f"MLflow at {uri}: {action}: {exc.message}") from exc
    except OSError as exc:
        raise RegistryError(f"MLflow at {uri} unreachable during {action}: {exc}") from exc


def _call(uri: str, action: str, fn: Callable[[], T]) -> T:
    with _errors(uri, action):
        return fn()


def _client(uri: str) -> Any:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def platform_webhooks(client: Any, uri: str) -> list[Any]:
    """Every MLflow webhook named :data:`WEBHOOK_NAME`, oldest first."""
    found: list[Any] = []
    token: str | None = None
    while True:
        with _errors(uri, "list webhooks"):
            page = client.list_webhooks(max_results=100, page_token=token)
        found += [w for w in page if w.name == WEBHOOK_NAME]
        token = page.token
        if not token:
            break
    return sorted(found, key=lambda w: (w.creation_timestamp, w.webhook_id))


def _state(action: str, hook: Any, removed: int) -> WebhookState:
    return WebhookState(action, hook.webhook_id, hook.url, str(hook.status), tuple(str(e) for e in hook.events),
                        removed)


def ensure_release_webhook(cfg: Settings, *, secret: str | None = None) -> WebhookState:
    """Make MLflow hold exactly one platform webhook as the settings say (idempotent).

    ``MODELOPS_RELEASE_WEBHOOKS=on``: created, or the existing one updated (URL, events, secret,
    ACTIVE); ``off``: the existing one DISABLED (none is created). Copies beyond the oldest
    (left by a race of two registrations) are deleted.
    """
    from mlflow.entities.webhook import WebhookEvent, WebhookStatus

    uri = cfg.mlflow_uri
    client = _client(uri)
    hooks = platform_webhooks(client, uri)
    for extra in hooks[1:]:
        with _errors(uri, f"delete duplicate webhook {extra.webhook_id}"):
            client.delete_webhook(extra.webhook_id)
    removed = max(0, len(hooks) - 1)
    events = [WebhookEvent.from_str(e) for e in EVENTS]  # type: ignore[arg-type]
    if cfg.release_webhooks == "off":
        if not hooks:
            return WebhookState("absent", removed_duplicates=removed)
        hook = _call(uri, "disable the release webhook",
                     lambda: client.update_webhook(hooks[0].webhook_id, status=WebhookStatus.DISABLED))
        return _state("disabled", hook, removed)
    key = secret if secret is not None else current_secret(cfg)
    if not hooks:
        hook = _call(uri, f"create webhook {WEBHOOK_NAME} -> {cfg.release_webhook_target}",
                     lambda: client.create_webhook(name=WEBHOOK_NAME, url=cfg.release_webhook_target, events=events,
                                                   description=DESCRIPTION, secret=key,
                                                   status=WebhookStatus.ACTIVE))
        return _state("created", hook, removed)
    hook = _call(uri, f"update webhook {WEBHOOK_NAME} -> {cfg.release_webhook_target}",
                 lambda: client.update_webhook(hooks[0].webhook_id, name=WEBHOOK_NAME, description=DESCRIPTION,
                                               url=cfg.release_webhook_target, events=events, secret=key,
                                               status=WebhookStatus.ACTIVE))
    return _state("updated", hook, removed)


def describe_release_webhook(cfg: Settings) -> WebhookState:
    """The platform's webhook as MLflow holds it (action ``absent`` when there is none)."""
    uri = cfg.mlflow_uri
    hooks = platform_webhooks(_client(uri), uri)
    return _state("found", hooks[0], 0) if hooks else WebhookState("absent")


def probe_release_webhook(cfg: Settings) -> tuple[bool, str]:
    """MLflow sends its example ``model_version_alias.created`` to the receiver: (delivered, what came back)."""
    uri = cfg.mlflow_uri
    client = _client(uri)
    hooks = platform_webhooks(client, uri)
    if not hooks:
        return False, f"no webhook {WEBHOOK_NAME} in MLflow at {uri}: run `modelops webhook register`"
    result = _call(uri, "test the release webhook",
                   lambda: client.test_webhook(hooks[0].webhook_id, event=EVENTS[0]))
    detail = result.error_message or f"HTTP {result.response_status} {str(result.response_body or '')[:300]}"
    return bool(result.success), detail
