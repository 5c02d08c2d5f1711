"""The production topology's ``mlflow-init``: the platform's own MLflow account.

MLflow runs its basic-auth app: anonymous calls are refused, authenticated users read, and only
accounts with a grant (or admins) write. ``python -m modelops.deploy.mlflow_users`` signs in as the
MLflow admin and creates (or re-keys) the ``airflow`` account the platform's tasks use, as an MLflow
admin: the release DAGs move any version between stages and aliases. People get their own accounts.
"""

from __future__ import annotations

import os
import sys

import requests

from modelops.config import settings
from modelops.errors import ConfigError, RegistryError

PLATFORM_USER = "airflow"


def _call(session: requests.Session, method: str, url: str, payload: dict[str, object]) -> requests.Response:
    try:
        return session.request(method, url, json=payload, timeout=30)
    except requests.RequestException as exc:
        raise RegistryError(f"MLflow {method} {url} failed: {exc}") from exc


def ensure_platform_user(base_url: str, admin_password: str, password: str, user: str = PLATFORM_USER) -> None:
    """Create USER with PASSWORD (or set its password), and make it an MLflow admin. Idempotent."""
    api = base_url.rstrip("/") + "/api/2.0/mlflow/users"
    session = requests.Session()
    session.auth = ("admin", admin_password)
    created = _call(session, "POST", f"{api}/create", {"username": user, "password": password})
    if created.status_code != 200:
        if "RESOURCE_ALREADY_EXISTS" not in created.text:
            raise RegistryError(f"MLflow refused to create user {user!r}: HTTP {created.status_code} "
                                f"{created.text[:300]}")
        changed = _call(session, "PATCH", f"{api}/update-password", {"username": user, "password": password})
        if changed.status_code != 200:
            raise RegistryError(f"MLflow refused the password of {user!r}: HTTP {changed.status_code} "
                                f"{changed.text[:300]}")
    admin = _call(session, "PATCH", f"{api}/update-admin", {"username": user, "is_admin": True})
    if admin.status_code != 200:
        raise RegistryError(f"MLflow refused to make {user!r} an admin: HTTP {admin.status_code} {admin.text[:300]}")


def main() -> int:
    try:
        ensure_platform_user(settings().mlflow_uri,
                             os.environ["MLFLOW_ADMIN_PASSWORD"], os.environ["MLFLOW_AIRFLOW_PASSWORD"])
    except (ConfigError, RegistryError, KeyError) as exc:
        print(f"mlflow-init: {exc}", file=sys.stderr)
        return 1
    print(f"MLflow account {PLATFORM_USER!r} ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())
