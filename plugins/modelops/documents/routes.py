"""The routes document: which Triton versions of a model serve, and the sticky canary split.

One document per model at ``routes/<model>.json`` in the platform bucket; the release
DAG writes it, every gateway polls it. Format (``schema_version`` 1)::

    {"schema_version": 1, "model": "recommender", "revision": 7,
     "stable": {"version": 3, "sha256": "<64 hex>"},
     "canary": {"version": 4, "sha256": "<64 hex>"} | null,
     "canary_weight": 0.05, "updated_at": "<ISO 8601>", "updated_by": "<who>",
     "canary_salt": "<per-release salt>",  # optional; absent or "" means unsalted
     "shadow": {"version": 4, "sha256": "<64 hex>", "share": 0.5, "top_k": 5}}  # optional; absent: none

``revision`` increases with every change; a gateway applies only a higher revision.
Assignment is sticky: a user goes to the canary when :func:`user_fraction` of their
``user_id`` is below ``canary_weight``, so raising the weight keeps every earlier
canary user on the canary, and one user always sees one version. The hash is salted with
``canary_salt`` (the release writes the canary's sha256 prefix, ``MODELOPS_CANARY_STICKY_SALT``),
so each release draws a different cohort: the same users are not the canary of every release.

``shadow`` (optional, added without a schema change: a reader that does not know it ignores it and
serves exactly as before) names a *shadow* version: it answers no user; the gateway mirrors
``share`` (0.1–1) of the requests the routes send to the stable version to it after answering them,
and compares the two answers (``top_k``: the ranked items whose order is compared). A shadow version
is routed (Triton keeps it loaded) but never chosen by :func:`choose_version`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from modelops.errors import ContractError
from modelops.names import check_model_name, model_name_problem

SCHEMA_VERSION = 1
ROUTES_PREFIX = "routes/"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SALT = re.compile(r"^[A-Za-z0-9_.:-]{0,64}$")


@dataclass(frozen=True)
class VersionRef:
    """A published Triton version: the integer folder and the sha256 identity of the model file."""

    version: int
    sha256: str

    @cached_property  # read several times per answered request
    def label(self) -> str:
        """The ``X-Model-Version`` value: ``<sha256[:12]>/<triton version>``."""
        return f"{self.sha256[:12]}/{self.version}"


@dataclass(frozen=True)
class Shadow:
    """The version the gateway mirrors stable traffic to (answers no user): share (0.1–1) and top-k."""

    version: VersionRef
    share: float = 1.0
    top_k: int = 5


@dataclass(frozen=True)
class Routes:
    """One model's routes document."""

    model: str
    revision: int
    stable: VersionRef
    canary: VersionRef | None
    canary_weight: float
    updated_at: str
    updated_by: str
    canary_salt: str = ""
    schema_version: int = SCHEMA_VERSION
    shadow: Shadow | None = None


def routed_versions(routes: Routes | None) -> set[int]:
    """The Triton versions a routes document sends traffic to (stable, and the canary if any; none for none)."""
    if routes is None:
        return set()
    versions = {int(routes.stable.version)}
    if routes.canary is not None:
        versions.add(int(routes.canary.version))
    if routes.shadow is not None:  # answers no user, but must stay loaded to answer the mirrored requests
        versions.add(int(routes.shadow.version.version))
    return versions


def routes_key(model: str) -> str:
    """Object-store key of a model's routes document (the name checked: it becomes part of a key)."""
    return f"{ROUTES_PREFIX}{check_model_name(model)}.json"


def model_from_key(key: str) -> str | None:
    """The model name of a routes key, or None for other keys."""
    if key.startswith(ROUTES_PREFIX) and key.endswith(".json"):
        name = key[len(ROUTES_PREFIX):-len(".json")]
        return name if not model_name_problem(name) else None
    return None


def _version(raw: Any, where: str) -> VersionRef:
    if not isinstance(raw, Mapping):
        raise ContractError(f"{where}: must be an object (example: {{\"version\": 3, \"sha256\": \"<64 hex>\"}})")
    version, sha = raw.get("version"), raw.get("sha256")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ContractError(f"{where}.version={version!r}: must be an integer >= 1 (example: 3)")
    if not isinstance(sha, str) or not _SHA256.match(sha):
        raise ContractError(f"{where}.sha256={sha!r}: must be 64 lowercase hex digits")
    return VersionRef(version, sha)


