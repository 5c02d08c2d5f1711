"""The platform's credentials: configured values win, else secrets generated once under HOME/secrets (0600).

The object store's S3 keys, the Airflow admin and viewer passwords, the feedback secret and the Triton
admin key are read here by whoever needs them (the object-store adapters, the Airflow client, the embedded stack that
starts the services with them).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path

from modelops.config import Settings
from modelops.secretfiles import configured_secret, generated_secret


def _generated(home: Path, name: str, make: Callable[[], str]) -> str:
    """A credential kept in HOME/secrets/NAME (0600), created on first use."""
    return generated_secret(home / "secrets" / name, make)


def s3_credentials(cfg: Settings) -> tuple[str | None, str | None]:
    """(access key, secret key) for the object store.

    Configured keys win. Otherwise the embedded store's keys from HOME/secrets (created on first
    use; also used when MODELOPS_S3_ENDPOINT_URL points elsewhere but the keys exist, e.g. a proxy
    in front of the embedded store), or ``(None, None)`` for an external endpoint without them, so
    boto3 uses its default credential chain.
    """
    if cfg.s3_access_key or cfg.s3_secret_key:
        return cfg.s3_access_key, cfg.s3_secret_key
    if cfg.s3_endpoint_url and not (cfg.home / "secrets" / "s3-access-key").exists():
        return None, None
    access = _generated(cfg.home, "s3-access-key", lambda: "modelops" + secrets.token_hex(8))
    secret = _generated(cfg.home, "s3-secret-key", lambda: secrets.token_urlsafe(30))
    return access, secret


def secret_file(home: Path, name: str) -> str:
    """A random secret kept under HOME, created once (0600)."""
    return generated_secret(home / "secrets" / name)


def airflow_password(cfg: Settings) -> str:
    return cfg.airflow_password or secret_file(cfg.home, "airflow-admin-password")


#: A read-only Airflow user of the embedded stack (simple auth manager role "viewer"): it can read the
#: release cockpit but not act on a release. Its password is in HOME/secrets/airflow-viewer-password.
VIEWER_USER = "viewer"


def airflow_viewer_password(cfg: Settings) -> str:
    return secret_file(cfg.home, "airflow-viewer-password")


def feedback_secret(cfg: Settings) -> str:
    return cfg.feedback_secret or secret_file(cfg.home, "feedback-secret")


def triton_admin_key(cfg: Settings) -> str:
    """The key of Triton's restricted repository API (MODELOPS_TRITON_ADMIN_KEY or its file), or ``""``."""
    return configured_secret(cfg.triton_admin_key, cfg.triton_admin_key_file)
