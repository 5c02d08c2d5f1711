"""Every model at the edge: zoo models through the gateway in MLflow's scoring form and the Open Inference Protocol.

Two models with different contracts are published from their specs at once (an sklearn classifier
with 30 named columns, a two-input ONNX model taking tensors), routed, and reached through the
embedded stack's gateway: the same rows in MLflow's ``dataframe_split`` / ``dataframe_records`` /
``inputs`` bodies, the Open Inference Protocol through ``tritonclient.http`` pointed at the gateway
(binary tensors, its default) and Triton directly give the same outputs, with the platform's headers
and a feedback token that the feedback endpoint accepts. Each class of bad input is refused with its
status and a message naming the column or input, and Triton's request count does not move. A canary
version of the classifier gets its share of the traffic and a rollback takes it away again.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
import requests

from modelops.documents.routes import VersionRef, load_routes, routes_key, serialize_routes
from modelops.objectstore import ObjectStore
from modelops.serving.spec_publish import publish_model, route_first
from modelops.serving.spec_reconcile import spec_key
from modelops.serving.triton import TritonClient
from tests.integration.test_model_zoo import _log_onnx, _register
from tests.support.stackops import gateway_metric

pytestmark = pytest.mark.integration
ROUTES_ERRORS = "modelops_gateway_routes_errors_total"


def _log_cancer(c: float) -> Any:
    import mlflow.sklearn
    from mlflow.models import infer_signature
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    data = load_breast_cancer(as_frame=True)
    x, y = data.data, data.target
    model = make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=500)).fit(x, y)
    return mlflow.sklearn.log_model(model, name="model", signature=infer_signature(x, model.predict_proba(x)),
                                    input_example=x.iloc[:20])


def _wait_ready(gateway: str, model: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if requests.get(f"{gateway}/v2/models/{model}/ready", timeout=5).status_code == 200:
            return
        time.sleep(0.2)
    raise AssertionError(f"the gateway never routed {model}")


def _wait_revision(gateway: str, model: str, revision: int, timeout_s: float = 20.0) -> None:
    """Until the gateway has applied ``revision`` of the model's routes (its ``/v1/routes`` view)."""
    deadline = time.monotonic() + timeout_s
    while requests.get(f"{gateway}/v1/routes", timeout=5).json()["models"].get(model, {}).get("revision") != revision:
        assert time.monotonic() < deadline, f"the gateway never applied revision {revision} of {model}'s routes"
        time.sleep(0.1)


def _triton_count(triton_url: str, model: str) -> int:
    stats = requests.get(f"{triton_url}/v2/models/{model}/stats", timeout=5).json()
    return sum(int(s["inference_stats"]["success"]["count"]) + int(s["inference_stats"]["fail"]["count"])
               for s in stats["model_stats"])


@pytest.fixture(scope="module")
def zoo(stack_settings: Any, mlflow_uri: str, object_store: ObjectStore) -> Iterator[dict[str, Any]]:
    suffix = uuid.uuid4().hex[:6]
    cancer, tensors = f"edge_cancer_{suffix}", f"edge_tensors_{suffix}"
    versions = {cancer: _register(mlflow_uri, cancer, lambda: _log_cancer(1.0)),
                tensors: _register(mlflow_uri, tensors, _log_onnx)}
    with ThreadPoolExecutor(2) as pool:
        published = dict(zip(versions, pool.map(lambda n: publish_model(n, versions[n], cfg=stack_settings),
                                                versions), strict=True))
    for result in published.values():
        assert route_first(result, store=object_store)  # the first serving: all traffic to version 1
        assert not route_first(result, store=object_store)  # routed already: left to releases
    for name in published:
        _wait_ready(stack_settings.gateway_url, name)
    yield {"cancer": cancer, "tensors": tensors, "published": published, "versions": versions}
    client = TritonClient(stack_settings.triton_http_url)
    for name in published:
        object_store.delete(routes_key(name))
        if client.ready_versions(name):
            client.unload(name)


def _rows(n: int = 6) -> Any:
    from sklearn.datasets import load_breast_cancer

    return load_breast_cancer(as_frame=True).data.iloc[:n]


