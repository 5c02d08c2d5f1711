"""The release lifecycle of a registered model version (pure): stages, aliases, tag names.

Stages and aliases move together:

=============  =================  ==============================================
stage          alias              when
=============  =================  ==============================================
None           —                  registered from a run
Staging        ``challenger``     the contract gate passed
Production     ``champion``       promoted; the previous Production → Archived,
                                  ``challenger`` removed from this version
Archived       —                  replaced, or rolled back (with reason tags)
=============  =================  ==============================================

Tags written by the platform are namespaced ``modelops.*`` (see :data:`TAG`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from modelops.errors import RegistryError

Stage = Literal["None", "Staging", "Production", "Archived"]
STAGES: tuple[Stage, ...] = ("None", "Staging", "Production", "Archived")
CHALLENGER = "challenger"
CHAMPION = "champion"

TAG = {
    "sha256": "modelops.sha256",
    "triton_version": "modelops.triton_version",
    "triton_repository": "modelops.triton_repository",
    "contract_result": "modelops.contract_result",
    "contract_passed": "modelops.contract_passed",
    "data_start": "modelops.data_start",
    "data_end": "modelops.data_end",
    "released_by": "modelops.released_by",
    "release_run_id": "modelops.release_run_id",
    "rollback_reason": "modelops.rollback_reason",
    "rolled_back_at": "modelops.rolled_back_at",
    "promoted_at": "modelops.promoted_at",
}
"""Platform tag keys on model versions."""

_RUN_URI = re.compile(r"^runs:/(?P<run_id>[0-9a-zA-Z]+)/(?P<path>[^\s]+)$")


@dataclass(frozen=True)
class RunUri:
    """A parsed ``runs:/<run_id>/<path>`` URI."""

    run_id: str
    path: str

    def __str__(self) -> str:
        return f"runs:/{self.run_id}/{self.path}"


def parse_run_uri(uri: str) -> RunUri:
    """Parse ``runs:/<run_id>/<path>``; raises :class:`RegistryError` naming the rule."""
    match = _RUN_URI.match(uri.strip())
    if not match:
        raise RegistryError(f"run URI {uri!r}: must look like runs:/<run_id>/<artifact path> "
                            "(example: runs:/0a1b2c3d4e5f/onnx)")
    return RunUri(match["run_id"], match["path"].strip("/"))


@dataclass(frozen=True)
class Lineage:
    """Where a served version comes from; written as version tags."""

    sha256: str | None = None
    triton_version: int | None = None
    triton_repository: str | None = None
    contract_result: str | None = None
    contract_passed: bool | None = None
    data_start: str | None = None
    data_end: str | None = None


def lineage_tags(lineage: Lineage) -> dict[str, str]:
    """Tag key → value for every field of ``lineage`` that is set."""
    tags: dict[str, str] = {}
    names = ("sha256", "triton_version", "triton_repository", "contract_result", "data_start", "data_end")
    for name in names:
        value = getattr(lineage, name)
        if value is not None:
            tags[TAG[name]] = str(value)
    if lineage.contract_passed is not None:
        tags[TAG["contract_passed"]] = "true" if lineage.contract_passed else "false"
    return tags


def alias_for(stage: Stage) -> str | None:
    """The alias a version in ``stage`` carries (None for None/Archived)."""
    return {"Staging": CHALLENGER, "Production": CHAMPION}.get(stage)


def check_transition(current: str, target: Stage) -> None:
    """Refuse transitions the lifecycle does not allow.

    Allowed: None → Staging; Staging → Production; Staging/Production → Archived
    (rollback or replacement); Archived → Staging (a re-release); and staying put.
    """
    allowed = {
        ("None", "Staging"), ("Staging", "Production"), ("Staging", "Archived"),
        ("Production", "Archived"), ("Archived", "Staging"), ("None", "Archived"),
    }
    if current == target or (current, target) in allowed:
        return
    raise RegistryError(f"stage transition {current} -> {target} is not allowed "
                        "(None -> Staging -> Production -> Archived; a rollback archives)")
