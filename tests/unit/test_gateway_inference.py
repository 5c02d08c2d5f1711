"""Parsing Triton's HTTP answers (binary tensor extension, JSON, chunked, errors) without a server."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from modelops.gateway.inference import TritonFailed, TritonUnavailable, _parse_scores, _read_response


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