def test_one_model_the_same_through_every_form_and_triton(zoo: dict[str, Any], stack_settings: Any,
                                                         triton_url: str) -> None:
    import tritonclient.http as httpclient

    gateway, model = stack_settings.gateway_url, zoo["cancer"]
    frame = _rows()
    client = httpclient.InferenceServerClient(gateway.removeprefix("http://"))
    metadata = client.get_model_metadata(model)
    datatype = metadata["inputs"][0]["datatype"]
    matrix = frame.to_numpy(np.float32 if datatype == "FP32" else np.float64)
    direct = TritonClient(triton_url).infer(model, 1, {"input": matrix}, ("probabilities",))
    want = np.asarray(direct["probabilities"])
    bodies = {
        "dataframe_split": {"dataframe_split": frame.to_dict(orient="split")},
        "dataframe_records": {"dataframe_records": frame.to_dict(orient="records")},
        "instances": {"instances": frame.to_dict(orient="records")},
        "inputs (columns)": {"inputs": frame.to_dict(orient="list")},
    }
    bodies["dataframe_split"]["dataframe_split"].pop("index")
    tokens = []
    for form, body in bodies.items():
        for path in ("predict", "invocations"):
            response = requests.post(f"{gateway}/v1/models/{model}/{path}", json=body, timeout=10)
            assert response.status_code == 200, (form, response.text)
            answer = response.json()
            np.testing.assert_allclose(np.asarray(answer["predictions"]), want, atol=1e-6, err_msg=form)
            assert answer["model_version"] == 1 and answer["variant"] == "stable"
            assert response.headers["X-Model-Version"] == answer["model_id"]
            assert response.headers["X-Feedback-Token"] == answer["feedback_token"]
            assert all(h in response.headers for h in ("X-Inference-Latency", "X-Request-ID", "X-Delay-Origin"))
            tokens.append(answer["feedback_token"])
    # The Open Inference Protocol through tritonclient, pointed at the gateway (binary tensors both ways).
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready(model)
    assert [i["name"] for i in metadata["inputs"]] == ["input"] and metadata["versions"] == ["1"]
    for binary in (True, False):
        tensor = httpclient.InferInput("input", [len(frame), 30], datatype)
        tensor.set_data_from_numpy(matrix, binary_data=binary)
        result = client.infer(model, [tensor], outputs=[httpclient.InferRequestedOutput("probabilities",
                                                                                      binary_data=binary)])
        np.testing.assert_allclose(result.as_numpy("probabilities"), want, atol=1e-6)
        response = result.get_response()
        assert response["model_version"] == "1" and response["parameters"]["feedback_token"]
        tokens.append(response["parameters"]["feedback_token"])
    for token in tokens[:2] + tokens[-1:]:
        accepted = requests.post(f"{gateway}/v1/feedback", json={"feedback_token": token, "action": "click",
                                                                  "timestamp": int(time.time())}, timeout=10)
        assert accepted.status_code == 202, accepted.text


def test_explain_gives_each_row_contributions_that_add_up_to_its_score(zoo: dict[str, Any],
                                                                        stack_settings: Any) -> None:
    gateway, model = stack_settings.gateway_url, zoo["cancer"]
    frame = _rows(4)
    body = {"dataframe_split": {"columns": list(frame.columns), "data": frame.to_numpy().tolist()}}
    plain = requests.post(f"{gateway}/v1/models/{model}/predict", json=body, timeout=10).json()
    response = requests.post(f"{gateway}/v1/models/{model}/predict?explain=true&top_k=3", json=body, timeout=30)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["predictions"] == plain["predictions"] and "explanations" not in plain
    probabilities = np.asarray(answer["predictions"])
    for i, item in enumerate(answer["explanations"]):
        assert item["row"] == i and item["output"] == "probabilities"
        assert item["class"] == int(np.argmax(probabilities[i]))  # the predicted class is explained
        assert item["score"] == pytest.approx(probabilities[i][item["class"]], abs=1e-6)
        top = item["feature_contributions"]
        assert len(top) == 3 and {t["feature"] for t in top} <= set(frame.columns)
        assert abs(top[0]["contribution"]) >= abs(top[-1]["contribution"])
        total = item["baseline_score"] + sum(t["contribution"] for t in top) + item["other_features_contribution"]
        assert total == pytest.approx(item["score"], abs=1e-4)  # additivity, through the real Triton
        assert item["top_reason"].startswith(top[0]["feature"])
    # The tensor model has no feature matrix: refused with the reason, before Triton.
    refused = requests.post(f"{gateway}/v1/models/{zoo['tensors']}/predict?explain=true",
                            json={"inputs": {"x": [[0.0] * 8], "ids": [[1]]}}, timeout=10)
    assert refused.status_code == 400 and "one numeric input tensor" in refused.text, refused.text
    bad = requests.post(f"{gateway}/v1/models/{model}/predict?top_k=0", json=body, timeout=10)
    assert bad.status_code == 400 and "top_k" in bad.text, bad.text