def parse_routes(document: Any) -> Routes:
    """Validate a parsed routes document.

    Raises:
        ContractError: naming the field, the rule and an example.
    """
    if not isinstance(document, Mapping):
        raise ContractError("routes: must be a JSON object")
    if document.get("schema_version") != SCHEMA_VERSION:
        raise ContractError(f"routes.schema_version={document.get('schema_version')!r}: must be {SCHEMA_VERSION}")
    model = document.get("model")
    problem = model_name_problem(model, "routes.model")
    if problem:
        raise ContractError(problem)
    revision = document.get("revision")
    if isinstance(revision, bool) or not isinstance(revision, int) or revision < 0:
        raise ContractError(f"routes.revision={revision!r}: must be an integer >= 0 (example: 7)")
    stable = _version(document.get("stable"), "routes.stable")
    canary = None if document.get("canary") is None else _version(document.get("canary"), "routes.canary")
    weight = document.get("canary_weight", 0.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0.0 <= weight <= 1.0:
        raise ContractError(f"routes.canary_weight={weight!r}: must be a number in [0, 1] (example: 0.05)")
    if canary is None and weight != 0:
        raise ContractError(f"routes.canary_weight={weight!r}: must be 0 when canary is null")
    if canary is not None and canary.version == stable.version:
        raise ContractError(f"routes.canary.version={canary.version}: must differ from stable.version")
    updated_at, updated_by = document.get("updated_at", ""), document.get("updated_by", "")
    if not isinstance(updated_at, str) or not isinstance(updated_by, str):
        raise ContractError("routes.updated_at / updated_by: must be strings")
    salt = document.get("canary_salt", "")
    if not isinstance(salt, str) or not _SALT.match(salt):
        raise ContractError(f"routes.canary_salt={salt!r}: must match {_SALT.pattern} (example: 3f2a9c1b7d4e5f60)")
    shadow = _shadow(document.get("shadow"), stable)
    return Routes(str(model), revision, stable, canary, float(weight), updated_at, updated_by, salt, shadow=shadow)


MIN_SHADOW_SHARE = 0.1


def _shadow(raw: Any, stable: VersionRef) -> Shadow | None:
    """The optional ``shadow`` block (absent or null: none)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ContractError('routes.shadow: must be an object or null (example: {"version": 4, "sha256": '
                            '"<64 hex>", "share": 0.5, "top_k": 5})')
    version = _version(raw, "routes.shadow")
    if version.version == stable.version:
        raise ContractError(f"routes.shadow.version={version.version}: must differ from stable.version")
    share, top_k = raw.get("share", 1.0), raw.get("top_k", 5)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not MIN_SHADOW_SHARE <= share <= 1.0:
        raise ContractError(f"routes.shadow.share={share!r}: must be a number in [{MIN_SHADOW_SHARE}, 1] "
                            "(example: 0.5)")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ContractError(f"routes.shadow.top_k={top_k!r}: must be an integer >= 1 (example: 5)")
    return Shadow(version, float(share), top_k)


def routes_to_dict(routes: Routes) -> dict[str, Any]:
    """The JSON-ready document."""
    def ref(v: VersionRef | None) -> dict[str, Any] | None:
        return None if v is None else {"version": v.version, "sha256": v.sha256}

    document = {"schema_version": routes.schema_version, "model": routes.model, "revision": routes.revision,
                "stable": ref(routes.stable), "canary": ref(routes.canary), "canary_weight": routes.canary_weight,
                "updated_at": routes.updated_at, "updated_by": routes.updated_by}
    if routes.canary_salt:
        document["canary_salt"] = routes.canary_salt
    if routes.shadow is not None:  # only then: a document without a shadow stays byte for byte as before
        document["shadow"] = {**(ref(routes.shadow.version) or {}), "share": routes.shadow.share,
                              "top_k": routes.shadow.top_k}
    return document


def serialize_routes(routes: Routes) -> bytes:
    """The document as stored (validated on the way out, so a writer cannot store a bad one)."""
    document = routes_to_dict(routes)
    parse_routes(document)
    return json.dumps(document, indent=2, sort_keys=True).encode()


def load_routes(data: bytes) -> Routes:
    """Parse stored bytes into routes.

    Raises:
        ContractError: not JSON or not a valid routes document.
    """
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise ContractError(f"routes: not valid JSON: {exc}") from exc
    return parse_routes(document)


def user_fraction(user_id: str, salt: str = "") -> float:
    """A stable position of a user in [0, 1): the first 8 bytes of sha256([salt NUL] user_id) over 2**64."""
    data = user_id.encode("utf-8")
    digest = hashlib.sha256(salt.encode("utf-8") + b"\0" + data if salt else data).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def user_hash(user_id: str) -> str:
    """The pseudonymous user id written to the prediction log (sha256 prefix, 16 hex)."""
    return hashlib.sha256(user_id.encode("utf-8")).hexdigest()[:16]


def choose_version(routes: Routes, user_id: str) -> VersionRef:
    """The version that serves ``user_id``: the canary when the user's fraction is under the weight."""
    if routes.canary is not None and routes.canary_weight > 0 \
            and user_fraction(user_id, routes.canary_salt) < routes.canary_weight:
        return routes.canary
    return routes.stable
