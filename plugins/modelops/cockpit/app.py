"""The cockpit's FastAPI app, mounted by the plugin on Airflow's API server at ``/modelops``.

Airflow does not authenticate a plugin's app: every route takes the logged-in user through
Airflow's own ``GetUserDep`` (the UI's session cookie or a bearer token; 401 without one)
and asks the auth manager: reading needs read access to ``model_release`` runs; Pause /
Resume / Abort need to create ``model_release_control`` runs, Approve / Reject need to
answer ``model_release``'s Required Actions (403 otherwise, with a message that says so).

Actions go through Airflow's REST API with the user's own token, so Airflow records and
authorizes them as that user. The forms carry a CSRF token bound to the session (an HMAC of
it), and a cross-site Origin is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import threading
import time
import uuid
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from modelops.canary import record_store
from modelops.canary.approval import APPROVAL_TASK, hitl_path
from modelops.canary.record import ReleaseRecord
from modelops.canary.shadow_stage import SHADOW_APPROVAL_TASK
from modelops.cockpit import store as cockpit_store
from modelops.cockpit import views

RELEASE_DAG, CONTROL_DAG = "model_release", "model_release_control"
CONTROL_ACTIONS = ("pause", "resume", "abort")
APPROVAL_ACTIONS = {"approve": "Approve", "reject": "Reject"}
PREFIX = "/modelops"
TOKEN_COOKIE = "_token"


@lru_cache(maxsize=1)
def _templates() -> Any:
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    return Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                       autoescape=select_autoescape(["html"]))


def _render(name: str, status_code: int = 200, **values: Any) -> HTMLResponse:
    values.setdefault("links", _links())
    return HTMLResponse(_templates().get_template(name).render(**values), status_code=status_code)


def _links() -> views.Links:
    from modelops.config import settings

    return views.Links(mlflow_ui=settings().mlflow_uri, cockpit=PREFIX)


def _store() -> Any:
    from modelops.objectstore import ObjectStore

    return ObjectStore.from_settings()


# ------------------------------------------------------------------ identity and permissions
def user_name(user: Any) -> str:
    return str(user.get_name())


def allowed(user: Any, action: str) -> bool:
    """Whether the auth manager lets ``user`` read the cockpit (``read``) or take ``action``."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    manager = get_auth_manager()
    if action == "read":
        return bool(manager.is_authorized_dag(method="GET", access_entity=DagAccessEntity.RUN,
                                              details=DagDetails(id=RELEASE_DAG), user=user))
    if action in APPROVAL_ACTIONS:
        return bool(manager.is_authorized_dag(method="PUT", access_entity=DagAccessEntity.HITL_DETAIL,
                                              details=DagDetails(id=RELEASE_DAG), user=user))
    return bool(manager.is_authorized_dag(method="POST", access_entity=DagAccessEntity.RUN,
                                          details=DagDetails(id=CONTROL_DAG), user=user))


def _require(user: Any, action: str) -> None:
    if not allowed(user, action):
        what = "read model releases" if action == "read" else f"{action} a release"
        need = {"read": f"read access to {RELEASE_DAG} runs",
                **{a: f"answering {RELEASE_DAG}'s Required Actions" for a in APPROVAL_ACTIONS}}.get(
            action, f"creating {CONTROL_DAG} runs")
        raise HTTPException(403, f"{user_name(user)} may not {what}: the auth manager does not grant {need} "
                                 "(a viewer can read the cockpit; an op or admin can act)")


def _session_token(request: Request) -> str:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return request.cookies.get(TOKEN_COOKIE, "")


@lru_cache(maxsize=1)
def _csrf_key() -> bytes:
    from airflow.configuration import conf

    secret = conf.get("api_auth", "jwt_secret", fallback="") or conf.get("core", "fernet_key", fallback="")
    return hashlib.sha256(("modelops-cockpit-csrf:" + secret).encode()).digest()


def csrf_token(session_token: str) -> str:
    """The form token of a session: an HMAC of its JWT (a forged cross-site form cannot know it)."""
    return hmac.new(_csrf_key(), session_token.encode(), hashlib.sha256).hexdigest()


