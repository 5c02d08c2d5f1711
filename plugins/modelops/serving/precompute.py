"""Precomputed predictions: the snapshot layout, its manifest, and which snapshot may serve (pure).

A snapshot holds the scores of the active users x candidate items by ONE Triton version of a
model (the champion: the routes document's stable version when the batch ran). Layout in the
platform bucket::

    precomputed/<model>/v=<triton version>/<snapshot>/scores.parquet   user_id, item_id, score (float32)
    precomputed/<model>/v=<triton version>/<snapshot>/_manifest.json   written last (one PUT: atomic)

``<snapshot>`` names the scheduled interval (``20261201T060000Z``), so re-running a batch for the
same interval rewrites the same keys. A reader only ever looks at manifests, and a manifest is
written after the scores it names (with their sha256), so a reader never sees half a snapshot.
Manifest (``schema_version`` 1)::

    {"schema_version": 1, "model": "recommender", "version": 3, "sha256": "<64 hex>",
     "snapshot": "20261201T060000Z", "created_at": "2026-12-01T06:00:41Z", "rows": 60000,
     "n_users": 500, "n_items": 120, "feature_snapshot": "2026-11-30",
     "scores_key": "precomputed/recommender/v=3/20261201T060000Z/scores.parquet",
     "scores_sha256": "<64 hex>", "routes_revision": 7}

Serving rule (:func:`servable`): a snapshot answers a request only when its Triton version AND
its sha256 equal the version the routes send the user to, it was scored on the feature snapshot
the gateway serves (so its scores equal what Triton would return for the same features), and it
is younger than the freshness limit. Anything else is answered online.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from modelops.errors import ContractError
from modelops.names import check_model_name, model_name_problem

SCHEMA_VERSION = 1
PRECOMPUTED_PREFIX = "precomputed/"
MANIFEST_NAME = "_manifest.json"
SCORES_NAME = "scores.parquet"
_SNAPSHOT = re.compile(r"^[0-9]{8}T[0-9]{6}Z$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_MANIFEST_KEY = re.compile(r"^precomputed/([^/]+)/v=([1-9][0-9]{0,9})/([^/]+)/_manifest\.json$")


def snapshot_name(at: datetime) -> str:
    """The snapshot name of a scheduled interval's start (UTC): ``20261201T060000Z``."""
    if at.tzinfo is None:
        raise ContractError(f"snapshot time {at.isoformat()}: must be timezone-aware (example: 2026-12-01T06:00Z)")
    return at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def snapshot_prefix(model: str, version: int, snapshot: str) -> str:
    """``precomputed/<model>/v=<version>/<snapshot>/`` (model name and snapshot name checked)."""
    check_model_name(model)
    if not _SNAPSHOT.match(snapshot):
        raise ContractError(f"snapshot={snapshot!r}: must match {_SNAPSHOT.pattern} (example: 20261201T060000Z)")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ContractError(f"version={version!r}: must be an integer >= 1 (example: 3)")
    return f"{PRECOMPUTED_PREFIX}{model}/v={version}/{snapshot}/"


def scores_key(model: str, version: int, snapshot: str) -> str:
    return snapshot_prefix(model, version, snapshot) + SCORES_NAME


def manifest_key(model: str, version: int, snapshot: str) -> str:
    return snapshot_prefix(model, version, snapshot) + MANIFEST_NAME


def model_prefix(model: str) -> str:
    """Where every snapshot of ``model`` lives (the gateway lists this)."""
    return f"{PRECOMPUTED_PREFIX}{check_model_name(model)}/"


def parse_manifest_key(key: str) -> tuple[str, int, str] | None:
    """``(model, version, snapshot)`` of a manifest key, None for any other key."""
    match = _MANIFEST_KEY.match(key)
    if match is None or model_name_problem(match.group(1)) or not _SNAPSHOT.match(match.group(3)):
        return None
    return match.group(1), int(match.group(2)), match.group(3)


@dataclass(frozen=True)
class Manifest:
    """What a snapshot holds; see the module docstring for the JSON form."""

    model: str
    version: int
    sha256: str
    snapshot: str
    created_at: str  # ISO 8601, UTC: when the scores were complete
    rows: int
    n_users: int
    n_items: int
    feature_snapshot: str
    scores_key: str
    scores_sha256: str
    routes_revision: int
    schema_version: int = SCHEMA_VERSION

    @property
    def created_at_s(self) -> float:
        return _timestamp(self.created_at)

    def age_s(self, now: float) -> float:
        """Seconds since the snapshot was complete (never negative)."""
        return max(0.0, now - self.created_at_s)


