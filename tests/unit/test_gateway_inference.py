"""Parsing Triton's HTTP answers (binary tensor extension, JSON, chunked, errors) without a server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest

from modelops.gateway.triton.inference import TritonFailed, TritonHTTP, TritonUnavailable, _parse_scores, _read_response


def _binary_answer(scores: np.ndarray) -> tuple[dict[str, str], bytes]:
    header = json.dumps({"model_name": "m", "outputs": [{"name": "score", "datatype": "FP32",
                                                         "shape": [len(scores), 1],
                                                         "parameters": {"binary_data_size": scores.nbytes}}]}).encode()
    return {"inference-header-content-length": str(len(header))}, header + scores.astype(np.float32).tobytes()


def test_binary_scores() -> None:
    scores = np.array([0.1, 0.5, 0.9], dtype=np.float32)
    headers, body = _binary_answer(scores)
    np.testing.assert_array_equal(_parse_scores(200, headers, body, "m", 1, 3), scores)


def test_json_scores_and_wrong_count() -> None:
    body = json.dumps({"outputs": [{"name": "score", "datatype": "FP32", "shape": [2, 1],
                                    "data": [0.25, 0.75]}]}).encode()
    np.testing.assert_array_equal(_parse_scores(200, {}, body, "m", 1, 2), np.array([0.25, 0.75], np.float32))
    with pytest.raises(TritonFailed, match="2 scores for 3 items"):
        _parse_scores(200, {}, body, "m", 1, 3)


def test_errors_are_classified() -> None:
    missing = json.dumps({"error": "Request for unknown model: 'm' version 7 is not found"}).encode()
    with pytest.raises(TritonUnavailable):
        _parse_scores(400, {}, missing, "m", 7, 1)
    with pytest.raises(TritonFailed, match="HTTP 500"):
        _parse_scores(500, {}, json.dumps({"error": "division by zero"}).encode(), "m", 1, 1)
    with pytest.raises(TritonFailed, match="malformed"):
        _parse_scores(200, {}, b"not json", "m", 1, 1)


def _read(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    async def main() -> tuple[int, dict[str, str], bytes]:
        reader = asyncio.StreamReader()
        reader.feed_data(raw)
        reader.feed_eof()
        return await _read_response(reader)

    return asyncio.run(main())


def test_read_response_content_length_and_chunked() -> None:
    status, headers, body = _read(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhelloEXTRA")
    assert (status, headers["x-a"], body) == (200, "b", b"hello")
    status, _, body = _read(b"HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n"
                            b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    assert (status, body) == (400, b"abcde")


def test_request_head_is_cached_per_shape_and_the_tensor_bytes_are_fresh() -> None:
    client = TritonHTTP("http://127.0.0.1:8300")

    def parse(request: bytes) -> tuple[dict[str, str], dict[str, Any], bytes]:
        head, _, rest = request.partition(b"\r\n\r\n")
        fields = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
        size = int(fields["Inference-Header-Content-Length"])
        assert int(fields["Content-Length"]) == len(rest)
        return fields, json.loads(rest[:size]), rest[size:]

    for n in (3, 10, 3):  # a shape seen before reuses its head, a new shape gets its own
        for seed in (1, 2):
            x = np.random.default_rng(seed).random((n, 128), dtype=np.float32)
            fields, header, tensor = parse(client._request("m", 2, (("features", x),), "score"))
            assert fields["Host"] == "127.0.0.1:8300"
            assert header["inputs"] == [{"name": "features", "shape": [n, 128], "datatype": "FP32",
                                         "parameters": {"binary_data_size": x.nbytes}}]
            assert header["outputs"] == [{"name": "score", "parameters": {"binary_data": True}}]
            assert tensor == x.tobytes()
    assert len(client._heads) == 2
    other = client._request("m", 3, (("features", x),), "score")
    assert other.startswith(b"POST /v2/models/m/versions/3/infer HTTP/1.1\r\n")
    ids = np.arange(4, dtype=np.int64)
    assert b'"datatype":"INT64"' in client._request("m", 2, (("ids", ids),), "score")
