"""The canary spec from the ``model_release`` DAG params (``canary_steps`` etc., ``canary_<field>``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from modelops.canary.spec import CanarySpec, describe
from modelops.errors import ConfigError

#: DAG params read by :func:`spec_from_params` besides the four main ones: ``canary_<field>``.
MAIN_PARAMS = {"canary_steps": "steps", "analysis_interval_s": "interval_s", "min_requests": "min_requests",
               "require_approval": "require_approval"}


def parse_steps(text: str) -> tuple[float, ...]:
    """``"1,5,25,50,100"`` (percent) → ``(0.01, 0.05, 0.25, 0.5, 1.0)``."""
    try:
        return tuple(float(part) / 100.0 for part in str(text).replace(" ", "").split(",") if part)
    except ValueError as exc:
        raise ConfigError(f"canary_steps={text!r}: comma-separated percentages (example: 5,25,50,100)") from exc


def extra_param_names() -> dict[str, str]:
    """``canary_<field>`` DAG param → spec field, for every spec field not among the main params."""
    return {f"canary_{name}": name for name in describe() if name not in MAIN_PARAMS.values()}


def spec_from_params(params: Mapping[str, Any]) -> CanarySpec:
    """The spec from the ``model_release`` params (missing ones take the spec's defaults)."""
    raw: dict[str, Any] = {}
    for param, field_name in {**MAIN_PARAMS, **extra_param_names()}.items():
        if param in params and params[param] is not None:
            raw[field_name] = params[param]
    if "steps" in raw:
        raw["steps"] = list(parse_steps(raw["steps"]))
    return CanarySpec.from_dict(raw)
