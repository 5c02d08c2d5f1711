"""Publish per flavor: from "the MLflow version exists" to "Triton serves it, verified", beside a bare Triton load.

For each flavor of the zoo — an sklearn breast-cancer classifier (30 columns, skl2onnx), a LightGBM
diabetes regressor (10 columns, onnxmltools), a raw ONNX graph with two inputs of different
dtypes, a ``triton``-flavor model directory (python backend) and a models-from-code ``pyfunc`` (served
by Triton's python backend running the MLflow model) — ``rounds`` models are logged and registered
(not timed), then each is published with
:func:`modelops.serving.spec_publish.publish_model`: download from MLflow, derive the spec, read the
evaluation sample, convert + parity-check (converted flavors), upload with verification, mirror,
load, config check, Triton's answers against the framework's own. Timed apart, on the same
downloaded model: :func:`~modelops.serving.mlflow_models.prepare_model` (derive + sample + convert +
parity) minus :func:`~modelops.modelspec.derive.derive_spec` alone — the conversion and parity
check's share of the publish (goal: at most 20 %).

**Anchor**, side by side in the same round: the least work that gets the same bytes served by the
same Triton — the files the publish wrote (``config.pbtxt``, the version folder) copied under a new
name into Triton's repository, loaded through its repository API and asked one inference. The
ratio printed last is publish / anchor per flavor (medians).

Runs on a private objectstore + MLflow + Triton stack of its own (``--port-base``), or on the
running stack (``--port-base 0``).

    .venv/bin/python bench/publish_flavors.py --rounds 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._stack import load_average, on_private_stack


def _log_sklearn(seed: int) -> Any:
    import mlflow.sklearn
    from mlflow.models import infer_signature
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    data = load_breast_cancer(as_frame=True)
    model = make_pipeline(StandardScaler(), LogisticRegression(C=0.5 + seed, max_iter=500)).fit(data.data,
                                                                                                data.target)
    return mlflow.sklearn.log_model(model, name="model", signature=infer_signature(
        data.data, model.predict_proba(data.data)), input_example=data.data.iloc[:20])


def _log_lightgbm(seed: int) -> Any:
    import lightgbm as lgb
    import mlflow.lightgbm
    from mlflow.models import infer_signature
    from sklearn.datasets import load_diabetes

    data = load_diabetes(as_frame=True)
    model = lgb.LGBMRegressor(n_estimators=30, num_leaves=15, random_state=seed, verbose=-1).fit(data.data,
                                                                                                data.target)
    return mlflow.lightgbm.log_model(model, name="model", signature=infer_signature(
        data.data, model.predict(data.data)), input_example=data.data.iloc[:20])


def _log_onnx(seed: int) -> Any:
    import mlflow.onnx

    from tests.unit.test_mlflow_models import two_input_model

    graph, signature, example = two_input_model()
    return mlflow.onnx.log_model(graph, name="model", signature=signature, input_example=example)


_WORK = Path(tempfile.mkdtemp(prefix="modelops-bench-flavors-"))


def _log_triton(seed: int) -> Any:
    """A Triton model directory (python backend, ``y = 2x + 1``) with the triton flavor, its sample under eval/."""
    import mlflow
    import numpy as np
    from mlflow.models import Model

    from tests.unit.test_flavor_triton import TritonFlavor, affine_sample, write_affine_folder

    work = _WORK / f"triton-{seed}-{uuid.uuid4().hex[:6]}"
    folder = write_affine_folder(work / "src")
    np.savez(work / "sample.npz", **affine_sample(20))
    mlflow.log_artifact(str(work / "sample.npz"), "eval")
    return Model.log(None, name="model", flavor=TritonFlavor, triton_model_path=str(folder))


def _log_pyfunc(seed: int) -> Any:
    """A models-from-code pyfunc (two outputs) that no converter takes: served by Triton's python backend."""
    from tests.unit.test_flavor_pyfunc import log_scorer

    work = _WORK / f"pyfunc-{seed}-{uuid.uuid4().hex[:6]}"
    work.mkdir(parents=True)
    return log_scorer(work)


FLAVORS: dict[str, Callable[[int], Any]] = {"sklearn": _log_sklearn, "lightgbm": _log_lightgbm, "onnx": _log_onnx,
                                            "triton": _log_triton, "pyfunc": _log_pyfunc}
CONVERTED = ("sklearn", "lightgbm")


def _register(mlflow_uri: str, name: str, log: Callable[[int], Any], seed: int) -> str:
    import mlflow

    mlflow.set_tracking_uri(mlflow_uri)
    mlflow.set_experiment("modelops-bench-publish-flavors")
    with mlflow.start_run():
        logged = log(seed)
    return str(mlflow.register_model(logged.model_uri, name).version)


