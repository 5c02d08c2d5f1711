"""What each model version declares it gets back (actions, a label), as the outcome job needs it.

The job reads a version's declaration from its spec (:class:`modelops.modelspec.spec.Outcomes`),
where :mod:`modelops.serving.spec_publish` stores it: ``<repository>/<model>/<version>/model-spec.json``
under the Triton repository prefix, in the object store or a local folder of the same layout. A
version without a spec (the reference recommender) declares the platform's actions
(:data:`modelops.records.ACTIONS`) and no label, as the gateway takes its feedback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from modelops.errors import ContractError
from modelops.modelspec.spec import ModelSpec, Outcomes
from modelops.spark_store import is_store_uri, split_uri

SPEC_NAME = "model-spec.json"
"""The spec's file name beside each Triton version (``modelops.serving.spec_files.SPEC_FILE``)."""

Version = tuple[str, int]


@dataclass(frozen=True)
class Declaration:
    """A version's outcomes as the job counts them."""

    actions: tuple[str, ...]
    kind: str | None = None
    """The label's kind (``binary``, ``multiclass``, ``numeric``); None: no label."""
    classes: tuple[str, ...] = ()

    @classmethod
    def of(cls, outcomes: Outcomes | None) -> Declaration:
        """From a spec's outcomes; None (no spec) declares the platform's actions."""
        declared = outcomes or Outcomes()
        label = declared.label
        return cls(declared.accepted_actions(), label.kind if label else None, label.classes if label else ())


SpecReader = Callable[[str, int], bytes | None]
"""Reads a version's ``model-spec.json`` bytes; None when the version has none."""


def spec_location(repository: str, model: str, version: int) -> str:
    """Where a version's spec lies under the repository root (a folder or ``s3://bucket/prefix``)."""
    return f"{repository.rstrip('/')}/{model}/{version}/{SPEC_NAME}"


def repository_reader(repository: str) -> SpecReader:
    """A :data:`SpecReader` of a Triton repository root: ``s3://bucket/prefix`` or a local folder."""
    if is_store_uri(repository):
        from modelops.objectstore import ObjectStore

        bucket, _ = split_uri(repository)
        store = ObjectStore.from_settings(bucket=bucket)

        def from_store(model: str, version: int) -> bytes | None:
            key = split_uri(spec_location(repository, model, version))[1]
            return store.get_bytes(key) if store.exists(key) else None

        return from_store

    def from_folder(model: str, version: int) -> bytes | None:
        path = Path(spec_location(repository, model, version))
        return path.read_bytes() if path.is_file() else None

    return from_folder


def declarations(versions: Iterable[tuple[str | None, int | None]],
                 reader: SpecReader | None) -> dict[Version, Declaration]:
    """The declaration of each ``(model, version)`` (rows without either are skipped); no reader: none has a spec.

    Raises:
        ContractError: a stored spec is unreadable, naming where it lies.
    """
    out: dict[Version, Declaration] = {}
    for model, version in versions:
        if model is None or version is None:
            continue
        raw = reader(model, version) if reader is not None else None
        try:
            outcomes = ModelSpec.from_json(raw).outcomes if raw is not None else None
        except ContractError as exc:
            raise ContractError(f"spec of {model} v{version}: {exc}") from exc
        out[(model, version)] = Declaration.of(outcomes)
    return out


def fixed(specs: Mapping[Version, ModelSpec]) -> SpecReader:
    """A :data:`SpecReader` of specs in hand (tests, benchmarks)."""
    def read(model: str, version: int) -> bytes | None:
        spec = specs.get((model, version))
        return None if spec is None else spec.to_json().encode()

    return read
