"""The release's phase as a metric: a status store that pushes each phase change.

:class:`PhasePushingStore` wraps the canary's checkpoint store (any
:class:`modelops.canary.runner.StatusStore`): every save still goes to the wrapped store
first; when the saved phase differs from the last one pushed, the model's
``modelops_release_phase{version, phase}`` group is replaced on the Pushgateway, so the
``ModelopsReleaseWaitingForPerson`` alert and the Releases dashboard see it.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelops.canary.machine import waits_for_person
from modelops.canary.runner import Checkpoint, StatusStore
from modelops.canary.spec import CanarySpec
from modelops.canary.status import Phase
from modelops.observability.pushed import push_if_configured, release_group


@dataclass
class PhasePushingStore:
    """A :class:`StatusStore` that also pushes the phase when it changes (never fails a save)."""

    inner: StatusStore
    pushed_phase: str | None = None
    pushed_person: bool = False
    pause_alert_s: float = CanarySpec.pause_alert_s

    def load(self) -> Checkpoint | None:
        return self.inner.load()

    def save(self, checkpoint: Checkpoint) -> None:
        self.inner.save(checkpoint)
        status = checkpoint.status
        paused = status.phase is Phase.PAUSED
        person = waits_for_person(status)
        # Pushed again when the phase changes, or whether a pause waits for a person (a person's pause
        # during an incident, or an incident beyond the automatic resumptions, changes only that).
        phase = status.phase.value
        if (phase, person) != (self.pushed_phase, self.pushed_person):
            since = next((t.at for t in reversed(status.transitions) if t.target is Phase.PAUSED), status.updated_at) \
                if paused else None
            group = release_group(status.model, status.canary_version, status.phase.value, paused_since=since,
                                  waits_for_person=person, pause_alert_s=self.pause_alert_s)
            if push_if_configured([group], f"release {status.model} v{status.canary_version}"):
                self.pushed_phase, self.pushed_person = phase, person