def _check_csrf(request: Request, submitted: str) -> None:
    """Refuse a cookie-authenticated form that is cross-site or lacks this session's token.

    A bearer token in the Authorization header is not ambient (no other site can make a browser
    send it), so API clients that send one need no form token.
    """
    if request.headers.get("authorization", "").lower().startswith("bearer "):
        return
    origin = request.headers.get("origin") or request.headers.get("referer") or ""
    if origin and urlsplit(origin).netloc != request.headers.get("host", ""):
        raise HTTPException(403, f"cross-site request refused (Origin {origin!r} is not this server)")
    if not submitted or not hmac.compare_digest(submitted, csrf_token(_session_token(request))):
        raise HTTPException(403, "CSRF token missing or not this session's: reload the page and press again")


# ------------------------------------------------------------------ actions through Airflow's REST API
def _airflow(request: Request, method: str, path: str, **kwargs: Any) -> Any:
    import requests

    from modelops.config import settings

    response = requests.request(method, f"{settings().airflow_api_url}{path}", timeout=30,
                                headers={"Authorization": f"Bearer {_session_token(request)}"}, **kwargs)
    if response.status_code >= 400:
        raise HTTPException(response.status_code if response.status_code in (401, 403, 404, 409) else 502,
                            f"Airflow refused {method} {path}: HTTP {response.status_code} {response.text[:300]}")
    return response.json() if response.content else None


def _approval_path(record: ReleaseRecord) -> str:
    task = SHADOW_APPROVAL_TASK if record.approval_for == "shadow" else APPROVAL_TASK  # the one that asks now
    return hitl_path(RELEASE_DAG, record.run_id, task)


def approval_open(request: Request, record: ReleaseRecord) -> bool:
    """Whether the release's Required Action exists yet (the canary reports waiting_approval a moment
    before the approval task has asked)."""
    try:
        detail = _airflow(request, "GET", _approval_path(record))
    except HTTPException:
        return False
    return bool(detail) and not detail.get("response_received")


def take_action(request: Request, user: Any, record: ReleaseRecord, action: str, reason: str) -> str:
    """Carry out one action as ``user``; returns what was done, for the page's message."""
    who = user_name(user)
    if action in APPROVAL_ACTIONS:
        if not approval_open(request, record):
            raise HTTPException(409, f"the approval of {record.model} v{record.canary_version} is not open yet "
                                     "(the approval task asks a few seconds after the canary waits): reload and "
                                     "press again")
        _airflow(request, "PATCH", _approval_path(record),
                 json={"chosen_options": [APPROVAL_ACTIONS[action]], "params_input": {}})
        return f"{action} recorded for {record.model} v{record.canary_version} as {who}"
    dag = _airflow(request, "GET", f"/api/v2/dags/{CONTROL_DAG}")
    if dag and dag.get("is_paused"):
        _airflow(request, "PATCH", f"/api/v2/dags/{CONTROL_DAG}", json={"is_paused": False})
    conf = {"model": record.model, "version": record.canary_version, "action": action, "reason": reason,
            "requested_by": who}
    run = _airflow(request, "POST", f"/api/v2/dags/{CONTROL_DAG}/dagRuns",
                   json={"logical_date": None, "conf": conf,
                         "dag_run_id": f"cockpit-{action}-{uuid.uuid4().hex[:8]}"})
    when = ("at once (the release waits for approval: the abort answers it)"
            if action == "abort" and record.phase == "waiting_approval" else "at its next analysis window")
    return (f"{action} requested for {record.model} v{record.canary_version} as {who} "
            f"(run {run['dag_run_id']}); the release applies it {when}")


# ------------------------------------------------------------------ the app
_SECTIONS: dict[tuple[str, str], tuple[Any, views.ModelRow, str]] = {}  # (bucket, model) -> (key, row, html)
_SECTIONS_LOCK = threading.Lock()


