"""explain=true against the real stack: Shapley sampling scored by the Triton version that scored the request.

Two differently shaped models: the reference model (``modelops.example``'s MLP, trained
small, published as a release publishes it: a pipeline of preprocess + MLP that scores an
explanation's path rows inside itself) and a python-backend model
built to depend on one feature (a steep sigmoid of it, ``max_batch_size`` 0: one call),
with a canary version. For each, the listed
contributions plus the rest plus the baseline score add up to the score within the stated
tolerance; the top feature of the second is the one it was built on; ``explain=false``
answers are byte-identical to answers without the option.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pyarrow.parquet as pq
import pytest
import requests

from modelops.config import Settings
from modelops.documents.routes import Routes, VersionRef, choose_version, routes_key, serialize_routes
from modelops.errors import ServingError
from modelops.example.synthetic import WorldSpec
from modelops.example.tables import publish_feature_tables
from modelops.example.train import TrainSpec, train
from modelops.features import feature_names
from modelops.gateway.explain.shapley import ADDITIVITY_TOLERANCE
from modelops.gateway.testing import feature_tables, write_test_model
from modelops.modelspec.recommender import recommender_features
from modelops.objectstore import ObjectStore
from modelops.records import EXPLANATIONS, LOG_PREFIXES
from modelops.serving.builder import Artifacts
from modelops.serving.pbtxt import step_names
from modelops.serving.publisher import Provenance, publish_artifacts
from modelops.serving.triton import TritonClient
from tests.integration.test_gateway import GatewayProcess, _log_rows, free_port, gateway_env, good_body

pytestmark = pytest.mark.integration

RUN = uuid.uuid4().hex[:8]
FOCUS = f"exfocus_{RUN}"
PIPELINE = f"expipe_{RUN}"
NAMES = feature_names(recommender_features())
FOCUS_FEATURE = next(name for name in NAMES if name.startswith("item_"))  # varies from item to item


@pytest.fixture(scope="module")
def served(stack_settings: Settings, object_store: ObjectStore, triton_url: str) -> Iterator[dict[str, Routes]]:
    repository = stack_settings.home / "triton" / "repository"
    write_test_model(repository, FOCUS, [1, 2], focus=NAMES.index(FOCUS_FEATURE))
    triton = TritonClient(triton_url)
    triton.load(FOCUS)
    reference = train(TrainSpec(world=replace(WorldSpec(), n_requests=1500), hidden=(16,), max_iter=25))
    published = publish_artifacts(PIPELINE, Artifacts(reference.preprocess_onnx, reference.model_onnx,
                                                      reference.variant_json),
                                  Provenance(owner="tests"), cfg=stack_settings, store=object_store)
    object_store.ensure_bucket()
    users, items = feature_tables()
    publish_feature_tables(object_store, f"extest-{RUN}", users, items)
    routes = {
        FOCUS: Routes(FOCUS, 1, VersionRef(1, "1" * 64), VersionRef(2, "2" * 64), 0.5, "2026-11-30T00:00:00Z",
                      "test_explain"),
        PIPELINE: Routes(PIPELINE, 1, VersionRef(published.triton_version, published.sha256), None, 0.0,
                         "2026-11-30T00:00:00Z", "test_explain"),
    }
    for name, doc in routes.items():
        object_store.put_bytes(routes_key(name), serialize_routes(doc))
    yield routes
    for name in routes:
        object_store.delete(routes_key(name))
    with contextlib.suppress(ServingError):  # best-effort cleanup of a shared stack
        triton.unload(FOCUS)
        for triton_model in step_names(PIPELINE).values():
            if triton.ready_versions(triton_model):
                triton.unload(triton_model)
    shutil.rmtree(repository / FOCUS, ignore_errors=True)


@pytest.fixture(scope="module")
def gateway(served: dict[str, Routes], stack_settings: Settings,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    base = tmp_path_factory.mktemp("explain-gateway")
    process = GatewayProcess(free_port(), base / "spool", base / "gateway.log", gateway_env(stack_settings),
                             ("--routes-poll-s", "0.3", "--max-deadline-ms", "10000", "--segment-max-age-s", "1"))
    process.start()
    yield process
    process.stop()


def predict(gw: GatewayProcess, model: str, body: dict[str, Any], query: str = "",
            request_id: str | None = None) -> requests.Response:
    headers = {"X-Request-ID": request_id} if request_id else {}
    return requests.post(f"{gw.url}/v1/models/{model}/predict{query}", json=body, headers=headers, timeout=30)


def check_additive(answer: dict[str, Any], top_k: int) -> None:
    assert len(answer["explanations"]) == len(answer["scores"])
    for score, item in zip(answer["scores"], answer["explanations"], strict=True):
        assert item["score"] == score
        listed = item["feature_contributions"]
        assert len(listed) == top_k
        sizes = [abs(c["contribution"]) for c in listed]
        assert sizes == sorted(sizes, reverse=True)
        total = item["baseline_score"] + sum(c["contribution"] for c in listed) + item["other_features_contribution"]
        assert abs(total - score) <= ADDITIVITY_TOLERANCE, item
        first = listed[0]
        assert item["top_reason"].startswith(f"{first['feature']}=") and "(baseline " in item["top_reason"]


def step_inferences(triton_url: str, routes: Routes) -> int:
    """How many rows the pipeline's model step of the stable version has scored (Triton's statistics)."""
    step, version = step_names(routes.model)["model"], routes.stable.version
    stats = requests.get(f"{triton_url}/v2/models/{step}/versions/{version}/stats", timeout=10).json()
    return int(stats["model_stats"][0]["inference_count"])


@pytest.mark.parametrize("model", [PIPELINE, FOCUS])
def test_contributions_add_up_to_the_score_for_both_model_shapes(gateway: GatewayProcess, model: str,
                                                                 served: dict[str, Routes], triton_url: str) -> None:
    body = good_body("u_0007", n=20)
    plain = predict(gateway, model, body)
    assert plain.status_code == 200, plain.text
    for top_k in (5, 128):
        before = step_inferences(triton_url, served[model]) if model == PIPELINE else 0
        explained = predict(gateway, model, body, f"?explain=true&top_k={top_k}")
        assert explained.status_code == 200, explained.text
        if model == PIPELINE:  # the release's pipeline scored the 5,160 path rows itself: only the 20 items
            # went through its steps (Triton may count the previous answer's 20 late, never the 5,160 paths)
            assert 20 <= step_inferences(triton_url, served[model]) - before < 5160
        answer = explained.json()
        assert answer["scores"] == plain.json()["scores"]  # the same version scored both
        check_additive(answer, top_k)
    # every feature listed: nothing left over
    assert all(abs(item["other_features_contribution"]) < 1e-9 for item in answer["explanations"])


def test_the_top_feature_is_the_one_the_model_was_built_on(gateway: GatewayProcess) -> None:
    answer = predict(gateway, FOCUS, good_body("u_0003", n=12), "?explain=true&top_k=3").json()
    for item in answer["explanations"]:
        top = item["feature_contributions"][0]
        assert top["feature"] == FOCUS_FEATURE, item
        assert item["top_reason"] == (f"{FOCUS_FEATURE}={top['value']:.4g} (baseline {top['baseline']:.4g})")
        # the focus feature carries almost the whole difference to the baseline
        assert abs(top["contribution"]) > 0.8 * abs(item["score"] - item["baseline_score"]) or abs(
            item["score"] - item["baseline_score"]) < 0.01


def test_explain_false_is_byte_identical_and_routing_headers_and_tokens_are_unchanged(
        gateway: GatewayProcess, served: dict[str, Routes]) -> None:
    seen: set[int] = set()
    for k in range(8):
        user = f"u_{k * 7:04d}"
        body = good_body(user, n=4)
        rid = f"ex-{RUN}-{k}"
        plain = predict(gateway, FOCUS, body, request_id=rid)
        off = predict(gateway, FOCUS, body, "?explain=false", request_id=rid)
        on = predict(gateway, FOCUS, body, "?explain=true", request_id=rid)
        for response in (plain, off, on):
            assert response.status_code == 200, response.text
        tokens = [r.json()["feedback_token"] for r in (plain, off)]
        assert plain.content.replace(tokens[0].encode(), b"T") == off.content.replace(tokens[1].encode(), b"T")
        assert sorted(plain.headers) == sorted(off.headers) == sorted(on.headers)
        version = choose_version(served[FOCUS], user)
        for response in (plain, off, on):
            assert response.headers["X-Model-Version"] == version.label
            assert response.json()["model_version"] == version.version
        shown = {key: value for key, value in on.json().items() if key not in ("explanations", "feedback_token")}
        assert shown == {key: value for key, value in plain.json().items() if key != "feedback_token"}
        seen.add(version.version)
        feedback = requests.post(f"{gateway.url}/v1/feedback", timeout=10, json={
            "feedback_token": on.json()["feedback_token"], "action": "click", "timestamp": 1764460900})
        assert feedback.status_code == 202 and feedback.json()["request_id"] == rid
    assert seen == {1, 2}, "both the stable and the canary version explained"


def test_explanations_are_logged_with_the_prediction(gateway: GatewayProcess, object_store: ObjectStore) -> None:
    answers = {}
    for k in range(3):
        rid = f"exlog-{RUN}-{k}"
        response = predict(gateway, FOCUS, good_body(f"u_{k:04d}", n=3), "?explain=true&top_k=2", request_id=rid)
        assert response.status_code == 200, response.text
        answers[rid] = response.json()
    plain = f"exlog-{RUN}-plain"
    assert predict(gateway, FOCUS, good_body(), request_id=plain).status_code == 200
    deadline = time.monotonic() + 60
    rows: list[dict[str, Any]] = []
    while time.monotonic() < deadline and len(rows) < len(answers):
        rows = _log_rows(object_store, LOG_PREFIXES["explanations"], "request_id", {*answers, plain})
        time.sleep(0.5)
    assert {row["request_id"] for row in rows} == set(answers), "every explained request, no other"
    for row in rows:
        answer = answers[row["request_id"]]
        assert (row["model"], row["model_version"]) == (FOCUS, answer["model_version"])
        assert json.loads(row["explanations"]) == answer["explanations"]
    key = next(iter(object_store.list_keys(LOG_PREFIXES["explanations"] + "/")))
    assert pq.read_table(io.BytesIO(object_store.get_bytes(key))).schema.equals(EXPLANATIONS)


@pytest.mark.parametrize(("query", "field", "rule"), [
    ("?explain=yes", "explain", "type boolean"),
    ("?explain=true&top_k=0", "top_k", "minimum 1"),
    ("?explain=true&top_k=129", "top_k", "maximum 128"),
    ("?explain=true&topk=3", "topk", "additionalProperties false"),
])
def test_bad_options_are_400_naming_the_field_and_rule(gateway: GatewayProcess, query: str, field: str,
                                                       rule: str) -> None:
    response = predict(gateway, FOCUS, good_body(), query)
    assert response.status_code == 400
    assert (response.json()["field"], response.json()["rule"]) == (field, rule), response.text
