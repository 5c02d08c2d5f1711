"""Feature metadata files (the reference recommender's is ``examples/recommender/features.yaml``): load and validate.

Format: a ``features:`` list of mappings with ``name``,
``dtype``, ``min``, ``max``, ``description``, ``owner``, ``drift_sensitivity`` in
[0, 1] and an optional ``drift_threshold`` in (0, 1].
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from modelops.errors import ContractError

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_DTYPES = {"float64", "float32", "int64", "int32"}


@dataclass(frozen=True)
class Feature:
    name: str
    dtype: str
    min: float
    max: float
    description: str
    owner: str
    drift_sensitivity: float
    drift_threshold: float | None = None


def _feature(index: int, raw: Any) -> Feature:
    where = f"features[{index}]"
    if not isinstance(raw, Mapping):
        raise ContractError(f"{where}: must be a mapping (example: {{name: user_age_days, ...}})")
    for key in ("name", "dtype", "min", "max", "description", "owner", "drift_sensitivity"):
        if key not in raw:
            raise ContractError(f"{where}.{key}: is required (example: {key}: {_EXAMPLES[key]})")
    name = str(raw["name"])
    if not _NAME.match(name):
        raise ContractError(f"{where}.name={name!r}: must match {_NAME.pattern} (example: user_age_days)")
    where = f"features[{index}] ({name})"
    if raw["dtype"] not in _DTYPES:
        raise ContractError(f"{where}.dtype={raw['dtype']!r}: must be one of {sorted(_DTYPES)} (example: float64)")
    try:
        lo, hi = float(raw["min"]), float(raw["max"])
        sensitivity = float(raw["drift_sensitivity"])
        threshold = None if raw.get("drift_threshold") is None else float(raw["drift_threshold"])
    except (TypeError, ValueError) as exc:
        raise ContractError(f"{where}: min, max, drift_sensitivity, drift_threshold must be numbers ({exc})") from exc
    if lo > hi:
        raise ContractError(f"{where}.min={lo} > max={hi}: min must not exceed max (example: min: 0, max: 1)")
    if not 0.0 <= sensitivity <= 1.0:
        raise ContractError(f"{where}.drift_sensitivity={sensitivity}: must be in [0, 1] (example: 0.5)")
    if threshold is not None and not 0.0 < threshold <= 1.0:
        raise ContractError(f"{where}.drift_threshold={threshold}: must be in (0, 1] (example: 0.08)")
    return Feature(name, str(raw["dtype"]), lo, hi, str(raw["description"]), str(raw["owner"]),
                   sensitivity, threshold)


_EXAMPLES = {"name": "user_age_days", "dtype": "float64", "min": "0", "max": "3650",
             "description": "days since signup", "owner": "growth-team", "drift_sensitivity": "0.5"}


def parse_features(document: Any) -> tuple[Feature, ...]:
    """Validate a parsed features document and return its features in order."""
    if not isinstance(document, Mapping) or not isinstance(document.get("features"), list):
        raise ContractError("features: the document must have a 'features:' list (example: features: [{name: ...}])")
    features = tuple(_feature(i, raw) for i, raw in enumerate(document["features"]))
    seen: set[str] = set()
    for f in features:
        if f.name in seen:
            raise ContractError(f"features: name {f.name!r} appears twice; names must be unique")
        seen.add(f.name)
    if not features:
        raise ContractError("features: the list must not be empty")
    return features


def load_features(path: Path | str) -> tuple[Feature, ...]:
    """Load and validate a feature metadata file."""
    try:
        document = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ContractError(f"cannot read feature metadata {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ContractError(f"feature metadata {path} is not valid YAML: {exc}") from exc
    return parse_features(document)


def feature_names(features: tuple[Feature, ...]) -> list[str]:
    return [f.name for f in features]
