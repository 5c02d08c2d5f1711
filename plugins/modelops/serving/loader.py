"""Load, unload and check versions of the pipeline on Triton (explicit model control).

Triton keeps one config per model, so "serve version N too" is a reload of each of the
three models with ``version_policy: specific`` listing every version to serve (the
``config`` override of the load API). After loading, the config Triton reports must
match what was rendered, and version N of all three must be READY; otherwise the
previous version sets are loaded back, so the version already serving keeps serving.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from modelops.errors import ServingError
from modelops.serving.pbtxt import ROLES, ModelConfigSpec, Role, config_json, config_mismatches
from modelops.serving.triton import TritonClient

SETTLE_TIMEOUT_S = 30.0
"""How long Triton may take to finish unloading versions dropped by a reload (it does so after answering)."""


def _apply(client: TritonClient, specs: Mapping[Role, ModelConfigSpec], versions: Sequence[int],
           order: Sequence[Role], *, parallel: bool) -> None:
    """Reload the three models so that each serves exactly ``versions``.

    Loading in parallel is safe because the pipeline calls its steps only at inference time
    (not in ``initialize``); Triton then starts the python stubs concurrently (~1/3 of the
    time). Dropping a version goes in ``order`` (pipeline first), so no request reaches a
    pipeline version whose steps are already gone.
    """
    if not parallel:
        for role in order:
            _apply_one(client, specs[role].with_versions(versions))
        return
    with ThreadPoolExecutor(max_workers=len(order)) as pool:
        futures = [pool.submit(_apply_one, client, specs[role].with_versions(versions)) for role in order]
    errors = [str(f.exception()) for f in futures if f.exception() is not None]
    if errors:
        raise ServingError("; ".join(errors))


def _apply_one(client: TritonClient, spec: ModelConfigSpec) -> None:
    expected = config_json(spec)
    client.load(spec.name, expected)
    # A version kept across a reload whose files did not change keeps its old config object, so
    # version_policy is checked by what Triton serves, every other field by the newest version's config.
    reported = client.model_config(spec.name, max(spec.versions))
    problems = config_mismatches(expected, {**reported, "version_policy": expected["version_policy"]})
    if problems:
        raise ServingError(f"{spec.name}: Triton's config after loading differs from the rendered "
                           "one:\n  " + "\n  ".join(problems))
    _wait_served(client, spec.name, list(spec.versions))


def _wait_served(client: TritonClient, name: str, versions: list[int]) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        served = client.ready_versions(name)
        if served == versions:
            return
        if time.monotonic() > deadline:
            raise ServingError(f"{name}: Triton serves versions {served}, expected exactly {versions}")
        time.sleep(0.1)


def _restore(client: TritonClient, specs: Mapping[Role, ModelConfigSpec],
             previous: Mapping[Role, list[int]]) -> list[str]:
    errors = []
    for role in ROLES:
        name = specs[role].name
        try:
            if previous[role]:
                client.load(name, config_json(specs[role].with_versions(previous[role])))
            elif client.ready_versions(name):
                client.unload(name)
        except ServingError as exc:
            errors.append(str(exc))
    return errors


def load_version(client: TritonClient, specs: Mapping[Role, ModelConfigSpec], version: int) -> list[int]:
    """Serve ``version`` beside the versions already served; returns the pipeline's versions now.

    Raises:
        ServingError: loading failed or Triton's config differs from the rendered one; the
            previously served versions were loaded back (the message says if that failed too).
    """
    pipeline = specs["ensemble"].name
    previous = {role: client.ready_versions(specs[role].name) for role in ROLES}
    target = sorted(set(previous["ensemble"]) | {version})
    try:
        _apply(client, specs, target, ROLES, parallel=True)
        not_ready = [specs[r].name for r in ROLES if not client.is_model_ready(specs[r].name, version)]
        if not_ready:
            raise ServingError(f"version {version} not READY after loading: {', '.join(not_ready)}")
    except ServingError as exc:
        restore_errors = _restore(client, specs, previous)
        if restore_errors:
            note = "; restoring the previous versions failed too: " + "; ".join(restore_errors)
        else:
            note = f"; still serving {pipeline} versions {previous['ensemble'] or 'none'}"
        raise ServingError(f"loading {pipeline} version {version} failed: {exc}{note}") from exc
    return target


def unload_version(client: TritonClient, specs: Mapping[Role, ModelConfigSpec], version: int) -> list[int]:
    """Stop serving ``version``; the others keep serving. Idempotent. Returns the versions left."""
    remaining = [v for v in client.ready_versions(specs["ensemble"].name) if v != version]
    if remaining:
        _apply(client, specs, remaining, tuple(reversed(ROLES)), parallel=False)
        return remaining
    for role in reversed(ROLES):
        if client.ready_versions(specs[role].name):
            client.unload(specs[role].name)
    return []


def serve_exactly(client: TritonClient, specs: Mapping[Role, ModelConfigSpec], versions: Sequence[int]) -> list[int]:
    """Make the three models serve exactly ``versions`` with the rendered config (none: unload them).

    Adding versions reloads the three models in parallel; dropping one goes pipeline first.
    Raises:
        ServingError: a load failed or Triton's config differs from the rendered one.
    """
    target = sorted(set(versions))
    if not target:
        for role in reversed(ROLES):
            if client.ready_versions(specs[role].name):
                client.unload(specs[role].name)
        return []
    current = set(client.ready_versions(specs["ensemble"].name))
    if current - set(target):
        _apply(client, specs, target, tuple(reversed(ROLES)), parallel=False)
    else:
        _apply(client, specs, target, ROLES, parallel=True)
    return target


@dataclass(frozen=True)
class ServedCheck:
    """The outcome of :func:`verify_served`."""

    model: str
    version: int
    rows: int
    max_abs_diff: float | None


def verify_served(client: TritonClient, model: str, version: int, *, expected_fn: object = None,
                  rows: int = 8, n_features: int = 128, attempts: int = 3, seed: int = 0) -> ServedCheck:
    """Check that ``model`` version ``version`` answers the contract: ``features`` → ``score`` [rows, 1].

    Args:
        client: the Triton client.
        model: the pipeline name.
        version: the version to call (explicitly).
        expected_fn: optional callable features → expected scores (e.g. onnxruntime on the
            published artifacts); the served scores must match it to 1e-4.
        rows / n_features: size of the random request.
        attempts: tries, so a variant that fails a share of requests on purpose still verifies.
        seed: random seed of the request.

    Raises:
        ServingError: not ready, wrong shape, non-finite scores or different from ``expected_fn``.
    """
    if not client.is_model_ready(model, version):
        raise ServingError(f"{model} version {version} is not ready")
    features = np.random.default_rng(seed).normal(size=(rows, n_features)).astype(np.float32)
    last: ServingError | None = None
    for _ in range(attempts):
        try:
            score = client.infer(model, version, {"features": features}, ("score",))["score"]
            break
        except ServingError as exc:
            last = exc
    else:
        raise ServingError(f"{model} version {version} failed {attempts} inference attempts: {last}")
    if score.shape != (rows, 1) or not np.all(np.isfinite(score)):
        raise ServingError(
            f"{model} version {version}: score shape {score.shape} (want ({rows}, 1)) or not finite"
        )
    diff = None
    if callable(expected_fn):
        want = np.asarray(expected_fn(features), dtype=np.float32).reshape(rows, 1)
        diff = float(np.max(np.abs(want - score)))
        if diff > 1e-4:
            raise ServingError(f"{model} version {version}: served scores differ from the published "
                               f"artifacts by {diff:.3g}: another model is being served")
    return ServedCheck(model, version, rows, diff)
