"""The canary's interval trigger: the triggerer waits out an analysis window, no worker slot held.

The trigger waits until an absolute moment (epoch seconds), so a restarted triggerer
re-created from the serialised kwargs waits only for what is left of the window.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class CanaryIntervalTrigger(BaseTrigger):
    """Fires once ``due`` (epoch seconds) has passed.

    Args:
        due: the end of the analysis window, in epoch seconds.
        model: the released model (for the triggerer's log only).
        canary_version: the canary's Triton version (for the log only).
        what: what happens when it fires (for the log only).
    """

    def __init__(self, due: float, model: str = "", canary_version: int = 0, what: str = "next analysis") -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.due = float(due)
        self.model = model
        self.canary_version = int(canary_version)
        self.what = what

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("modelops.canary.trigger.CanaryIntervalTrigger",
                {"due": self.due, "model": self.model, "canary_version": self.canary_version, "what": self.what})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        remaining = self.due - time.time()
        self.log.info("%s v%s: %s in %.1f s", self.model, self.canary_version, self.what, max(remaining, 0))
        while remaining > 0:
            await asyncio.sleep(min(remaining, 10.0))
            remaining = self.due - time.time()
        yield TriggerEvent({"due": self.due, "fired_at": time.time()})  # type: ignore[no-untyped-call]
