"""Container health check of an Airflow component without its own health endpoint (stdlib only).

    python healthcheck.py triggerer|dag_processor
Healthy when the API server's /api/v2/monitor/health reports the component healthy (its latest
heartbeat is recent). One replica per component in the compose file, so this is that container.
"""

import json
import os
import sys
import urllib.request

component = sys.argv[1]
url = os.environ.get("AIRFLOW__API__BASE_URL", "http://airflow-api-server:8080").rstrip("/")
with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=8) as response:
    status = json.load(response).get(component, {}).get("status")
sys.exit(0 if status == "healthy" else f"{component}: {status}")
