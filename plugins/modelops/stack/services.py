"""The services of the embedded stack: how each starts, where it listens, how it is checked.

Everything here is data plus small preparation steps; :mod:`modelops.stack.launcher` lists them
in start order (:func:`~modelops.stack.launcher.all_services`), starts, checks and stops them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from modelops.config import PROJECT_ROOT, SETTINGS, Settings
from modelops.credentials import airflow_password, feedback_secret, s3_credentials
from modelops.errors import RegistryError, StackError
from modelops.secretfiles import generated_secret
from modelops.stack import seaweedfs

VENV_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Service:
    """One long-running process of the stack."""

    name: str
    argv: tuple[str, ...]
    ports: tuple[int, ...]
    health_url: str
    env: Mapping[str, str] = field(default_factory=dict)
    prepare: Callable[[], None] | None = None
    after_healthy: Callable[[], None] | None = None
    depends_on: tuple[str, ...] = ()
    cwd: Path | None = None
    # For Airflow components other than the API server: the key in the API server's
    # /api/v2/monitor/health answer whose status must be "healthy".
    airflow_component: str | None = None
    url: str = ""
    # A health check richer than an HTTP GET (the object store: a real S3 round trip); wins over health_url.
    health_check: Callable[[], tuple[bool, str]] | None = None

    def log_file(self, home: Path) -> Path:
        return home / "logs" / f"{self.name}.log"

    def pid_file(self, home: Path) -> Path:
        return home / "run" / f"{self.name}.pid"


def modelops_env(cfg: Settings) -> dict[str, str]:
    """The MODELOPS_* settings as environment, so every child process sees the same config."""
    env = {s.env: s.render(getattr(cfg, s.attr)) for s in SETTINGS}
    env["MODELOPS_FEEDBACK_SECRET"] = feedback_secret(cfg)
    env["MODELOPS_AIRFLOW_PASSWORD"] = airflow_password(cfg)
    return env


def base_env(cfg: Settings) -> dict[str, str]:
    env = dict(os.environ)
    env.update(modelops_env(cfg))
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    access, secret = s3_credentials(cfg)
    if access and secret:  # the embedded store's generated keys reach every child process
        env["AWS_ACCESS_KEY_ID"] = env["MODELOPS_S3_ACCESS_KEY"] = access
        env["AWS_SECRET_ACCESS_KEY"] = env["MODELOPS_S3_SECRET_KEY"] = secret
    env["AWS_DEFAULT_REGION"] = cfg.s3_region
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def with_plugins(pythonpath: str) -> str:
    """PYTHONPATH with the repo's plugins/ first, so services import this checkout's package."""
    return os.pathsep.join(p for p in (str(PROJECT_ROOT / "plugins"), pythonpath) if p)


# ---------------------------------------------------------------- object store
def object_store(cfg: Settings) -> Service:
    """SeaweedFS (see :mod:`modelops.stack.seaweedfs`): durable, data under HOME/seaweedfs."""

    def create_buckets() -> None:
        from modelops.objectstore import ObjectStore

        for bucket in (cfg.bucket, cfg.mlflow_bucket):
            ObjectStore.from_settings(cfg, bucket=bucket).ensure_bucket()

    return Service(
        name="objectstore",
        argv=seaweedfs.argv(cfg, VENV_BIN / "weed"),
        ports=seaweedfs.ports(cfg),
        health_url=f"s3://{cfg.bind_host}:{cfg.s3_port}/{cfg.bucket}/{seaweedfs.HEALTH_KEY}",
        env=base_env(cfg),
        prepare=lambda: seaweedfs.prepare(cfg),
        after_healthy=create_buckets,
        url=f"http://{cfg.bind_host}:{cfg.s3_port}",
        health_check=lambda: seaweedfs.health(cfg),
    )


# ---------------------------------------------------------------- PostgreSQL (optional)
def postgres(cfg: Settings) -> Service:
    data_dir = cfg.home / "postgres" / "data"
    sock_dir = cfg.home / "postgres" / "sock"

    def initdb() -> None:
        sock_dir.mkdir(parents=True, exist_ok=True)
        if (data_dir / "PG_VERSION").exists():
            return
        data_dir.mkdir(parents=True, exist_ok=True)
        run_as = _postgres_user_prefix(data_dir.parent)
        result = subprocess.run(
            [*run_as, str(cfg.postgres_bin / "initdb"), "-D", str(data_dir), "-U", "modelops",
             "--auth=trust", "-E", "UTF8"],
            capture_output=True, text=True, check=False,
        )
        if result.returncode != 0:
            raise StackError(f"postgres: initdb failed: {result.stderr.strip()[-800:]}")

    argv = (*_postgres_user_prefix(data_dir.parent), str(cfg.postgres_bin / "postgres"), "-D", str(data_dir),
            "-p", str(cfg.postgres_port), "-k", str(sock_dir), "-c", f"listen_addresses={cfg.bind_host}")
    return Service(
        name="postgres",
        argv=argv,
        ports=(cfg.postgres_port,),
        health_url=f"tcp://{cfg.bind_host}:{cfg.postgres_port}",
        env=base_env(cfg),
        prepare=initdb,
        url=f"postgresql://modelops@{cfg.bind_host}:{cfg.postgres_port}/postgres",
    )


def _postgres_user_prefix(owned_dir: Path) -> tuple[str, ...]:
    """PostgreSQL refuses to run as root: run it as the 'postgres' user when we are root."""
    if os.geteuid() != 0:
        return ()
    owned_dir.mkdir(parents=True, exist_ok=True)
    shutil.chown(owned_dir, "postgres", "postgres")
    for path in owned_dir.rglob("*"):
        shutil.chown(path, "postgres", "postgres")
    # The home directory itself must be traversable by 'postgres'.
    for parent in owned_dir.parents:
        if parent == Path("/"):
            break
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod(mode | 0o001)
    return ("runuser", "-u", "postgres", "--")


# ---------------------------------------------------------------- MLflow
def mlflow(cfg: Settings) -> Service:
    mlflow_dir = cfg.home / "mlflow"
    if cfg.mlflow_backend == "postgresql":
        backend = f"postgresql://modelops@{cfg.bind_host}:{cfg.postgres_port}/postgres"
        depends: tuple[str, ...] = ("objectstore", "postgres")
    else:
        backend = f"sqlite:///{mlflow_dir / 'mlflow.db'}"
        depends = ("objectstore",)
    env = base_env(cfg)
    env.update({
        "MLFLOW_S3_ENDPOINT_URL": cfg.s3_endpoint,
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "GUNICORN_CMD_ARGS": "--timeout 120",
        **mlflow_webhook_env(cfg),
    })

    def register_webhook() -> None:
        from modelops.registry.webhooks import ensure_release_webhook

        try:
            ensure_release_webhook(cfg)
        except RegistryError as exc:
            raise StackError(f"mlflow: registering the release webhook failed: {exc} "
                             "(MODELOPS_RELEASE_WEBHOOKS=off starts the stack without it)") from exc

    return Service(
        name="mlflow",
        argv=(str(VENV_BIN / "mlflow"), "server", "--host", cfg.bind_host, "--port", str(cfg.mlflow_port),
              "--backend-store-uri", backend, "--artifacts-destination", f"s3://{cfg.mlflow_bucket}/",
              "--workers", "2"),
        ports=(cfg.mlflow_port,),
        health_url=f"http://{cfg.bind_host}:{cfg.mlflow_port}/health",
        env=env,
        prepare=lambda: mlflow_dir.mkdir(parents=True, exist_ok=True),
        after_healthy=register_webhook,
        depends_on=depends,
        url=cfg.mlflow_uri,
    )


def mlflow_webhook_env(cfg: Settings) -> dict[str, str]:
    """What MLflow's server needs to deliver the release webhook to the receiver on loopback.

    A stable key for the webhook secrets it stores (each process draws its own without one, and
    cannot decrypt what another wrote); http and private addresses allowed (the receiver is the
    Airflow API server on BIND_HOST); the webhook list cached 5 s instead of 60 s, so a
    registration, a rotation or switching webhooks off takes effect within seconds.
    """
    import base64

    key = generated_secret(cfg.home / "secrets" / "mlflow-webhook-encryption-key",
                           lambda: base64.urlsafe_b64encode(os.urandom(32)).decode())
    return {"MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY": key, "MLFLOW_WEBHOOK_ALLOWED_SCHEMES": "http,https",
            "MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS": "true", "MLFLOW_WEBHOOK_CACHE_TTL": "5"}


# ---------------------------------------------------------------- Triton
def triton_distribution() -> Path:
    """The Triton server directory shipped inside the nvidia-pytriton wheel."""
    import pytriton

    root = Path(pytriton.__file__).parent / "tritonserver"
    if not (root / "bin" / "tritonserver").exists():
        raise StackError(f"triton: no tritonserver binary under {root} (is nvidia-pytriton installed?)")
    return root


def triton_repository(cfg: Settings) -> Path:
    """The local model repository the embedded Triton reads (the publisher mirrors into it)."""
    return cfg.home / "triton" / "repository"


def triton(cfg: Settings) -> Service:
    dist = cfg.home / "triton" / "dist"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"

    def prepare() -> None:
        source = triton_distribution()
        marker = dist / ".source"
        if not (marker.exists() and marker.read_text() == f"{source}:{version}"):
            shutil.rmtree(dist, ignore_errors=True)
            for part in ("bin", "backends", "caches"):
                shutil.copytree(source / part, dist / part)
            stub = source / "python_backend_stubs" / version / "triton_python_backend_stub"
            if not stub.exists():
                raise StackError(f"triton: no python backend stub for Python {version} in {stub.parent.parent}")
            shutil.copy2(stub, dist / "backends" / "python" / "triton_python_backend_stub")
            marker.write_text(f"{source}:{version}")
        triton_repository(cfg).mkdir(parents=True, exist_ok=True)

    import importlib.util

    spec = importlib.util.find_spec("pytriton")
    site = Path(spec.origin).parent.parent if spec and spec.origin else Path()
    libs = site / "nvidia_pytriton.libs"
    env = base_env(cfg)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(libs), sysconfig.get_config_var("LIBDIR") or "", env.get("LD_LIBRARY_PATH", "")) if p
    )
    env["PYTHONPATH"] = with_plugins(env.get("PYTHONPATH", ""))
    argv = (
        str(dist / "bin" / "tritonserver"),
        f"--model-repository={PROJECT_ROOT / 'model_repository'}",
        f"--model-repository={triton_repository(cfg)}",
        "--model-control-mode=explicit",
        f"--backend-directory={dist / 'backends'}",
        f"--cache-directory={dist / 'caches'}",
        f"--http-address={cfg.bind_host}", f"--http-port={cfg.triton_http_port}",
        f"--grpc-address={cfg.bind_host}", f"--grpc-port={cfg.triton_grpc_port}",
        f"--metrics-address={cfg.bind_host}", f"--metrics-port={cfg.triton_metrics_port}",
        "--allow-metrics=true", "--allow-gpu-metrics=false", "--allow-cpu-metrics=true",
        "--strict-readiness=false", "--exit-on-error=false", "--log-verbose=0",
    )
    return Service(
        name="triton",
        argv=argv,
        ports=(cfg.triton_http_port, cfg.triton_grpc_port, cfg.triton_metrics_port),
        health_url=f"http://{cfg.bind_host}:{cfg.triton_http_port}/v2/health/ready",
        env=env,
        prepare=prepare,
        url=cfg.triton_http_url,
    )


# ---------------------------------------------------------------- the serving gateway
def gateway(cfg: Settings) -> Service:
    return Service(
        name="gateway",
        argv=(str(VENV_BIN / "modelops"), "gateway", "serve"),
        ports=(cfg.gateway_port,),
        health_url=f"http://{cfg.bind_host}:{cfg.gateway_port}/healthz",
        env=base_env(cfg),
        depends_on=("objectstore", "triton"),
        url=cfg.gateway_url,
    )


# ---------------------------------------------------------------- the Triton reconciler
def reconciler(cfg: Settings) -> Service:
    """``modelops reconcile``: every Triton serves exactly the routed versions (modelops.serving.reconcile)."""
    from modelops.serving.reconcile import status_file_of

    def fresh() -> tuple[bool, str]:
        try:
            age = time.time() - status_file_of(cfg).stat().st_mtime
        except OSError:
            return False, "no pass finished yet"
        return age < 30.0, f"last pass {age:.0f} s ago"

    return Service(
        name="reconciler",
        argv=(str(VENV_BIN / "modelops"), "reconcile"),
        ports=(),
        health_url=f"file://{cfg.home / 'run' / 'reconciler.status.json'}",
        env=base_env(cfg),
        depends_on=("objectstore", "triton"),
        prepare=lambda: status_file_of(cfg).unlink(missing_ok=True),  # healthy after a pass of this process
        health_check=fresh,
    )


# ---------------------------------------------------------------- the Triton scaling controller
def scaler(cfg: Settings) -> Service:
    """``modelops scale``: instance counts by queue time (modelops.serving.scaler); only when MODELOPS_SCALING=on."""
    from modelops.serving.scaler import status_file_of

    def fresh() -> tuple[bool, str]:
        try:
            age = time.time() - status_file_of(cfg).stat().st_mtime
        except OSError:
            return False, "no pass finished yet"
        # A change waits for Triton's reload (a scale-down for the model's queue to empty): allow for it.
        return age < 30.0 + 10 * cfg.scaling_interval_s, f"last pass {age:.0f} s ago"

    return Service(
        name="scaler",
        argv=(str(VENV_BIN / "modelops"), "scale"),
        ports=(),
        health_url=f"file://{status_file_of(cfg)}",
        env=base_env(cfg),
        depends_on=("objectstore", "triton"),
        prepare=lambda: status_file_of(cfg).unlink(missing_ok=True),
        health_check=fresh,
    )
