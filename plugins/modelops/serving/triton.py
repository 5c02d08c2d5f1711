"""A thin client of Triton's HTTP API (KServe v2 + repository extension).

Every failure (connection, HTTP status, malformed answer) becomes
:class:`~modelops.errors.ServingError` naming the call and Triton's own message.

A production Triton restricts its model-repository API (``--http-restricted-api=model-repository:
admin-key=KEY``, docker/triton-serve.sh): the repository calls (index, load, unload) carry the header
:data:`ADMIN_HEADER` with the configured key (MODELOPS_TRITON_ADMIN_KEY or its file); inference,
health, metadata and statistics never do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt
import requests

from modelops.config import Settings, settings
from modelops.credentials import triton_admin_key
from modelops.errors import ServingError

Array = npt.NDArray[Any]

ADMIN_HEADER = "admin-key"
"""The header Triton's restricted repository API checks (the key of ``--http-restricted-api``)."""

_NP_TO_TRITON: dict[np.dtype[Any], str] = {
    np.dtype(np.float32): "FP32", np.dtype(np.float64): "FP64", np.dtype(np.int64): "INT64",
    np.dtype(np.int32): "INT32", np.dtype(np.bool_): "BOOL",
}
_TRITON_TO_NP: dict[str, np.dtype[Any]] = {v: k for k, v in _NP_TO_TRITON.items()}


@dataclass(frozen=True)
class ModelState:
    """One row of Triton's repository index."""

    name: str
    version: int | None
    state: str
    reason: str = ""


@dataclass(frozen=True)
class TritonClient:
    """Triton over HTTP; ``base_url`` like ``http://127.0.0.1:8300``."""

    base_url: str
    timeout_s: float = 10.0
    load_timeout_s: float = 120.0
    headers: Mapping[str, str] = field(default_factory=dict)
    admin_key: str | None = None
    """Key of the restricted repository API: None reads the configured one when first needed, "" sends none."""

    @classmethod
    def from_settings(cls, cfg: Settings | None = None) -> TritonClient:
        """The configured Triton; with several servers (a ``dns+`` URL) the first: see :func:`triton_clients`."""
        return cls((cfg or settings()).triton_url_list[0])

    @cached_property
    def session(self) -> requests.Session:
        session = requests.Session()
        session.headers.update(dict(self.headers))
        return session

    @cached_property
    def _admin_headers(self) -> dict[str, str]:
        try:
            key = triton_admin_key(settings()) if self.admin_key is None else self.admin_key
        except OSError as exc:
            raise ServingError(f"Triton admin key: {exc} (MODELOPS_TRITON_ADMIN_KEY_FILE)") from exc
        return {ADMIN_HEADER: key} if key else {}

    def _call(self, method: str, path: str, *, body: Any = None, timeout: float | None = None,
              ok: tuple[int, ...] = (200,), admin: bool = False) -> requests.Response:
        url = f"{self.base_url.rstrip('/')}{path}"
        try:
            headers = self._admin_headers if admin else None
            response = self.session.request(method, url, json=body, timeout=timeout or self.timeout_s,
                                            headers=headers)
        except requests.RequestException as exc:
            raise ServingError(f"Triton {method} {url}: {exc}") from exc
        if response.status_code not in ok:
            raise ServingError(f"Triton {method} {url}: HTTP {response.status_code}: {_error_text(response)}")
        return response

    # -- health ---------------------------------------------------------------------------
    def is_ready(self) -> bool:
        """Whether the server answers ready (False when unreachable)."""
        try:
            return self._call("GET", "/v2/health/ready", ok=(200, 400)).status_code == 200
        except ServingError:
            return False

    def is_model_ready(self, model: str, version: int) -> bool:
        try:
            response = self._call("GET", f"/v2/models/{model}/versions/{version}/ready", ok=(200, 400, 404))
        except ServingError:
            return False
        return response.status_code == 200

    # -- repository -----------------------------------------------------------------------
    def repository_index(self) -> list[ModelState]:
        rows = self._json(self._call("POST", "/v2/repository/index", body={}, admin=True))
        if not isinstance(rows, list):
            raise ServingError(f"Triton repository index: expected a list, got {type(rows).__name__}")
        return [
            ModelState(str(r.get("name")), int(r["version"]) if str(r.get("version", "")).isdigit() else None,
                       str(r.get("state", "")), str(r.get("reason", "")))
            for r in rows
        ]

    def ready_versions(self, model: str) -> list[int]:
        """Versions of ``model`` Triton reports READY, ascending."""
        return sorted(
            row.version for row in self.repository_index()
            if row.name == model and row.state == "READY" and row.version is not None
        )

    def load(self, model: str, config: Mapping[str, Any] | None = None) -> None:
        """Load (or reload) ``model``; ``config`` is Triton's JSON model config used instead of the file."""
        body: dict[str, Any] = {}
        if config is not None:
            body = {"parameters": {"config": json.dumps(config)}}
        self._call("POST", f"/v2/repository/models/{model}/load", body=body, timeout=self.load_timeout_s,
                   admin=True)

    def unload(self, model: str) -> None:
        self._call("POST", f"/v2/repository/models/{model}/unload", body={}, timeout=self.load_timeout_s,
                   admin=True)

    def model_config(self, model: str, version: int | None = None) -> dict[str, Any]:
        """The config Triton uses for ``model`` (of one loaded ``version`` when given)."""
        path = f"/v2/models/{model}/config" if version is None else f"/v2/models/{model}/versions/{version}/config"
        doc = self._json(self._call("GET", path))
        if not isinstance(doc, dict):
            raise ServingError(f"Triton config of {model}: expected an object")
        return doc

    # -- inference --------------------------------------------------------------------------
    def infer(self, model: str, version: int, inputs: Mapping[str, Array],
              outputs: tuple[str, ...]) -> dict[str, Array]:
        """Run one request on an explicit version; returns output name → array."""
        body = {
            "inputs": [
                {"name": name, "shape": list(arr.shape), "datatype": _datatype(arr),
                 "data": arr.ravel().tolist()}
                for name, arr in inputs.items()
            ],
            "outputs": [{"name": name} for name in outputs],
        }
        doc = self._json(self._call("POST", f"/v2/models/{model}/versions/{version}/infer", body=body))
        try:
            result = {}
            for out in doc["outputs"]:
                dtype: np.dtype[Any] | None = _TRITON_TO_NP.get(out["datatype"])
                if dtype is None:
                    raise ServingError(f"Triton {model} v{version}: unsupported type {out['datatype']}")
                result[out["name"]] = np.asarray(out["data"], dtype=dtype).reshape(out["shape"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ServingError(f"Triton {model} v{version}: malformed inference answer ({exc})") from exc
        return result

    def _json(self, response: requests.Response) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            raise ServingError(f"Triton {response.url}: answer is not JSON ({exc})") from exc


def triton_clients(cfg: Settings | None = None, **options: Any) -> list[TritonClient]:
    """One client per configured Triton server (MODELOPS_TRITON_URL's ``dns+`` name resolved now).

    Raises:
        ConfigError: a ``dns+`` name that resolves to no server.
    """
    return [TritonClient(url, **options) for url in (cfg or settings()).triton_url_list]


def _datatype(arr: Array) -> str:
    try:
        return _NP_TO_TRITON[arr.dtype]
    except KeyError:
        raise ServingError(f"unsupported input dtype {arr.dtype} (example: float32)") from None


def _error_text(response: requests.Response) -> str:
    try:
        doc = response.json()
    except ValueError:
        return response.text[:500]
    return str(doc.get("error", doc)) if isinstance(doc, dict) else str(doc)[:500]
