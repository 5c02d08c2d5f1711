"""Publishing MLflow versions to the embedded Triton: serve side by side, idempotence, refusals.

Every test uses its own model name, so tests are independent on the shared stack, and
unloads what it loaded.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelops.errors import RegistryError, ServingError
from modelops.objectstore import ObjectStore
from modelops.serving.builder import Artifacts
from modelops.serving.index_store import (
    S3ConditionalStore,
    allocate_version,
    index_key,
    lock_key,
    model_lock,
    read_index,
)
from modelops.serving.loader import unload_version, verify_served
from modelops.serving.modelinfo import ModelInfo
from modelops.serving.pbtxt import step_names
from modelops.serving.publisher import (
    Provenance,
    local_repository,
    onnx_scorer,
    publish_artifacts,
    publish_version,
    specs_for,
)
from modelops.serving.repository import REPOSITORY_PREFIX, marker_path
from modelops.serving.testing import broken_artifacts, fixture_artifacts
from modelops.serving.triton import TritonClient

pytestmark = pytest.mark.integration


@pytest.fixture()
def model_name(stack_settings: Any, triton_url: str) -> Iterator[str]:
    """A fresh pipeline name; its three Triton models are unloaded afterwards."""
    name = f"pub_{uuid.uuid4().hex[:8]}"
    yield name
    client = TritonClient(triton_url)
    for triton_model in step_names(name).values():
        if client.ready_versions(triton_model):
            client.unload(triton_model)


def log_run(mlflow_uri: str, artifacts: Artifacts, name: str) -> tuple[str, str]:
    """Log ``artifacts`` under ``onnx/`` of a new run and register it; returns (run_id, version)."""
    import mlflow

    from modelops.registry.mlflow_registry import MlflowRegistry

    mlflow.set_tracking_uri(mlflow_uri)
    mlflow.set_experiment("modelops-tests-publish")
    with mlflow.start_run() as run, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "onnx"
        folder.mkdir()
        for file_name, data in artifacts.as_files().items():
            (folder / file_name).write_bytes(data)
        mlflow.set_tags({"data_start": "2026-11-01", "data_end": "2026-11-28", "owner": "tests"})
        mlflow.log_artifacts(str(folder), artifact_path="onnx")
    version = MlflowRegistry(mlflow_uri).register(f"runs:/{run.info.run_id}/onnx", name)
    return run.info.run_id, version.version


def count_writes(store: ObjectStore) -> list[str]:
    """Keys of every PutObject / CopyObject / DeleteObject the store's client sends from now on."""
    keys: list[str] = []
    for operation in ("PutObject", "CopyObject", "DeleteObject"):
        store.client.meta.events.register(f"before-parameter-build.s3.{operation}",
                                          lambda params, **_: keys.append(params["Key"]))
    return keys


def etags(store: ObjectStore, prefix: str) -> dict[str, str]:
    pages = store.client.get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=prefix)
    return {obj["Key"]: obj["ETag"] for page in pages for obj in page.get("Contents", [])}


def test_two_mlflow_versions_serve_side_by_side_and_republish_uploads_nothing(
    stack_settings: Any, object_store: ObjectStore, mlflow_uri: str, triton_url: str, model_name: str
) -> None:
    from modelops.registry.lifecycle import TAG
    from modelops.registry.mlflow_registry import MlflowRegistry

    client = TritonClient(triton_url)
    first, second = fixture_artifacts(11), fixture_artifacts(12, variant={"variant": "good"})
    run1, v1 = log_run(mlflow_uri, first, model_name)
    _, v2 = log_run(mlflow_uri, second, model_name)

    puts = count_writes(object_store)
    r1 = publish_version(model_name, v1, cfg=stack_settings, store=object_store, client=client)
    r2 = publish_version(model_name, v2, cfg=stack_settings, store=object_store, client=client)
    assert f"{REPOSITORY_PREFIX}{model_name}_model/2/model.onnx" in puts
    repository_writes = [key for key in puts if key.startswith(("triton/repository/", "triton/staging/"))]
    assert repository_writes[-1] == f"{REPOSITORY_PREFIX}{marker_path(model_name, 2)}", "_COMPLETE last"
    assert any(key.startswith(f"triton/staging/{model_name}/2/") for key in puts), "uploads go via staging"
    assert list(object_store.list_keys(f"triton/staging/{model_name}/")) == [], "staging is cleaned up"
    assert (r1.triton_version, r2.triton_version) == (1, 2)
    assert r1.uploaded and r2.uploaded and r1.loaded and r2.loaded
    assert r1.sha256 != r2.sha256
    # Both versions answer, each with its own model (scores equal onnxruntime on its artifacts).
    assert verify_served(client, model_name, 1, expected_fn=onnx_scorer(first)).max_abs_diff == 0.0
    assert verify_served(client, model_name, 2, expected_fn=onnx_scorer(second)).max_abs_diff == 0.0
    with pytest.raises(ServingError, match="another model"):
        verify_served(client, model_name, 1, expected_fn=onnx_scorer(second))
    assert client.ready_versions(model_name) == [1, 2]

    # model-info.json beside the version, lineage tags on the MLflow version.
    info = ModelInfo.from_json(object_store.get_bytes(f"{REPOSITORY_PREFIX}{model_name}/1/model-info.json"))
    assert (info.triton_version, info.sha256, info.run_id, info.mlflow_version) == (1, r1.sha256, run1, v1)
    assert (info.data_start, info.data_end, info.owner) == ("2026-11-01", "2026-11-28", "tests")
    assert info.mlflow_model_uri == f"models:/{model_name}/{v1}"
    tags = MlflowRegistry(mlflow_uri).get(model_name, v1).tags
    assert (tags[TAG["sha256"]], tags[TAG["triton_version"]]) == (r1.sha256, "1")
    index, _ = read_index(S3ConditionalStore(object_store), model_name)
    assert dict(index.versions) == {r1.sha256: 1, r2.sha256: 2}

    # Idempotent: same integer, no PutObject, identical ETags, still served.
    before = etags(object_store, "triton/")
    puts.clear()
    again = publish_version(model_name, v1, cfg=stack_settings, store=object_store, client=client)
    assert (again.triton_version, again.sha256, again.uploaded, again.loaded) == (1, r1.sha256, False, True)
    assert puts == []
    assert etags(object_store, "triton/") == before
    assert client.ready_versions(model_name) == [1, 2]

    # Unloading one version leaves the other serving.
    assert unload_version(client, specs_for(model_name, stack_settings), 2) == [1]
    assert client.ready_versions(model_name) == [1]
    verify_served(client, model_name, 1, expected_fn=onnx_scorer(first))
    assert not client.is_model_ready(model_name, 2)


