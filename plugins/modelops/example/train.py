"""Train the reference click model and export it as two ONNX graphs (preprocess → model).

The sklearn pipeline is ``SimpleImputer(mean) → clip(min, max) → StandardScaler →
classifier`` (an ``MLPClassifier``, or ``LogisticRegression`` when ``hidden`` is empty).
Everything before the classifier is the model's own numeric preprocessing; it is
exported separately so the serving side runs it as the first step of an ensemble:

* ``preprocess.onnx``: ``features`` float32 [-1, 128] → ``scaled`` float32 [-1, 128]
  (NaN → train mean, clip to the metadata min/max, standard scale).
* ``model.onnx``: ``scaled`` float32 [-1, 128] → ``score`` float32 [-1, 1], the click probability.

Faulty variants for canary tests: ``faulty-errors``, ``slow`` and ``permuted`` (each request's
scores returned in reverse item order: a silently different model) only change
``variant.json`` (the served python model applies them); ``collapsed`` changes the
weights themselves (zero output weights, bias = logit of the base rate), so every
score is the same constant.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from modelops.example import synthetic
from modelops.example.tables import FeatureLookup
from modelops.features import Feature
from modelops.modelspec.recommender import FEATURES_FILE, recommender_features

VARIANTS: tuple[str, ...] = ("good", "faulty-errors", "collapsed", "slow", "permuted")
DEFAULT_ERROR_RATE = 0.05
DEFAULT_SLOWDOWN = 3.0
ONNX_OPSET = 17
ONNX_IR_VERSION = 8  # readable by the onnxruntime of older Triton releases too
EVAL_SAMPLE_ROWS = 3000


@dataclass(frozen=True)
class TrainSpec:
    """What to train: world, model shape and variant."""

    world: synthetic.WorldSpec = field(default_factory=synthetic.WorldSpec)
    hidden: tuple[int, ...] = (32,)
    max_iter: int = 60
    holdout_share: float = 0.2
    variant: str = "good"
    error_rate: float = DEFAULT_ERROR_RATE
    slowdown: float = DEFAULT_SLOWDOWN

    def variant_document(self) -> dict[str, Any]:
        """The content of ``variant.json``."""
        if self.variant == "faulty-errors":
            return {"variant": self.variant, "error_rate": self.error_rate}
        if self.variant == "slow":
            return {"variant": self.variant, "slowdown": self.slowdown}
        return {"variant": self.variant}


@dataclass(frozen=True)
class TrainedModel:
    """A trained model and everything needed to log it (no I/O has happened yet)."""

    spec: TrainSpec
    pipeline: Any  # sklearn Pipeline
    feature_names: tuple[str, ...]
    preprocess_onnx: bytes
    model_onnx: bytes
    variant_json: bytes
    metrics: Mapping[str, float]
    eval_sample: pd.DataFrame  # the 128 feature columns + score
    input_example: pd.DataFrame
    data_start: datetime
    data_end: datetime
    features_sha256: str

    @property
    def onnx_sha256(self) -> dict[str, str]:
        return {
            "preprocess": hashlib.sha256(self.preprocess_onnx).hexdigest(),
            "model": hashlib.sha256(self.model_onnx).hexdigest(),
        }


def build_dataset(
    features: Sequence[Feature], world: synthetic.WorldSpec
) -> tuple[NDArray[Any], NDArray[Any], NDArray[Any]]:
    """``(X float32 [n,128], y int8 [n], timestamps int64 [n])`` of one impression per requested item."""
    users, items = synthetic.generate_tables(features, world)
    pairs = synthetic.explode_requests(synthetic.generate_requests(world))
    names = [f.name for f in features]
    x = FeatureLookup.from_frames(users, items, names).matrix(
        pairs["user_id"].to_numpy(), pairs["item_id"].to_numpy()
    )
    y = synthetic.draw_clicks(synthetic.true_click_probability(x, names), world.seed)
    return x, y, pairs["timestamp"].to_numpy(dtype=np.int64)


def build_pipeline(features: Sequence[Feature], hidden: Sequence[int], *, seed: int, max_iter: int) -> Any:
    """The unfitted sklearn pipeline (impute → clip → scale → classifier)."""
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import FunctionTransformer, StandardScaler

    lo = np.array([f.min for f in features], dtype=np.float32)
    hi = np.array([f.max for f in features], dtype=np.float32)
    classifier = (
        MLPClassifier(
            hidden_layer_sizes=tuple(hidden),
            max_iter=max_iter,
            early_stopping=True,
            random_state=seed,
            alpha=1e-4,
            batch_size=256,
        )
        if hidden
        else LogisticRegression(max_iter=max_iter * 5, random_state=seed)
    )
    return Pipeline(
        [
            ("impute", SimpleImputer(strategy="mean", keep_empty_features=True)),
            ("clip", FunctionTransformer(np.clip, kw_args={"a_min": lo, "a_max": hi})),
            ("scale", StandardScaler()),
            ("classifier", classifier),
        ]
    )


def collapse(classifier: Any, base_rate: float) -> None:
    """Make ``classifier`` output the constant ``base_rate`` (zero output weights, bias = its logit)."""
    bias = float(np.log(base_rate / (1.0 - base_rate)))
    if hasattr(classifier, "coefs_"):
        classifier.coefs_[-1][:] = 0.0
        classifier.intercepts_[-1][:] = bias
    else:
        classifier.coef_[:] = 0.0
        classifier.intercept_[:] = bias


def preprocess_onnx(pipeline: Any, n_features: int) -> bytes:
    """``features`` → ``scaled`` built from the fitted impute, clip and scale steps."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    mean = pipeline.named_steps["impute"].statistics_.astype(np.float32)
    clip_kw = pipeline.named_steps["clip"].kw_args
    scaler = pipeline.named_steps["scale"]
    constants = {
        "impute_mean": mean,
        "clip_min": np.asarray(clip_kw["a_min"], dtype=np.float32),
        "clip_max": np.asarray(clip_kw["a_max"], dtype=np.float32),
        "scale_mean": scaler.mean_.astype(np.float32),
        "scale_scale": scaler.scale_.astype(np.float32),
    }
    nodes = [
        helper.make_node("IsNaN", ["features"], ["is_nan"]),
        helper.make_node("Where", ["is_nan", "impute_mean", "features"], ["imputed"]),
        helper.make_node("Min", ["imputed", "clip_max"], ["clipped_hi"]),
        helper.make_node("Max", ["clipped_hi", "clip_min"], ["clipped"]),
        helper.make_node("Sub", ["clipped", "scale_mean"], ["centred"]),
        helper.make_node("Div", ["centred", "scale_scale"], ["scaled"]),
    ]
    graph = helper.make_graph(
        nodes,
        "preprocess",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [None, n_features])],
        [helper.make_tensor_value_info("scaled", TensorProto.FLOAT, [None, n_features])],
        initializer=[numpy_helper.from_array(v, name=k) for k, v in constants.items()],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", ONNX_OPSET)], producer_name="modelops.example"
    )
    model.ir_version = ONNX_IR_VERSION
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def classifier_onnx(classifier: Any, n_features: int) -> bytes:
    """``scaled`` → ``score`` [-1, 1]: skl2onnx's graph, cut down to the positive-class probability."""
    import onnx
    from onnx import TensorProto, helper
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType

    converted = convert_sklearn(
        classifier,
        initial_types=[("scaled", FloatTensorType([None, n_features]))],
        options={id(classifier): {"zipmap": False}},
        target_opset={"": ONNX_OPSET, "ai.onnx.ml": 3},
    )
    probabilities = next(o.name for o in converted.graph.output if o.name != "label")
    graph = converted.graph
    graph.initializer.extend(
        [
            onnx.numpy_helper.from_array(np.array([1], dtype=np.int64), "score_start"),
            onnx.numpy_helper.from_array(np.array([2], dtype=np.int64), "score_end"),
            onnx.numpy_helper.from_array(np.array([1], dtype=np.int64), "score_axis"),
        ]
    )
    graph.node.append(
        helper.make_node("Slice", [probabilities, "score_start", "score_end", "score_axis"], ["score"])
    )
    graph.output.append(helper.make_tensor_value_info("score", TensorProto.FLOAT, [None, 1]))
    converted.ir_version = ONNX_IR_VERSION
    # Keep only what computes `score` (drops the label branch and its ai.onnx.ml ops).
    model = onnx.utils.Extractor(converted).extract_model(["scaled"], ["score"])
    model.ir_version = ONNX_IR_VERSION
    versions: dict[str, int] = {}
    for opset in model.opset_import:  # the extractor can repeat a domain
        versions[opset.domain] = max(versions.get(opset.domain, 0), opset.version)
    del model.opset_import[:]
    model.opset_import.extend([helper.make_opsetid(d, v) for d, v in sorted(versions.items())])
    model.producer_name = "modelops.example"
    model.graph.name = "model"  # skl2onnx/extractor names carry random ids: keep the bytes reproducible
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def _logloss(y: NDArray[Any], p: NDArray[Any]) -> float:
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def evaluate(y: NDArray[Any], p: NDArray[Any]) -> dict[str, float]:
    """AUC, log loss, mean score and base rate of a holdout."""
    from sklearn.metrics import roc_auc_score

    auc = float(roc_auc_score(y, p)) if len(np.unique(y)) == 2 else float("nan")
    return {
        "auc": auc,
        "logloss": _logloss(y, p),
        "score_mean": float(np.mean(p)),
        "base_rate": float(np.mean(y)),
        "score_std": float(np.std(p)),
    }


