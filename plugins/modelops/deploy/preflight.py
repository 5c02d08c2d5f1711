"""The production topology's init step: refuse placeholder secrets, then write the generated configs.

``python -m modelops.deploy.preflight --env-example FILE --objectstore-config DIR --mlflow-config DIR
--airflow-auth DIR --triton-admin DIR --spark-auth DIR`` (the compose file's ``init`` service) reads every
secret named in :data:`SECRETS` from the environment and fails, naming the variable, when one is empty, still holds its
``.env.example`` placeholder, or breaks its rule (the Fernet key must be 32 url-safe base64 bytes).
It then writes, from the same variables, each file into the folder (a volume of its own) that only
its reader mounts:

- ``s3-identities.json`` in ``--objectstore-config``: the object store's identities, one per
  service (Triton read-only, the Spark executors read-only but for the feedback quarantine),
- ``mlflow-auth.ini`` in ``--mlflow-config``: the MLflow basic-auth app's configuration (user store
  in PostgreSQL, its password inside),
- ``passwords.json`` in ``--airflow-auth``: the Airflow admin's password file,
- ``admin-key`` in ``--triton-admin``: the key of Triton's restricted repository API (Triton, the
  publisher, the reconciler and the scaler mount it),
- ``secret`` in ``--spark-auth``: Spark's RPC authentication secret (the master, the workers and the
  drivers in the Airflow workers mount it).

:data:`CONFIG_FILES` says which file goes where; the structure test checks that no service mounts
a generated-secrets volume it does not read.

Everything but :func:`main` is pure.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from modelops.config import value_of
from modelops.errors import ConfigError
from modelops.secretfiles import write_private

#: The generated files are read by other services of the compose project (they share gid 0), never by others.
GROUP_READABLE = 0o640

#: The variables that must hold a real secret, and what a valid value looks like.
SECRETS: tuple[str, ...] = (
    "POSTGRES_PASSWORD",
    "POSTGRES_AIRFLOW_PASSWORD",
    "POSTGRES_MLFLOW_PASSWORD",
    "AIRFLOW_ADMIN_PASSWORD",
    "AIRFLOW_JWT_SECRET",
    "AIRFLOW_API_SECRET_KEY",
    "AIRFLOW_FERNET_KEY",
    "MLFLOW_ADMIN_PASSWORD",
    "MLFLOW_AIRFLOW_PASSWORD",
    "MLFLOW_FLASK_SECRET_KEY",
    "MODELOPS_FEEDBACK_SECRET",
    "GRAFANA_ADMIN_PASSWORD",
    "S3_ADMIN_SECRET_KEY",
    "S3_AIRFLOW_SECRET_KEY",
    "S3_MLFLOW_SECRET_KEY",
    "S3_GATEWAY_SECRET_KEY",
    "S3_TRITON_SECRET_KEY",
    "S3_SPARK_SECRET_KEY",
    "REDIS_PASSWORD",
    "TRITON_ADMIN_KEY",
    "SPARK_AUTH_SECRET",
)
MIN_SECRET_LENGTH = 12
#: Secrets that stand in a URL or a flag as they are (the Celery broker URL ``redis://:PASSWORD@redis:6379/0``,
#: the database URLs, Triton's ``--http-restricted-api=APIS:admin-key=KEY``).
URL_SECRETS = frozenset({"REDIS_PASSWORD", "POSTGRES_AIRFLOW_PASSWORD", "POSTGRES_MLFLOW_PASSWORD", "TRITON_ADMIN_KEY"})
_URL_SAFE = re.compile(r"[A-Za-z0-9_~.-]+")
GENERATE_HINT = 'python3 -c "import secrets; print(secrets.token_urlsafe(32))"'
FERNET_HINT = 'python3 -c "import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())"'


@dataclass(frozen=True)
class Identity:
    """One object-store identity: its access-key variable, secret variable and S3 actions."""

    name: str
    access_key_env: str
    secret_key_env: str
    actions: tuple[str, ...]


#: The feedback job's output: the only prefix the Spark executors write (its quarantine objects).
SPARK_WRITES = "metrics/ctr_cvr"
#: The event logs (modelops.records.LOG_PREFIXES): the only prefix the gateways write. A compromised gateway
#: reads routes, repositories and feature tables but cannot rewrite them.
GATEWAY_WRITES = "logs"

#: The generated config files by the folder (and compose volume) they are written to, and who mounts it.
CONFIG_FILES: dict[str, tuple[str, ...]] = {
    "objectstore-config": ("s3-identities.json",),
    "mlflow-config": ("mlflow-auth.ini",),
    "airflow-auth": ("passwords.json",),
    "triton-admin": ("admin-key",),
    "spark-auth": ("secret",),
}


def identities(bucket: str, mlflow_bucket: str) -> tuple[Identity, ...]:
    """Per-service object-store identities: only the admin may create buckets; Triton only reads.

    The Spark executors read the platform bucket (logs, baselines, the drift job's inputs) and
    write only under :data:`SPARK_WRITES`, the gateways only under :data:`GATEWAY_WRITES` (SeaweedFS
    prefix grants: ``Write:bucket/prefix/*``).
    """
    rw = ("Read", "Write", "List", "Tagging")
    return (
        Identity("admin", "S3_ADMIN_ACCESS_KEY", "S3_ADMIN_SECRET_KEY", ("Admin", "Read", "Write", "List", "Tagging")),
        Identity("airflow", "S3_AIRFLOW_ACCESS_KEY", "S3_AIRFLOW_SECRET_KEY",
                 tuple(f"{a}:{b}" for b in (bucket, mlflow_bucket) for a in rw)),
        Identity("mlflow", "S3_MLFLOW_ACCESS_KEY", "S3_MLFLOW_SECRET_KEY", tuple(f"{a}:{mlflow_bucket}" for a in rw)),
        Identity("gateway", "S3_GATEWAY_ACCESS_KEY", "S3_GATEWAY_SECRET_KEY",
                 (f"Read:{bucket}", f"List:{bucket}", f"Write:{bucket}/{GATEWAY_WRITES}/*")),
        Identity("triton", "S3_TRITON_ACCESS_KEY", "S3_TRITON_SECRET_KEY", (f"Read:{bucket}", f"List:{bucket}")),
        Identity("spark", "S3_SPARK_ACCESS_KEY", "S3_SPARK_SECRET_KEY",
                 (f"Read:{bucket}", f"List:{bucket}", f"Write:{bucket}/{SPARK_WRITES}/*")),
    )


def parse_env_file(text: str) -> dict[str, str]:
    """``NAME=value`` lines of an env file (comments and blank lines skipped, no quoting rules)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        out[name.strip()] = value.strip()
    return out


def _fernet_problem(value: str) -> str | None:
    try:
        raw = base64.urlsafe_b64decode(value.encode())
    except (binascii.Error, ValueError):
        return "is not url-safe base64"
    return None if len(raw) == 32 else f"decodes to {len(raw)} bytes, not 32"


def secret_problems(env: Mapping[str, str], placeholders: Mapping[str, str]) -> list[str]:
    """One message per secret that is missing, empty, a placeholder or malformed (empty: all good)."""
    problems: list[str] = []
    for name in SECRETS:
        value = env.get(name, "")
        hint = FERNET_HINT if name == "AIRFLOW_FERNET_KEY" else GENERATE_HINT
        if not value.strip():
            problems.append(f"{name} is empty: set it in .env (e.g. the output of {hint})")
        elif placeholders.get(name) and value == placeholders[name]:
            problems.append(f"{name} still holds the .env.example placeholder {value!r}: set a real secret "
                            f"in .env (e.g. the output of {hint})")
        elif name == "AIRFLOW_FERNET_KEY":
            problem = _fernet_problem(value)
            if problem:
                problems.append(f"AIRFLOW_FERNET_KEY {problem}: it must be 32 url-safe base64-encoded bytes "
                                f"(e.g. the output of {FERNET_HINT})")
        elif len(value) < MIN_SECRET_LENGTH:
            problems.append(f"{name} is {len(value)} characters: a secret needs at least {MIN_SECRET_LENGTH} "
                            f"(e.g. the output of {hint})")
        elif name in URL_SECRETS and not _URL_SAFE.fullmatch(value):
            problems.append(f"{name} goes into a URL as it is: only letters, digits and - _ . ~ are allowed "
                            f"(e.g. the output of {hint})")
    for ident in identities("b", "m"):
        if not env.get(ident.access_key_env, "").strip():
            problems.append(f"{ident.access_key_env} is empty: set the {ident.name} identity's access key in "
                            f".env (e.g. {ident.access_key_env}={ident.name})")
    return problems


def check_secrets(env: Mapping[str, str], placeholders: Mapping[str, str]) -> None:
    """Raise ConfigError listing every bad secret."""
    problems = secret_problems(env, placeholders)
    if problems:
        raise ConfigError("refusing to start the topology:\n  " + "\n  ".join(problems))


def s3_identities_doc(env: Mapping[str, str], bucket: str, mlflow_bucket: str) -> dict[str, object]:
    """SeaweedFS's ``-s3.config`` document."""
    return {"identities": [
        {"name": i.name, "credentials": [{"accessKey": env[i.access_key_env], "secretKey": env[i.secret_key_env]}],
         "actions": list(i.actions)}
        for i in identities(bucket, mlflow_bucket)
    ]}


def mlflow_auth_ini(database_uri: str) -> str:
    """The basic-auth app's config: authenticated users read, the rest is granted per user.

    The admin password comes from MLFLOW_AUTH_ADMIN_PASSWORD in the MLflow container, not this file.
    """
    return ("[mlflow]\n"
            "default_permission = READ\n"
            f"database_uri = {database_uri}\n"
            "admin_username = admin\n"
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-example", type=Path, required=True, help="the .env.example with the placeholders")
    parser.add_argument("--objectstore-config", type=Path, required=True,
                        help="directory for s3-identities.json (mounted by the object store only)")
    parser.add_argument("--mlflow-config", type=Path, required=True,
                        help="directory for mlflow-auth.ini (mounted by MLflow only)")
    parser.add_argument("--airflow-auth", type=Path, required=True,
                        help="directory for Airflow's password file (Airflow opens it read-write)")
    parser.add_argument("--triton-admin", type=Path, required=True,
                        help="directory for Triton's admin key (Triton, the publisher, reconciler and scaler mount it)")
    parser.add_argument("--spark-auth", type=Path, required=True,
                        help="directory for Spark's authentication secret (the Spark daemons and drivers mount it)")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    try:
        check_secrets(env, parse_env_file(args.env_example.read_text()))
        bucket, mlflow_bucket = value_of("bucket", env), value_of("mlflow_bucket", env)
        airflow_user = value_of("airflow_user", env)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    for folder in (args.objectstore_config, args.mlflow_config, args.airflow_auth, args.triton_admin, args.spark_auth):
        folder.mkdir(parents=True, exist_ok=True)
    write_private(args.objectstore_config / "s3-identities.json",
                  json.dumps(s3_identities_doc(env, bucket, mlflow_bucket)), mode=GROUP_READABLE)
    write_private(args.mlflow_config / "mlflow-auth.ini", mlflow_auth_ini(env["MLFLOW_AUTH_DATABASE_URI"]),
                  mode=GROUP_READABLE)
    write_private(args.airflow_auth / "passwords.json",
                  json.dumps({airflow_user: env["AIRFLOW_ADMIN_PASSWORD"]}),
                  mode=GROUP_READABLE)
    write_private(args.triton_admin / "admin-key", env["TRITON_ADMIN_KEY"], mode=GROUP_READABLE)
    write_private(args.spark_auth / "secret", env["SPARK_AUTH_SECRET"], mode=GROUP_READABLE)
    print(f"secrets checked; configs written to {args.objectstore_config}, {args.mlflow_config}, "
          f"{args.airflow_auth}, {args.triton_admin} and {args.spark_auth}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
