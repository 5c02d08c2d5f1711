"""The canary's interval trigger: the triggerer waits out an analysis window, no worker slot held.

The trigger waits until an absolute moment (epoch seconds), so a restarted triggerer
re-created from the serialised kwargs waits only for what is left of the window.

For a canary window (``gateway_urls`` given) the trigger also takes the metrics marker
that closes the window (a scrape of every gateway and Triton, or the moment for
Prometheus) when it fires, and puts it in the event: the window ends on time whatever
the worker's start-up delay, and the same marker opens the next window, so windows are
contiguous and no traffic goes unmeasured between them.

With the window's opening marker, the step's error evidence and the spec, the trigger also
looks at the traffic so far every ``check_s`` (:mod:`modelops.canary.early`) and fires as
soon as the sequential error test finds the canary bad: the rollback does not wait for the
window's end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from modelops.canary.machine import ANALYSING
from modelops.canary.runner import Release
from modelops.canary.spec import CanarySpec
from modelops.canary.status import CanaryStatus, Phase


class CanaryIntervalTrigger(BaseTrigger):
    """Fires once ``due`` (epoch seconds) has passed.

    Args:
        due: the end of the analysis window, in epoch seconds.
        model: the released model (for the triggerer's log only).
        canary_version: the canary's Triton version (for the log only).
        what: what happens when it fires (for the log only).
    """

    def __init__(self, due: float, model: str = "", canary_version: int = 0, what: str = "next analysis",
                 gateway_urls: list[str] | None = None, opened: dict[str, Any] | None = None,
                 stable_version: int = 0, spec: dict[str, Any] | None = None,
                 evidence: dict[str, float] | None = None, baseline: dict[str, Any] | None = None,
                 shadow: dict[str, Any] | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.due = float(due)
        self.model = model
        self.canary_version = int(canary_version)
        self.what = what
        self.gateway_urls = None if gateway_urls is None else list(gateway_urls)
        self.opened = opened
        self.stable_version = int(stable_version)
        self.spec = spec
        self.evidence = evidence
        self.baseline = baseline
        self.shadow = shadow  # the divergence evidence while the release is in its shadow phase
        self._look_failed = False

    @classmethod
    def for_window(cls, spec: CanarySpec, status: CanaryStatus, release: Release | None, model: str,
                   canary_version: int, gateway_urls: Sequence[str],
                   opened: Mapping[str, Any]) -> CanaryIntervalTrigger:
        """The trigger of the window ``opened`` opens: looking inside it while the release is analysed.

        Only a release being analysed (progressing, or waiting for approval) with a known stable
        version is looked at: a paused release's windows are not analysed, so cutting them short
        would only shorten them.
        """
        look: dict[str, Any] = {}
        if release is not None and status.phase in ANALYSING:
            look = {"opened": dict(opened), "stable_version": release.stable.triton_version, "spec": spec.to_dict(),
                    "evidence": status.error_evidence.to_dict(),
                    "baseline": None if status.baseline is None else status.baseline.to_dict(),
                    "shadow": status.shadow_evidence.to_dict() if status.phase is Phase.SHADOW else None}
        return cls(float(opened["at"]) + spec.interval_s, model, canary_version, gateway_urls=list(gateway_urls),
                   **look)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("modelops.canary.trigger.CanaryIntervalTrigger",
                {"due": self.due, "model": self.model, "canary_version": self.canary_version, "what": self.what,
                 "gateway_urls": self.gateway_urls, "opened": self.opened, "stable_version": self.stable_version,
                 "spec": self.spec, "evidence": self.evidence, "baseline": self.baseline, "shadow": self.shadow})

    def _check_s(self) -> float:
        """How often to look inside the window (0: not at all: no marker, spec or metrics to look with)."""
        if self.gateway_urls is None or self.opened is None or self.spec is None:
            return 0.0
        return float(self.spec.get("check_s", 0.0))

    def check_early(self) -> dict[str, Any] | None:
        """The marker closing the window now if the traffic so far already fails the error test, else None."""
        from modelops.canary.early import check_partial
        from modelops.canary.gates import Baseline
        from modelops.canary.metrics_source import metrics_source
        from modelops.canary.sequential import ErrorEvidence
        from modelops.canary.shadow import ShadowEvidence
        from modelops.config import settings

        assert self.opened is not None and self.spec is not None
        try:
            cfg = settings()
            source = metrics_source(cfg, self.gateway_urls or cfg.gateway_url_list)
            baseline = None if self.baseline is None else Baseline.from_dict(self.baseline)
            return check_partial(source, self.model, self.stable_version, self.canary_version, self.opened,
                                 CanarySpec.from_dict(self.spec), ErrorEvidence.from_dict(self.evidence), time.time(),
                                 baseline=baseline,
                                 shadow=None if self.shadow is None else ShadowEvidence.from_dict(self.shadow))
        except Exception as exc:  # looking early is an optimisation; the window's end still decides
            if not self._look_failed:  # once per window, not every second
                self.log.warning("canary %s: could not look inside the window (the window's end still "
                                 "decides): %s", self.model, exc)
            self._look_failed = True
            return None

    async def _look(self) -> dict[str, Any] | None:
        """One look, bounded by what is left of the window (a slow metrics source must not delay its end)."""
        try:
            return await asyncio.wait_for(asyncio.to_thread(self.check_early), max(self.due - time.time(), 0.01))
        except TimeoutError:
            return None

    def close_window(self) -> dict[str, Any] | None:
        """The marker that closes the window now (None if it cannot be taken: the worker measures then)."""
        from modelops.canary.metrics_source import metrics_source
        from modelops.config import settings

        try:
            cfg = settings()
            source = metrics_source(cfg, self.gateway_urls or cfg.gateway_url_list)
            marker: dict[str, Any] = source.open_window(self.model, time.time())
            return marker
        except Exception as exc:  # a marker is an optimisation; the worker measures without one
            self.log.warning("canary %s: could not close the window in the triggerer: %s", self.model, exc)
            return None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        remaining = self.due - time.time()
        self.log.info("%s v%s: %s in %.1f s", self.model, self.canary_version, self.what, max(remaining, 0))
        check_s = self._check_s()
        while remaining > 0:
            await asyncio.sleep(min(remaining, check_s or 10.0))
            if check_s and time.time() < self.due:
                early = await self._look()
                if early is not None:
                    self.log.info("%s v%s: the error test failed the canary %.1f s before the window's end",
                                  self.model, self.canary_version, self.due - time.time())
                    yield TriggerEvent({"due": self.due, "fired_at": time.time(),  # type: ignore[no-untyped-call]
                                        "closed": early, "early": True})
                    return
            remaining = self.due - time.time()
        fired_at = time.time()
        closed = None if self.gateway_urls is None else await asyncio.to_thread(self.close_window)
        yield TriggerEvent({"due": self.due, "fired_at": fired_at, "closed": closed})  # type: ignore[no-untyped-call]
