"""The release's phase as a metric: a status store that pushes each phase change.

:class:`PhasePushingStore` wraps the canary's checkpoint store (any
:class:`modelops.canary.runner.StatusStore`): every save still goes to the wrapped store
first; when the saved phase differs from the last one pushed, the model's
``modelops_release_phase{version, phase}`` group is replaced on the Pushgateway, so the
``ModelopsReleaseWaitingForPerson`` alert and the Releases dashboard see it.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelops.canary.runner import Checkpoint, StatusStore
from modelops.observability.pushed import push_if_configured, release_group


@dataclass
class PhasePushingStore:
    """A :class:`StatusStore` that also pushes the phase when it changes (never fails a save)."""

    inner: StatusStore
    pushed_phase: str | None = None

    def load(self) -> Checkpoint | None:
        return self.inner.load()

    def save(self, checkpoint: Checkpoint) -> None:
        self.inner.save(checkpoint)
        status = checkpoint.status
        phase = status.phase.value
        if phase != self.pushed_phase:
            group = release_group(status.model, status.canary_version, phase)
            if push_if_configured([group], f"release {status.model} v{status.canary_version}"):
                self.pushed_phase = phase
