"""The canary spec from the ``model_release`` DAG params (``canary_steps`` etc., ``canary_<field>``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from modelops.canary.spec import OPERATIONAL_GATES, CanarySpec, describe
from modelops.errors import ConfigError

#: The DAG params of the main spec fields; :func:`spec_from_params` reads ``canary_<field>`` for the others.
MAIN_PARAMS = {"canary_steps": "steps", "analysis_interval_s": "interval_s", "min_requests": "min_requests",
               "require_approval": "require_approval", "shadow": "shadow", "shadow_share": "shadow_share"}


def parse_steps(text: str) -> tuple[float, ...]:
    """``"1,5,25,50,100"`` (percent) → ``(0.01, 0.05, 0.25, 0.5, 1.0)``."""
    try:
        return tuple(float(part) / 100.0 for part in str(text).replace(" ", "").split(",") if part)
    except ValueError as exc:
        raise ConfigError(f"canary_steps={text!r}: comma-separated percentages (example: 5,25,50,100)") from exc


def extra_param_names() -> dict[str, str]:
    """``canary_<field>`` DAG param → spec field, for every spec field not among the main params."""
    return {f"canary_{name}": name for name in describe() if name not in MAIN_PARAMS.values()}


def spec_from_params(params: Mapping[str, Any], model: Mapping[str, Any] | None = None) -> CanarySpec:
    """The spec from the ``model_release`` params (missing ones take the spec's defaults).

    ``model``: spec fields the released version's model spec declares (``canary:`` in its
    ``modelops.yaml``, e.g. the divergence a retrained model is allowed); each replaces the spec's
    default, and a release param set to another value than its default replaces it in turn.
    """
    raw: dict[str, Any] = {}
    for param, field_name in {**MAIN_PARAMS, **extra_param_names()}.items():
        if param in params and params[param] is not None:
            raw[field_name] = params[param]
    if "steps" in raw:
        raw["steps"] = list(parse_steps(raw["steps"]))
    if model:
        defaults = CanarySpec().to_dict()
        unknown = sorted(set(model) - set(defaults) - {"schema_version"})
        if unknown:
            raise ConfigError(f"model spec canary overrides: unknown field(s) {unknown} (known: {sorted(defaults)})")
        for name, value in model.items():
            if name not in raw or _same(raw[name], defaults[name]):  # a param left at its default
                raw[name] = value
    return CanarySpec.from_dict(raw)


def _same(a: Any, b: Any) -> bool:
    return list(a) == list(b) if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) else bool(a == b)


def with_model_gates(overrides: Mapping[str, Any], actions: Sequence[str]) -> dict[str, Any]:
    """The model spec's canary overrides with the gates its outcomes allow.

    ``actions``: the feedback actions the model takes (:meth:`~modelops.modelspec.spec.Outcomes.accepted_actions`).
    A model whose ``canary:`` names its ``gates`` keeps them; otherwise one whose actions do not
    include every ``ctr_success_actions`` (its own, or the spec's default ``click``) — a labelled model,
    a model with other actions — runs on :data:`~modelops.canary.spec.OPERATIONAL_GATES` alone: its
    action-rate gate would count actions that never come and stay inconclusive forever.
    """
    out = dict(overrides)
    if "gates" in out:
        return out
    success = out.get("ctr_success_actions", CanarySpec().ctr_success_actions)
    if isinstance(success, str) or not set(success) <= set(actions):
        out["gates"] = list(OPERATIONAL_GATES)
    return out
