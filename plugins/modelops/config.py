"""Typed settings, declared once, read from the environment and validated once.

Every setting is a :class:`Setting` in :data:`SETTINGS` with its environment variable,
type, default and a one-line doc. :func:`load_settings` converts and validates all of
them; a bad value raises :class:`~modelops.errors.ConfigError` naming the variable,
the rule and an example. The configuration reference (docs/reference/configuration.md) is generated from this
module (``modelops config --markdown``) and a test keeps the two in step.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from modelops import config_rules as rules
from modelops.errors import ConfigError

PROJECT_ROOT = rules.PROJECT_ROOT
"""The repository root (``plugins/modelops/config.py`` lives two levels below it)."""


@dataclass(frozen=True)
class Setting:
    """One configuration variable: name, parser, default (as text) and a one-line doc."""

    attr: str
    env: str
    parse: Callable[[str], Any]
    default: str
    doc: str
    example: str = ""
    secret: bool = False

    @property
    def example_value(self) -> str:
        return self.example or self.default or "<value>"

    def render(self, value: Any) -> str:
        """A parsed value as environment text that :attr:`parse` reads back (for child processes)."""
        if isinstance(value, tuple):
            return ",".join(str(v) for v in value)
        return str(value)


SETTINGS: tuple[Setting, ...] = (
    Setting("home", "MODELOPS_HOME", rules.path, ".modelops",
            "State directory of the embedded stack (logs, PIDs, databases); relative to the repo root."),
    Setting("bind_host", "MODELOPS_BIND_HOST", rules.host, "127.0.0.1",
            "Address every embedded server binds to.", example="127.0.0.1"),
    Setting("s3_port", "MODELOPS_S3_PORT", rules.port, "9310",
            "S3 port of the embedded object store (SeaweedFS, data under HOME/seaweedfs)."),
    Setting("s3_grpc_port", "MODELOPS_S3_GRPC_PORT", rules.port, "9320",
            "gRPC port of the embedded SeaweedFS S3 server."),
    Setting("seaweedfs_master_port", "MODELOPS_SEAWEEDFS_MASTER_PORT", rules.port, "9321",
            "HTTP port of the embedded SeaweedFS master."),
    Setting("seaweedfs_master_grpc_port", "MODELOPS_SEAWEEDFS_MASTER_GRPC_PORT", rules.port, "9322",
            "gRPC port of the embedded SeaweedFS master."),
    Setting("seaweedfs_volume_port", "MODELOPS_SEAWEEDFS_VOLUME_PORT", rules.port, "9323",
            "HTTP port of the embedded SeaweedFS volume server."),
    Setting("seaweedfs_volume_grpc_port", "MODELOPS_SEAWEEDFS_VOLUME_GRPC_PORT", rules.port, "9324",
            "gRPC port of the embedded SeaweedFS volume server."),
    Setting("seaweedfs_filer_port", "MODELOPS_SEAWEEDFS_FILER_PORT", rules.port, "9325",
            "HTTP port of the embedded SeaweedFS filer."),
    Setting("seaweedfs_filer_grpc_port", "MODELOPS_SEAWEEDFS_FILER_GRPC_PORT", rules.port, "9326",
            "gRPC port of the embedded SeaweedFS filer."),
    Setting("s3_endpoint_url", "MODELOPS_S3_ENDPOINT_URL", rules.optional_url, "",
            "S3 endpoint; empty means the embedded store at http://BIND_HOST:S3_PORT.",
            example="http://minio:9000"),
    Setting("s3_access_key", "MODELOPS_S3_ACCESS_KEY", rules.text, "",
            "Access key for the object store; empty means: for the embedded store generate one at first start "
            "and keep it in HOME/secrets, for MODELOPS_S3_ENDPOINT_URL boto3's default credentials.",
            secret=True),
    Setting("s3_secret_key", "MODELOPS_S3_SECRET_KEY", rules.text, "",
            "Secret key for the object store; empty: like MODELOPS_S3_ACCESS_KEY.", secret=True),
    Setting("s3_region", "MODELOPS_S3_REGION", rules.text, "us-east-1", "Region name passed to boto3."),
    Setting("bucket", "MODELOPS_BUCKET", rules.bucket, "modelops",
            "Bucket for Triton repositories, routes, event logs and reports."),
    Setting("mlflow_bucket", "MODELOPS_MLFLOW_BUCKET", rules.bucket, "mlflow",
            "Bucket for MLflow artifacts."),
    Setting("mlflow_port", "MODELOPS_MLFLOW_PORT", rules.port, "5510", "Port of the MLflow server."),
    Setting("mlflow_tracking_uri", "MODELOPS_MLFLOW_TRACKING_URI", rules.optional_url, "",
            "MLflow tracking URI; empty means the embedded server.", example="http://mlflow:5000"),
    Setting("mlflow_backend", "MODELOPS_MLFLOW_BACKEND", rules.choice("sqlite", "postgresql"), "sqlite",
            "Backend store of the embedded MLflow server."),
    Setting("postgres_port", "MODELOPS_POSTGRES_PORT", rules.port, "5532",
            "Port of the private PostgreSQL cluster (only when MLFLOW_BACKEND=postgresql)."),
    Setting("postgres_bin", "MODELOPS_POSTGRES_BIN", rules.path, "/usr/lib/postgresql/15/bin",
            "Directory with the PostgreSQL 15 server binaries (initdb, pg_ctl, postgres)."),
    Setting("triton_http_port", "MODELOPS_TRITON_HTTP_PORT", rules.port, "8300",
            "HTTP port of Triton (inference, repository API)."),
    Setting("triton_grpc_port", "MODELOPS_TRITON_GRPC_PORT", rules.port, "8301", "gRPC port of Triton."),
    Setting("triton_metrics_port", "MODELOPS_TRITON_METRICS_PORT", rules.port, "8302",
            "Prometheus metrics port of Triton."),
    Setting("triton_url", "MODELOPS_TRITON_URL", rules.optional_url, "",
            "Triton HTTP URL; empty means the embedded server.", example="http://triton:8000"),
    Setting("triton_backend", "MODELOPS_TRITON_BACKEND", rules.choice("python", "onnxruntime"), "python",
            "Backend of published models: python (model.py running onnxruntime) or native onnxruntime."),
    Setting("triton_gpus", "MODELOPS_TRITON_GPUS", rules.non_negative_int, "0",
            "GPUs each Triton server has (0: CPU only). A spec's instance_group kind auto becomes KIND_GPU where "
            "this is > 0, KIND_CPU otherwise; kind gpu is refused before Triton where it is 0.", example="1"),
    Setting("triton_admin_key", "MODELOPS_TRITON_ADMIN_KEY", rules.text, "",
            "Key of Triton's restricted model-repository API (sent as header admin-key on load, unload and "
            "index calls); empty: MODELOPS_TRITON_ADMIN_KEY_FILE, else no header (an unrestricted Triton, as the "
            "embedded stack's).", secret=True),
    Setting("triton_admin_key_file", "MODELOPS_TRITON_ADMIN_KEY_FILE", rules.text, "",
            "File holding the Triton admin key when MODELOPS_TRITON_ADMIN_KEY is empty (compose: written by init "
            "into the triton-admin volume, mounted by its readers only).",
            example="/etc/modelops/triton-admin/admin-key"),
    Setting("airflow_port", "MODELOPS_AIRFLOW_PORT", rules.port, "8380", "Port of the Airflow API server / UI."),
    Setting("airflow_worker_log_port", "MODELOPS_AIRFLOW_WORKER_LOG_PORT", rules.port, "8393",
            "Port of Airflow's worker log server."),
    Setting("airflow_trigger_log_port", "MODELOPS_AIRFLOW_TRIGGER_LOG_PORT", rules.port, "8394",
            "Port of Airflow's triggerer log server."),
    Setting("airflow_url", "MODELOPS_AIRFLOW_URL", rules.optional_url, "",
            "Airflow API base URL; empty means the embedded server.", example="http://airflow:8080"),
    Setting("airflow_user", "MODELOPS_AIRFLOW_USER", rules.text, "admin", "Airflow admin user name."),
    Setting("airflow_password", "MODELOPS_AIRFLOW_PASSWORD", rules.text, "",
            "Airflow admin password; empty means generate one at first start and keep it in HOME.",
            secret=True),
    Setting("airflow_parallelism", "MODELOPS_AIRFLOW_PARALLELISM", rules.positive_int, "4",
            "Task slots of the embedded LocalExecutor."),
    Setting("gateway_port", "MODELOPS_GATEWAY_PORT", rules.port, "8400", "Port of the serving gateway."),
    Setting("gateway_workers", "MODELOPS_GATEWAY_WORKERS", rules.positive_int, "1",
            "uvicorn worker processes of the gateway."),
    Setting("spark_master", "MODELOPS_SPARK_MASTER", rules.text, "local[2]",
            "Spark master URL of the batch jobs.", example="spark://spark-master:7077"),
    Setting("spark_auth_secret", "MODELOPS_SPARK_AUTH_SECRET", rules.text, "",
            "Spark RPC authentication secret of a spark:// cluster (spark.authenticate, set on the driver's "
            "session, never on a command line); empty: MODELOPS_SPARK_AUTH_SECRET_FILE, else no authentication.",
            secret=True),
    Setting("spark_auth_secret_file", "MODELOPS_SPARK_AUTH_SECRET_FILE", rules.text, "",
            "File holding the Spark authentication secret when MODELOPS_SPARK_AUTH_SECRET is empty (compose: "
            "written by init into the spark-auth volume).", example="/etc/modelops/spark-auth/secret"),
    Setting("spark_cluster_workers", "MODELOPS_SPARK_CLUSTER_WORKERS", rules.non_negative_int, "0",
            "Workers of a Spark standalone cluster the embedded stack starts (a master and this many workers "
            "from pyspark's spark-class; 0: none). Jobs use it with MODELOPS_SPARK_MASTER=spark://127.0.0.1:PORT.",
            example="2"),
    Setting("spark_cluster_port", "MODELOPS_SPARK_CLUSTER_PORT", rules.port, "9700",
            "Port of the embedded Spark master (its web UI on PORT+1; worker i on PORT+10+10i, its UI +1)."),
    Setting("notify_urls", "MODELOPS_NOTIFY_URLS", rules.text, "",
            "Comma-separated apprise URLs for notifications; empty disables delivery.",
            example="json://127.0.0.1:8999/notify"),
    Setting("feedback_secret", "MODELOPS_FEEDBACK_SECRET", rules.text, "",
            "HMAC secret for feedback tokens; empty means generate one at first start and keep it in HOME.",
            secret=True),
    Setting("startup_timeout_s", "MODELOPS_STARTUP_TIMEOUT_S", rules.positive_float, "180",
            "Seconds `stack up` waits for one service to become healthy."),
    Setting("sample_share", "MODELOPS_SCORED_SAMPLE_SHARE", rules.fraction, "1.0",
            "Share of requests whose scored items (with features) are logged (the drift job's input)."),
    Setting("sample_max_per_s", "MODELOPS_SCORED_SAMPLE_MAX_PER_S", rules.non_negative_float, "200",
            "At most this many requests a second per gateway process have their scored items logged (the share "
            "in force is lowered to fit; 0: no cap). 200 x 10 items is 173 million rows a day, the drift job reads "
            "at most 1 million per version: see modelops.gateway.sampling."),
    Setting("spool_sync", "MODELOPS_SPOOL_SYNC", rules.choice("write", "fsync"), "write",
            "What the gateway's 200 (prediction) and 202 (feedback) wait for: write (the record is written to "
            "its spool segment: a crash or kill -9 of the gateway loses none; fdatasync follows within 50 ms, "
            "so only a crash of the whole machine can lose the last 50 ms) or fsync (written and fdatasynced "
            "before the answer, group-committed: ~0.5 ms more per answer at concurrency 1)."),
    Setting("gateway_urls", "MODELOPS_GATEWAY_URLS", rules.url_list, "",
            "Comma-separated base URLs of every gateway replica: the canary waits for each to apply new "
            "routes and scrapes each one's metrics; dns+http://NAME:PORT stands for every address NAME "
            "resolves to (the replicas of a compose or headless service). Empty: the embedded gateway.",
            example="http://gateway-1:8400,http://gateway-2:8400"),
    Setting("canary_metrics", "MODELOPS_CANARY_METRICS", rules.choice("auto", "scrape", "prometheus"), "auto",
            "Where the canary reads its per-version metrics: scrape the gateways' and Triton's /metrics "
            "(differenced over the window), or PromQL against MODELOPS_PROMETHEUS_URL; auto: PromQL when "
            "MODELOPS_PROMETHEUS_URL is set or the embedded stack's Prometheus runs, else scrape."),
    Setting("canary_sticky_salt", "MODELOPS_CANARY_STICKY_SALT", rules.choice("per_release", "none"), "per_release",
            "Salt of the sticky canary split: per_release (the canary's sha256 prefix, written to the routes "
            "document, so each release draws a different cohort of users) or none (the same users every time)."),
    Setting("prometheus_url", "MODELOPS_PROMETHEUS_URL", rules.optional_url, "",
            "Prometheus HTTP API base URL (required when MODELOPS_CANARY_METRICS=prometheus).",
            example="http://prometheus:9090"),
    Setting("prometheus_up_selector", "MODELOPS_PROMETHEUS_UP_SELECTOR", rules.text, "",
            "PromQL label matchers of the gateway and Triton scrape targets (a target down in the window makes "
            "the analysis inconclusive). Empty: the targets that exported the model's series in the last hour.",
            example='job=~"modelops-gateway|triton"'),
    Setting("pushgateway_url", "MODELOPS_PUSHGATEWAY_URL", rules.optional_url, "",
            "Prometheus Pushgateway base URL: nightly_drift, feedback_join and the release phase push their "
            "results there. Empty: the embedded stack's Pushgateway when it runs (MODELOPS_OBSERVABILITY), "
            "else nothing is pushed.", example="http://pushgateway:9091"),
    Setting("observability", "MODELOPS_OBSERVABILITY", rules.choice("auto", "on", "off"), "auto",
            "Start Prometheus (the repository's rules), Pushgateway, Alertmanager and the alert relay with the "
            "embedded stack: on, off, or auto (on when `make prometheus` has unpacked Debian's binaries)."),
    Setting("prometheus_port", "MODELOPS_PROMETHEUS_PORT", rules.port, "9690", "Port of the embedded Prometheus."),
    Setting("pushgateway_port", "MODELOPS_PUSHGATEWAY_PORT", rules.port, "9691", "Port of the embedded Pushgateway."),
    Setting("alertmanager_port", "MODELOPS_ALERTMANAGER_PORT", rules.port, "9693",
            "Port of the embedded Alertmanager."),
    Setting("alert_relay_port", "MODELOPS_ALERT_RELAY_PORT", rules.port, "9694",
            "Port of the alert relay (Alertmanager's webhook into MODELOPS_NOTIFY_URLS)."),
    Setting("statsd_port", "MODELOPS_STATSD_PORT", rules.port, "9695",
            "UDP port where the embedded stack's StatsD bridge receives Airflow's metrics."),
    Setting("statsd_bridge_port", "MODELOPS_STATSD_BRIDGE_PORT", rules.port, "9696",
            "HTTP port of the StatsD bridge's /metrics (scraped by the embedded Prometheus as job airflow)."),
    Setting("scaling", "MODELOPS_SCALING", rules.choice("on", "off"), "off",
            "Run the queue-driven instance scaling controller of Triton (`modelops scale`) with the embedded stack. "
            "Off by default: every instance is a process of its own (memory; CPU to start) and a change reloads the "
            "model, which a machine without spare cores pays for on every other request."),
    Setting("scaling_models", "MODELOPS_SCALING_MODELS", rules.regex, ".*",
            "Regular expression the Triton model names the controller scales must match (fully).",
            example="ranker(_preprocess|_model)?"),
    Setting("scaling_min_instances", "MODELOPS_SCALING_MIN_INSTANCES", rules.positive_int, "1",
            "Fewest instances of a scaled Triton model."),
    Setting("scaling_max_instances", "MODELOPS_SCALING_MAX_INSTANCES", rules.positive_int, "4",
            "Most instances of a scaled Triton model (>= MODELOPS_SCALING_MIN_INSTANCES)."),
    Setting("scaling_up_queue_ms", "MODELOPS_SCALING_UP_QUEUE_MS", rules.positive_float, "50",
            "Scale up when a version's mean queue time per request over the interval reaches this."),
    Setting("scaling_down_queue_ms", "MODELOPS_SCALING_DOWN_QUEUE_MS", rules.non_negative_float, "5",
            "Scale down when every version queues at most this (and nothing is pending) for the cool-down "
            "(< MODELOPS_SCALING_UP_QUEUE_MS: the gap is the hysteresis)."),
    Setting("scaling_up_pending", "MODELOPS_SCALING_UP_PENDING", rules.positive_int, "8",
            "Scale up when a version has this many requests pending."),
    Setting("scaling_cooldown_s", "MODELOPS_SCALING_COOLDOWN_S", rules.non_negative_float, "30",
            "No change within this many seconds of the last one; a scale-down needs low load for as long."),
    Setting("scaling_interval_s", "MODELOPS_SCALING_INTERVAL_S", rules.positive_float, "2",
            "Seconds between the controller's scrapes of Triton's metrics (the window of one decision)."),
    Setting("scaling_mode", "MODELOPS_SCALING_MODE", rules.choice("replace", "update"), "replace",
            "How a count changes: replace (the override also sets a marker parameter: Triton loads a new copy beside "
            "the serving one and switches, ~6 s under load) or update (only the count: Triton updates in place but "
            "first waits for the model's queue to empty, 39 s measured under overload)."),
    Setting("precomputed_max_age_s", "MODELOPS_PRECOMPUTED_MAX_AGE_S", rules.positive_float, "7200",
            "Freshness limit of precomputed predictions: the gateway answers online when the routed version's "
            "newest snapshot is older (two runs of the hourly precompute_predictions DAG)."),
    Setting("precomputed_poll_s", "MODELOPS_PRECOMPUTED_POLL_S", rules.positive_float, "5",
            "Seconds between the gateway's looks for new precomputed snapshots of the routed versions."),
    Setting("release_webhooks", "MODELOPS_RELEASE_WEBHOOKS", rules.choice("on", "off"), "on",
            "MLflow's webhook starts a release seconds after the alias challenger is set (on), or only the "
            "one-minute poll of release_on_staging does (off: registration disables the webhook, deliveries get 404)."),
    Setting("release_webhook_url", "MODELOPS_RELEASE_WEBHOOK_URL", rules.optional_url, "",
            "Where MLflow delivers the webhook; empty: the Airflow API server's "
            "AIRFLOW_URL/modelops-webhooks/mlflow.", example="http://airflow-api-server:8080/modelops-webhooks/mlflow"),
    Setting("release_webhook_secret", "MODELOPS_RELEASE_WEBHOOK_SECRET", rules.text, "",
            "HMAC secret of the MLflow webhook; empty means generate one at first use and keep it in HOME/secrets "
            "(`modelops webhook register --rotate` replaces it).", secret=True),
    Setting("release_webhook_max_age_s", "MODELOPS_RELEASE_WEBHOOK_MAX_AGE_S", rules.positive_float, "300",
            "A delivery whose X-MLflow-Timestamp is further than this from the receiver's clock is refused (400)."),
)


@dataclass(frozen=True)
class Settings:
    """The validated settings. Build with :func:`load_settings`, never by hand in code."""

    home: Path
    bind_host: str
    s3_port: int
    s3_grpc_port: int
    seaweedfs_master_port: int
    seaweedfs_master_grpc_port: int
    seaweedfs_volume_port: int
    seaweedfs_volume_grpc_port: int
    seaweedfs_filer_port: int
    seaweedfs_filer_grpc_port: int
    s3_endpoint_url: str
    s3_access_key: str
    s3_secret_key: str
    s3_region: str
    bucket: str
    mlflow_bucket: str
    mlflow_port: int
    mlflow_tracking_uri: str
    mlflow_backend: str
    postgres_port: int
    postgres_bin: Path
    triton_http_port: int
    triton_grpc_port: int
    triton_metrics_port: int
    triton_url: str
    triton_backend: str
    triton_gpus: int
    triton_admin_key: str
    triton_admin_key_file: str
    airflow_port: int
    airflow_worker_log_port: int
    airflow_trigger_log_port: int
    airflow_url: str
    airflow_user: str
    airflow_password: str
    airflow_parallelism: int
    gateway_port: int
    gateway_workers: int
    spark_master: str
    spark_auth_secret: str
    spark_auth_secret_file: str
    spark_cluster_workers: int
    spark_cluster_port: int
    notify_urls: str
    feedback_secret: str
    startup_timeout_s: float
    sample_share: float
    sample_max_per_s: float
    spool_sync: str
    gateway_urls: tuple[str, ...]
    canary_metrics: str
    canary_sticky_salt: str
    prometheus_url: str
    prometheus_up_selector: str
    pushgateway_url: str
    observability: str
    prometheus_port: int
    pushgateway_port: int
    alertmanager_port: int
    alert_relay_port: int
    statsd_port: int
    statsd_bridge_port: int
    scaling: str
    scaling_models: str
    scaling_min_instances: int
    scaling_max_instances: int
    scaling_up_queue_ms: float
    scaling_down_queue_ms: float
    scaling_up_pending: int
    scaling_cooldown_s: float
    scaling_interval_s: float
    scaling_mode: str
    precomputed_max_age_s: float
    precomputed_poll_s: float
    release_webhooks: str
    release_webhook_url: str
    release_webhook_secret: str
    release_webhook_max_age_s: float

    # Derived values: the embedded defaults unless an explicit URL was configured.
    @property
    def s3_endpoint(self) -> str:
        return self.s3_endpoint_url or f"http://{self.bind_host}:{self.s3_port}"

    @property
    def mlflow_uri(self) -> str:
        return self.mlflow_tracking_uri or f"http://{self.bind_host}:{self.mlflow_port}"

    @property
    def triton_http_url(self) -> str:
        return self.triton_url or f"http://{self.bind_host}:{self.triton_http_port}"

    @property
    def triton_metrics_url(self) -> str:
        """Triton's Prometheus metrics: the host of MODELOPS_TRITON_URL (or the bind host), the metrics port."""
        host = urlsplit(self.triton_url).hostname if self.triton_url else None
        return f"http://{host or self.bind_host}:{self.triton_metrics_port}/metrics"

    @property
    def triton_url_list(self) -> tuple[str, ...]:
        """Every Triton server (MODELOPS_TRITON_URL, a ``dns+`` name resolved now), or the embedded one."""
        from modelops.discovery import expand

        return expand([self.triton_http_url])

    @property
    def triton_metrics_url_list(self) -> tuple[str, ...]:
        """The metrics endpoint of every server of :attr:`triton_url_list` (same host, the metrics port)."""
        return tuple(f"http://{urlsplit(url).hostname}:{self.triton_metrics_port}/metrics"
                     for url in self.triton_url_list)

    @property
    def airflow_api_url(self) -> str:
        return self.airflow_url or f"http://{self.bind_host}:{self.airflow_port}"

    @property
    def release_webhook_target(self) -> str:
        """The URL MLflow posts its webhook deliveries to."""
        return self.release_webhook_url or f"{self.airflow_api_url}/modelops-webhooks/mlflow"

    @property
    def gateway_url(self) -> str:
        return f"http://{self.bind_host}:{self.gateway_port}"

    @property
    def gateway_url_list(self) -> tuple[str, ...]:
        """Every gateway replica (MODELOPS_GATEWAY_URLS, ``dns+`` names resolved now), or the embedded one."""
        from modelops.discovery import expand

        return expand(self.gateway_urls) if self.gateway_urls else (self.gateway_url,)

    @property
    def notify_url_list(self) -> list[str]:
        return [u.strip() for u in self.notify_urls.split(",") if u.strip()]


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Read and validate every setting.

    Args:
        env: the environment to read; ``os.environ`` when omitted.

    Raises:
        ConfigError: naming every variable with a bad value, its rule and an example.
    """
    source = os.environ if env is None else env
    values: dict[str, Any] = {}
    problems: list[str] = []
    for setting in SETTINGS:
        raw = source.get(setting.env, setting.default)
        try:
            values[setting.attr] = setting.parse(raw.strip() if setting.parse is not rules.text else raw)
        except ValueError as exc:
            rule = str(exc) if not str(exc).startswith("invalid literal") else _rule_for(setting)
            shown = "<hidden>" if setting.secret else repr(raw)
            problems.append(
                f"{setting.env}={shown}: {rule} (example: {setting.env}={setting.example_value})"
            )
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    _check_distinct_ports(values, problems)
    if values["canary_metrics"] == "prometheus" and not values["prometheus_url"]:
        problems.append("MODELOPS_PROMETHEUS_URL='': required when MODELOPS_CANARY_METRICS=prometheus "
                        "(example: MODELOPS_PROMETHEUS_URL=http://prometheus:9090)")
    _check_scaling(values, problems)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    return Settings(**values)


def _check_scaling(values: Mapping[str, Any], problems: list[str]) -> None:
    """The rules between the scaling settings (each alone is checked by its parser)."""
    low, high = values["scaling_min_instances"], values["scaling_max_instances"]
    if high < low:
        problems.append(f"MODELOPS_SCALING_MAX_INSTANCES={high}: must be >= MODELOPS_SCALING_MIN_INSTANCES={low} "
                        f"(example: MODELOPS_SCALING_MAX_INSTANCES={max(low, 4)})")
    down, up = values["scaling_down_queue_ms"], values["scaling_up_queue_ms"]
    if not down < up:
        problems.append(f"MODELOPS_SCALING_DOWN_QUEUE_MS={down:g}: must be < MODELOPS_SCALING_UP_QUEUE_MS={up:g} "
                        f"(the gap is the hysteresis; example: MODELOPS_SCALING_DOWN_QUEUE_MS={up / 10:g})")


def _rule_for(setting: Setting) -> str:
    names: dict[Callable[[str], Any], str] = {
             rules.port: "must be a TCP port between 1 and 65535", rules.positive_int: "must be an integer >= 1",
             rules.positive_float: "must be a number > 0", rules.fraction: "must be a number between 0 and 1",
             rules.non_negative_float: "must be a number >= 0", rules.non_negative_int: "must be an integer >= 0"}
    return names.get(setting.parse, "has the wrong type")


def _check_distinct_ports(values: Mapping[str, Any], problems: list[str]) -> None:
    seen: dict[int, str] = {}
    for setting in SETTINGS:
        if setting.parse is rules.port:
            port = values[setting.attr]
            if port in seen and not (setting.attr == "postgres_port" and values["mlflow_backend"] == "sqlite"):
                problems.append(
                    f"{setting.env}={port}: must differ from {seen[port]} (each server needs its own port)"
                )
            seen.setdefault(port, setting.env)


#: Port of each server relative to a base (``stack_port_env``): one layout for tests and benchmarks.
STACK_PORT_OFFSETS = {
    "MODELOPS_S3_PORT": 310, "MODELOPS_S3_GRPC_PORT": 320, "MODELOPS_SEAWEEDFS_MASTER_PORT": 321,
    "MODELOPS_SEAWEEDFS_MASTER_GRPC_PORT": 322, "MODELOPS_SEAWEEDFS_VOLUME_PORT": 323,
    "MODELOPS_SEAWEEDFS_VOLUME_GRPC_PORT": 324, "MODELOPS_SEAWEEDFS_FILER_PORT": 325,
    "MODELOPS_SEAWEEDFS_FILER_GRPC_PORT": 326, "MODELOPS_MLFLOW_PORT": 510, "MODELOPS_TRITON_HTTP_PORT": 300,
    "MODELOPS_TRITON_GRPC_PORT": 301, "MODELOPS_TRITON_METRICS_PORT": 302, "MODELOPS_AIRFLOW_PORT": 380,
    "MODELOPS_AIRFLOW_WORKER_LOG_PORT": 393, "MODELOPS_AIRFLOW_TRIGGER_LOG_PORT": 394,
    "MODELOPS_GATEWAY_PORT": 400, "MODELOPS_POSTGRES_PORT": 532,
    "MODELOPS_PROMETHEUS_PORT": 600, "MODELOPS_PUSHGATEWAY_PORT": 601, "MODELOPS_ALERTMANAGER_PORT": 602,
    "MODELOPS_ALERT_RELAY_PORT": 603, "MODELOPS_STATSD_PORT": 604, "MODELOPS_STATSD_BRIDGE_PORT": 605,
    "MODELOPS_SPARK_CLUSTER_PORT": 700,  # the master; its UI and the workers' ports follow (700-799)
}


def stack_port_env(base: int) -> dict[str, str]:
    """The port variables of a whole stack placed at ``base`` (e.g. 24000 → S3 on 24310), beside others."""
    return {env: str(base + offset) for env, offset in STACK_PORT_OFFSETS.items()}


@lru_cache(maxsize=1)
def settings() -> Settings:
    """The process-wide settings, read once from ``os.environ``."""
    return load_settings()


def markdown_table() -> str:
    """The configuration reference table (docs/reference/configuration.md), generated from :data:`SETTINGS`."""
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for s in SETTINGS:
        default = f"`{s.default}`" if s.default else "(empty)"
        lines.append(f"| `{s.env}` | {default} | {s.doc} |")
    return "\n".join(lines)

