# Test stand-in for the official postgres:15 image (no registry here): Debian 12's postgresql-15 with
# the same contract — POSTGRES_USER/POSTGRES_PASSWORD/POSTGRES_DB, /docker-entrypoint-initdb.d/*.sql on
# first start, data in /var/lib/postgresql/data, pg_isready for health checks.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /docker-entrypoint-initdb.d /var/run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql && chmod 3777 /var/run/postgresql
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
USER postgres
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]
STOPSIGNAL SIGINT
