"""The release steps of a model published from its spec: any MLflow model other than the reference pipeline.

``model_release`` tells the two kinds apart when it resolves the candidate (:func:`kind_of`): a run
that logged the platform's reference layout (``onnx/preprocess.onnx`` beside ``onnx/model.onnx``)
is published as the recommender's three-model pipeline; every other registered version is published
from its **model spec**, derived from the MLflow model itself (flavor, signature, input example) plus
the registered model's ``modelops.*`` tags and a logged ``modelops.yaml``:

* contract gate: the model's **own** suite (:func:`modelops.contracts.suites.spec_suite`, rendered from
  the spec: each column exists, has its type, lies in its declared range, is not null) over its
  evaluation sample (a table the run logged under ``eval/``, else the input example);
* publish: :func:`modelops.serving.spec_publish.publish_model` (conversion with its parity check, the
  sha256 → integer version, verified upload, load, Triton's answers compared with the framework's own);
* verify: every Triton server serves the version READY with the config rendered from the stored spec.

The canary, approval, promotion and retirement are the same for both kinds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelops.errors import ContractError, GateFailed

PIPELINE = "pipeline"
SPEC = "spec"
PIPELINE_MARKER = "onnx/preprocess.onnx"
"""The artifact that marks a run logged in the reference recommender's layout."""


def kind_of(registry: Any, run_id: str) -> str:
    """``pipeline`` for a run in the reference layout, ``spec`` for any other MLflow model."""
    return PIPELINE if run_id and registry.has_artifact(run_id, PIPELINE_MARKER) else SPEC


@dataclass(frozen=True)
class GateInput:
    """What the contract gate validates: the evaluation frame (None: a model of tensors, no columns) and its suite."""

    frame: Any
    suite: Any
    source: str
    title: str


def gate_input(registry: Any, model: str, version: str, run_id: str, into: Path) -> GateInput:
    """The spec-published model's evaluation sample and the suite rendered from its spec.

    Raises:
        GateFailed: the model cannot be described (no signature, a malformed override) or has no
            evaluation data; the message says what to log.
    """
    import pandas as pd

    from modelops.contracts.suites import spec_suite
    from modelops.modelspec.derive import TAG_PREFIX
    from modelops.serving.mlflow_models import model_spec
    from modelops.serving.prepared import evaluation_data
    from modelops.serving.spec_publish import eval_table

    model_dir = registry.download_model(model, version, into / "model")
    overrides = {k: v for k, v in registry.model_tags(model).items() if k.startswith(TAG_PREFIX)}
    try:
        spec = model_spec(model_dir, model, overrides=overrides)
        table = eval_table(registry, run_id, into) if run_id else None
        raw, source = evaluation_data(model_dir, model, table)
    except ContractError as exc:
        registry.set_tags(model, version, {"modelops.contract_result": f"refused: {exc}"[:250],
                                           "modelops.contract_passed": "false"})
        raise GateFailed(f"{model}/{version}: {exc}") from exc
    title = f"Feature contract of its model spec: {model} v{version} ({source})"
    if not spec.features:  # a model of tensors: its shapes and dtypes are checked when Triton answers the sample
        return GateInput(None, None, source, title)
    try:
        frame = raw if isinstance(raw, pd.DataFrame) else pd.DataFrame(raw)
    except ValueError as exc:  # tensors of several dimensions are not a table of the spec's columns
        raise GateFailed(f"{model}/{version}: the evaluation data ({source}) is not a table of the model's columns "
                         f"{[f.name for f in spec.features][:5]}: {exc}") from exc
    return GateInput(frame, spec_suite(spec), source, title)


def publish(candidate: Mapping[str, str]) -> dict[str, Any]:
    """Publish the version from its spec; the same keys as the pipeline's publish result, plus the spec's."""
    from modelops.config import settings
    from modelops.registry.mlflow_registry import MlflowRegistry
    from modelops.serving.spec_publish import publish_model, store_uri

    try:
        result = publish_model(candidate["model"], candidate["version"])
    except ContractError as exc:  # refused before Triton: the same refusal on every retry
        MlflowRegistry.from_settings().set_tags(candidate["model"], candidate["version"],
                                                {"modelops.publish_result": f"refused: {exc}"[:250]})
        raise GateFailed(f"{candidate['model']}/{candidate['version']}: {exc}") from exc

    return {"model": result.model, "triton_version": result.triton_version, "sha256": result.sha256,
            "uploaded": result.uploaded, "loaded": True, "repository_uri": store_uri(settings()),
            "mlflow_version": candidate["version"], "kind": SPEC, "spec_uri": result.spec_uri,
            "max_abs_diff": result.max_abs_diff, "timings_s": dict(result.timings_s),
            "served_as": result.served_as, "verified_by": result.verified_by, "notes": list(result.notes)}


def verify(published: Mapping[str, Any]) -> dict[str, Any]:
    """Every server serves the version with its spec's config (its answers were checked at publish)."""
    from modelops.serving.api import verify_served

    verify_served(str(published["model"]), int(published["triton_version"]))
    return {"model": published["model"], "version": int(published["triton_version"]), "rows": 0,
            "max_abs_diff": published.get("max_abs_diff")}
