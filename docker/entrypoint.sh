#!/bin/sh
# The project image's entrypoint: make the state directories a fresh volume may lack, then run
# the command exactly as given (no wrapper that rewrites it). tini (PID 1) reaps and forwards signals.
set -e
for dir in "${MODELOPS_HOME:-/var/lib/modelops}" "${AIRFLOW_HOME:-/opt/airflow}/logs"; do
  mkdir -p "$dir" 2>/dev/null || true
done
exec "$@"
