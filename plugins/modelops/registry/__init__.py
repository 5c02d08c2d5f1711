"""modelops.registry: the MLflow model registry (stages, aliases, lineage tags, release claims).

``lifecycle`` holds the pure rules; ``mlflow_registry`` the adapter (MLflow is imported lazily).
"""

from __future__ import annotations

from modelops.registry.lifecycle import CHALLENGER, CHAMPION, TAG, Lineage, parse_run_uri
from modelops.registry.mlflow_registry import MlflowRegistry, VersionInfo

__all__ = ["CHALLENGER", "CHAMPION", "TAG", "Lineage", "MlflowRegistry", "VersionInfo", "parse_run_uri"]