def test_each_models_rows_reach_the_model_samples_log_with_its_own_columns(zoo: dict[str, Any], stack_settings: Any,
                                                                          object_store: ObjectStore) -> None:
    from modelops.modelspec.spec import ModelSpec
    from modelops.records import LOG_PREFIXES, MODEL_SAMPLES
    from tests.integration.test_gateway import _log_rows

    gateway, model = stack_settings.gateway_url, zoo["cancer"]
    frame, ids = _rows(3), {f"samples-{uuid.uuid4().hex[:8]}-{k}" for k in range(2)}
    answers = {}
    for rid in ids:
        response = requests.post(f"{gateway}/v1/models/{model}/predict", headers={"X-Request-ID": rid},
                                 json={"dataframe_records": frame.to_dict(orient="records")}, timeout=10)
        assert response.status_code == 200, response.text
        answers[rid] = response.json()["predictions"]
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    prefix = f"{LOG_PREFIXES['model_samples']}/dt={day}"
    deadline, rows = time.monotonic() + 60, []
    while time.monotonic() < deadline and len(rows) < 6:
        rows = _log_rows(object_store, prefix, "request_id", ids)
        time.sleep(0.5)
    assert len(rows) == 6, rows  # share 1.0 on the test stack: every row of both requests
    spec = ModelSpec.from_json(object_store.get_bytes(rows[0]["spec"]))
    assert [f.name for f in spec.features] == list(frame.columns)  # the record names the columns' spec
    for row in rows:
        assert (row["model"], row["model_version"]) == (model, 1)
        np.testing.assert_allclose(row["features"], frame.iloc[row["row_index"]].to_numpy(), rtol=1e-6)
        np.testing.assert_allclose(row["outputs"], answers[row["request_id"]][row["row_index"]], atol=1e-6)
    import io

    import pyarrow.parquet as pq

    key = next(iter(object_store.list_keys(prefix + "/")))
    assert pq.read_table(io.BytesIO(object_store.get_bytes(key))).schema.equals(MODEL_SAMPLES)


def test_two_models_with_different_contracts_at_once(zoo: dict[str, Any], stack_settings: Any,
                                                    triton_url: str) -> None:
    import tritonclient.http as httpclient

    gateway, model = stack_settings.gateway_url, zoo["tensors"]
    x = np.random.default_rng(5).normal(size=(3, 8)).astype(np.float32)
    ids = np.arange(3, dtype=np.int64).reshape(3, 1)
    response = requests.post(f"{gateway}/v1/models/{model}/predict",
                             json={"inputs": {"x": x.tolist(), "ids": ids.tolist()}}, timeout=10)
    assert response.status_code == 200, response.text
    predicted = response.json()["predictions"]
    np.testing.assert_allclose(predicted["total"], (x.sum(axis=1, keepdims=True) * ids)[:, 0], rtol=1e-5)
    assert predicted["shifted"] == (ids + 1)[:, 0].tolist()
    client = httpclient.InferenceServerClient(gateway.removeprefix("http://"))
    inputs = [httpclient.InferInput("x", [3, 8], "FP32"), httpclient.InferInput("ids", [3, 1], "INT64")]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(ids)
    result = client.infer(model, inputs)
    direct = TritonClient(triton_url).infer(model, 1, {"x": x, "ids": ids}, ("total", "shifted"))
    np.testing.assert_allclose(result.as_numpy("total"), direct["total"], rtol=1e-6)
    np.testing.assert_array_equal(result.as_numpy("shifted"), direct["shifted"])
    # The other model's contract is not this one's: its columns are refused here.
    refused = requests.post(f"{gateway}/v1/models/{model}/predict",
                            json={"dataframe_records": _rows(1).to_dict(orient="records")}, timeout=10)
    assert refused.status_code == 400 and refused.json()["field"].startswith("dataframe_records")