def _timestamp(raw: str) -> float:
    return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()


def _int(document: Mapping[str, Any], name: str, minimum: int, example: int) -> int:
    value = document.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ContractError(f"manifest.{name}={value!r}: must be an integer >= {minimum} (example: {example})")
    return value


def _str(document: Mapping[str, Any], name: str, pattern: re.Pattern[str] | None, example: str) -> str:
    value = document.get(name)
    if not isinstance(value, str) or not value or (pattern is not None and not pattern.match(value)):
        rule = f"must match {pattern.pattern}" if pattern is not None else "must be a non-empty string"
        raise ContractError(f"manifest.{name}={value!r}: {rule} (example: {example})")
    return value


def parse_manifest(document: Any) -> Manifest:
    """Validate a parsed manifest.

    Raises:
        ContractError: naming the field, the rule and an example.
    """
    if not isinstance(document, Mapping):
        raise ContractError("manifest: must be a JSON object (example: {\"schema_version\": 1, ...})")
    if document.get("schema_version") != SCHEMA_VERSION:
        raise ContractError(f"manifest.schema_version={document.get('schema_version')!r}: must be {SCHEMA_VERSION}")
    model = document.get("model")
    problem = model_name_problem(model, "manifest.model")
    if problem:
        raise ContractError(problem)
    version = _int(document, "version", 1, 3)
    snapshot = _str(document, "snapshot", _SNAPSHOT, "20261201T060000Z")
    created_at = _str(document, "created_at", None, "2026-12-01T06:00:41Z")
    try:
        _timestamp(created_at)
    except ValueError as exc:
        raise ContractError(f"manifest.created_at={created_at!r}: must be an ISO 8601 time "
                            f"(example: 2026-12-01T06:00:41Z)") from exc
    key = _str(document, "scores_key", None, scores_key(str(model), version, snapshot))
    if key != scores_key(str(model), version, snapshot):
        raise ContractError(f"manifest.scores_key={key!r}: must be {scores_key(str(model), version, snapshot)!r} "
                            "(the version and snapshot of the manifest's own path)")
    return Manifest(
        model=str(model), version=version, sha256=_str(document, "sha256", _SHA256, "<64 lowercase hex>"),
        snapshot=snapshot, created_at=created_at, rows=_int(document, "rows", 0, 60000),
        n_users=_int(document, "n_users", 0, 500), n_items=_int(document, "n_items", 0, 120),
        feature_snapshot=_str(document, "feature_snapshot", None, "2026-11-30"), scores_key=key,
        scores_sha256=_str(document, "scores_sha256", _SHA256, "<64 lowercase hex>"),
        routes_revision=_int(document, "routes_revision", 0, 7))


def load_manifest(data: bytes, key: str | None = None) -> Manifest:
    """Parse stored bytes; with ``key``, the manifest must describe the snapshot of its own path.

    Raises:
        ContractError: not JSON, not a valid manifest, or stored under another snapshot's key.
    """
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise ContractError(f"manifest {key or ''}: not valid JSON: {exc}") from exc
    manifest = parse_manifest(document)
    if key is not None and parse_manifest_key(key) != (manifest.model, manifest.version, manifest.snapshot):
        raise ContractError(f"manifest {key}: describes {manifest.model} v{manifest.version} {manifest.snapshot}, "
                            "not the snapshot of its key")
    return manifest


def serialize_manifest(manifest: Manifest) -> bytes:
    """The stored form (validated on the way out, so a writer cannot store a bad one)."""
    document = asdict(manifest)
    parse_manifest(document)
    return json.dumps(document, indent=2, sort_keys=True).encode()


def newest_by_version(manifests: Iterable[Manifest]) -> dict[tuple[str, int, str], Manifest]:
    """Per ``(model, version, sha256)`` the newest snapshot: the latest interval (its name), as :func:`prunable`.

    One ordering for both, so the retention never deletes the snapshot a gateway serves; a late
    re-run of an older interval (newer ``created_at``) does not displace a newer interval.
    """
    newest: dict[tuple[str, int, str], Manifest] = {}
    for manifest in manifests:
        key = (manifest.model, manifest.version, manifest.sha256)
        current = newest.get(key)
        if current is None or (manifest.snapshot, manifest.created_at_s) > (current.snapshot, current.created_at_s):
            newest[key] = manifest
    return newest


