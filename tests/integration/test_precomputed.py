"""Precomputed predictions against the real stack: Triton (python backend), the object store, a gateway process.

The batch body of the ``precompute_predictions`` DAG (:func:`modelops.jobs.precompute_tasks.precompute`)
scores the published feature tables' users x items with the routed stable version through Triton and
writes the snapshot; the gateway polls it (``MODELOPS_PRECOMPUTED_POLL_S=0.3``). Each version of the
test model scores differently, so an answer's scores say which version's snapshot served it.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
import requests

from modelops.config import Settings
from modelops.documents.routes import routes_key, serialize_routes
from modelops.errors import ServingError
from modelops.example.tables import FeatureLookup, publish_feature_tables
from modelops.gateway.lookup.precomputed import PrecomputedScores
from modelops.gateway.metrics import Registry
from modelops.gateway.testing import feature_tables, write_test_model
from modelops.jobs.precompute_tasks import Champion, precompute, publish_snapshot
from modelops.objectstore import ObjectStore
from modelops.process import free_port
from modelops.records import LOG_PREFIXES
from modelops.serving.precompute import PRECOMPUTED_PREFIX, manifest_key, population, scores_key, snapshot_name
from modelops.serving.triton import TritonClient
from tests.integration.test_gateway import GatewayProcess, _log_rows, direct_scores, gateway_env, routes_doc
from tests.support.stackops import wait_for

pytestmark = pytest.mark.integration

RUN = uuid.uuid4().hex[:8]
MODEL = f"pctest_{RUN}"
STALE = f"pcstale_{RUN}"
SHA = {1: "1" * 64, 2: "2" * 64}
COVERED_ITEMS = 100  # the batch scores i_0000..i_0099 of the 120 items; i_0100.. are answered online


@dataclass
class Served:
    lookup: FeatureLookup
    feature_snapshot: str
    store: ObjectStore
    triton_url: str

    def expected(self, model: str, version: int, user: str, items: list[str]) -> list[float]:
        features = self.lookup.matrix([user] * len(items), items)
        return [float(s) for s in direct_scores(self.triton_url, model, version, features)]

    def precompute(self, model: str, version: int, revision: int, at: datetime) -> dict[str, Any]:
        return precompute(Champion(model, version, SHA[version], revision), at, store=self.store,
                          triton_url=self.triton_url, max_items=COVERED_ITEMS, batch_rows=2048)


@pytest.fixture(scope="module")
def served(stack_settings: Settings, object_store: ObjectStore, triton_url: str) -> Iterator[Served]:
    repository = stack_settings.home / "triton" / "repository"
    write_test_model(repository, MODEL, [1, 2])
    write_test_model(repository, STALE, [1])
    triton = TritonClient(triton_url)
    for name in (MODEL, STALE):
        triton.load(name)
    object_store.ensure_bucket()
    users, items = feature_tables()
    published = publish_feature_tables(object_store, f"pctest-{RUN}", users, items)
    object_store.put_bytes(routes_key(MODEL), serialize_routes(routes_doc(MODEL, 1, 1, None, 0.0)))
    object_store.put_bytes(routes_key(STALE), serialize_routes(routes_doc(STALE, 1, 1, None, 0.0)))
    yield Served(FeatureLookup.from_frames(users, items), published.snapshot, object_store, triton_url)
    for name in (MODEL, STALE):
        object_store.delete(routes_key(name))
        for key in list(object_store.list_keys(f"{PRECOMPUTED_PREFIX}{name}/")):
            object_store.delete(key)
        with contextlib.suppress(ServingError):  # best-effort cleanup of a shared stack
            triton.unload(name)
        shutil.rmtree(repository / name, ignore_errors=True)


@pytest.fixture(scope="module")
def gateway(served: Served, stack_settings: Settings,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    base = tmp_path_factory.mktemp("precomputed-gateway")
    process = GatewayProcess(free_port(), base / "spool", base / "gateway.log",
                             gateway_env(stack_settings, MODELOPS_PRECOMPUTED_POLL_S="0.3"),
                             ("--routes-poll-s", "0.3", "--max-deadline-ms", "10000", "--segment-max-age-s", "1"))
    process.start()
    yield process
    process.stop()


def body(user: str, items: list[str]) -> dict[str, Any]:
    return {"user_id": user, "item_ids": items, "timestamp": 1764460800}


def items(start: int, n: int) -> list[str]:
    return [f"i_{k:04d}" for k in range(start, start + n)]


def same_scores(got: list[float], want: list[float]) -> bool:
    """Equal float32 scores, up to 4 units in the last place: a batched kernel (numpy's matmul, onnxruntime)
    may round a row differently when it computes 2048 rows at once than when it computes 20."""
    try:
        np.testing.assert_array_max_ulp(np.float32(got), np.float32(want), maxulp=4)
    except AssertionError:
        return False
    return len(got) == len(want)


def snapshot_age(gw: GatewayProcess, model: str, version: int) -> float | None:
    """The gateway's age gauge of a loaded snapshot (None: not loaded)."""
    prefix = f'modelops_gateway_precomputed_snapshot_age_seconds{{model="{model}",version="{version}"}} '
    for line in requests.get(f"{gw.url}/metrics", timeout=5).text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix):])
    return None


