"""The reconciler's step for a model published from its spec: one Triton model, not the recommender's pipeline.

:class:`modelops.serving.reconcile.Reconciler` keeps the reference recommender's three models
(preprocess, model, ensemble) in line with the routes; a model published by
:mod:`modelops.serving.spec_publish` is a single Triton model whose every version runs under one
config, rendered from the spec of its newest routed version (as the publish loads it). Without this
step the reconciler would reload such a model with the recommender's ensemble config (seen: Triton
then refused the model's own outputs).

:func:`spec_plan` says what one server should serve: exactly ``routed`` plus the ``kept`` versions it
serves already (holds and the rollback grace), with the rendered config; :func:`spec_step` carries
it out, mirroring missing versions into the server's local repository first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelops.errors import ContractError
from modelops.modelspec.render import config_json
from modelops.modelspec.spec import ModelSpec
from modelops.objectstore import ObjectStore
from modelops.serving.pbtxt import config_mismatches
from modelops.serving.repository import REPOSITORY_PREFIX, mirror_release
from modelops.serving.spec_files import SPEC_FILE, served_spec
from modelops.serving.triton import TritonClient


@dataclass(frozen=True)
class SpecStep:
    """What :func:`spec_step` found and did on one server."""

    changed: bool
    target: tuple[int, ...]
    loaded: tuple[int, ...]
    unloaded: tuple[int, ...]


def spec_key(model: str, version: int) -> str:
    """The object key of a spec-published version's ``model-spec.json``."""
    return f"{REPOSITORY_PREFIX}{model}/{version}/{SPEC_FILE}"


def read_spec(store: ObjectStore, model: str, version: int) -> ModelSpec | None:
    """The stored spec of a version, or None for a version published without one (the recommender's).

    Raises:
        ContractError: the stored spec is unreadable (the model is left as it is).
    """
    key = spec_key(model, version)
    if not store.exists(key):
        return None
    try:
        return ModelSpec.from_json(store.get_bytes(key))
    except ContractError as exc:
        raise ContractError(f"{key}: {exc}") from exc


@dataclass(frozen=True)
class SpecPlan:
    """What one server should serve of a spec model, and whether it does (:func:`spec_plan`)."""

    served: tuple[int, ...]
    target: tuple[int, ...]
    config: dict[str, Any]
    in_sync: bool


def spec_plan(client: TritonClient, spec: ModelSpec, server_backend: str, routed: frozenset[int],
              kept: frozenset[int], server_gpus: int = 0) -> SpecPlan:
    """``routed`` plus the ``kept`` versions the server serves already, under the config rendered from ``spec``."""
    served = client.ready_versions(spec.name)
    target = sorted(routed | (kept & set(served)))
    expected = config_json(served_spec(spec, server_backend, server_gpus), versions=target)
    config_ok = not served or not config_mismatches(
        expected, {**client.model_config(spec.name, max(served)), "version_policy": expected["version_policy"]})
    return SpecPlan(tuple(served), tuple(target), expected, served == target and config_ok)


def spec_step(client: TritonClient, store: ObjectStore, repository: Path | None, spec: ModelSpec, plan: SpecPlan
              ) -> SpecStep:
    """Carry out ``plan`` on one server: mirror the versions it lacks, then load with the rendered config."""
    if plan.in_sync:
        return SpecStep(False, plan.target, (), ())
    missing = sorted(set(plan.target) - set(plan.served))
    if repository is not None:
        for version in missing:
            mirror_release(store, spec.name, version, repository)
    client.load(spec.name, plan.config)
    return SpecStep(True, plan.target, tuple(missing), tuple(sorted(set(plan.served) - set(plan.target))))
