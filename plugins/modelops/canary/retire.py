"""After a promotion: the previous stable version stays loaded for a grace period, then is unloaded.

:class:`RetirePreviousStable` keeps it loaded in Triton for the ``stable_grace_s`` param
(routes can be flipped back to it at once), waiting in the triggerer, then unloads it
unless the routes serve it again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowSkipException

from modelops.canary.status import Phase
from modelops.canary.trigger import CanaryIntervalTrigger
from modelops.documents.routes import routed_versions

#: Seconds the previous stable version stays loaded after a promotion (``stable_grace_s`` param).
DEFAULT_STABLE_GRACE_S = 600


class RetirePreviousStable(BaseOperator):
    """Unloads the version a promotion replaced, after a grace period spent in the triggerer.

    Skipped unless ``canary_finish`` promoted a canary over a stable version. During the
    grace period the previous stable stays loaded, so routing back to it is instant; at
    its end the version is unloaded unless the routes send traffic to it again.
    """

    ui_color = "#e8f4ea"

    def __init__(self, *, finish_task_id: str = "canary_finish", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.finish_task_id = finish_task_id

    def execute(self, context: Any) -> dict[str, Any]:
        result = context["ti"].xcom_pull(task_ids=self.finish_task_id) or {}
        if result.get("phase") != Phase.PROMOTED.value or not result.get("stable_version"):
            raise AirflowSkipException(f"nothing to retire (release {result.get('phase', 'n/a')}, "
                                       f"previous stable {result.get('stable_version') or 'none'})")
        grace_s = float(context["params"].get("stable_grace_s", DEFAULT_STABLE_GRACE_S))
        due = float(result.get("ended_at") or time.time()) + grace_s
        self.log.info("%s v%s stays loaded for %.0f s after the promotion of v%s (instant rollback), then is "
                      "unloaded", result["model"], result["stable_version"], grace_s, result["canary_version"])
        if due > time.time():
            self.defer(trigger=CanaryIntervalTrigger(due, str(result["model"]), int(result["stable_version"]),
                                                     what="unload (grace period over)"),
                       method_name="retire", kwargs={"result": result})
        return self.retire(context, result=result)

    def retire(self, context: Any, event: Mapping[str, Any] | None = None,
               result: Mapping[str, Any] | None = None) -> dict[str, Any]:
        from modelops.canary.adapters import current_routes
        from modelops.config import settings
        from modelops.objectstore import ObjectStore
        from modelops.serving.api import unload_version

        assert result is not None
        model, previous = str(result["model"]), int(result["stable_version"])
        routed = routed_versions(current_routes(ObjectStore.from_settings(settings()), model))
        if previous in routed:
            self.log.info("%s v%d is routed again (%s): kept loaded", model, previous, sorted(routed))
            return {"model": model, "version": previous, "unloaded": False, "served": None}
        served = unload_version(model, previous)
        self.log.info("%s v%d unloaded after the grace period; Triton serves %s", model, previous, served)
        return {"model": model, "version": previous, "unloaded": True, "served": served}
