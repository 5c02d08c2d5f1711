"""Refuse, before any Triton sees it, a version whose ONNX files onnxruntime cannot open.

On the Tritons that read a mirrored repository (the embedded stack's, the CPU Triton of the
compose test override) every model runs in the python backend, which opens an ONNX file with
the same onnxruntime as here. A python model whose ``initialize`` raises is the one
failed load Triton 2.51 (the server the ``nvidia-pytriton`` wheel ships) does not reliably
survive: in the CI run of 2026-12-07 Triton took a SIGSEGV 0.06 s after "failed to load
'..._model' version 2: InvalidProtobuf", then hung 22 minutes in its exit handler with every
model of every team unserved. The stub launch after a failed ``initialize`` was mended upstream
in python_backend#408 (Triton 25.08). So a file onnxruntime cannot open is refused here, where
the refusal costs one exception, and never becomes a failed load on a shared server.

The check opens a session with graph optimisation off and one thread: it parses the model and
resolves its operators and external data, as the backend will, without the optimisation work.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def unopenable(version_dirs: Iterable[Path]) -> list[str]:
    """Each ``*.onnx`` file under these version folders that onnxruntime cannot open, with its reason."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: the reason is in the exception
    problems = []
    for folder in version_dirs:
        for path in sorted(folder.glob("*.onnx")):
            try:
                ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
            except Exception as exc:  # onnxruntime's pybind errors (InvalidProtobuf, Fail, ...) derive from Exception
                reason = " ".join(str(exc).split())
                problems.append(f"{path.parent.parent.name}/{path.parent.name}/{path.name}: onnxruntime cannot "
                                f"open it ({reason[:300]})")
    return problems