def _bad_tabular(columns: list[str]) -> dict[str, dict[str, Any]]:
    row = _rows(1).to_dict(orient="records")[0]
    return {
        "missing column": {"dataframe_records": [{k: v for k, v in row.items() if k != "mean radius"}]},
        "extra column": {"dataframe_records": [{**row, "zip code": 1}]},
        "wrong type": {"dataframe_records": [{**row, "mean radius": "large"}]},
        "null (NaN) where required": {"dataframe_records": [{**row, "mean radius": None}]},
        "wrong columns": {"dataframe_split": {"columns": columns[:-1], "data": [list(row.values())[:-1]]}},
        "too many rows": {"dataframe_records": [row] * 51},
        "two forms": {"dataframe_records": [row], "instances": [row]},
    }


def test_bad_input_is_refused_naming_the_input_and_never_reaches_triton(zoo: dict[str, Any], stack_settings: Any,
                                                                       triton_url: str) -> None:
    gateway, model = stack_settings.gateway_url, zoo["cancer"]
    columns = list(_rows(1).columns)
    before = _triton_count(triton_url, model)
    for case, body in _bad_tabular(columns).items():
        response = requests.post(f"{gateway}/v1/models/{model}/predict", json=body, timeout=10)
        assert response.status_code == 400, (case, response.text)
        answer = response.json()
        assert answer["error"] == "contract_violation" and answer["field"] and answer["rule"], (case, answer)
        assert answer["message"], case
    assert "mean radius" in requests.post(f"{gateway}/v1/models/{model}/predict",
                                          json=_bad_tabular(columns)["wrong type"], timeout=10).json()["message"]
    datatype = requests.get(f"{gateway}/v2/models/{model}", timeout=5).json()["inputs"][0]["datatype"]
    row = _rows(1).to_numpy(np.float64)
    good = {"name": "input", "datatype": datatype, "shape": [1, 30], "data": row.reshape(-1).tolist()}
    oip = {
        "wrong datatype": ({**good, "datatype": "INT32"}, "datatype"),
        "wrong shape": ({**good, "shape": [1, 29], "data": row.reshape(-1)[:29].tolist()}, "shape"),
        "too few values": ({**good, "data": row.reshape(-1)[:10].tolist()}, "values"),
        "strings for floats": ({**good, "data": ["x"] * 30}, "kind"),
        "batch over max_batch_size": ({**good, "shape": [65, 30], "data": np.tile(row, (65, 1)).reshape(-1).tolist()},
                                      "more than"),
    }
    for case, (tensor, named) in oip.items():
        response = requests.post(f"{gateway}/v2/models/{model}/infer", json={"inputs": [tensor]}, timeout=10)
        assert response.status_code == 400, (case, response.text)
        message = response.json()["error"]
        assert "input" in message and named in message, (case, message)
    missing = requests.post(f"{gateway}/v2/models/{model}/infer", json={"inputs": []}, timeout=10)
    assert missing.status_code == 400 and "'input' is missing" in missing.json()["error"]
    extra = requests.post(f"{gateway}/v2/models/{model}/infer",
                          json={"inputs": [good, {**good, "name": "other"}]}, timeout=10)
    assert extra.status_code == 400 and "'other'" in extra.json()["error"]
    assert _triton_count(triton_url, model) == before  # no rejected request reached Triton


