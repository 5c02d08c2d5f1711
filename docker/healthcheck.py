"""Container health check of an Airflow component without its own health endpoint (stdlib only).

    python healthcheck.py triggerer|dag_processor|celery_worker
triggerer, dag_processor: healthy when the API server's /api/v2/monitor/health reports the component
healthy (its latest heartbeat is recent). One replica per component in the compose file, so this is
that container.
celery_worker (any number of replicas): healthy while this container holds an established connection
to the Celery broker (Redis, port 6379) — the worker consumes over it. Read from /proc/net/tcp in a few
milliseconds, where `celery inspect ping` imports Airflow (~2.5 CPU seconds per check and replica).
"""

import json
import os
import sys
import urllib.request

component = sys.argv[1]
if component == "celery_worker":
    port = f"{int(os.environ.get('BROKER_PORT', '6379')):04X}"
    established = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as rows:
                next(rows)
                established += sum(1 for row in rows
                                   if row.split()[2].endswith(f":{port}") and row.split()[3] == "01")
        except FileNotFoundError:
            continue
    sys.exit(0 if established else "celery_worker: no established connection to the broker")
url = os.environ.get("AIRFLOW__API__BASE_URL", "http://airflow-api-server:8080").rstrip("/")
with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=8) as response:
    status = json.load(response).get(component, {}).get("status")
sys.exit(0 if status == "healthy" else f"{component}: {status}")
