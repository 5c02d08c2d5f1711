"""Where a spec-published model runs: a GPU-only spec is refused before Triton on the CPU stack; auto runs on the CPU.

The embedded stack's Triton has no GPU (``MODELOPS_TRITON_GPUS=0``). A model whose registered-model
tag declares ``tuning.instance_group.kind: gpu`` is refused before a version number is taken or a
byte is uploaded, with the field, the rule and the way out in the message; the same model declared
``kind: auto`` is published, and the config Triton reports places it on the CPU.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from modelops.errors import ContractError
from modelops.objectstore import ObjectStore
from modelops.serving.repository import REPOSITORY_PREFIX
from modelops.serving.spec_publish import publish_model
from modelops.serving.triton import TritonClient

pytestmark = pytest.mark.integration


def _log_small_classifier() -> Any:
    import mlflow.sklearn
    from mlflow.models import infer_signature
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    data = load_iris(as_frame=True)
    model = LogisticRegression(max_iter=300).fit(data.data, data.target)
    return mlflow.sklearn.log_model(model, name="model", signature=infer_signature(
        data.data, model.predict_proba(data.data)), input_example=data.data.iloc[:20])


def test_a_gpu_spec_is_refused_before_triton_and_auto_runs_on_the_cpu(
    stack_settings: Any, mlflow_uri: str, triton_url: str, object_store: ObjectStore,
) -> None:
    import mlflow

    assert stack_settings.triton_gpus == 0
    name = f"placed_{uuid.uuid4().hex[:6]}"
    mlflow.set_tracking_uri(mlflow_uri)
    mlflow.set_experiment("placement")
    with mlflow.start_run():
        logged = _log_small_classifier()
    version = str(mlflow.register_model(logged.model_uri, name).version)
    client = TritonClient(triton_url)
    with pytest.raises(ContractError, match=r"tuning.instance_group.kind=gpu, but the Triton servers have no GPU "
                                            r"\(MODELOPS_TRITON_GPUS=0\); declare kind: auto"):
        publish_model(name, version, cfg=stack_settings,
                      overrides={"modelops.spec.tuning.instance_group": "{kind: gpu, count: 1, gpus: [0]}"})
    assert client.ready_versions(name) == []
    assert list(object_store.list_keys(f"{REPOSITORY_PREFIX}{name}/")) == []  # nothing uploaded
    try:
        result = publish_model(name, version, cfg=stack_settings,
                               overrides={"modelops.spec.tuning.instance_group": "{kind: auto, count: 1}"})
        groups = client.model_config(name, result.triton_version)["instance_group"]
        assert [g["kind"] for g in groups] == ["KIND_CPU"] and result.max_abs_diff <= 1e-5
    finally:
        if client.ready_versions(name):
            client.unload(name)
