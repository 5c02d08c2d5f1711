"""The modelops Airflow plugin: small on purpose (the package is imported normally).

It mounts the release cockpit (:mod:`modelops.cockpit.app`) on the API server at
``/modelops`` and adds its pages to the UI: "Releases" in the navigation and a "Release"
tab on DAG runs (the release detail of a ``model_release`` run). It also mounts the receiver
of MLflow's release webhook (:mod:`modelops.release.webhook_app`) at ``/modelops-webhooks``:
a version given the alias ``challenger`` starts its release within seconds. The FastAPI apps
are built only when the API server asks for them, so the scheduler, the triggerer and task
processes, which load plugins too, do not import the web stack.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

PREFIX = "/modelops"


class ModelopsPlugin(AirflowPlugin):
    name = "modelops"
    external_views = [  # noqa: RUF012 (Airflow's own attribute, read per instance)
        {"name": "Releases", "href": f"{PREFIX}/releases", "destination": "nav", "url_route": "modelops-releases",
         "category": "browse"},
        {"name": "Release", "href": f"{PREFIX}/runs/{{DAG_ID}}/{{RUN_ID}}", "destination": "dag_run",
         "url_route": "modelops-release"},
    ]

    @property  # type: ignore[misc]
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        from modelops.cockpit.app import create_app
        from modelops.release import webhook_app

        return [{"app": create_app(), "url_prefix": PREFIX, "name": "modelops release cockpit"},
                {"app": webhook_app.create_app(), "url_prefix": webhook_app.PREFIX,
                 "name": "modelops MLflow webhook receiver"}]