def test_a_canary_of_a_classifier_gets_its_share_and_a_rollback_ends_it(
        zoo: dict[str, Any], stack_settings: Any, mlflow_uri: str, object_store: ObjectStore) -> None:
    gateway, model = stack_settings.gateway_url, zoo["cancer"]
    version = _register(mlflow_uri, model, lambda: _log_cancer(0.01))
    canary = publish_model(model, version, cfg=stack_settings)
    assert canary.triton_version == 2
    routes = load_routes(object_store.get_bytes(routes_key(model)))
    stable_label = f"{routes.stable.sha256[:12]}/{routes.stable.version}"
    # The canary's spec unreadable when its routes arrive: the gateway holds the new revision back (never
    # judging a canary's request by another contract: CI once saw a 400 in that gap) until it can read it.
    good_spec = object_store.get_bytes(spec_key(model, 2))
    object_store.put_bytes(spec_key(model, 2), b"{not a spec")
    held_before = gateway_metric(gateway, ROUTES_ERRORS, model=model)
    object_store.put_bytes(routes_key(model), serialize_routes(replace(
        routes, revision=routes.revision + 1, canary=VersionRef(canary.triton_version, canary.sha256),
        canary_weight=0.5, updated_at=datetime.now(UTC).isoformat())))
    body = {"dataframe_split": {"columns": list(_rows(1).columns), "data": _rows(2).to_numpy().tolist()}}

    def served(n: int) -> dict[str, int]:
        seen: dict[str, int] = {}
        for _ in range(n):
            response = requests.post(f"{gateway}/v1/models/{model}/predict", json=body, timeout=10)
            assert response.status_code == 200, response.text
            seen[response.json()["variant"]] = seen.get(response.json()["variant"], 0) + 1
        return seen

    deadline = time.monotonic() + 20
    while gateway_metric(gateway, ROUTES_ERRORS, model=model) < held_before + 2:  # two polls held it back
        assert time.monotonic() < deadline, "the gateway never counted the unreadable canary spec"
        time.sleep(0.1)
    applied = requests.get(f"{gateway}/v1/routes", timeout=5).json()["models"][model]["revision"]
    assert applied == routes.revision
    assert served(10) == {"stable": 10}  # held back: the spec is still unreadable
    object_store.put_bytes(spec_key(model, 2), good_spec)
    _wait_revision(gateway, model, routes.revision + 1)
    split = served(80)
    assert 15 <= split.get("canary", 0) <= 65, split  # 50 % by request id (no routing key): binomial(80, .5)
    rolled = load_routes(object_store.get_bytes(routes_key(model)))
    object_store.put_bytes(routes_key(model), serialize_routes(replace(
        rolled, revision=rolled.revision + 1, canary=None, canary_weight=0.0,
        updated_at=datetime.now(UTC).isoformat())))
    _wait_revision(gateway, model, rolled.revision + 1)
    response = requests.post(f"{gateway}/v1/models/{model}/predict", json=body, timeout=10)
    assert served(20) == {"stable": 20} and response.headers["X-Model-Version"] == stable_label
    # The reconciler keeps the model as one Triton model of its own (not the recommender's pipeline): both
    # versions served (the rolled-back one kept for the grace), under the config rendered from the spec.
    from modelops.serving.reconcile import read_status, status_file_of

    def reconciled() -> bool:
        status = read_status(status_file_of(stack_settings)) or {}
        mine = [o for o in status.get("outcomes", []) if o["model"] == model]
        return bool(mine) and all(o["action"] == "in_sync" and o["target"] == [1, 2] for o in mine)

    deadline = time.monotonic() + 30
    while not reconciled():
        assert time.monotonic() < deadline, read_status(status_file_of(stack_settings))
        time.sleep(0.5)
    config = TritonClient(stack_settings.triton_http_url).model_config(model)
    assert [o["name"] for o in config["output"]] == ["probabilities"], config


def test_the_openapi_document_lists_each_model_and_fuzzing_finds_no_server_error(
        zoo: dict[str, Any], stack_settings: Any) -> None:
    import schemathesis
    from hypothesis import HealthCheck, given
    from hypothesis import settings as hypothesis_settings
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    gateway = stack_settings.gateway_url
    document = requests.get(f"{gateway}/openapi.json", timeout=5).json()
    for name in (zoo["cancer"], zoo["tensors"]):
        assert f"/v1/models/{name}/predict" in document["paths"], sorted(document["paths"])
    cancer = document["components"]["schemas"][f"PredictRequest_{zoo['cancer']}"]
    assert cancer["properties"]["dataframe_split"]["properties"]["columns"]["const"][0] == "mean radius"
    schema = schemathesis.openapi.from_dict(document)
    for name in (zoo["cancer"], zoo["tensors"]):
        operation = schema[f"/v1/models/{name}/predict"]["POST"]

        @given(case=operation.as_strategy())
        @hypothesis_settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
        def fuzz(case: Any) -> None:
            case.call_and_validate(base_url=gateway, checks=[
                not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance])

        fuzz()
