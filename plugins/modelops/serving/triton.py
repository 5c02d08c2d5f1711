"""The platform's client of Triton's HTTP API (KServe v2 + repository extension), on ``tritonclient.http``.

Every failure (connection, HTTP status, malformed answer) becomes
:class:`~modelops.errors.ServingError` naming the call and Triton's own message.

``tritonclient.http.InferenceServerClient`` is not thread-safe (its docstring: "intended to be used by a
single thread"); the publisher loads a model's two graphs from two threads and the reconciler serves
several Tritons at once, so each thread (and each forked process) gets its own library client
(:mod:`modelops.serving.triton_library`, which also closes it after its thread). Repository calls that
load or unload use a second one whose network timeout is the load timeout.

A production Triton restricts its model-repository API (``--http-restricted-api=model-repository:
admin-key=KEY``, docker/triton-serve.sh): the repository calls (index, load, unload) carry the header
:data:`ADMIN_HEADER` with the configured key (MODELOPS_TRITON_ADMIN_KEY or its file); inference,
health, metadata and statistics never do.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar
from urllib.parse import urlsplit

import gevent
import numpy.typing as npt
import requests
from tritonclient import http as triton_http
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from modelops.config import Settings, settings
from modelops.credentials import triton_admin_key
from modelops.errors import ServingError
from modelops.serving.triton_library import library_client

Array = npt.NDArray[Any]
T = TypeVar("T")

ADMIN_HEADER = "admin-key"
"""The header Triton's restricted repository API checks (the key of ``--http-restricted-api``)."""

_DATATYPES = {"FP32", "FP64", "INT64", "INT32", "BOOL", "BYTES"}


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
        """Plain HTTP to the same server, for endpoints this client does not wrap (diagnostics, tests)."""
        session = requests.Session()
        session.headers.update(dict(self.headers))
        return session

    def _library(self, *, long: bool = False) -> triton_http.InferenceServerClient:
        """This thread's (and process's) library client; ``long``: the one with the load timeout."""
        parts = urlsplit(self.base_url)
        timeout = self.load_timeout_s if long else self.timeout_s
        return library_client(f"{parts.netloc}{parts.path.rstrip('/')}", ssl=parts.scheme == "https",
                              connection_timeout=min(timeout, self.timeout_s), network_timeout=timeout)

    @cached_property
    def _admin_headers(self) -> dict[str, str]:
        try:
            key = triton_admin_key(settings()) if self.admin_key is None else self.admin_key
        except OSError as exc:
            raise ServingError(f"Triton admin key: {exc} (MODELOPS_TRITON_ADMIN_KEY_FILE)") from exc
        return {ADMIN_HEADER: key} if key else {}

    def _headers(self, *, admin: bool = False) -> dict[str, str] | None:
        merged = {**self.headers, **(self._admin_headers if admin else {})}
        return merged or None

    def _call(self, what: str, call: Callable[[triton_http.InferenceServerClient], T], *, long: bool = False) -> T:
        """One library call; its errors as :class:`ServingError` naming ``what`` and Triton's message."""
        with _translated(f"Triton {what} at {self.base_url}"):
            return call(self._library(long=long))

    # -- health ---------------------------------------------------------------------------
    def is_ready(self) -> bool:
        """Whether the server answers ready (False when unreachable)."""
        try:
            return self._call("health", lambda c: bool(c.is_server_ready(headers=self._headers())))
        except ServingError:
            return False

    def is_model_ready(self, model: str, version: int) -> bool:
        try:
            return self._call(f"{model} v{version} ready", lambda c: bool(
                c.is_model_ready(model, model_version=str(version), headers=self._headers())))
        except ServingError:
            return False

# -- repository -----------------------------------------------------------------------
    def repository_index(self) -> list[ModelState]:
        rows = self._call("repository index", lambda c: c.get_model_repository_index(
            headers=self._headers(admin=True)))
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
        text = None if config is None else json.dumps(config)
        self._call(f"load {model}", lambda c: c.load_model(model, headers=self._headers(admin=True), config=text),
                   long=True)

    def unload(self, model: str) -> None:
        self._call(f"unload {model}", lambda c: c.unload_model(model, headers=self._headers(admin=True)), long=True)

    def model_config(self, model: str, version: int | None = None) -> dict[str, Any]:
        """The config Triton uses for ``model`` (of one loaded ``version`` when given)."""
        doc = self._call(f"config of {model}", lambda c: c.get_model_config(
            model, model_version="" if version is None else str(version), headers=self._headers()))
        if not isinstance(doc, dict):
            raise ServingError(f"Triton config of {model}: expected an object")
        return doc

    # -- inference --------------------------------------------------------------------------
    def infer(self, model: str, version: int, inputs: Mapping[str, Array],
              outputs: tuple[str, ...]) -> dict[str, Array]:
        """Run one request on an explicit version (binary tensors); returns output name → array."""
        tensors = []
        for name, arr in inputs.items():
            tensor = triton_http.InferInput(name, list(arr.shape), _datatype(arr))
            tensor.set_data_from_numpy(arr, binary_data=True)
            tensors.append(tensor)
        wanted = [triton_http.InferRequestedOutput(name, binary_data=True) for name in outputs]
        result = self._call(f"{model} v{version} inference", lambda c: c.infer(
            model, tensors, model_version=str(version), outputs=wanted, headers=self._headers()))
        answers = {}
        for name in outputs:
            array = result.as_numpy(name)
            if array is None:
                raise ServingError(f"Triton {model} v{version}: malformed inference answer (no output {name!r})")
            answers[name] = array
        return answers


def triton_clients(cfg: Settings | None = None, **options: Any) -> list[TritonClient]:
    """One client per configured Triton server (MODELOPS_TRITON_URL's ``dns+`` name resolved now).

    Raises:
        ConfigError: a ``dns+`` name that resolves to no server.
    """
    return [TritonClient(url, **options) for url in (cfg or settings()).triton_url_list]


def _datatype(arr: Array) -> str:
    kind = np_to_triton_dtype(arr.dtype)
    if kind not in _DATATYPES:
        raise ServingError(f"unsupported input dtype {arr.dtype} (example: float32)")
    return str(kind)


@contextmanager
def _translated(what: str) -> Iterator[None]:
    """The library's and the network's errors as :class:`ServingError` (Triton's own message kept)."""
    try:
        yield
    except InferenceServerException as exc:
        status = f"HTTP {exc.status()}: " if exc.status() else ""
        raise ServingError(f"{what}: {status}{exc.message()}") from exc
    except (OSError, gevent.Timeout, http.client.HTTPException) as exc:
        # HTTPException: geventhttpclient's HTTPConnectionClosed / HTTPParseError (a server killed mid-call
        # resets the connection); untranslated, it once ended the reconciler's process after a Triton kill.
        raise ServingError(f"{what}: {type(exc).__name__}: {exc}") from exc
