"""Shadow first: candidates judged on mirrored requests before any user sees them, on the real stack.

Releases through ``model_release`` with ``shadow=true`` (5 s windows, ``min_requests`` 20) on two models,
each with its stable version (module-scoped) and generated traffic, two releases at a time:

* four faulty candidates are rolled back in the shadow phase — one that fails 5 % of its calls, one
  three times slower, one whose scores collapse, and one *silently different* (each request's item
  scores reversed: the same errors, latency and score spread as the stable, only its answers
  differ), which only the divergence gate can catch — and for each the prediction log holds no
  answer of the candidate (every answer users got came from the stable), while the shadow log holds
  its mirrored answers under the stable answers' request ids;
* a good candidate and an intentionally better one (retrained on more data: its answers differ, within
  the divergence it declares through the release's params) pass the shadow and are promoted;
* with ``canary_shadow_approval``, a candidate that answers differently waits at the end of the shadow for
  a person (``approve_shadow``, Required Actions) and, approved, goes on through the canary steps.

Without Airflow (routes written directly): users' latency with 100 % mirrored against none, a shadow
that hangs (its mirrored calls time out, the in-flight budget is spent, the rest are dropped and
counted) slowing no user down; and a classifier and a regressor served from their specs, mirrored in
MLflow's scoring form and the Open Inference Protocol, compared by class and by relative difference.
"""

from __future__ import annotations

import io
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pyarrow.parquet as pq
import pytest
import requests

from modelops.airflow_client import AirflowClient
from modelops.config import Settings
from modelops.objectstore import ObjectStore
from tests.integration.test_canary_release import (
    Traffic,
    _checkpoint,
    _register,
    _routes,
    _serve_stable,
    _variant,
    features_published,
    trained,
)
from tests.support.releases import ended, explain
from tests.support.stackops import gateway_metric

pytestmark = pytest.mark.integration

__all__ = ["features_published", "trained"]  # module fixtures shared with test_canary_release

RATE = 15.0  # req/s per model: two models' traffic, mirrored 100 %, beside the stack on two cores
SHADOW = {"shadow": True, "shadow_share": 1.0, "canary_steps": "50,100", "analysis_interval_s": 5,
          "min_requests": 20, "stable_grace_s": 4}
SLOW_BASE_MS = 100.0  # the slow candidate's model step: 3 x this per batch; the stable's calls take a few ms


def _release(airflow: AirflowClient, model: str, version: str, **conf: Any) -> str:
    return airflow.trigger("model_release", {"model": model, "version": version, **SHADOW, **conf},
                           run_id=f"test-shadow-{uuid.uuid4().hex[:8]}")


