#!/usr/bin/env bash
# Print a throw-away env file for the compose topology on this machine: random secrets, the published
# ports on 127.0.0.1:PORT_BASE+{30,50,80,400}, the CPU Triton's python backend, small worker counts.
#   docker/compose-env.sh [PORT_BASE]  (default 28000)
set -euo pipefail
PORT_BASE=${1:-28000}
PY=${PYTHON:-python3}
secret() { "$PY" -c "import secrets; print(secrets.token_urlsafe(24))"; }
for name in POSTGRES_PASSWORD AIRFLOW_ADMIN_PASSWORD AIRFLOW_JWT_SECRET AIRFLOW_API_SECRET_KEY \
    MLFLOW_ADMIN_PASSWORD MLFLOW_AIRFLOW_PASSWORD MLFLOW_FLASK_SECRET_KEY MODELOPS_FEEDBACK_SECRET S3_ADMIN_SECRET_KEY \
    S3_AIRFLOW_SECRET_KEY S3_MLFLOW_SECRET_KEY S3_GATEWAY_SECRET_KEY S3_TRITON_SECRET_KEY S3_SPARK_SECRET_KEY GRAFANA_ADMIN_PASSWORD REDIS_PASSWORD \
    POSTGRES_AIRFLOW_PASSWORD POSTGRES_MLFLOW_PASSWORD TRITON_ADMIN_KEY SPARK_AUTH_SECRET; do
  echo "$name=$(secret)"
done
echo "AIRFLOW_FERNET_KEY=$("$PY" -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())')"
for who in admin airflow mlflow gateway triton spark; do
  echo "S3_${who^^}_ACCESS_KEY=${who}$("$PY" -c 'import secrets; print(secrets.token_hex(4))')"
done
cat <<ENV
MODELOPS_PUBLISH_ADDRESS=127.0.0.1
GATEWAY_PUBLISHED_PORT=$((PORT_BASE + 400))
AIRFLOW_PUBLISHED_PORT=$((PORT_BASE + 80))
MLFLOW_PUBLISHED_PORT=$((PORT_BASE + 50))
GRAFANA_PUBLISHED_PORT=$((PORT_BASE + 30))
MLFLOW_PUBLIC_HOSTS=127.0.0.1:$((PORT_BASE + 50))
MODELOPS_TRITON_BACKEND=python
AIRFLOW_API_WORKERS=1
MLFLOW_WORKERS=1
SPARK_WORKER_CORES=1
SPARK_WORKER_MEMORY=2g
SPARK_DRIVER_MEMORY=1g
ENV
