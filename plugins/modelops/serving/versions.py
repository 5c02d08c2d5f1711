"""The sha256 → integer Triton version mapping (pure).

Triton only loads numerically named version folders; the sha256 of the model file
is the identity of a version. :class:`VersionIndex` maps each distinct sha256 to one
integer, assigned as ``max + 1`` the first time the sha256 is seen, and the same
sha256 always maps to the same integer. The index is stored as JSON
(``triton/<NAME>/index.json``, see :mod:`modelops.serving.index_store`); this module
only holds the data and the rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from modelops.errors import ServingError

INDEX_SCHEMA_VERSION = 1
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def check_sha256(sha256: str) -> str:
    """Return ``sha256`` if it is 64 lowercase hex digits, else raise :class:`ServingError`."""
    if not _SHA256.match(sha256):
        raise ServingError(f"sha256={sha256!r}: must be 64 lowercase hex digits (example: {'ab' * 32})")
    return sha256


@dataclass(frozen=True)
class VersionIndex:
    """The mapping of one Triton model name: sha256 → integer version.

    Attributes:
        model: the Triton model (ensemble) name.
        versions: sha256 → integer version; read-only.
    """

    model: str
    versions: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        seen: dict[int, str] = {}
        for sha, number in self.versions.items():
            check_sha256(sha)
            if not isinstance(number, int) or isinstance(number, bool) or number < 1:
                raise ServingError(
                    f"index of {self.model}: version {number!r} of {sha} must be an integer >= 1"
                )
            if number in seen:
                raise ServingError(
                    f"index of {self.model}: version {number} is given to both {seen[number]} and {sha}"
                )
            seen[number] = sha
        object.__setattr__(self, "versions", MappingProxyType(dict(self.versions)))

    @property
    def latest(self) -> int:
        """The highest integer assigned so far (0 when empty)."""
        return max(self.versions.values(), default=0)

    def version_of(self, sha256: str) -> int | None:
        """The integer of ``sha256``, or None when it was never assigned."""
        return self.versions.get(sha256)

    def sha256_of(self, version: int) -> str | None:
        """The sha256 that owns ``version``, or None."""
        for sha, number in self.versions.items():
            if number == version:
                return sha
        return None

    def to_json(self) -> str:
        """Serialise (sorted by version, stable output)."""
        ordered = dict(sorted(self.versions.items(), key=lambda item: item[1]))
        doc = {"schema_version": INDEX_SCHEMA_VERSION, "model": self.model, "versions": ordered}
        return json.dumps(doc, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, *, model: str) -> VersionIndex:
        """Parse an index document; raises :class:`ServingError` naming the problem."""
        try:
            doc: Any = json.loads(text)
        except ValueError as exc:
            raise ServingError(f"index of {model}: not valid JSON ({exc})") from exc
        if not isinstance(doc, dict) or doc.get("schema_version") != INDEX_SCHEMA_VERSION:
            raise ServingError(f"index of {model}: schema_version must be {INDEX_SCHEMA_VERSION}")
        if doc.get("model") != model:
            raise ServingError(f"index of {model}: model is {doc.get('model')!r}, expected {model!r}")
        versions = doc.get("versions")
        if not isinstance(versions, dict):
            raise ServingError(f"index of {model}: versions must be a mapping sha256 -> int")
        return cls(model, versions)


def assign_version(index: VersionIndex, sha256: str) -> tuple[VersionIndex, int, bool]:
    """Give ``sha256`` its integer version.

    Args:
        index: the current mapping.
        sha256: the identity of the model file.

    Returns:
        ``(new_index, version, created)``: the same index and the existing integer when
        ``sha256`` is known (``created`` False), otherwise an index with ``latest + 1``
        added (``created`` True).
    """
    check_sha256(sha256)
    known = index.version_of(sha256)
    if known is not None:
        return index, known, False
    number = index.latest + 1
    return VersionIndex(index.model, {**index.versions, sha256: number}), number, True