def servable(manifest: Manifest | None, *, version: int, sha256: str, feature_snapshot: str | None,
             now: float, max_age_s: float) -> str:
    """Why ``manifest`` may not answer for a routed ``version``/``sha256``; ``""`` when it may.

    The reasons (also the metric label of an online answer): ``none`` (no snapshot of the routed
    version), ``version`` (a snapshot of another version or build), ``features`` (scored on another
    feature snapshot than the one served), ``stale`` (older than ``max_age_s``).
    """
    if manifest is None:
        return "none"
    if manifest.version != version or manifest.sha256 != sha256:
        return "version"
    if feature_snapshot is None or manifest.feature_snapshot != feature_snapshot:
        return "features"
    if manifest.age_s(now) > max_age_s:
        return "stale"
    return ""


@dataclass(frozen=True)
class Population:
    """The pairs a batch scores: every user of ``user_ids`` with every item of ``item_ids``."""

    user_ids: tuple[str, ...]
    item_ids: tuple[str, ...]

    @property
    def rows(self) -> int:
        return len(self.user_ids) * len(self.item_ids)


MAX_PAIRS = 25_000_000
"""Default bound of one snapshot's pairs: the gateway holds each routed version's snapshot as a dense
float32 table (4 bytes per pair, plus about 100 bytes per user and item id), so 25 M pairs is about
100 MB of gateway memory per routed version."""


def population(user_ids: Sequence[str], item_ids: Sequence[str], *, max_users: int = 0,
               max_items: int = 0, max_pairs: int = MAX_PAIRS) -> Population:
    """The active users x candidate items: ids de-duplicated and sorted, each capped (0: no cap).

    Raises:
        ContractError: a negative cap, or more than ``max_pairs`` pairs after the caps (0: no bound).
    """
    for name, cap in (("max_users", max_users), ("max_items", max_items), ("max_pairs", max_pairs)):
        if cap < 0:
            raise ContractError(f"{name}={cap}: must be >= 0 (0: no limit; example: 1000)")
    users = sorted({str(u) for u in user_ids})
    items = sorted({str(i) for i in item_ids})
    pop = Population(tuple(users[:max_users] if max_users else users),
                     tuple(items[:max_items] if max_items else items))
    if max_pairs and pop.rows > max_pairs:
        raise ContractError(
            f"max_pairs={max_pairs}: {len(pop.user_ids)} users x {len(pop.item_ids)} items = {pop.rows} pairs "
            f"exceed it (the gateway holds 4 bytes per pair per routed version); cap max_users or max_items, "
            f"or raise max_pairs (example: max_users=100000, max_items=200)")
    return pop


def row_ranges(rows: int, batch_rows: int, max_batch: int) -> list[tuple[int, int]]:
    """``[start, stop)`` ranges of the user-major pair rows, one Triton call each.

    A call carries at most ``batch_rows`` rows, and at most the model's ``max_batch_size`` when it
    has one (``max_batch`` > 0: Triton refuses a larger batch).

    Raises:
        ContractError: ``batch_rows`` < 1.
    """
    if batch_rows < 1:
        raise ContractError(f"batch_rows={batch_rows}: must be >= 1 (example: 4096)")
    limit = min(batch_rows, max_batch) if max_batch > 0 else batch_rows
    return [(start, min(rows, start + limit)) for start in range(0, rows, limit)]


def prunable(keys: Iterable[str], keep: int) -> list[tuple[str, int, str]]:
    """``(model, version, snapshot)`` of the snapshots beyond the newest ``keep`` of each version (by name,
    the ordering of :func:`newest_by_version`).

    Only snapshots with a manifest count; the newest ones (those a gateway may serve) are never listed.

    Raises:
        ContractError: ``keep`` < 1.
    """
    if keep < 1:
        raise ContractError(f"keep={keep}: must be >= 1 (example: 3)")
    by_version: dict[tuple[str, int], list[str]] = {}
    for key in keys:
        parsed = parse_manifest_key(key)
        if parsed is not None:
            by_version.setdefault(parsed[:2], []).append(parsed[2])
    return [(model, version, snapshot) for (model, version), names in sorted(by_version.items())
            for snapshot in sorted(names, reverse=True)[keep:]]
