"""The files of one Triton version of the pipeline (pure: bytes in, path → bytes out).

Layout (paths relative to the repository root, N the integer version)::

    NAME_preprocess/config.pbtxt        NAME_preprocess/N/model.onnx   [+ model.py]
    NAME_model/config.pbtxt             NAME_model/N/model.onnx        [+ model.py, variant.json]
    NAME/config.pbtxt                   NAME/N/model.py  NAME/N/model-info.json

``model.py`` of the two steps exists only with the python backend; the pipeline's
``model.py`` always (see ``model_repository/templates/ensemble.pbtxt.tmpl`` for why the
pipeline is not a Triton ensemble). The files in the ``config.pbtxt`` do not name a
version, so re-publishing another version rewrites them with identical bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from modelops.errors import ServingError
from modelops.serving.modelinfo import MODEL_INFO_FILE, ModelInfo
from modelops.serving.pbtxt import TEMPLATES_DIR, ModelConfigSpec, Role, render_pbtxt

ARTIFACTS = {"preprocess": "preprocess.onnx", "model": "model.onnx", "variant": "variant.json"}
"""Names of the served artifacts under the run's ``onnx/`` artifact folder."""


RUN_TIME_VARIANTS = frozenset({"faulty-errors", "slow", "permuted"})
"""``variant.json`` kinds that change what the model step does when it runs (``templates/onnx_model.py``)."""


def acts_at_run_time(variant_json: bytes | None) -> bool:
    """Whether ``variant.json`` makes the model step fail or wait at run time (unreadable counts as yes)."""
    if variant_json is None:
        return False
    try:
        return str(json.loads(variant_json).get("variant", "good")) in RUN_TIME_VARIANTS
    except (ValueError, AttributeError):
        return True


@dataclass(frozen=True)
class Artifacts:
    """The source artifacts of a version, as bytes."""

    preprocess_onnx: bytes
    model_onnx: bytes
    variant_json: bytes | None = None

    def as_files(self) -> dict[str, bytes]:
        """Name → content, the input of :func:`~modelops.serving.modelinfo.bundle_sha256`."""
        files = {ARTIFACTS["preprocess"]: self.preprocess_onnx, ARTIFACTS["model"]: self.model_onnx}
        if self.variant_json is not None:
            files[ARTIFACTS["variant"]] = self.variant_json
        return files

    @classmethod
    def from_dir(cls, folder: Path) -> Artifacts:
        """Read ``preprocess.onnx``, ``model.onnx`` and optional ``variant.json`` from ``folder``."""
        try:
            variant = folder / ARTIFACTS["variant"]
            return cls(
                (folder / ARTIFACTS["preprocess"]).read_bytes(),
                (folder / ARTIFACTS["model"]).read_bytes(),
                variant.read_bytes() if variant.exists() else None,
            )
        except OSError as exc:
            raise ServingError(
                f"{folder}: needs {ARTIFACTS['preprocess']} and {ARTIFACTS['model']} ({exc})"
            ) from exc


def release_files(
    specs: Mapping[Role, ModelConfigSpec],
    version: int,
    artifacts: Artifacts,
    info: ModelInfo,
    *,
    templates_dir: Path = TEMPLATES_DIR,
) -> dict[str, bytes]:
    """Every file of version ``version`` of the pipeline, repository-relative path → bytes.

    Args:
        specs: the three config specs (:func:`~modelops.serving.pbtxt.pipeline_specs`).
        version: the integer Triton version.
        artifacts: the ONNX files (and variant) to serve.
        info: the provenance written as ``model-info.json``.
        templates_dir: where the templates and the ``model.py`` sources lie.
    """
    if info.triton_version != version:
        raise ServingError(f"model-info says version {info.triton_version}, building {version}")
    try:
        onnx_model_py = (templates_dir / "onnx_model.py").read_bytes()
        pipeline_py = (templates_dir / "ensemble_model.py").read_bytes()
    except OSError as exc:
        raise ServingError(f"templates in {templates_dir} unreadable: {exc}") from exc
    files: dict[str, bytes] = {}
    for role, spec in specs.items():
        files[f"{spec.name}/config.pbtxt"] = render_pbtxt(spec, templates_dir=templates_dir).encode()
        folder = f"{spec.name}/{version}"
        if role == "ensemble":
            files[f"{folder}/model.py"] = pipeline_py
            files[f"{folder}/{MODEL_INFO_FILE}"] = info.to_json()
            # the steps' own bytes, for explanations computed inside the pipeline (ensemble_model.py);
            # not for a demonstration variant (faulty, slow): the copies would not behave as the step does
            if not acts_at_run_time(artifacts.variant_json):
                files[f"{folder}/{ARTIFACTS['preprocess']}"] = artifacts.preprocess_onnx
                files[f"{folder}/{ARTIFACTS['model']}"] = artifacts.model_onnx
            continue
        onnx = artifacts.preprocess_onnx if role == "preprocess" else artifacts.model_onnx
        files[f"{folder}/model.onnx"] = onnx
        if spec.backend == "python":
            files[f"{folder}/model.py"] = onnx_model_py
        if role == "model" and artifacts.variant_json is not None:
            files[f"{folder}/variant.json"] = artifacts.variant_json
    return files
