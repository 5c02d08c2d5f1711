"""What the production topology declares about each service: its networks and its user (docs/operations/security.md).

One table for both checks: ``tests/unit/test_compose_hardening.py`` holds ``docker-compose.yml`` to it (no
engine), ``tests/compose/test_security.py`` holds the running containers to it (``docker inspect``, the
processes' user ids). Every service also has a read-only root filesystem, no capability (``cap_drop: [ALL]``,
none added back), ``no-new-privileges`` and a memory and CPU limit: no exception, so no column for them.
"""

from __future__ import annotations

#: The networks by role (docker-compose.yml's top-level ``networks``); only edge and egress reach outside.
INTERNAL = frozenset({"serving", "data", "control", "observability"})
EXTERNAL = frozenset({"edge", "egress"})

PROJECT_UID = 50000  # the project image's user modelops (docker/Dockerfile)

#: Service -> (its networks, the uid its processes run as; None: the image's named user, any uid but 0).
SERVICES: dict[str, tuple[frozenset[str], int | None]] = {
    "init": (frozenset(), PROJECT_UID),  # network_mode: none
    "postgres": (frozenset({"data"}), None),  # user postgres
    "postgres-roles": (frozenset({"data"}), PROJECT_UID),
    "objectstore": (frozenset({"data"}), PROJECT_UID),
    "objectstore-init": (frozenset({"data"}), PROJECT_UID),
    "mlflow": (frozenset({"edge", "control", "data"}), PROJECT_UID),
    "mlflow-init": (frozenset({"control"}), PROJECT_UID),
    "triton": (frozenset({"serving", "data"}), 1000),  # NVIDIA's triton-server; the CPU stand-in: PROJECT_UID
    "airflow-db-migrate": (frozenset({"control", "data"}), PROJECT_UID),
    "airflow-api-server": (frozenset({"edge", "control", "data"}), PROJECT_UID),
    "airflow-scheduler": (frozenset({"control", "data"}), PROJECT_UID),
    "airflow-dag-processor": (frozenset({"control", "data"}), PROJECT_UID),
    "airflow-triggerer": (frozenset({"control", "data", "observability"}), PROJECT_UID),
    "airflow-worker": (frozenset({"control", "data", "serving", "observability", "egress"}), PROJECT_UID),
    "redis": (frozenset({"data"}), None),  # user redis
    "reconciler": (frozenset({"serving", "data"}), PROJECT_UID),
    "scaler": (frozenset({"serving", "data"}), PROJECT_UID),
    "gateway": (frozenset({"edge", "serving", "data"}), PROJECT_UID),
    "gateway-lb": (frozenset({"edge"}), 65534),
    "spark-master": (frozenset({"control"}), PROJECT_UID),
    "spark-worker": (frozenset({"control", "data"}), PROJECT_UID),
    "prometheus": (frozenset({"observability", "serving"}), 65534),
    "pushgateway": (frozenset({"observability"}), 65534),
    "alertmanager": (frozenset({"observability"}), 65534),
    "alert-relay": (frozenset({"observability", "egress"}), PROJECT_UID),
    "statsd-bridge": (frozenset({"control", "observability"}), PROJECT_UID),
    "grafana": (frozenset({"edge", "observability"}), 472),
}

#: What the test override (docker-compose.test.yml) changes in this table: the CPU Triton is the project image.
TEST_UIDS = {"triton": PROJECT_UID}

#: (service, port) of everything no container on the edge network may reach, by name or by any address.
NOT_FROM_EDGE = (("triton", 8000), ("triton", 8001), ("triton", 8002), ("spark-master", 7077),
                 ("spark-master", 8080), ("spark-worker", 8081), ("redis", 6379), ("postgres", 5432),
                 ("objectstore", 8333), ("pushgateway", 9091), ("prometheus", 9090), ("alertmanager", 9093),
                 ("statsd-bridge", 9102))

#: The reachability matrix of docs/operations/security.md: (column title, service) and (row title, services).
MATRIX_COLUMNS = (("gateway-lb", "gateway-lb"), ("gateway", "gateway"), ("airflow API", "airflow-api-server"),
                  ("mlflow", "mlflow"), ("triton", "triton"), ("spark master", "spark-master"),
                  ("postgres / redis / objectstore", "postgres"), ("prometheus", "prometheus"),
                  ("pushgateway", "pushgateway"), ("alertmanager", "alertmanager"))
MATRIX_ROWS = (("`gateway-lb`", ("gateway-lb",)), ("`gateway`", ("gateway",)), ("`triton`", ("triton",)),
               ("`reconciler`, `scaler`", ("reconciler", "scaler")), ("`airflow-worker`", ("airflow-worker",)),
               ("`airflow-scheduler`, `-dag-processor`", ("airflow-scheduler", "airflow-dag-processor")),
               ("`airflow-triggerer`", ("airflow-triggerer",)), ("`airflow-api-server`", ("airflow-api-server",)),
               ("`mlflow`", ("mlflow",)), ("`spark-master`", ("spark-master",)),
               ("`spark-worker` (and the jobs' executors)", ("spark-worker",)), ("`prometheus`", ("prometheus",)),
               ("`pushgateway`, `alertmanager`", ("pushgateway", "alertmanager")), ("`alert-relay`", ("alert-relay",)),
               ("`statsd-bridge`", ("statsd-bridge",)), ("`grafana`", ("grafana",)))
PUBLISHED_FROM_HOST = frozenset({"gateway-lb", "airflow-api-server", "mlflow", "grafana"})


def reachability_table() -> str:
    """The markdown matrix: ✓ where the caller shares a network with the service, · where it does not."""
    def mark(ok: bool) -> str:
        return "✓" if ok else "·"

    lines = ["| from ↓ / to → | " + " | ".join(title for title, _ in MATRIX_COLUMNS) + " |",
             "|---" * (len(MATRIX_COLUMNS) + 1) + "|",
             "| the host (published ports) | "
             + " | ".join(mark(target in PUBLISHED_FROM_HOST) for _, target in MATRIX_COLUMNS) + " |"]
    for title, callers in MATRIX_ROWS:
        cells = []
        for _, target in MATRIX_COLUMNS:
            shared = {bool(SERVICES[caller][0] & SERVICES[target][0]) for caller in callers}
            assert len(shared) == 1, (title, target)  # one row, one answer
            cells.append(mark(shared.pop()))
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
