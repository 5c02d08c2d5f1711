"""``modelops demo``, a second model: an sklearn classifier logged the ordinary MLflow way, released and rolled back.

Nothing here is specific to the platform's reference recommender: the classifier (scikit-learn's
breast-cancer set, 30 columns whose names hold spaces) is logged with plain
``mlflow.sklearn.log_model(..., signature=..., input_example=...)`` as its owner would from a notebook,
registered, and released by the same ``model_release`` DAG, which publishes it from its model spec.
The gateway then answers it in MLflow's scoring form and the Open Inference Protocol. A second version,
regularised until its answers no longer depend on the patient (a collapsed model), is released under
generated traffic and rolled back by the canary's collapse gate.
"""

from __future__ import annotations

from typing import Any

from modelops.config import Settings
from modelops.demo.common import DEMO_CANARY, Step, canary_under_traffic, expect_outcome, follow, wait_release

SECOND_MODEL = "cancer_classifier"
_VERSIONS: dict[str, str] = {}


def _log_and_register(cfg: Settings, c: float, note: str) -> str:
    """Log the classifier (``C``: its inverse regularisation) and register it; returns the MLflow version."""
    import mlflow
    import mlflow.sklearn
    from mlflow.models import infer_signature
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    data = load_breast_cancer(as_frame=True)
    x, y = data.data, data.target
    model = make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=500)).fit(x, y)
    mlflow.set_tracking_uri(cfg.mlflow_uri)
    mlflow.set_experiment("demo-second-model")
    with mlflow.start_run(run_name=note):
        logged = mlflow.sklearn.log_model(model, name="model", signature=infer_signature(x, model.predict_proba(x)),
                                          input_example=x.iloc[:20])
    return str(mlflow.register_model(logged.model_uri, SECOND_MODEL).version)


def _register_first(cfg: Settings) -> str:
    version = _log_and_register(cfg, 1.0, "logistic regression")
    _VERSIONS["first"] = version
    print("    mlflow.sklearn.log_model(pipeline, name='model', signature=infer_signature(X, "
          "pipeline.predict_proba(X)), input_example=X[:20])")
    return f"MLflow {SECOND_MODEL} version {version} (flavor sklearn, 30 columns, predict_proba)"


def _traffic(cfg: Settings) -> Any:
    """Generated requests in MLflow's scoring form (rows of the data set) for the length of a release."""
    from sklearn.datasets import load_breast_cancer

    from modelops.traffic.runner import BackgroundTraffic
    from modelops.traffic.tabular import tabular_bodies, tabular_spec

    frame = load_breast_cancer(as_frame=True).data
    return BackgroundTraffic(tabular_spec(SECOND_MODEL, rate=20.0, seconds=900.0), cfg.gateway_url,
                             tabular_bodies(list(frame.columns), frame.to_numpy().tolist()))


def _release_first(cfg: Settings) -> str:
    from modelops.airflow_client import client_from_settings
    from modelops.canary.adapters import current_routes
    from modelops.objectstore import ObjectStore
    from modelops.registry.mlflow_registry import MlflowRegistry

    conf = {"model": SECOND_MODEL, "version": _VERSIONS["first"], **DEMO_CANARY}
    earlier = current_routes(ObjectStore.from_settings(cfg), SECOND_MODEL)
    client = client_from_settings()
    if earlier is None:
        run_id = follow("model_release", conf)
    else:  # a second `make demo` on the stack the first one left up: a canary against what it left serving
        print(f"    an earlier demo left {SECOND_MODEL} Triton v{earlier.stable.version} serving: this release is a "
              "canary against it, under generated traffic")
        run_id = canary_under_traffic(client, SECOND_MODEL, conf, _traffic(cfg))
    published = client.xcom("model_release", run_id, "publish")
    info = MlflowRegistry.from_settings().get(SECOND_MODEL, _VERSIONS["first"])
    return (f"Triton {SECOND_MODEL} version {published['triton_version']} from its spec ({published['spec_uri']}), "
            f"answers within {published['max_abs_diff']:.1g} of predict_proba; MLflow {info.stage} "
            f"(aliases: {', '.join(info.aliases) or '-'})")


def _ask_the_gateway(cfg: Settings) -> str:
    import requests
    from sklearn.datasets import load_breast_cancer

    frame = load_breast_cancer(as_frame=True).data.iloc[:3]
    body: dict[str, Any] = {"dataframe_split": {"columns": list(frame.columns), "data": frame.to_numpy().tolist()}}
    url = f"{cfg.gateway_url}/v1/models/{SECOND_MODEL}/predict"
    answer = requests.post(url, json=body, timeout=30)
    answer.raise_for_status()
    print(f"    POST {url} (MLflow's dataframe_split, 3 rows):")
    for row, p in zip(range(3), answer.json()["predictions"], strict=True):
        print(f"      row {row}: P(benign) = {p[1]:.4f}")
    metadata = requests.get(f"{cfg.gateway_url}/v2/models/{SECOND_MODEL}", timeout=30).json()
    tensor = metadata["inputs"][0]  # the served graph's one feature matrix
    oip = {"inputs": [{"name": tensor["name"], "datatype": tensor["datatype"], "shape": list(frame.shape),
                       "data": frame.to_numpy().ravel().tolist()}]}
    v2 = requests.post(f"{cfg.gateway_url}/v2/models/{SECOND_MODEL}/infer", json=oip, timeout=30)
    print(f"    POST {cfg.gateway_url}/v2/models/{SECOND_MODEL}/infer (Open Inference Protocol): {v2.status_code}, "
          f"X-Model-Version {v2.headers.get('x-model-version')}")
    return f"answered by {SECOND_MODEL} {answer.headers.get('x-model-version')} in both forms"


def _release_collapsed(cfg: Settings) -> str:
    from modelops.airflow_client import client_from_settings

    version = _log_and_register(cfg, 1e-8, "over-regularised")
    print(f"    registered {SECOND_MODEL} version {version} (C=1e-8: the same answer for every patient); "
          "releasing it with a canary under traffic in MLflow's scoring form")
    client = client_from_settings()
    with _traffic(cfg):
        release = client.trigger("model_release", {"model": SECOND_MODEL, "version": version, **DEMO_CANARY})
        state = wait_release(client, SECOND_MODEL, release)
    outcome = expect_outcome(client, SECOND_MODEL, release, state, "the collapsed version", "rolled back")
    return f"{SECOND_MODEL} version {version} (collapsed) {outcome}"


STEPS: tuple[Step, ...] = (
    Step("a second model: log an sklearn classifier the ordinary MLflow way and register it", _register_first),
    Step("release it from its model spec (Airflow: model_release)", _release_first),
    Step("ask the gateway in MLflow's scoring form and the Open Inference Protocol", _ask_the_gateway),
    Step("release a collapsed second version under traffic (canary: expect rollback)", _release_collapsed),
)