def test_a_broken_new_version_fails_and_the_serving_version_keeps_serving(
    stack_settings: Any, object_store: ObjectStore, triton_url: str, model_name: str
) -> None:
    client = TritonClient(triton_url)
    good = fixture_artifacts(21)
    r1 = publish_artifacts(model_name, good, Provenance(owner="tests"), cfg=stack_settings, store=object_store,
                           client=client)
    # Refused before Triton is asked to load it: a python-backend model whose initialize fails once
    # crashed the shared Triton (modelops.serving.preflight).
    with pytest.raises(ServingError, match=rf"version 2 of {model_name} cannot be loaded[\s\S]*"
                                           rf"{model_name}_model/2/model.onnx: onnxruntime cannot open it"):
        publish_artifacts(model_name, broken_artifacts(22), Provenance(owner="tests"), cfg=stack_settings,
                          store=object_store, client=client)
    assert not (local_repository(stack_settings) / f"{model_name}_model" / "2").exists(), "never mirrored"
    assert client.ready_versions(model_name) == [r1.triton_version]
    assert not client.is_model_ready(f"{model_name}_model", 2)
    verify_served(client, model_name, r1.triton_version, expected_fn=onnx_scorer(good))


def test_a_tampered_object_is_refused_before_triton_sees_it(
    stack_settings: Any, object_store: ObjectStore, triton_url: str, model_name: str, tmp_path: Path
) -> None:
    client = TritonClient(triton_url)
    artifacts = fixture_artifacts(31)
    first_mirror = tmp_path / "first" / "repository"
    result = publish_artifacts(model_name, artifacts, Provenance(), cfg=stack_settings, store=object_store,
                               client=client, mirror_to=first_mirror, load=False)
    assert result.uploaded and not result.loaded
    assert (first_mirror / marker_path(model_name, 1)).exists()

    # Someone overwrites one object after the upload was verified and marked complete.
    object_store.put_bytes(f"{REPOSITORY_PREFIX}{model_name}_model/1/model.onnx", b"tampered")
    second_mirror = tmp_path / "second" / "repository"
    with pytest.raises(ServingError, match=r"does not match its manifest[\s\S]*_model/1/model.onnx"):
        publish_artifacts(model_name, artifacts, Provenance(), cfg=stack_settings, store=object_store,
                          client=client, mirror_to=second_mirror)
    assert not (second_mirror / model_name).exists()
    assert not client.ready_versions(model_name)


def test_an_incomplete_version_is_never_mirrored(
    stack_settings: Any, object_store: ObjectStore, model_name: str, tmp_path: Path
) -> None:
    from modelops.serving.repository import mirror_release

    publish_artifacts(model_name, fixture_artifacts(41), Provenance(), cfg=stack_settings, store=object_store,
                      mirror_to=tmp_path / "a", load=False)
    object_store.delete(REPOSITORY_PREFIX + marker_path(model_name, 1))
    with pytest.raises(ServingError, match="not complete"):
        mirror_release(object_store, model_name, 1, tmp_path / "b")