def _model_section(store: Any, data: cockpit_store.Overview, model: str,
                   links: views.Links) -> tuple[views.ModelRow, str]:
    """One model's row and rendered history, reused while its two documents keep their ETags."""
    versions = data.versions.get(model)
    cacheable = getattr(store, "client", None) is not None and versions is not None
    key = (versions, links)
    if cacheable:
        with _SECTIONS_LOCK:
            hit = _SECTIONS.get((store.bucket, model))
        if hit is not None and hit[0] == key:
            return hit[1], hit[2]
    row = views.model_row(model, data.routes.get(model), data.releases.get(model, ()), links)
    html = _templates().get_template("history.html").render(m=row)
    if cacheable:
        with _SECTIONS_LOCK:
            _SECTIONS[(store.bucket, model)] = (key, row, html)
    return row, html


def releases_page(store: Any, user: str, links: views.Links | None = None) -> HTMLResponse:
    """The Releases page: every model's routes and release index (only changed documents are
    read and rendered again), the serving table and each model's history."""
    data = cockpit_store.overview(store)
    links = links or _links()
    parts = [_model_section(store, data, m, links) for m in sorted(set(data.routes) | set(data.releases))]
    return _render("releases.html", title="Releases", models=[r for r, _ in parts],
                   sections=[h for _, h in parts], user=user, links=links)


def overview_json(data: cockpit_store.Overview) -> dict[str, Any]:
    """The Releases page's data as JSON: per model, its routes and its release summaries."""
    def routes(r: Any) -> dict[str, Any] | None:
        if r is None:
            return None
        return {"stable": r.stable.version, "stable_sha256": r.stable.sha256,
                "canary": r.canary.version if r.canary else None, "canary_weight": r.canary_weight,
                "revision": r.revision, "updated_at": r.updated_at}

    return {"models": {m: {"routes": routes(data.routes.get(m)),
                           "releases": [x.to_dict(windows=False) for x in data.releases.get(m, [])]}
                       for m in sorted(set(data.routes) | set(data.releases))}}


def _record_or_404(model: str, version: int) -> ReleaseRecord:
    record = record_store.load_record(_store(), model, version)
    if record is None:
        raise HTTPException(404, f"no release of {model} v{version} is recorded")
    return record


def _detail(model: str, version: int) -> tuple[ReleaseRecord, views.Detail]:
    from modelops.config import settings
    from modelops.registry.mlflow_registry import MlflowRegistry

    store = _store()
    record = _record_or_404(model, version)
    status = cockpit_store.checkpoint_status(store, model, version) if record.stable_version else None
    contract: dict[str, str] = {}
    if record.mlflow_version:
        try:
            info = MlflowRegistry.from_settings().get(model, record.mlflow_version)
            contract = cockpit_store.contract(info.tags, info.run_id, settings().mlflow_uri)
        except Exception as exc:  # the page still shows the release without MLflow
            contract = {"result": f"MLflow unavailable ({type(exc).__name__})"}
    return record, views.detail(record, status, _links(), contract)


