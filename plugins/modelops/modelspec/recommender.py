"""The reference recommender declared as a :class:`~modelops.modelspec.spec.ModelSpec`.

The recommender is one model declared like any other: its declaration lives in
``examples/recommender/`` (no file of it is a global of the platform): ``features.yaml`` (its 128
feature columns with their metadata) and ``features.custom.json`` (hand-written expectations added to
its contract gate's suite). Its request JSON Schema is rendered from this spec
(:func:`modelops.modelspec.render.edge_contract`), as every model's is.

Its features are those of ``features.yaml`` (128 float columns, looked up by the
gateway and sent to the model as one FP32 vector ``features``), its output one FP32 ``score``; the
request form is ``feature-lookup`` (``user_id``, ``item_ids``, ``timestamp``) with ``user_id`` as the
sticky routing key; its outcomes are the feedback actions click, purchase and skip. The tuning is
:class:`modelops.serving.pbtxt.Tuning`'s defaults. Rendering it reproduces today's contracts (see
``tests/unit/test_modelspec_recommender.py``).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from modelops.config import PROJECT_ROOT
from modelops.features import Feature as FeatureMetadata
from modelops.features import load_features
from modelops.modelspec.render import edge_contract
from modelops.modelspec.spec import Feature, ModelSpec, Outcomes, Request, Tensor, Tuning
from modelops.records import ACTIONS

DECLARATION_DIR = PROJECT_ROOT / "examples" / "recommender"
FEATURES_FILE = DECLARATION_DIR / "features.yaml"
"""The recommender's features and their metadata (range, owner, drift sensitivity)."""
CUSTOM_EXPECTATIONS_FILE = DECLARATION_DIR / "features.custom.json"
"""Hand-written expectations merged into the recommender's feature suite (GX format)."""
ROUTING_KEY = "user_id"
MAX_ITEMS = 50
NOT_NULL_MOSTLY = 0.99
"""As :data:`modelops.contracts.suites.FEATURE_NOT_NULL_MOSTLY` (cold-start NaNs are legitimate)."""
_DTYPES = {"float64": "FP64", "float32": "FP32", "int64": "INT64", "int32": "INT32"}


@cache
def recommender_features() -> tuple[FeatureMetadata, ...]:
    """The recommender's feature metadata (:data:`FEATURES_FILE`), read once."""
    return load_features(FEATURES_FILE)


def recommender_feature_names() -> tuple[str, ...]:
    """The recommender's model input columns, in order."""
    return tuple(f.name for f in recommender_features())


def recommender_contract(name: str = "recommender") -> dict[str, Any]:
    """The recommender's request JSON Schema, rendered from its spec."""
    return edge_contract(recommender_spec(name))


def recommender_spec(name: str = "recommender") -> ModelSpec:
    """The recommender's spec, its features those of :data:`FEATURES_FILE`."""
    features = recommender_features()
    return ModelSpec(
        name=name,
        flavor="onnx",
        inputs=(Tensor(name="features", dtype="FP32", shape=(-1, len(features))),),
        outputs=(Tensor(name="score", dtype="FP32", shape=(-1, 1)),),
        request=Request(form="feature-lookup", max_items=MAX_ITEMS),
        features=tuple(
            Feature(name=f.name, dtype=_DTYPES[f.dtype], min=f.min, max=f.max, description=f.description,
                    owner=f.owner, drift_sensitivity=f.drift_sensitivity, drift_threshold=f.drift_threshold,
                    not_null_mostly=NOT_NULL_MOSTLY)
            for f in features
        ),
        tuning=Tuning(),
        routing_key=ROUTING_KEY,
        outcomes=Outcomes(actions=ACTIONS),
    )