def _rows(store: ObjectStore, prefix: str, model: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for key in store.list_keys(prefix + "/"):
        rows.extend(r for r in pq.read_table(io.BytesIO(store.get_bytes(key))).to_pylist() if r["model"] == model)
    return rows


def _logs_settled(store: ObjectStore, model: str, shadow_version: int,
                  timeout_s: float = 90.0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The model's prediction and shadow log rows once the shadow's rows, and their requests' predictions, are
    uploaded (the spool seals a segment within 10 s, then uploads it)."""
    from modelops.records import LOG_PREFIXES

    deadline = time.monotonic() + timeout_s
    while True:
        shadow = [r for r in _rows(store, LOG_PREFIXES["shadow"], model) if r["shadow_version"] == shadow_version]
        predictions = _rows(store, LOG_PREFIXES["predictions"], model)
        answered = {r["request_id"] for r in predictions}
        if (shadow and all(r["request_id"] in answered for r in shadow)) or time.monotonic() > deadline:
            return predictions, shadow
        time.sleep(2)


# ------------------------------------------------------------------ through model_release
@pytest.fixture(scope="module")
def pair(stack_settings: Settings, object_store: ObjectStore, mlflow_uri: str, trained: Any,
         features_published: None) -> dict[str, Any]:
    """Two models, each with a stable version served 100 %: their releases run two at a time."""
    models = [f"shd_a_{uuid.uuid4().hex[:5]}", f"shd_b_{uuid.uuid4().hex[:5]}"]
    stables = [_serve_stable(stack_settings, object_store, trained, mlflow_uri, m) for m in models]
    return {"models": models, "stables": stables}


def _release_pair(airflow: AirflowClient, cfg: Settings, mlflow_uri: str, pair: dict[str, Any],
                  candidates: list[tuple[Any, dict[str, Any], dict[str, Any]]]) -> list[dict[str, Any]]:
    """Release one candidate on each model at once, under traffic; each one's run, state, version, traffic."""
    out = []
    versions = [_register(_variant(base, doc), mlflow_uri, model)
                for model, (base, doc, _conf) in zip(pair["models"], candidates, strict=True)]
    with Traffic(cfg, pair["models"][0], rate=RATE) as first, Traffic(cfg, pair["models"][1], rate=RATE) as second:
        runs = [_release(airflow, model, version, **conf)
                for model, version, (_base, _doc, conf) in zip(pair["models"], versions, candidates, strict=True)]
        states = [ended(airflow, model, run, 600) for model, run in zip(pair["models"], runs, strict=True)]
    for model, stable, run, state, traffic in zip(pair["models"], pair["stables"], runs, states, (first, second),
                                                  strict=True):
        canary_tv = int(airflow.xcom("model_release", run, "publish")["triton_version"])
        out.append({"model": model, "run": run, "state": state, "canary_tv": canary_tv, "report": traffic.report,
                    "stable_tv": stable["triton_version"]})
    return out


def _assert_caught_in_shadow(airflow: AirflowClient, store: ObjectStore, r: dict[str, Any], gate: str,
                             only_divergence: bool = False) -> None:
    model, run_id, canary_tv = r["model"], r["run"], r["canary_tv"]
    assert r["state"] == "failed", explain(airflow, model, run_id)
    status = _checkpoint(store, model, canary_tv)
    assert [t["to"] for t in status["transitions"]] == ["shadow", "rolling_back", "rolled_back"], status
    assert status["reason"].startswith("failed in shadow, no user exposed"), status["reason"]
    failed = [g["name"] for g in status["last_analysis"]["gates"] if g["verdict"] == "failed"]
    assert gate in failed, status["last_analysis"]
    if only_divergence:  # as fast and as error-free as the stable: only its answers tell it
        assert set(failed) <= {"divergence", "delta_median", "delta_p95"}, status["last_analysis"]
    assert status["exposed_at"] is None and status["weight"] == 0.0
    record = _record(store, model, canary_tv)
    assert record["users_exposed"] is False and record["detection_s"] is not None, record
    routes = _routes(store, model)
    assert (routes.stable.version, routes.canary, routes.shadow) == (r["stable_tv"], None, None)
    assert r["report"] is not None and r["report"].per_version.get(canary_tv, 0) == 0, r["report"].line()
    # No user answer from the candidate in the prediction log; its mirrored answers in the shadow log,
    # each under the request id of an answer the stable version gave.
    predictions, shadow = _logs_settled(store, model, canary_tv)
    assert predictions and not [p for p in predictions if p["model_version"] == canary_tv]
    mine = [row for row in shadow if row["shadow_version"] == canary_tv]
    assert mine, "no mirrored answer logged"
    answered = {p["request_id"]: p["model_version"] for p in predictions}
    assert all(answered.get(row["request_id"]) == r["stable_tv"] for row in mine)


def _record(store: ObjectStore, model: str, canary_tv: int) -> dict[str, Any]:
    import json

    from modelops.canary.record import record_key

    return dict(json.loads(store.get_bytes(record_key(model, canary_tv))))


def test_faulty_candidates_are_rolled_back_in_shadow_with_no_user_answer_from_them(
    airflow: AirflowClient, stack_settings: Settings, object_store: ObjectStore, mlflow_uri: str, trained: Any,
    pair: dict[str, Any],
) -> None:
    from modelops.example.train import train

    collapsed = train(replace(trained.spec, variant="collapsed"))
    errors, permuted = _release_pair(airflow, stack_settings, mlflow_uri, pair, [
        (trained, {"variant": "faulty-errors", "error_rate": 0.05}, {}),
        (trained, {"variant": "permuted"}, {})])
    _assert_caught_in_shadow(airflow, object_store, errors, "shadow_error_rate")
    _assert_caught_in_shadow(airflow, object_store, permuted, "divergence", only_divergence=True)
    slow, flat = _release_pair(airflow, stack_settings, mlflow_uri, pair, [
        (trained, {"variant": "slow", "slowdown": 3.0, "base_ms": SLOW_BASE_MS},
         {"canary_slo_p99_ms": SLOW_BASE_MS}),
        (collapsed, {"variant": "collapsed"}, {})])
    _assert_caught_in_shadow(airflow, object_store, slow, "shadow_p99_ms")
    _assert_caught_in_shadow(airflow, object_store, flat, "divergence")


def test_a_good_and_an_intentionally_better_candidate_pass_the_shadow_and_are_promoted(
    airflow: AirflowClient, stack_settings: Settings, object_store: ObjectStore, mlflow_uri: str, trained: Any,
    pair: dict[str, Any],
) -> None:
    from modelops.example.synthetic import WorldSpec
    from modelops.example.train import TrainSpec, train

    # Retrained on twice the data of another world: a better model whose answers differ (78 % of 2–6 item
    # requests change their order, |Δ| median ~0.07, p95 ~0.3 offline): it declares that much.
    better = train(TrainSpec(world=replace(WorldSpec(), n_requests=3000, seed=11), hidden=(16,), max_iter=25))
    allowance = {"canary_shadow_disagreement_rate": 0.9, "canary_shadow_disagreement_limit": 0.99,
                 "canary_shadow_max_delta_median": 0.25, "canary_shadow_max_delta_p95": 1.0}
    results = _release_pair(airflow, stack_settings, mlflow_uri, pair, [
        (trained, {"variant": "good"}, {}), (better, {"variant": "good"}, allowance)])
    for kind, r in zip(("good", "better"), results, strict=True):
        model, canary_tv = r["model"], r["canary_tv"]
        assert r["state"] == "success", (kind, explain(airflow, model, r["run"]))
        # A loaded scheduler may start a new try of a canary task while the old one, taken for dead, still
        # finishes the promotion (modelops.canary.operator._ended_in_this_run): the run can end first.
        deadline = time.monotonic() + 60
        while (status := _checkpoint(object_store, model, canary_tv))["phase"] == "promoting" \
                and time.monotonic() < deadline:
            time.sleep(1)
        targets = [t["to"] for t in status["transitions"]]
        assert targets[:2] == ["shadow", "progressing"] and targets[-1] == "promoted", (kind, targets)
        assert status["transitions"][1]["reason"] == "shadow passed"
        assert _routes(object_store, model).stable.version == canary_tv
        record = _record(object_store, model, canary_tv)
        assert record["shadow"] and record["users_exposed"], record
        shadow_windows = [w for w in record["windows"] if w.get("mirrored") is not None]
        assert shadow_windows and sum(w["mirrored"] for w in shadow_windows) >= SHADOW["min_requests"]
        divergence = next(g for g in shadow_windows[-1]["gates"] if g["name"] == "divergence")
        if kind == "good":  # the same weights: the same answers
            assert divergence["canary"] == 0.0, divergence
        else:  # differs, within what it declared
            assert divergence["canary"] > 0.3 and divergence["verdict"] == "passed", divergence


def test_an_intended_change_waits_at_the_end_of_the_shadow_for_a_person_and_goes_on_once_approved(
    airflow: AirflowClient, stack_settings: Settings, object_store: ObjectStore, mlflow_uri: str, trained: Any,
    pair: dict[str, Any],
) -> None:
    """With ``canary_shadow_approval``, a candidate failing only the divergence gates is not rolled back: it
    waits (0 % users, still mirrored) for ``approve_shadow``; approved, the canary steps run and promote it."""
    from modelops.canary.approval import hitl_path

    model = pair["models"][0]
    version = _register(_variant(trained, {"variant": "permuted"}), mlflow_uri, model)
    path = ""
    with Traffic(stack_settings, model, rate=RATE):
        run_id = _release(airflow, model, version, canary_shadow_approval=True)
        path = hitl_path("model_release", run_id, "approve_shadow")
        deadline = time.monotonic() + 400
        detail: dict[str, Any] = {}
        while not detail:
            try:
                detail = dict(airflow.request("GET", path))
            except Exception:  # the approval has not asked yet
                assert time.monotonic() < deadline, explain(airflow, model, run_id)
                assert airflow.run_state("model_release", run_id) in ("queued", "running"), \
                    explain(airflow, model, run_id)
                time.sleep(2)
        canary_tv = int(airflow.xcom("model_release", run_id, "publish")["triton_version"])
        status = _checkpoint(object_store, model, canary_tv)
        assert (status["phase"], status["approval_for"], status["weight"]) == ("waiting_approval", "shadow", 0.0)
        assert not _record(object_store, model, canary_tv)["users_exposed"]
        assert detail["options"] == ["Approve", "Reject"] and not detail["response_received"]
        airflow.request("PATCH", path, json={"chosen_options": ["Approve"]})
        state = ended(airflow, model, run_id, 400)
    assert state == "success", explain(airflow, model, run_id)
    deadline = time.monotonic() + 60
    while (status := _checkpoint(object_store, model, canary_tv))["phase"] == "promoting" \
            and time.monotonic() < deadline:
        time.sleep(1)
    targets = [t["to"] for t in status["transitions"]]
    assert targets[:3] == ["shadow", "waiting_approval", "progressing"] and targets[-1] == "promoted", targets
    assert status["transitions"][2]["reason"].startswith("shadow divergence approved by"), status["transitions"]
    assert _record(object_store, model, canary_tv)["users_exposed"]


# ------------------------------------------------------------------ the gateway's mirroring, routes written directly
def _route(store: ObjectStore, gateway: str, model: str, stable: Any, shadow: Any = None, share: float = 1.0,
           top_k: int = 5) -> None:
    from modelops.documents.routes import Routes, Shadow, load_routes, routes_key, serialize_routes

    current = load_routes(store.get_bytes(routes_key(model)))
    routes = Routes(model, current.revision + 1, stable, None, 0.0, datetime.now(UTC).isoformat(), "tests",
                    shadow=None if shadow is None else Shadow(shadow, share, top_k))
    store.put_bytes(routes_key(model), serialize_routes(routes))
    deadline = time.monotonic() + 20
    while requests.get(f"{gateway}/v1/routes", timeout=5).json()["models"][model]["revision"] != routes.revision:
        assert time.monotonic() < deadline, "the gateway never applied the routes"
        time.sleep(0.1)


def _latencies(gateway: str, model: str, n: int, body: Callable[[int], dict[str, Any]]) -> list[float]:
    session = requests.Session()
    out = []
    for i in range(n):
        started = time.perf_counter()
        response = session.post(f"{gateway}/v1/models/{model}/predict", json=body(i), timeout=10)
        out.append((time.perf_counter() - started) * 1000.0)
        assert response.status_code == 200, response.text
        assert response.json()["variant"] == "stable"
    return out


def _publish(cfg: Settings, mlflow_uri: str, trained: Any, model: str, document: dict[str, Any]) -> Any:
    from modelops.documents.routes import VersionRef
    from modelops.registry.mlflow_registry import MlflowRegistry
    from modelops.serving.publisher import publish_version

    version = _register(_variant(trained, document), mlflow_uri, model)
    MlflowRegistry.from_settings().to_staging(model, version, contract_passed=True, contract_result="passed")
    published = publish_version(model, version)
    return VersionRef(published.triton_version, published.sha256)


def test_mirroring_never_delays_users_and_a_hanging_shadow_spends_only_its_budget(
    stack_settings: Settings, object_store: ObjectStore, mlflow_uri: str, trained: Any, features_published: None,
) -> None:
    from modelops.documents.routes import load_routes, routes_key

    gateway = stack_settings.gateway_url
    model = f"shd_lat_{uuid.uuid4().hex[:5]}"
    _serve_stable(stack_settings, object_store, trained, mlflow_uri, model)
    stable = load_routes(object_store.get_bytes(routes_key(model))).stable
    good = _publish(stack_settings, mlflow_uri, trained, model, {"variant": "good"})
    hanging = _publish(stack_settings, mlflow_uri, trained, model, {"variant": "slow", "slowdown": 2.0,
                                                                     "base_ms": 5000.0})

    def body(i: int) -> dict[str, Any]:
        return {"user_id": f"u_{i % 400:06d}", "item_ids": [f"i_{(i * 7 + k) % 400:06d}" for k in range(5)],
                "timestamp": int(time.time())}

    medians: dict[str, list[float]] = {"none": [], "mirrored": [], "hanging": []}
    for _round in range(3):  # alternated, so the machine's load drifts over all three alike
        for mode, shadow in (("none", None), ("mirrored", good), ("hanging", hanging)):
            _route(object_store, gateway, model, stable, shadow)
            medians[mode].append(statistics.median(_latencies(gateway, model, 60, body)))
    none, mirrored, hung = (statistics.median(medians[m]) for m in ("none", "mirrored", "hanging"))
    print(f"user p50: no shadow {none:.2f} ms, 100 % mirrored {mirrored:.2f} ms, hanging shadow {hung:.2f} ms")
    # Each answer is sent before its mirrored call starts: users wait for neither (a loose bound: shared machine).
    assert mirrored < none + 5.0 and hung < none + 5.0, medians
    labels = {"model": model, "version": str(good.version)}
    # 180 requests were mirrored to the good shadow; CI (2 cores, loaded) counted 120 answered "ok" once, so the
    # bound is one round's worth: the good shadow answers, and none of its answers disagree (next line).
    assert gateway_metric(gateway, "modelops_gateway_shadow_answers_total", outcome="ok", **labels) >= 60
    assert gateway_metric(gateway, "modelops_gateway_shadow_disagreements_total", measure="topk", **labels) == 0
    # The hanging shadow: a burst beyond the budget (32 in flight, each ending at its 2 s timeout).
    _route(object_store, gateway, model, stable, hanging)
    hung_labels = {"model": model, "version": str(hanging.version)}
    with ThreadPoolExecutor(8) as pool:
        burst = list(pool.map(lambda i: _latencies(gateway, model, 15, lambda j: body(i * 15 + j)), range(8)))
    assert statistics.median(x for run in burst for x in run) < 500.0  # users are answered, not held
    dropped = gateway_metric(gateway, "modelops_gateway_shadow_dropped_total", reason="budget", **hung_labels)
    assert dropped > 0, "120 requests in a burst against a budget of 32 calls hanging 2 s each"
    deadline = time.monotonic() + 10
    while gateway_metric(gateway, "modelops_gateway_shadow_answers_total", outcome="timeout", **hung_labels) == 0:
        assert time.monotonic() < deadline, "the hanging shadow's calls never timed out"
        time.sleep(0.5)
    # Every request answered while the hanging shadow was routed was mirrored or dropped, none queued.
    mirrored_n = gateway_metric(gateway, "modelops_gateway_shadow_mirrored_total", **hung_labels)
    all_dropped = gateway_metric(gateway, "modelops_gateway_shadow_dropped_total", **hung_labels)
    assert mirrored_n + all_dropped == 3 * 60 + 8 * 15, (mirrored_n, all_dropped)
    _route(object_store, gateway, model, stable)  # no shadow: routes back, the candidates can go


def _log_regressor(sign: float) -> Any:
    import lightgbm as lgb
    import mlflow.lightgbm
    from mlflow.models import infer_signature
    from sklearn.datasets import load_diabetes

    data = load_diabetes(as_frame=True)
    model = lgb.LGBMRegressor(n_estimators=30, num_leaves=8, verbose=-1).fit(data.data, sign * data.target)
    return mlflow.lightgbm.log_model(model, name="model", signature=infer_signature(data.data,
                                                                                    model.predict(data.data)),
                                     input_example=data.data.iloc[:20])


@pytest.fixture(scope="module")
def spec_models(stack_settings: Settings, mlflow_uri: str, object_store: ObjectStore) -> Iterator[dict[str, Any]]:
    """A classifier and a regressor with two versions each, the second routed as the first's shadow."""
    from modelops.documents.routes import VersionRef, routes_key
    from modelops.serving.spec_publish import publish_model, route_first
    from modelops.serving.triton import TritonClient
    from tests.integration.test_edge_models import _log_cancer as _log_classifier
    from tests.integration.test_model_zoo import _register as register_zoo

    suffix = uuid.uuid4().hex[:5]
    names = {"classifier": f"shd_cls_{suffix}", "regressor": f"shd_reg_{suffix}"}
    first = {"classifier": lambda: _log_classifier(1.0), "regressor": lambda: _log_regressor(1.0)}
    # A heavily regularised classifier (some classes flip); a regressor trained on the negated target (a sign
    # flipped: its relative difference from the stable's answer is about 2 on every row).
    second = {"classifier": lambda: _log_classifier(0.0005), "regressor": lambda: _log_regressor(-1.0)}
    out: dict[str, Any] = {}
    for kind, name in names.items():
        v1 = publish_model(name, register_zoo(mlflow_uri, name, first[kind]), cfg=stack_settings)
        assert route_first(v1, store=object_store)
        v2 = publish_model(name, register_zoo(mlflow_uri, name, second[kind]), cfg=stack_settings)
        out[kind] = {"name": name, "stable": VersionRef(v1.triton_version, v1.sha256),
                     "shadow": VersionRef(v2.triton_version, v2.sha256)}
    yield out
    client = TritonClient(stack_settings.triton_http_url)
    for name in names.values():
        object_store.delete(routes_key(name))
        if client.ready_versions(name):
            client.unload(name)


def test_classifiers_and_regressors_are_mirrored_in_both_forms_and_the_open_inference_protocol(
    spec_models: dict[str, Any], stack_settings: Settings, object_store: ObjectStore,
) -> None:
    import numpy as np
    from sklearn.datasets import load_breast_cancer, load_diabetes

    gateway = stack_settings.gateway_url
    frames = {"classifier": load_breast_cancer(as_frame=True).data.iloc[:8],
              "regressor": load_diabetes(as_frame=True).data.iloc[:8]}
    for kind, m in spec_models.items():
        _route(object_store, gateway, m["name"], m["stable"], m["shadow"])
        frame = frames[kind]
        split = frame.to_dict(orient="split")
        split.pop("index")
        bodies = [{"dataframe_split": split}, {"dataframe_records": frame.to_dict(orient="records")}]
        for body in bodies * 5:
            response = requests.post(f"{gateway}/v1/models/{m['name']}/predict", json=body, timeout=10)
            assert response.status_code == 200 and response.json()["model_version"] == m["stable"].version
        meta = requests.get(f"{gateway}/v2/models/{m['name']}", timeout=10).json()
        tensor = meta["inputs"][0]
        values = frame.to_numpy(np.float32 if tensor["datatype"] == "FP32" else np.float64)
        infer = {"inputs": [{"name": tensor["name"], "shape": list(values.shape), "datatype": tensor["datatype"],
                             "data": values.ravel().tolist()}]}
        for _ in range(5):
            response = requests.post(f"{gateway}/v2/models/{m['name']}/infer", json=infer, timeout=10)
            assert response.status_code == 200, response.text
    deadline = time.monotonic() + 15
    cls, reg = spec_models["classifier"], spec_models["regressor"]
    cls_labels = {"model": cls["name"], "version": str(cls["shadow"].version)}
    reg_labels = {"model": reg["name"], "version": str(reg["shadow"].version)}
    while gateway_metric(gateway, "modelops_gateway_shadow_answers_total", outcome="ok", **cls_labels) < 15 \
            or gateway_metric(gateway, "modelops_gateway_shadow_answers_total", outcome="ok", **reg_labels) < 15:
        assert time.monotonic() < deadline, "the mirrored calls did not all end"
        time.sleep(0.5)
    # The classifier: every row compared by class; its heavily regularised second version flips some.
    assert gateway_metric(gateway, "modelops_gateway_shadow_compared_total", measure="class", **cls_labels) == 15 * 8
    assert gateway_metric(gateway, "modelops_gateway_shadow_disagreements_total", measure="class", **cls_labels) > 0
    # The regressor with its sign flipped: relative |Δ| per row, every one beyond 1 (a flip is 2).
    rel = gateway_metric(gateway, "modelops_gateway_shadow_divergence_count", measure="rel", **reg_labels)
    below_one = gateway_metric(gateway, "modelops_gateway_shadow_divergence_bucket", measure="rel", le="1",
                               **reg_labels)
    assert rel == 15 * 8 and below_one == 0
    assert gateway_metric(gateway, "modelops_gateway_shadow_compared_total", measure="class", **reg_labels) == 0
    for m in spec_models.values():
        _route(object_store, gateway, m["name"], m["stable"])