def test_the_store_honours_conditional_writes(object_store: ObjectStore, model_name: str) -> None:
    cas = S3ConditionalStore(object_store)
    key = index_key(model_name)
    assert cas.write_if(key, b'{"first": 1}', None)
    assert not cas.write_if(key, b'{"second": 1}', None), "If-None-Match: * must refuse an existing key"
    _, etag = cas.read(key)
    assert cas.write_if(key, b'{"third": 1}', etag)
    assert not cas.write_if(key, b'{"fourth": 1}', etag), "If-Match with a stale ETag must be refused"
    object_store.delete(key)
    first = allocate_version(object_store, model_name, "a" * 64)
    second = allocate_version(object_store, model_name, "b" * 64)
    assert (first.version, second.version, allocate_version(object_store, model_name, "a" * 64).version) == (
        1, 2, 1)
    with model_lock(object_store, model_name, owner="test"):
        assert object_store.exists(lock_key(model_name))
        with pytest.raises(ServingError, match="held by test"), model_lock(object_store, model_name, wait_s=0.3):
            pass
    assert not object_store.exists(lock_key(model_name))


def test_publishing_an_unknown_mlflow_version_is_a_registry_error(
    stack_settings: Any, mlflow_uri: str, model_name: str
) -> None:
    with pytest.raises(RegistryError, match=model_name):
        publish_version(model_name, 99, cfg=stack_settings)


def test_the_embedded_triton_reads_the_mirrored_repository(stack_settings: Any, triton_url: str) -> None:
    repository = local_repository(stack_settings)
    assert repository == stack_settings.home / "triton" / "repository"
    # A folder that only the local mirror has (never uploaded) is in the embedded Triton's index:
    # Triton scans this very directory, not a copy of the object store.
    probe = repository / f"mirrorprobe_{uuid.uuid4().hex[:8]}"
    (probe / "1").mkdir(parents=True)
    try:
        names = {row.name for row in TritonClient(triton_url).repository_index()}
        assert probe.name in names, f"{probe.name} not in Triton's repository index ({len(names)} models)"
    finally:
        import shutil

        shutil.rmtree(probe)
    assert probe.name not in {row.name for row in TritonClient(triton_url).repository_index()}


def _infer_outcomes(client: TritonClient, model: str, version: int, n: int) -> tuple[int, list[float]]:
    """(failures, latencies of the successes in s) of ``n`` single-row requests."""
    import time

    import numpy as np

    features = {"features": np.zeros((1, 128), dtype=np.float32)}
    failures, latencies = 0, []
    for _ in range(n):
        t0 = time.perf_counter()
        try:
            client.infer(model, version, features, ("score",))
            latencies.append(time.perf_counter() - t0)
        except ServingError:
            failures += 1
    return failures, latencies


def test_variants_fail_or_slow_down_as_declared(
    stack_settings: Any, object_store: ObjectStore, triton_url: str, model_name: str
) -> None:
    import statistics

    client = TritonClient(triton_url)
    good = publish_artifacts(model_name, fixture_artifacts(51), Provenance(), cfg=stack_settings,
                             store=object_store, client=client)
    faulty = publish_artifacts(model_name, fixture_artifacts(51, variant={"variant": "faulty-errors",
                                                                          "error_rate": 0.5}),
                               Provenance(), cfg=stack_settings, store=object_store, client=client)
    slow = publish_artifacts(model_name, fixture_artifacts(51, variant={"variant": "slow", "slowdown": 3.0,
                                                                        "base_ms": 20}),
                             Provenance(), cfg=stack_settings, store=object_store, client=client)
    assert len({good.triton_version, faulty.triton_version, slow.triton_version}) == 3  # variant is identity

    failures, _ = _infer_outcomes(client, model_name, faulty.triton_version, 60)
    assert 10 <= failures <= 50, f"{failures}/60 failed with error_rate 0.5"
    # Triton counts them as failures of the pipeline version (what the canary analysis reads).
    import re

    import requests

    def counted_failures() -> float:
        metrics = requests.get(stack_settings.triton_metrics_url, timeout=5).text
        return sum(
            float(m.group(1)) for m in re.finditer(
                rf'nv_inference_request_failure{{[^}}]*model="{model_name}"[^}}]*version="{faulty.triton_version}"'
                rf'[^}}]*}} (\S+)', metrics)
        )

    # Triton records a request's statistics after it has sent the response, so the last failure can
    # reach the counter a moment after the client saw it: read until it settles (bounded), then compare.
    import time

    deadline = time.monotonic() + 10.0
    counted = counted_failures()
    while counted < failures and time.monotonic() < deadline:
        time.sleep(0.1)
        counted = counted_failures()
    assert counted == failures
    good_failures, good_latency = _infer_outcomes(client, model_name, good.triton_version, 15)
    slow_failures, slow_latency = _infer_outcomes(client, model_name, slow.triton_version, 15)
    assert good_failures == slow_failures == 0
    # base 20 ms x slowdown 3 -> at least 40 ms added per request.
    assert statistics.median(slow_latency) - statistics.median(good_latency) > 0.035
