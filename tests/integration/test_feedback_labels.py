"""Delayed labels through the real gateway: a model whose registered-model tags declare a binary label.

An sklearn classifier is registered in MLflow with tags that override its spec
(``modelops.spec.outcomes.label.*`` and a 20 s ``token_ttl_s``), published from its spec and
routed. Its prediction's token takes a label (0/1, true/false or one of its two classes); a label of
the wrong type, a value, or an action the model does not declare is refused with 400 naming the
field, the rule and an example; once the model's own token validity has passed, 410. The prediction
log keeps the positive-class probability the gateway answered, the feedback log the label.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests

from modelops.documents.routes import routes_key
from modelops.objectstore import ObjectStore
from modelops.records import LOG_PREFIXES
from modelops.serving.spec_publish import publish_model, route_first
from modelops.serving.triton import TritonClient
from tests.integration.test_edge_models import _log_cancer, _rows, _wait_ready
from tests.integration.test_model_zoo import _register

pytestmark = pytest.mark.integration

TTL_S = 20


@pytest.fixture(scope="module")
def labelled(stack_settings: Any, mlflow_uri: str, object_store: ObjectStore) -> Iterator[str]:
    from mlflow import MlflowClient

    name = f"labels_cancer_{uuid.uuid4().hex[:6]}"
    version = _register(mlflow_uri, name, lambda: _log_cancer(1.0))
    client = MlflowClient(mlflow_uri)
    for key, value in {"modelops.spec.outcomes.label.kind": "binary",
                       "modelops.spec.outcomes.label.classes": "[malignant, benign]",
                       "modelops.spec.outcomes.label.delay_s": "3600",
                       "modelops.spec.outcomes.token_ttl_s": str(TTL_S)}.items():
        client.set_registered_model_tag(name, key, value)
    published = publish_model(name, version, cfg=stack_settings)
    assert route_first(published, store=object_store)
    _wait_ready(stack_settings.gateway_url, name)
    yield name
    object_store.delete(routes_key(name))
    triton = TritonClient(stack_settings.triton_http_url)
    if triton.ready_versions(name):
        triton.unload(name)


def _predict(gateway: str, model: str) -> dict[str, Any]:
    body = {"dataframe_split": _rows(1).to_dict(orient="split")}
    body["dataframe_split"].pop("index")
    response = requests.post(f"{gateway}/v1/models/{model}/predict", json=body, timeout=10)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _rows_of(store: ObjectStore, kind: str, column: str, wanted: str, timeout_s: float = 90.0) -> list[dict[str, Any]]:
    """The rows of a log whose ``column`` is ``wanted``, once its spool segment has been uploaded."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = []
        for key in store.list_keys(LOG_PREFIXES[kind] + "/"):
            if key.endswith(".parquet"):
                table = pq.read_table(pa.BufferReader(store.get_bytes(key)))
                found += [r for r in table.to_pylist() if r.get(column) == wanted]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(2)


def test_labels_are_checked_against_the_models_declaration_and_its_token_validity(
        labelled: str, stack_settings: Any, object_store: ObjectStore) -> None:
    gateway, model = stack_settings.gateway_url, labelled
    url = f"{gateway}/v1/feedback"
    answer = _predict(gateway, model)
    token, issued = answer["feedback_token"], time.time()

    def send(**outcome: Any) -> requests.Response:
        return requests.post(url, json={"feedback_token": token, "timestamp": time.time(), **outcome}, timeout=10)

    for good in ({"label": 1}, {"label": False}, {"label": "benign"}):
        accepted = send(**good)
        assert accepted.status_code == 202, accepted.text
        assert accepted.json()["request_id"] == answer["request_id"]
    for bad, field, rule in (({"label": "maybe"}, "label", "binary label: 0, 1, true, false, malignant, benign"),
                             ({"label": 2}, "label", "binary label"),
                             ({"value": 0.5}, "value", "binary label"),
                             ({"action": "click"}, "action", "not declared"),
                             ({"label": 1, "action": "click"}, "label", "oneOf")):
        refused = send(**bad)
        assert refused.status_code == 400, (bad, refused.text)
        error = refused.json()
        assert error["field"] == field and error["rule"].startswith(rule), error
        assert "(example: " in error["message"], error
    shaped = requests.post(url, json={"feedback_token": token, "timestamp": time.time(), "label": [1]}, timeout=10)
    assert shaped.status_code == 400 and shaped.json()["field"] == "label"

    # The prediction record holds the answered positive-class probability; the feedback log the labels.
    logged = _rows_of(object_store, "predictions", "request_id", answer["request_id"])
    assert len(logged) == 1 and logged[0]["prediction"] == pytest.approx(answer["predictions"][0][1], abs=1e-6)
    labels = _rows_of(object_store, "feedback", "feedback_token", token)
    assert sorted((r["action"], r["label"], r["value"]) for r in labels) == [(None, "0", None), (None, "1", None),
                                                                            (None, "1", None)]

    time.sleep(max(0.0, issued + TTL_S + 1 - time.time()))  # the model's own validity: 20 s, not 24 h
    expired = send(label=1)
    assert expired.status_code == 410 and expired.json()["error"] == "token_expired", expired.text
    assert f"valid {TTL_S} s" in expired.json()["message"]
    fresh = _predict(gateway, model)["feedback_token"]
    assert requests.post(url, json={"feedback_token": fresh, "timestamp": time.time(), "label": 0},
                         timeout=10).status_code == 202