def create_app() -> FastAPI:
    app = FastAPI(title="modelops release cockpit", docs_url=None, redoc_url=None, openapi_url=None)

    @app.middleware("http")
    async def server_timing(request: Request, call_next: Any) -> Response:
        started = time.perf_counter()
        response: Response = await call_next(request)
        response.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.1f}"
        response.headers["X-Frame-Options"] = "SAMEORIGIN"
        return response

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        if request.url.path.startswith(f"{PREFIX}/api/") or "text/html" not in request.headers.get("accept", ""):
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)
        return _render("message.html", exc.status_code, title=f"HTTP {exc.status_code}", message=exc.detail)

    @app.get("/", include_in_schema=False)
    def index() -> RedirectResponse:
        return RedirectResponse(f"{PREFIX}/releases")

    @app.get("/releases", response_class=HTMLResponse)
    def releases(user: GetUserDep) -> HTMLResponse:
        _require(user, "read")
        return releases_page(_store(), user_name(user))

    @app.get("/api/releases")
    def releases_json(user: GetUserDep) -> dict[str, Any]:
        _require(user, "read")
        return overview_json(cockpit_store.overview(_store()))

    @app.get("/releases/{model}/{version}", response_class=HTMLResponse)
    def release_detail(model: str, version: int, request: Request, user: GetUserDep,
                       msg: str = "", error: int = 0) -> HTMLResponse:
        _require(user, "read")
        _, d = _detail(model, version)
        if "approve" in d.actions and not approval_open(request, d.record):
            d = dataclasses.replace(d, actions=tuple(a for a in d.actions if a not in APPROVAL_ACTIONS))
            msg = msg or "The release waits for approval; the approval request opens in a moment (reload)."
        return _render("detail.html", title=d.title, d=d, user=user_name(user), flash=msg, flash_error=bool(error),
                       csrf=csrf_token(_session_token(request)),
                       action_url=f"{PREFIX}/releases/{quote(model, safe='')}/{version}")

    @app.get("/api/releases/{model}/{version}")
    def release_json(model: str, version: int, user: GetUserDep) -> dict[str, Any]:
        _require(user, "read")
        record, d = _detail(model, version)
        return {**record.to_dict(), "actions": list(d.actions), "mttr": d.mttr, "mttr_how": d.mttr_how,
                "contract": {"result": d.contract, "url": d.contract_url},
                "timeline": [vars(t) for t in d.timeline]}

    @app.get("/runs/{dag_id}/{run_id}", response_class=HTMLResponse)
    def run_tab(dag_id: str, run_id: str, user: GetUserDep) -> Response:
        _require(user, "read")
        record = cockpit_store.find_run(_store(), dag_id, run_id)
        if record is None:
            return _render("message.html", title="Release", message=(
                f"Run {run_id} of {dag_id} has no canary release recorded (yet): the release appears here once "
                "its canary starts; a run stopped at the contract gate or at publish has none."))
        return RedirectResponse(f"{PREFIX}/releases/{quote(record.model, safe='')}/{record.canary_version}",
                                status_code=303)

    @app.post("/releases/{model}/{version}/{action}")
    async def act(model: str, version: int, action: str, request: Request, user: GetUserDep) -> Response:
        if action not in (*CONTROL_ACTIONS, *APPROVAL_ACTIONS):
            raise HTTPException(400, f"action={action!r}: one of {', '.join((*CONTROL_ACTIONS, *APPROVAL_ACTIONS))}")
        form = {k: v[-1] for k, v in parse_qs((await request.body()).decode("utf-8", "replace")).items()}
        _require(user, action)
        _check_csrf(request, form.get("csrf", ""))
        record = _record_or_404(model, version)
        if action not in views.available_actions(record):
            possible = ", ".join(views.available_actions(record)) or "none"
            raise HTTPException(409, f"{action} is not possible while the release of {model} v{version} is "
                                     f"{record.phase} (possible: {possible})")
        from starlette.concurrency import run_in_threadpool

        done = await run_in_threadpool(take_action, request, user, record, action, form.get("reason", ""))
        target = f"{PREFIX}/releases/{quote(model, safe='')}/{version}?msg={quote(done)}"
        if "application/json" in request.headers.get("accept", ""):
            return JSONResponse({"detail": done}, status_code=202)
        return RedirectResponse(target, status_code=303)

    @app.get("/lineage/{model}/{version}", response_class=HTMLResponse)
    def lineage_page(model: str, version: str, user: GetUserDep) -> HTMLResponse:
        _require(user, "read")
        from modelops.errors import RegistryError
        from modelops.registry.mlflow_registry import MlflowRegistry

        store = _store()
        try:
            info = MlflowRegistry.from_settings().get(model, version)
        except RegistryError as exc:
            raise HTTPException(404, f"MLflow has no version {version} of {model}: {exc}") from exc
        triton = info.tags.get("modelops.triton_version", "")
        page = views.lineage(
            model, version, info.stage, info.aliases, info.run_id, info.tags,
            cockpit_store.model_info(store, info.tags.get("modelops.triton_repository", ""), model, triton),
            record_store.model_releases(store, model),
            record_store.latest_drift(store, model, triton) if triton else {},
            _links())
        contract = cockpit_store.contract(info.tags, info.run_id, _links().mlflow_ui)
        page = views.Lineage(**{**vars(page), "contract_url": contract["url"]})
        return _render("lineage.html", title=f"{model} v{version}", l=page)

    return app
