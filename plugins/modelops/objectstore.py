"""The object store adapter (S3 API through boto3): SeaweedFS on loopback and in compose, or any S3.

Third-party errors become :class:`~modelops.errors.ObjectStoreError` here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from modelops.config import Settings, settings
from modelops.errors import ObjectStoreError


@dataclass(frozen=True)
class ObjectStore:
    """A bucket-scoped S3 client with the few operations the platform needs."""

    endpoint_url: str
    bucket: str
    access_key: str | None
    secret_key: str | None
    region: str = "us-east-1"
    connect_timeout_s: float = 3.0
    read_timeout_s: float = 30.0

    @classmethod
    def from_settings(cls, cfg: Settings | None = None, *, bucket: str | None = None) -> ObjectStore:
        from modelops.credentials import s3_credentials

        cfg = cfg or settings()
        access, secret = s3_credentials(cfg)
        return cls(cfg.s3_endpoint, bucket or cfg.bucket, access, secret, cfg.s3_region)

    @cached_property
    def client(self) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(
                connect_timeout=self.connect_timeout_s,
                read_timeout=self.read_timeout_s,
                retries={"max_attempts": 2, "mode": "standard"},
                s3={"addressing_style": "path"},
            ),
        )

    def _fail(self, action: str, key: str, exc: Exception) -> ObjectStoreError:
        return ObjectStoreError(f"object store {self.endpoint_url}: {action} s3://{self.bucket}/{key} failed: {exc}")

    def ensure_bucket(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError:
            try:
                self.client.create_bucket(Bucket=self.bucket)
            except (ClientError, BotoCoreError) as exc:
                raise self._fail("create bucket", "", exc) from exc
        except BotoCoreError as exc:
            raise self._fail("head bucket", "", exc) from exc

    def put_bytes(self, key: str, data: bytes, *, content_type: str = "application/octet-stream") -> str:
        """Upload ``data``; returns its sha256 hex digest (verified against the stored ETag/MD5)."""
        from botocore.exceptions import BotoCoreError, ClientError

        md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
        try:
            response = self.client.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=content_type)
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("put", key, exc) from exc
        etag = str(response.get("ETag", "")).strip('"')
        if etag and "-" not in etag and etag != md5:
            raise ObjectStoreError(f"upload of s3://{self.bucket}/{key} corrupted: md5 {md5} != etag {etag}")
        return hashlib.sha256(data).hexdigest()

    def put_file(self, key: str, path: Path) -> str:
        return self.put_bytes(key, path.read_bytes())

    def get_bytes(self, key: str) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return bytes(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("get", key, exc) from exc

    def exists(self, key: str) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"404", "NoSuchKey", "NotFound"}:
                return False
            raise self._fail("head", key, exc) from exc
        except BotoCoreError as exc:
            raise self._fail("head", key, exc) from exc
        return True

    def list_keys(self, prefix: str) -> Iterator[str]:
        from botocore.exceptions import BotoCoreError, ClientError

        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                for obj in page.get("Contents", []):
                    yield str(obj["Key"])
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("list", prefix, exc) from exc

    def list_tagged(self, prefix: str) -> Iterator[tuple[str, str]]:
        """``(key, tag)`` of every object under ``prefix``; the tag (ETag and last-modified) changes on a rewrite."""
        from botocore.exceptions import BotoCoreError, ClientError

        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                for obj in page.get("Contents", []):
                    etag = str(obj.get("ETag", "")).strip('"')
                    yield str(obj["Key"]), f"{etag}@{obj.get('LastModified', '')}"
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("list", prefix, exc) from exc

    def get_with_etag(self, key: str) -> tuple[bytes | None, str | None]:
        """The object and its ETag, or ``(None, None)`` when it does not exist (for :meth:`put_if`)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
            return bytes(response["Body"].read()), str(response["ETag"])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"404", "NoSuchKey", "NotFound"}:
                return None, None
            raise self._fail("get", key, exc) from exc
        except BotoCoreError as exc:
            raise self._fail("get", key, exc) from exc

    def put_if(self, key: str, data: bytes, etag: str | None, *, content_type: str = "application/json") -> bool:
        """Write ``key`` only if it still has ``etag`` (None: only if it does not exist); False when another
        writer changed it first (an atomic conditional PutObject: SeaweedFS and S3 honour it)."""
        from botocore.exceptions import BotoCoreError, ClientError

        condition = {"IfNoneMatch": "*"} if etag is None else {"IfMatch": etag}
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=content_type, **condition)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code"))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in {"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"} or status in {409, 412}:
                return False
            raise self._fail("conditional put", key, exc) from exc
        except BotoCoreError as exc:
            raise self._fail("conditional put", key, exc) from exc
        return True

    def delete(self, key: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.delete_object(Bucket=self.bucket, Key=key)
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("delete", key, exc) from exc

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"
