"""The pre-flight that keeps an unopenable ONNX file away from Triton (``modelops.serving.preflight``)."""

from __future__ import annotations

from pathlib import Path

from modelops.serving.preflight import unopenable
from modelops.serving.testing import broken_artifacts, fixture_artifacts


def _version(root: Path, model: str, data: bytes) -> Path:
    folder = root / model / "3"
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(data)
    (folder / "model.py").write_text("# not an ONNX file: never opened\n")
    return folder


def test_files_onnxruntime_opens_pass(tmp_path: Path) -> None:
    good = fixture_artifacts(5)
    folders = [_version(tmp_path, "m_preprocess", good.preprocess_onnx), _version(tmp_path, "m_model", good.model_onnx)]
    assert unopenable(folders) == []


def test_an_unparsable_file_is_named_with_onnxruntimes_reason(tmp_path: Path) -> None:
    broken = broken_artifacts(6)
    folders = [_version(tmp_path, "m_preprocess", broken.preprocess_onnx),
               _version(tmp_path, "m_model", broken.model_onnx)]
    problems = unopenable(folders)
    assert len(problems) == 1, problems
    assert problems[0].startswith("m_model/3/model.onnx: onnxruntime cannot open it (")
    assert "INVALID_PROTOBUF" in problems[0]


def test_a_truncated_model_is_refused(tmp_path: Path) -> None:
    data = fixture_artifacts(7).model_onnx
    problems = unopenable([_version(tmp_path, "m_model", data[: len(data) // 2])])
    assert len(problems) == 1 and "m_model/3/model.onnx" in problems[0], problems