def _conversion_s(cfg: Any, name: str, version: str) -> float:
    """prepare_model minus derive_spec on one downloaded copy: the sample read, conversion and parity check."""
    from modelops.modelspec.derive import derive_spec
    from modelops.registry.mlflow_registry import MlflowRegistry
    from modelops.serving.mlflow_models import prepare_model

    registry = MlflowRegistry.from_settings(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = registry.download_model(name, version, Path(tmp) / "model")
        started = time.perf_counter()
        derive_spec(model_dir, name)
        derived = time.perf_counter()
        prepare_model(model_dir, name)
        return (time.perf_counter() - derived) - (derived - started)


def _anchor_s(cfg: Any, name: str, triton_version: int) -> float:
    """Copy the published files under a new name into Triton's repository, load them, infer once."""
    import numpy as np

    from modelops.modelspec.render import config_json
    from modelops.modelspec.spec import ModelSpec
    from modelops.serving.publisher import local_repository
    from modelops.serving.spec_files import SPEC_FILE, served_spec
    from modelops.serving.triton import TritonClient

    repository = local_repository(cfg)
    spec = ModelSpec.from_json((repository / name / str(triton_version) / SPEC_FILE).read_bytes())
    copy = f"{name}_anchor"
    shutil.rmtree(repository / copy, ignore_errors=True)
    shutil.copytree(repository / name, repository / copy)
    config = config_json(served_spec(spec, cfg.triton_backend, cfg.triton_gpus), name=copy, versions=[triton_version])
    client = TritonClient(cfg.triton_http_url)
    inputs = {t.name: np.zeros([1, *[d for d in t.shape[1:]]], dtype=np.float32 if t.dtype == "FP32" else
                               np.float64 if t.dtype == "FP64" else np.int64) for t in spec.inputs}
    started = time.perf_counter()
    client.load(copy, config)
    client.infer(copy, triton_version, inputs, tuple(t.name for t in spec.outputs))
    took = time.perf_counter() - started
    client.unload(copy)
    return took


def bench(args: argparse.Namespace) -> None:
    from modelops.config import settings
    from modelops.serving.spec_publish import publish_model
    from modelops.serving.triton import TritonClient

    cfg = settings()
    print(f"publish per flavor: {args.rounds} rounds; {load_average()}")
    suffix = uuid.uuid4().hex[:6]
    names = {(f, k): f"bench_{f}_{suffix}_{k}" for f in FLAVORS for k in range(args.rounds)}
    versions = {key: _register(cfg.mlflow_uri, name, FLAVORS[key[0]], key[1]) for key, name in names.items()}
    publish: dict[str, list[float]] = {f: [] for f in FLAVORS}
    conversion: dict[str, list[float]] = {f: [] for f in FLAVORS}
    anchor: dict[str, list[float]] = {f: [] for f in FLAVORS}
    client = TritonClient(cfg.triton_http_url)
    for k in range(args.rounds):
        for flavor in FLAVORS:
            name, version = names[(flavor, k)], versions[(flavor, k)]
            started = time.perf_counter()
            result = publish_model(name, version, cfg=cfg)
            publish[flavor].append(time.perf_counter() - started)
            conversion[flavor].append(_conversion_s(cfg, name, version))
            anchor[flavor].append(_anchor_s(cfg, name, result.triton_version))
            client.unload(name)
            parts = ", ".join(f"{p} {s * 1000:.0f} ms" for p, s in result.timings_s.items())
            print(f"round {k} {flavor:9s}: publish {publish[flavor][-1] * 1000:6.0f} ms ({parts}); conversion + "
                  f"parity {conversion[flavor][-1] * 1000:5.0f} ms; bare Triton load + infer "
                  f"{anchor[flavor][-1] * 1000:5.0f} ms")
    print("\nmedians:")
    ratios = []
    for flavor in FLAVORS:
        p, c, a = (statistics.median(v[flavor]) for v in (publish, conversion, anchor))
        ratios.append(f"{flavor} {p / a:.2f}x")
        what = (f"conversion + parity, {c / p:.0%} of the publish (goal <= 20%)" if flavor in CONVERTED else
                "sample + the model's own answers (served as logged, no conversion)")
        print(f"  {flavor:9s} publish {p * 1000:6.0f} ms, {what} {c * 1000:5.0f} ms, "
              f"bare Triton load + infer {a * 1000:5.0f} ms")
    print(f"\nratio publish / bare Triton load (medians): {', '.join(ratios)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="models per flavor (at least 3: medians)")
    parser.add_argument("--port-base", type=int, default=8970,
                        help="the private stack's port base (0: the running stack, as configured)")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error(f"--rounds: at least 3 (medians); got {args.rounds}")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        on_private_stack(args.port_base or None, "modelops-bench-flavors-", lambda: bench(args),
                         only=["objectstore", "mlflow", "triton"], MODELOPS_OBSERVABILITY="off")
    finally:
        shutil.rmtree(_WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