def test_covered_requests_are_precomputed_with_triton_scores_and_the_rest_online(
        gateway: GatewayProcess, served: Served) -> None:
    summary = served.precompute(MODEL, 1, 1, datetime.now(UTC))
    assert summary["rows"] == 60 * COVERED_ITEMS and summary["version"] == 1
    wait_for(lambda: snapshot_age(gateway, MODEL, 1) is not None, 30, "the v1 snapshot is loaded")
    session = requests.Session()
    url = f"{gateway.url}/v1/models/{MODEL}/predict"
    covered = items(10, 20)
    rid = f"pc-{RUN}-covered"
    answer = session.post(url, json=body("u_0003", covered), headers={"X-Request-ID": rid}, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.headers["X-Prediction-Source"] == "precomputed"
    assert answer.headers["X-Model-Version"] == f"{SHA[1][:12]}/1"
    document = answer.json()
    assert same_scores(document["scores"], served.expected(MODEL, 1, "u_0003", covered))  # Triton's scores
    assert document["variant"] == "stable" and document["model_version"] == 1
    assert "X-Delay-Origin" in answer.headers and "Server-Timing" in answer.headers
    feedback = session.post(f"{gateway.url}/v1/feedback", json={
        "feedback_token": document["feedback_token"], "action": "click", "timestamp": time.time()}, timeout=10)
    assert feedback.status_code == 202, feedback.text
    for user, wanted, why in (("u_0003", [*items(95, 4), "i_0100"], "an item the batch did not score"),
                              ("u_9999", items(0, 3), "a user the batch did not score")):
        online = session.post(url, json=body(user, wanted), timeout=30)
        assert online.status_code == 200, online.text
        assert online.headers["X-Prediction-Source"] == "online", why
        assert online.json()["scores"] == served.expected(MODEL, 1, user, wanted), why  # same call shape: exact
    explained = session.post(f"{url}?explain=true&top_k=3", json=body("u_0003", covered), timeout=30)
    assert explained.status_code == 200 and explained.headers["X-Prediction-Source"] == "online"
    # after online calls (Triton statistics exist) a hit still calls no Triton: no Triton part in its delay split
    again = session.post(url, json=body("u_0004", covered), timeout=30)
    assert again.headers["X-Prediction-Source"] == "precomputed"
    assert again.headers["X-Inference-Latency"] == "0.000"
    assert "triton_queue;dur=0.000" in again.headers["Server-Timing"], again.headers["Server-Timing"]
    assert "triton_compute;dur=0.000" in again.headers["Server-Timing"], again.headers["Server-Timing"]
    metrics = requests.get(f"{gateway.url}/metrics", timeout=5).text
    for source in ("precomputed", "online"):  # the canary's latency gate reads source="online" only
        assert (f'modelops_gateway_request_duration_seconds_count{{model="{MODEL}",version="1",'
                f'source="{source}"}}') in metrics, source
    for source, reason in (("precomputed", ""), ("online", "items"), ("online", "explain")):
        assert (f'modelops_gateway_prediction_source_total{{model="{MODEL}",version="1",source="{source}",'
                f'reason="{reason}"}}') in metrics, (source, reason)
    # the scored samples of a precomputed answer are logged as for an online one (features + scores)
    day = datetime.now(UTC).date().isoformat()
    rows = wait_for(lambda: _log_rows(served.store, f"{LOG_PREFIXES['scored_samples']}/dt={day}", "request_id",
                                      {rid}), 30, "the precomputed answer's scored samples are uploaded")
    assert sorted((r["item_index"], r["score"]) for r in rows) == list(enumerate(document["scores"]))
    assert all(r["user_age_days"] is not None for r in rows)


def test_only_the_routed_versions_snapshot_serves_across_a_promotion_and_a_rollback(
        gateway: GatewayProcess, served: Served) -> None:
    served.precompute(MODEL, 1, 1, datetime.now(UTC))
    wait_for(lambda: snapshot_age(gateway, MODEL, 1) is not None, 30, "the v1 snapshot is loaded")
    users = [f"u_{k:04d}" for k in range(0, 60, 6)]
    wanted = items(30, 8)
    expected = {v: {u: served.expected(MODEL, v, u, wanted) for u in users} for v in (1, 2)}
    assert not any(same_scores(expected[1][u], expected[2][u]) for u in users)  # the scores tell versions apart
    answers: list[tuple[float, float, int, str, str, list[float]]] = []  # sent, received, version, source, user,
    # scores
    stop = threading.Event()

    failures: list[str] = []  # asserted in the main thread (an assert in a traffic thread would go unseen)

    def traffic(offset: int) -> None:
        session = requests.Session()
        k = offset
        while not stop.is_set():
            user = users[k % len(users)]
            k += 1
            sent = time.monotonic()
            try:
                response = session.post(f"{gateway.url}/v1/models/{MODEL}/predict", json=body(user, wanted),
                                        timeout=30)
                if response.status_code != 200:
                    failures.append(f"{response.status_code}: {response.text[:200]}")
                    continue
                answers.append((sent, time.monotonic(), response.json()["model_version"],
                                response.headers["X-Prediction-Source"], user, response.json()["scores"]))
            except Exception as exc:  # reported by the main thread
                failures.append(f"{type(exc).__name__}: {exc}")

    def applied(revision: int) -> float:
        view = requests.get(f"{gateway.url}/v1/routes", timeout=5).json()
        return time.monotonic() if view["models"][MODEL]["revision"] == revision else 0.0

    def seen(version: int, source: str, after: float) -> bool:
        return any(a[2] == version and a[3] == source and a[0] > after for a in list(answers))

    threads = [threading.Thread(target=traffic, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: seen(1, "precomputed", 0.0), 30, "v1 answered from its snapshot")
        # promotion: v2 becomes the stable version; it has no snapshot yet
        served.store.put_bytes(routes_key(MODEL), serialize_routes(routes_doc(MODEL, 2, 2, None, 0.0)))
        promoted = wait_for(lambda: applied(2), 30, "routes revision 2 applied")
        wait_for(lambda: sum(1 for a in list(answers) if a[2] == 2 and a[0] > promoted) >= 10,
                 30, "v2 answered online")
        v2_started = time.monotonic()
        served.precompute(MODEL, 2, 2, datetime.now(UTC))
        wait_for(lambda: seen(2, "precomputed", v2_started), 30, "v2 answered from its snapshot")
        # rollback: v1 again; its snapshot still exists and is fresh
        rollback_written = time.monotonic()
        served.store.put_bytes(routes_key(MODEL), serialize_routes(routes_doc(MODEL, 3, 1, None, 0.0)))
        rolled_back = wait_for(lambda: applied(3), 30, "routes revision 3 applied")
        wait_for(lambda: seen(1, "precomputed", rolled_back), 30, "v1 answered from its snapshot after the rollback")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads), "a traffic thread did not stop"
    assert failures == [], failures[:5]
    checked = list(answers)
    assert len(checked) >= 20
    for sent, received, version, source, user, scores in checked:
        assert source in {"precomputed", "online"}
        assert same_scores(scores, expected[version][user]), (version, source, user)  # that version's own scores
        if promoted < sent and received < rollback_written:
            assert version == 2, "a request after the promotion answered by v1"
            if received < v2_started:
                assert source == "online", "v2 answered precomputed before its snapshot existed"
        if sent > rolled_back:
            assert version == 1, "a request after the rollback answered by v2"
    counts = {(v, s) for _a, _b, v, s, _u, _sc in checked}
    assert {(1, "precomputed"), (2, "online"), (2, "precomputed")} <= counts


def test_a_stale_snapshot_is_not_served(gateway: GatewayProcess, served: Served) -> None:
    """Default freshness limit (7200 s): a snapshot complete three hours ago answers nothing."""
    url = f"{gateway.url}/v1/models/{STALE}/predict"
    wanted = items(0, 5)
    pop = population(served.lookup.user_index.tolist(), served.lookup.item_index.tolist(), max_items=COVERED_ITEMS)
    rows = np.arange(pop.rows)
    features = served.lookup.matrix(np.asarray(pop.user_ids, dtype=object)[rows // COVERED_ITEMS],
                                     np.asarray(pop.item_ids, dtype=object)[rows % COVERED_ITEMS])
    scores = direct_scores(served.triton_url, STALE, 1, features).astype(np.float32)
    champion = Champion(STALE, 1, SHA[1], 1)
    three_hours_ago = datetime.now(UTC) - timedelta(hours=3)
    publish_snapshot(served.store, champion, snapshot_name(three_hours_ago), served.feature_snapshot, pop, scores,
                     three_hours_ago)
    age = wait_for(lambda: snapshot_age(gateway, STALE, 1), 30, "the stale snapshot is loaded")
    assert age > 7200
    answer = requests.post(url, json=body("u_0001", wanted), timeout=30)
    assert answer.status_code == 200 and answer.headers["X-Prediction-Source"] == "online"
    metrics = requests.get(f"{gateway.url}/metrics", timeout=5).text
    assert f'{{model="{STALE}",version="1",source="online",reason="stale"}}' in metrics
    # the same scores, complete now: served (so staleness was the only reason)
    publish_snapshot(served.store, champion, snapshot_name(datetime.now(UTC)), served.feature_snapshot, pop, scores,
                     datetime.now(UTC))
    wait_for(lambda: (age := snapshot_age(gateway, STALE, 1)) is not None and age < 600, 30, "the fresh snapshot")
    fresh = requests.post(url, json=body("u_0001", wanted), timeout=30)
    assert fresh.headers["X-Prediction-Source"] == "precomputed"
    row = pop.user_ids.index("u_0001") * COVERED_ITEMS
    assert fresh.json()["scores"] == [float(v) for v in scores[row:row + len(wanted)]]  # what the snapshot holds
    assert same_scores(fresh.json()["scores"], answer.json()["scores"])


def test_a_rewritten_manifest_is_read_again_and_a_deleted_one_forgotten(object_store: ObjectStore) -> None:
    """The gateway's manifest cache (real object store, no gateway process): keyed on the listed ETag."""
    model = f"pccache_{RUN}"
    routes = [routes_doc(model, 1, 1, None, 0.0)]
    champion = Champion(model, 1, routes[0].stable.sha256, 1)
    pop = population(["u1", "u2"], ["i1", "i2"])
    scores = np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32)
    first, second, third = "20261201T060000Z", "20261201T070000Z", "20261201T080000Z"
    cache = PrecomputedScores(object_store, max_age_s=7200)
    key = (model, 1, champion.sha256)
    try:
        publish_snapshot(object_store, champion, first, "f1", pop, scores, datetime.now(UTC) - timedelta(hours=3))
        assert cache.refresh(routes)
        assert cache.loaded[key].manifest.age_s(time.time()) > 7200
        assert not cache.refresh(routes)  # nothing rewritten: nothing reloaded
        # a re-run of the same interval rewrites the same keys: read again (before: the stale one stayed)
        publish_snapshot(object_store, champion, first, "f1", pop, scores + 1, datetime.now(UTC))
        assert cache.refresh(routes)
        assert cache.loaded[key].manifest.age_s(time.time()) < 600
        assert cache.loaded[key].scores_of("u2", ["i1"]).tolist() == [np.float32(1.3)]
        publish_snapshot(object_store, champion, second, "f1", pop, scores, datetime.now(UTC))
        object_store.delete(manifest_key(model, 1, first))
        cache.refresh(routes)
        assert list(cache._manifests) == [manifest_key(model, 1, second)]  # the deleted key is dropped
        # an unreadable manifest is counted once and exported; the loaded snapshot keeps serving
        registry = Registry()
        cache.register(registry)
        object_store.put_bytes(manifest_key(model, 1, third), b"{")
        assert not cache.refresh(routes) and not cache.refresh(routes)
        cache.refresh_gauges(time.time())
        assert "modelops_gateway_precomputed_refresh_errors 1" in registry.render()
        assert cache.loaded[key].manifest.snapshot == second
    finally:
        for name in (first, second, third):
            object_store.delete(manifest_key(model, 1, name))
            object_store.delete(scores_key(model, 1, name))
