"""Typed settings, declared once, read from the environment and validated once.

Every setting is one field of :class:`Settings`, declared with :func:`setting`: its type (the
annotation), parser and rule, default, a one-line doc, an example, whether it is secret, and for a
port its place in the stack's port layout. :data:`SETTINGS` (the environment variables),
:data:`STACK_PORT_OFFSETS`, the validation of :func:`load_settings` and the configuration
reference (docs/reference/configuration.md, ``modelops config --markdown``; a test keeps the two in
step) all come from those fields. A bad value raises :class:`~modelops.errors.ConfigError` naming
the variable, the rule and an example. No module outside this one reads a ``MODELOPS_*`` variable
from the environment (tests/unit/test_config.py greps for it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from modelops import config_rules as rules
from modelops.errors import ConfigError

PROJECT_ROOT = rules.PROJECT_ROOT
"""The repository root (``plugins/modelops/config.py`` lives two levels below it)."""

_SETTING = "modelops.setting"  # the key of a field's metadata that holds its Setting


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
    offset: int | None = None
    """A port's place in the stack's layout: ``stack_port_env(base)`` puts it at ``base + offset``."""

    @property
    def example_value(self) -> str:
        return self.example or self.default or "<value>"

    def render(self, value: Any) -> str:
        """A parsed value as environment text that :attr:`parse` reads back (for child processes)."""
        if isinstance(value, tuple):
            return ",".join(str(v) for v in value)
        return str(value)


def setting(parse: Callable[[str], Any], default: str, doc: str, *, env: str = "", example: str = "",
            secret: bool = False, offset: int | None = None) -> Any:
    """Declare one field of :class:`Settings`: the only place a setting is declared.

    ``env`` defaults to ``MODELOPS_`` + the field's name in capitals. The field has no default of its
    own (:func:`load_settings` fills every field); its ``default`` is the text the parser reads.
    """
    if (offset is None) != (parse is not rules.port):
        raise ValueError("a port setting, and only a port setting, has a place in the stack's port layout")
    declared = Setting("", env, parse, default, doc, example, secret, offset)
    return field(metadata={_SETTING: declared})


@dataclass(frozen=True)
class Settings:
    """The validated settings. Build with :func:`load_settings`, never by hand in code."""

    home: Path = setting(rules.path, ".modelops",
        "State directory of the embedded stack (logs, PIDs, databases); relative to the repo root.")
    bind_host: str = setting(rules.host, "127.0.0.1",
        "Address every embedded server binds to.", example="127.0.0.1")
    s3_port: int = setting(rules.port, "9310",
        "S3 port of the embedded object store (SeaweedFS, data under HOME/seaweedfs).", offset=310)
    s3_grpc_port: int = setting(rules.port, "9320",
        "gRPC port of the embedded SeaweedFS S3 server.", offset=320)
    seaweedfs_master_port: int = setting(rules.port, "9321",
        "HTTP port of the embedded SeaweedFS master.", offset=321)
    seaweedfs_master_grpc_port: int = setting(rules.port, "9322",
        "gRPC port of the embedded SeaweedFS master.", offset=322)
    seaweedfs_volume_port: int = setting(rules.port, "9323",
        "HTTP port of the embedded SeaweedFS volume server.", offset=323)
    seaweedfs_volume_grpc_port: int = setting(rules.port, "9324",
        "gRPC port of the embedded SeaweedFS volume server.", offset=324)
    seaweedfs_filer_port: int = setting(rules.port, "9325",
        "HTTP port of the embedded SeaweedFS filer.", offset=325)
    seaweedfs_filer_grpc_port: int = setting(rules.port, "9326",
        "gRPC port of the embedded SeaweedFS filer.", offset=326)
    s3_endpoint_url: str = setting(rules.optional_url, "",
        "S3 endpoint; empty means the embedded store at http://BIND_HOST:S3_PORT.", example="http://minio:9000")
    s3_access_key: str = setting(rules.text, "",
        "Access key for the object store; empty means: for the embedded store generate one at first start "
        "and keep it in HOME/secrets, for MODELOPS_S3_ENDPOINT_URL boto3's default credentials.", secret=True)
    s3_secret_key: str = setting(rules.text, "",
        "Secret key for the object store; empty: like MODELOPS_S3_ACCESS_KEY.", secret=True)
    s3_region: str = setting(rules.text, "us-east-1",
        "Region name passed to boto3.")
    bucket: str = setting(rules.bucket, "modelops",
        "Bucket for Triton repositories, routes, event logs and reports.")
    mlflow_bucket: str = setting(rules.bucket, "mlflow",
        "Bucket for MLflow artifacts.")
    mlflow_port: int = setting(rules.port, "5510",
        "Port of the MLflow server.", offset=510)
    mlflow_tracking_uri: str = setting(rules.optional_url, "",
        "MLflow tracking URI; empty means the embedded server.", example="http://mlflow:5000")
    mlflow_backend: str = setting(rules.choice("sqlite", "postgresql"), "sqlite",
        "Backend store of the embedded MLflow server.")
    postgres_port: int = setting(rules.port, "5532",
        "Port of the private PostgreSQL cluster (only when MLFLOW_BACKEND=postgresql).", offset=532)
    postgres_bin: Path = setting(rules.path, "/usr/lib/postgresql/15/bin",
        "Directory with the PostgreSQL 15 server binaries (initdb, pg_ctl, postgres).")
    triton_http_port: int = setting(rules.port, "8300",
        "HTTP port of Triton (inference, repository API).", offset=300)
    triton_grpc_port: int = setting(rules.port, "8301",
        "gRPC port of Triton.", offset=301)
    triton_metrics_port: int = setting(rules.port, "8302",
        "Prometheus metrics port of Triton.", offset=302)
    triton_url: str = setting(rules.optional_url, "",
        "Triton HTTP URL; empty means the embedded server.", example="http://triton:8000")
    triton_backend: str = setting(rules.choice("python", "onnxruntime"), "python",
        "Backend of published models: python (model.py running onnxruntime) or native onnxruntime.")
    triton_gpus: int = setting(rules.non_negative_int, "0",
        "GPUs each Triton server has (0: CPU only). A spec's instance_group kind auto becomes KIND_GPU where "
        "this is > 0, KIND_CPU otherwise; kind gpu is refused before Triton where it is 0.", example="1")
    triton_admin_key: str = setting(rules.text, "",
        "Key of Triton's restricted model-repository API (sent as header admin-key on load, unload and "
        "index calls); empty: MODELOPS_TRITON_ADMIN_KEY_FILE, else no header (an unrestricted Triton, as the "
        "embedded stack's).", secret=True)
    triton_admin_key_file: str = setting(rules.text, "",
        "File holding the Triton admin key when MODELOPS_TRITON_ADMIN_KEY is empty (compose: written by init "
        "into the triton-admin volume, mounted by its readers only).", example="/etc/modelops/triton-admin/admin-key")
    airflow_port: int = setting(rules.port, "8380",
        "Port of the Airflow API server / UI.", offset=380)
    airflow_worker_log_port: int = setting(rules.port, "8393",
        "Port of Airflow's worker log server.", offset=393)
    airflow_trigger_log_port: int = setting(rules.port, "8394",
        "Port of Airflow's triggerer log server.", offset=394)
    airflow_url: str = setting(rules.optional_url, "",
        "Airflow API base URL; empty means the embedded server.", example="http://airflow:8080")
    airflow_user: str = setting(rules.text, "admin",
        "Airflow admin user name.")
    airflow_password: str = setting(rules.text, "",
        "Airflow admin password; empty means generate one at first start and keep it in HOME.", secret=True)
    airflow_parallelism: int = setting(rules.positive_int, "4",
        "Task slots of the embedded LocalExecutor.")
    gateway_port: int = setting(rules.port, "8400",
        "Port of the serving gateway.", offset=400)
    gateway_workers: int = setting(rules.positive_int, "1",
        "uvicorn worker processes of the gateway.")
    spark_master: str = setting(rules.text, "local[2]",
        "Spark master URL of the batch jobs.", example="spark://spark-master:7077")
    spark_auth_secret: str = setting(rules.text, "",
        "Spark RPC authentication secret of a spark:// cluster (spark.authenticate, set on the driver's "
        "session, never on a command line); empty: MODELOPS_SPARK_AUTH_SECRET_FILE, else no authentication.",
        secret=True)
    spark_auth_secret_file: str = setting(rules.text, "",
        "File holding the Spark authentication secret when MODELOPS_SPARK_AUTH_SECRET is empty (compose: "
        "written by init into the spark-auth volume).", example="/etc/modelops/spark-auth/secret")
    spark_cluster_workers: int = setting(rules.non_negative_int, "0",
        "Workers of a Spark standalone cluster the embedded stack starts (a master and this many workers "
        "from pyspark's spark-class; 0: none). Jobs use it with MODELOPS_SPARK_MASTER=spark://127.0.0.1:PORT.",
        example="2")
    spark_cluster_port: int = setting(rules.port, "9700",
        "Port of the embedded Spark master (its web UI on PORT+1; worker i on PORT+10+10i, its UI +1).", offset=700)
    spark_driver_memory: str = setting(rules.memory_size, "4g",
        "Heap of the Spark driver of the batch jobs (spark.driver.memory; the compose workers set 2g).",
        example="2g")
    notify_urls: str = setting(rules.text, "",
        "Comma-separated apprise URLs for notifications; empty disables delivery.",
        example="json://127.0.0.1:8999/notify")
    feedback_secret: str = setting(rules.text, "",
        "HMAC secret for feedback tokens; empty means generate one at first start and keep it in HOME.", secret=True)
    startup_timeout_s: float = setting(rules.positive_float, "180",
        "Seconds `stack up` waits for one service to become healthy.")
    sample_share: float = setting(rules.fraction, "1.0",
        "Share of requests whose scored items (with features) are logged (the drift job's input).",
        env="MODELOPS_SCORED_SAMPLE_SHARE")
    sample_max_per_s: float = setting(rules.non_negative_float, "200",
        "At most this many requests a second per gateway process have their scored items logged (the share "
        "in force is lowered to fit; 0: no cap). 200 x 10 items is 173 million rows a day, the drift job reads "
        "at most 1 million per version: see modelops.gateway.logs.sampling.", env="MODELOPS_SCORED_SAMPLE_MAX_PER_S")
    spool_sync: str = setting(rules.choice("write", "fsync"), "write",
        "What the gateway's 200 (prediction) and 202 (feedback) wait for: write (the record is written to "
        "its spool segment: a crash or kill -9 of the gateway loses none; fdatasync follows within 50 ms, "
        "so only a crash of the whole machine can lose the last 50 ms) or fsync (written and fdatasynced "
        "before the answer, group-committed: ~0.5 ms more per answer at concurrency 1).")
    gateway_urls: tuple[str, ...] = setting(rules.url_list, "",
        "Comma-separated base URLs of every gateway replica: the canary waits for each to apply new "
        "routes and scrapes each one's metrics; dns+http://NAME:PORT stands for every address NAME "
        "resolves to (the replicas of a compose or headless service). Empty: the embedded gateway.",
        example="http://gateway-1:8400,http://gateway-2:8400")
    canary_metrics: str = setting(rules.choice("auto", "scrape", "prometheus"), "auto",
        "Where the canary reads its per-version metrics: scrape the gateways' and Triton's /metrics "
        "(differenced over the window), or PromQL against MODELOPS_PROMETHEUS_URL; auto: PromQL when "
        "MODELOPS_PROMETHEUS_URL is set or the embedded stack's Prometheus runs, else scrape.")
    canary_sticky_salt: str = setting(rules.choice("per_release", "none"), "per_release",
        "Salt of the sticky canary split: per_release (the canary's sha256 prefix, written to the routes "
        "document, so each release draws a different cohort of users) or none (the same users every time).")
    prometheus_url: str = setting(rules.optional_url, "",
        "Prometheus HTTP API base URL (required when MODELOPS_CANARY_METRICS=prometheus).",
        example="http://prometheus:9090")
    prometheus_up_selector: str = setting(rules.text, "",
        "PromQL label matchers of the gateway and Triton scrape targets (a target down in the window makes "
        "the analysis inconclusive). Empty: the targets that exported the model's series in the last hour.",
        example='job=~"modelops-gateway|triton"')
    pushgateway_url: str = setting(rules.optional_url, "",
        "Prometheus Pushgateway base URL: nightly_drift, feedback_join and the release phase push their "
        "results there. Empty: the embedded stack's Pushgateway when it runs (MODELOPS_OBSERVABILITY), "
        "else nothing is pushed.", example="http://pushgateway:9091")
    observability: str = setting(rules.choice("auto", "on", "off"), "auto",
        "Start Prometheus (the repository's rules), Pushgateway, Alertmanager and the alert relay with the "
        "embedded stack: on, off, or auto (on when `make prometheus` has unpacked Debian's binaries).")
    prometheus_bin: str = setting(rules.text, "",
        "A prometheus executable; its folder also holds promtool, the Pushgateway and Alertmanager. Empty: "
        "the Debian packages that `make prometheus` unpacks under .cache/prometheus.",
        example="/opt/prometheus/prometheus")
    prometheus_port: int = setting(rules.port, "9690",
        "Port of the embedded Prometheus.", offset=600)
    pushgateway_port: int = setting(rules.port, "9691",
        "Port of the embedded Pushgateway.", offset=601)
    alertmanager_port: int = setting(rules.port, "9693",
        "Port of the embedded Alertmanager.", offset=602)
    alert_relay_port: int = setting(rules.port, "9694",
        "Port of the alert relay (Alertmanager's webhook into MODELOPS_NOTIFY_URLS).", offset=603)
    statsd_port: int = setting(rules.port, "9695",
        "UDP port where the embedded stack's StatsD bridge receives Airflow's metrics.", offset=604)
    statsd_bridge_port: int = setting(rules.port, "9696",
        "HTTP port of the StatsD bridge's /metrics (scraped by the embedded Prometheus as job airflow).", offset=605)
    scaling: str = setting(rules.choice("on", "off"), "off",
        "Run the queue-driven instance scaling controller of Triton (`modelops scale`) with the embedded stack. "
        "Off by default: every instance is a process of its own (memory; CPU to start) and a change reloads the "
        "model, which a machine without spare cores pays for on every other request.")
    scaling_models: str = setting(rules.regex, ".*",
        "Regular expression the Triton model names the controller scales must match (fully).",
        example="ranker(_preprocess|_model)?")
    scaling_min_instances: int = setting(rules.positive_int, "1",
        "Fewest instances of a scaled Triton model.")
    scaling_max_instances: int = setting(rules.positive_int, "4",
        "Most instances of a scaled Triton model (>= MODELOPS_SCALING_MIN_INSTANCES).")
    scaling_up_queue_ms: float = setting(rules.positive_float, "50",
        "Scale up when a version's mean queue time per request over the interval reaches this.")
    scaling_down_queue_ms: float = setting(rules.non_negative_float, "5",
        "Scale down when every version queues at most this (and nothing is pending) for the cool-down "
        "(< MODELOPS_SCALING_UP_QUEUE_MS: the gap is the hysteresis).")
    scaling_up_pending: int = setting(rules.positive_int, "8",
        "Scale up when a version has this many requests pending.")
    scaling_cooldown_s: float = setting(rules.non_negative_float, "30",
        "No change within this many seconds of the last one; a scale-down needs low load for as long.")
    scaling_interval_s: float = setting(rules.positive_float, "2",
        "Seconds between the controller's scrapes of Triton's metrics (the window of one decision).")
    scaling_mode: str = setting(rules.choice("replace", "update"), "replace",
        "How a count changes: replace (the override also sets a marker parameter: Triton loads a new copy beside "
        "the serving one and switches, ~6 s under load) or update (only the count: Triton updates in place but "
        "first waits for the model's queue to empty, 39 s measured under overload).")
    precomputed_max_age_s: float = setting(rules.positive_float, "7200",
        "Freshness limit of precomputed predictions: the gateway answers online when the routed version's "
        "newest snapshot is older (two runs of the hourly precompute_predictions DAG).")
    precomputed_poll_s: float = setting(rules.positive_float, "5",
        "Seconds between the gateway's looks for new precomputed snapshots of the routed versions.")
    release_webhooks: str = setting(rules.choice("on", "off"), "on",
        "MLflow's webhook starts a release seconds after the alias challenger is set (on), or only the "
        "one-minute poll of release_on_staging does (off: registration disables the webhook, deliveries get 404).")
    release_webhook_url: str = setting(rules.optional_url, "",
        "Where MLflow delivers the webhook; empty: the Airflow API server's "
        "AIRFLOW_URL/modelops-webhooks/mlflow.", example="http://airflow-api-server:8080/modelops-webhooks/mlflow")
    release_webhook_secret: str = setting(rules.text, "",
        "HMAC secret of the MLflow webhook; empty means generate one at first use and keep it in HOME/secrets "
        "(`modelops webhook register --rotate` replaces it).", secret=True)
    release_webhook_max_age_s: float = setting(rules.positive_float, "300",
        "A delivery whose X-MLflow-Timestamp is further than this from the receiver's clock is refused (400).")

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


def _declared() -> tuple[Setting, ...]:
    named = []
    for item in fields(Settings):
        declared: Setting = item.metadata[_SETTING]
        env = declared.env or f"MODELOPS_{item.name.upper()}"
        named.append(Setting(item.name, env, declared.parse, declared.default, declared.doc, declared.example,
                             declared.secret, declared.offset))
    return tuple(named)


#: Every setting, in declaration order (the fields of :class:`Settings`).
SETTINGS: tuple[Setting, ...] = _declared()


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
        try:
            values[setting.attr] = _parse(setting, source)
        except ConfigError as exc:
            problems.append(str(exc))
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


def value_of(attr: str, env: Mapping[str, str]) -> Any:
    """One setting read from ``env`` (a deployment's environment, not this process's), validated alone.

    Raises:
        ConfigError: its value breaks its rule (the message names the variable, the rule and an example).
    """
    return _parse(next(s for s in SETTINGS if s.attr == attr), env)


def _parse(setting: Setting, source: Mapping[str, str]) -> Any:
    raw = source.get(setting.env, setting.default)
    try:
        return setting.parse(raw.strip() if setting.parse is not rules.text else raw)
    except ValueError as exc:
        rule = str(exc) if not str(exc).startswith("invalid literal") else _rule_for(setting)
        shown = "<hidden>" if setting.secret else repr(raw)
        raise ConfigError(f"{setting.env}={shown}: {rule} (example: {setting.env}={setting.example_value})") from None


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


#: Port of each server relative to a base (``stack_port_env``): one layout for tests and benchmarks, from the
#: ``offset`` of each port setting.
STACK_PORT_OFFSETS: dict[str, int] = {s.env: s.offset for s in SETTINGS if s.offset is not None}


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

