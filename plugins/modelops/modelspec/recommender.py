"""The reference recommender declared as a :class:`~modelops.modelspec.spec.ModelSpec`.

Its features are those of ``expectations/features.yaml`` (128 float columns, looked up by the
gateway and sent to the model as one FP32 vector ``features``), its output one FP32 ``score``; the
request form is ``feature-lookup`` (``user_id``, ``item_ids``, ``timestamp``) with ``user_id`` as the
sticky routing key; its outcomes are the feedback actions click, purchase and skip. The tuning is
:class:`modelops.serving.pbtxt.Tuning`'s defaults. Rendering it reproduces today's contracts (see
``tests/unit/test_modelspec_recommender.py``).
"""

from __future__ import annotations

from pathlib import Path

from modelops.features import DEFAULT_FEATURES_FILE, load_features
from modelops.modelspec.spec import Feature, ModelSpec, Outcomes, Request, Tensor, Tuning
from modelops.records import ACTIONS

ROUTING_KEY = "user_id"
MAX_ITEMS = 50
NOT_NULL_MOSTLY = 0.99
"""As :data:`modelops.contracts.suites.FEATURE_NOT_NULL_MOSTLY` (cold-start NaNs are legitimate)."""
_DTYPES = {"float64": "FP64", "float32": "FP32", "int64": "INT64", "int32": "INT32"}


def recommender_spec(name: str = "recommender", features_file: Path | str = DEFAULT_FEATURES_FILE) -> ModelSpec:
    """The recommender's spec, its features read from ``features_file``."""
    features = load_features(features_file)
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
