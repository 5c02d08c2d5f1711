"""The production topology's ``objectstore-init``: create the buckets with the admin identity.

``python -m modelops.deploy.buckets`` creates the platform bucket (versioned) and MLflow's bucket,
idempotently, through the project's object-store adapter, then proves a real write + read round trip.
"""

from __future__ import annotations

import sys

from modelops.config import settings
from modelops.errors import ObjectStoreError
from modelops.objectstore import ObjectStore

HEALTH_KEY = "_deploy/objectstore-init"


def main() -> int:
    cfg = settings()
    try:
        for bucket in (cfg.bucket, cfg.mlflow_bucket):
            store = ObjectStore.from_settings(cfg, bucket=bucket)
            store.ensure_bucket()
            store.put_bytes(HEALTH_KEY, b"ok")
            if store.get_bytes(HEALTH_KEY) != b"ok":
                raise ObjectStoreError(f"s3://{bucket}/{HEALTH_KEY}: read back differs from what was written")
            store.delete(HEALTH_KEY)
    except ObjectStoreError as exc:
        print(f"objectstore-init: {exc}", file=sys.stderr)
        return 1
    print(f"buckets ready: {cfg.bucket}, {cfg.mlflow_bucket}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