def train(spec: TrainSpec, features: Sequence[Feature] | None = None) -> TrainedModel:
    """Generate the world of ``spec``, fit the pipeline, apply the variant and export ONNX."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    if spec.variant not in VARIANTS:
        raise ValueError(f"variant {spec.variant!r}: must be one of {', '.join(VARIANTS)}")
    features = tuple(features) if features is not None else recommender_features()
    names = tuple(f.name for f in features)
    x, y, stamps = build_dataset(features, spec.world)
    rng = np.random.default_rng([spec.world.seed, 4])
    holdout = rng.random(len(y)) < spec.holdout_share
    pipeline = build_pipeline(features, spec.hidden, seed=spec.world.seed, max_iter=spec.max_iter)
    frame = pd.DataFrame(x, columns=list(names))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        pipeline.fit(frame[~holdout], y[~holdout])
    if spec.variant == "collapsed":
        collapse(pipeline.named_steps["classifier"], float(np.mean(y[~holdout])))
    scores = pipeline.predict_proba(frame[holdout])[:, 1]
    metrics = evaluate(y[holdout], scores)
    truth = synthetic.true_click_probability(x[holdout], names)
    metrics["oracle_auc"] = evaluate(y[holdout], truth)["auc"]  # the best any model could do
    metrics.update({"n_train": float((~holdout).sum()), "n_holdout": float(holdout.sum())})
    sample = frame[holdout].head(EVAL_SAMPLE_ROWS).astype(np.float64)
    sample["score"] = scores[: len(sample)].astype(np.float64)
    return TrainedModel(
        spec=spec,
        pipeline=pipeline,
        feature_names=names,
        preprocess_onnx=preprocess_onnx(pipeline, len(names)),
        model_onnx=classifier_onnx(pipeline.named_steps["classifier"], len(names)),
        variant_json=json.dumps(spec.variant_document(), sort_keys=True).encode(),
        metrics=metrics,
        eval_sample=sample.reset_index(drop=True),
        input_example=frame[holdout].head(5).reset_index(drop=True),
        data_start=datetime.fromtimestamp(int(stamps.min()), UTC),
        data_end=datetime.fromtimestamp(int(stamps.max()), UTC),
        features_sha256=hashlib.sha256(FEATURES_FILE.read_bytes()).hexdigest(),
    )


def onnx_scores(preprocess: bytes, model: bytes, features: NDArray[Any]) -> NDArray[Any]:
    """Run the two graphs the way the serving ensemble does; returns ``score`` [n, 1]."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    pre = ort.InferenceSession(preprocess, options, providers=["CPUExecutionProvider"])
    net = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    scaled = pre.run(["scaled"], {"features": features.astype(np.float32)})[0]
    return np.asarray(net.run(["score"], {"scaled": scaled})[0])
