"""Load, unload and check one version of a model published from its spec, on one Triton server.

The reference recommender is three Triton models (preprocess, model, ensemble) loaded through
:mod:`modelops.serving.loader`; a model published by :mod:`modelops.serving.spec_publish` is one
Triton model whose versions all run under one config, rendered from a spec
(:func:`modelops.serving.spec_files.served_spec`). A load or unload therefore reloads the model with
the set of versions it should serve afterwards, and checks what Triton reports. The canary (rollback:
unload the candidate; retirement: unload the previous stable) and the release's verification call
these through :mod:`modelops.serving.api`, which tells the two kinds apart by the stored spec.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from modelops.errors import ServingError
from modelops.modelspec.render import config_json
from modelops.modelspec.spec import ModelSpec
from modelops.serving.pbtxt import config_mismatches
from modelops.serving.spec_files import served_spec
from modelops.serving.triton import TritonClient

SETTLE_TIMEOUT_S = 30.0
"""How long Triton may take to report exactly the target versions READY after a load."""


@dataclass(frozen=True)
class Placement:
    """What the servers have: the backend the platform runs ONNX with, and their GPU count."""

    backend: str
    gpus: int


def serve_versions(client: TritonClient, spec: ModelSpec, versions: Sequence[int], placement: Placement) -> None:
    """Make ``client`` serve exactly ``versions`` of ``spec``'s model (none: unload it), config checked.

    Raises:
        ServingError: Triton refused the config, reports another one, or never served exactly ``versions``.
    """
    target = sorted(set(versions))
    if not target:
        if client.ready_versions(spec.name):
            client.unload(spec.name)
        return
    expected = config_json(served_spec(spec, placement.backend, placement.gpus), versions=target)
    client.load(spec.name, expected)
    reported = client.model_config(spec.name, target[-1])
    problems = config_mismatches(expected, {**reported, "version_policy": expected["version_policy"]})
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not problems and client.ready_versions(spec.name) != target:
        if time.monotonic() > deadline:
            problems = [f"Triton serves versions {client.ready_versions(spec.name)}, expected {target}"]
        time.sleep(0.1)
    if problems:
        raise ServingError(f"{spec.name} versions {target} on {client.base_url}: Triton's config after loading "
                           "differs from the spec's:\n  " + "\n  ".join(problems))


def load_beside(client: TritonClient, spec: ModelSpec, version: int, placement: Placement) -> list[int]:
    """Serve ``version`` beside the versions ``client`` serves already; returns the versions served now."""
    target = sorted(set(client.ready_versions(spec.name)) | {version})
    serve_versions(client, spec, target, placement)
    return target


def unload_one(client: TritonClient, model: str, version: int, spec_of: Callable[[int], ModelSpec],
               placement: Placement) -> list[int]:
    """Stop serving ``version`` on ``client`` (idempotent); returns the versions still served.

    The versions left run under the config of the newest of them (``spec_of(version)`` reads a
    version's stored spec), as the publish and the reconciler render it.
    """
    served = client.ready_versions(model)
    if version not in served:
        return served
    left = [v for v in served if v != version]
    serve_versions(client, spec_of(max(left) if left else version), left, placement)
    return left


def check_served(client: TritonClient, spec: ModelSpec, version: int, placement: Placement) -> None:
    """``client`` serves ``version`` READY with the config rendered from ``spec``.

    Raises:
        ServingError: not served, or served with another config (named).
    """
    if not client.is_model_ready(spec.name, version):
        raise ServingError(f"{spec.name} version {version} is not READY on {client.base_url}")
    served = client.ready_versions(spec.name)
    expected = config_json(served_spec(spec, placement.backend, placement.gpus), versions=served)
    reported = client.model_config(spec.name, version)
    problems = config_mismatches(expected, {**reported, "version_policy": expected["version_policy"]})
    if problems:
        raise ServingError(f"{spec.name} version {version} on {client.base_url}: Triton's config differs from the "
                           "spec's:\n  " + "\n  ".join(problems))
