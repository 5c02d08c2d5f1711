"""`stack up` refuses to start anything when a port is taken by another program."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from modelops.config import load_settings
from modelops.errors import StackError
from modelops.stack import launcher


def test_taken_port_is_reported_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        cfg = load_settings({"MODELOPS_HOME": str(tmp_path), "MODELOPS_MLFLOW_PORT": str(port),
                             "MODELOPS_S3_PORT": "22911", "MODELOPS_TRITON_HTTP_PORT": "22912",
                             "MODELOPS_TRITON_GRPC_PORT": "22913", "MODELOPS_TRITON_METRICS_PORT": "22914",
                             "MODELOPS_AIRFLOW_PORT": "22915", "MODELOPS_GATEWAY_PORT": "22916"})
        with pytest.raises(StackError) as info:
            launcher.up(cfg, progress=lambda line: None)
    message = str(info.value)
    assert f"mlflow: port {port} on 127.0.0.1 is already in use" in message
    assert "nothing was started" in message
    assert not (tmp_path / "run").exists() or not list((tmp_path / "run").iterdir())
    assert all(s.state == "stopped" for s in launcher.status(cfg))
