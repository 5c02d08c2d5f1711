"""The production topology's ``postgres-roles``: one PostgreSQL role per service, owning only its databases.

``python -m modelops.deploy.db_roles`` connects as the superuser the postgres image created
(``POSTGRES_USER`` / ``POSTGRES_PASSWORD``, used by nothing else) and makes, idempotently, at every ``up``:

- role ``airflow`` (``POSTGRES_AIRFLOW_PASSWORD``) owning database ``airflow`` (Airflow's metadata and the
  Celery results),
- role ``mlflow`` (``POSTGRES_MLFLOW_PASSWORD``) owning ``mlflow`` (the tracking store) and ``mlflow_auth``
  (MLflow's users),

each database's privileges revoked from ``PUBLIC`` (``CONNECT`` included) and held by its owner alone, so a
service's role cannot even open another service's database. Whatever the superuser still owns in a service's
database (tables of a deployment from before the per-service roles) passes to the service's role. A changed
password in ``.env`` re-keys its role on the next ``up``.

:func:`plan` is pure; :func:`main` carries it out.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from modelops.errors import ConfigError


@dataclass(frozen=True)
class ServiceRole:
    """One service's login role, the variable holding its password, and the databases it owns."""

    name: str
    password_env: str
    databases: tuple[str, ...]


ROLES: tuple[ServiceRole, ...] = (
    ServiceRole("airflow", "POSTGRES_AIRFLOW_PASSWORD", ("airflow",)),
    ServiceRole("mlflow", "POSTGRES_MLFLOW_PASSWORD", ("mlflow", "mlflow_auth")),
)

#: Databases no service role may open (the superuser's own).
CLOSED = ("postgres",)

# Hands what the superuser (current_user) owns in schema public of the current database to the role ``owner``
# (a psycopg2 parameter, hence the doubled %% of format()):
# tables, views, sequences not owned by a column, types that are not a table's row type. Fresh databases
# have none; a deployment from before the per-service roles has all of its tables there.
_HAND_OVER = """
DO $$
DECLARE r record;
BEGIN
  FOR r IN
    SELECT format('ALTER %%s %%s OWNER TO %%I',
                  CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                                 WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END,
                  c.oid::regclass, %(owner)s) AS stmt
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'public' AND c.relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
       AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
       AND NOT (c.relkind = 'S' AND EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid
                                            AND d.classid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')))
    UNION ALL
    SELECT format('ALTER TYPE %%s OWNER TO %%I', t.oid::regtype, %(owner)s)
      FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
     WHERE n.nspname = 'public' AND t.typowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
       AND t.typtype IN ('e', 'c', 'd') AND (t.typrelid = 0 OR t.typtype = 'd'
            OR (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c')
  LOOP
    EXECUTE r.stmt;
  END LOOP;
END
$$
"""


def passwords(env: Mapping[str, str]) -> dict[str, str]:
    """Each role's password from ``env``.

    Raises:
        ConfigError: naming every missing variable.
    """
    missing = [role.password_env for role in ROLES if not env.get(role.password_env)]
    if missing:
        raise ConfigError(f"postgres-roles: {', '.join(missing)} not set (set it in .env)")
    return {role.name: env[role.password_env] for role in ROLES}


def plan(existing_roles: set[str], existing_databases: set[str]) -> list[tuple[str, str | None, tuple[str, ...]]]:
    """The statements to run on the server's maintenance database, in order, as ``(kind, role, names)``.

    ``kind`` is one of ``create_role`` / ``alter_role`` (role), ``create_database`` / ``alter_owner``
    (database, its owner), ``lock`` (database: privileges revoked from PUBLIC, its owner's granted) and
    ``hand_over`` (database, its owner: the superuser's objects in it).
    """
    steps: list[tuple[str, str | None, tuple[str, ...]]] = []
    for role in ROLES:
        steps.append(("alter_role" if role.name in existing_roles else "create_role", role.name, ()))
    for role in ROLES:
        for database in role.databases:
            kind = "alter_owner" if database in existing_databases else "create_database"
            steps.append((kind, role.name, (database,)))
            steps.append(("lock", role.name, (database,)))
            if kind == "alter_owner":
                steps.append(("hand_over", role.name, (database,)))
    steps += [("lock", None, (database,)) for database in CLOSED if database in existing_databases]
    return steps


def apply(connect, passwords_by_role: Mapping[str, str]) -> list[str]:  # type: ignore[no-untyped-def]
    """Carry out :func:`plan` through ``connect(dbname)`` (a psycopg2 connection factory); returns what it did."""
    from psycopg2 import sql

    done: list[str] = []
    admin = connect("postgres")
    admin.autocommit = True  # CREATE DATABASE runs outside a transaction
    try:
        with admin.cursor() as cursor:
            cursor.execute("SELECT rolname FROM pg_roles")
            roles = {row[0] for row in cursor.fetchall()}
            cursor.execute("SELECT datname FROM pg_database")
            databases = {row[0] for row in cursor.fetchall()}
            hand_overs: list[tuple[str, str]] = []
            for kind, role, names in plan(roles, databases):
                ident = sql.Identifier(role) if role else None
                if kind in ("create_role", "alter_role"):
                    verb = "CREATE ROLE {} WITH" if kind == "create_role" else "ALTER ROLE {} WITH"
                    cursor.execute(sql.SQL(verb + " LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD %s")
                                   .format(ident), (passwords_by_role[str(role)],))
                elif kind == "create_database":
                    cursor.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(names[0]), ident))
                elif kind == "alter_owner":
                    cursor.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(sql.Identifier(names[0]), ident))
                elif kind == "lock":
                    cursor.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(sql.Identifier(names[0])))
                elif kind == "hand_over":
                    hand_overs.append((names[0], str(role)))
                done.append(f"{kind} {role or ''} {' '.join(names)}".strip())
    finally:
        admin.close()
    for database, role in hand_overs:
        connection = connect(database)
        try:
            with connection, connection.cursor() as cursor:
                cursor.execute(_HAND_OVER, {"owner": role})
        finally:
            connection.close()
    return done


def main() -> int:
    import psycopg2

    env = os.environ
    try:
        by_role = passwords(env)
        superuser, password = env["POSTGRES_USER"], env["POSTGRES_PASSWORD"]
    except (ConfigError, KeyError) as exc:
        print(f"postgres-roles: {exc}", file=sys.stderr)
        return 1
    host, port = env.get("PGHOST", "postgres"), int(env.get("PGPORT", "5432"))  # libpq's own variables

    def connect(dbname: str):  # type: ignore[no-untyped-def]
        return psycopg2.connect(host=host, port=port, user=superuser, password=password, dbname=dbname,
                                connect_timeout=10)

    try:
        done = apply(connect, by_role)
    except psycopg2.Error as exc:
        print(f"postgres-roles: {exc}".strip(), file=sys.stderr)
        return 1
    print("postgres roles ready: " + "; ".join(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
