"""Queue-driven instance scaling of Triton models: the decision (pure).

Input per Triton model: one :class:`Load` per served version, differenced from Triton's
counters over the controller's window (mean queue time per request from
``nv_inference_queue_duration_us`` / requests, the ``nv_inference_pending_request_count``
gauge), and the instance count the model runs now. Output: the new count.

Triton keeps one config per model, so the instance count applies to every version of that
model; the busiest version decides (a scale-up when any version is over the up threshold, a
scale-down only when every version is under the down threshold).

Rules (:func:`decide`):

- out of bounds: move into ``[min_instances, max_instances]`` at once;
- up: some version queues ``>= up_queue_ms`` per request or has ``>= up_pending`` requests
  pending → ``+ step`` (at most ``max_instances``), unless the last change is less than
  ``cooldown_s`` ago;
- down: every version queues ``<= down_queue_ms`` and nothing is pending, continuously for
  ``cooldown_s`` (the low spell starts again at any sample that is not low), and the last
  change is ``cooldown_s`` ago → ``- step`` (at least ``min_instances``);
- between the two thresholds (hysteresis): keep the count, and the low spell ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from modelops.errors import ConfigError


@dataclass(frozen=True)
class Policy:
    """Bounds, thresholds and cool-down of the controller (from the MODELOPS_SCALING_* settings)."""

    min_instances: int = 1
    max_instances: int = 4
    up_queue_ms: float = 50.0
    down_queue_ms: float = 5.0
    up_pending: int = 8
    cooldown_s: float = 30.0
    step: int = 1

    def __post_init__(self) -> None:
        problems = []
        if self.min_instances < 1:
            problems.append(f"min_instances={self.min_instances}: must be >= 1 (example: 1)")
        if self.max_instances < self.min_instances:
            problems.append(f"max_instances={self.max_instances}: must be >= min_instances={self.min_instances} "
                            f"(example: {max(self.min_instances, 4)})")
        if not self.down_queue_ms >= 0:
            problems.append(f"down_queue_ms={self.down_queue_ms}: must be >= 0 (example: 5)")
        if not self.up_queue_ms > self.down_queue_ms:
            problems.append(f"up_queue_ms={self.up_queue_ms}: must be > down_queue_ms={self.down_queue_ms} "
                            "(the gap is the hysteresis; example: 50)")
        if self.up_pending < 1:
            problems.append(f"up_pending={self.up_pending}: must be >= 1 (example: 8)")
        if not self.cooldown_s >= 0:
            problems.append(f"cooldown_s={self.cooldown_s}: must be >= 0 (example: 30)")
        if self.step < 1:
            problems.append(f"step={self.step}: must be >= 1 (example: 1)")
        if problems:
            raise ConfigError("invalid scaling policy:\n  " + "\n  ".join(problems))


@dataclass(frozen=True)
class Load:
    """One version over one window: requests finished, their mean queue time, requests pending now."""

    requests: int
    queue_ms: float
    pending: int


@dataclass(frozen=True)
class State:
    """What the controller remembers of one model between windows (monotonic seconds)."""

    last_change_at: float | None = None
    low_since: float | None = None


@dataclass(frozen=True)
class Decision:
    """The count to run (``target == current``: no change), why, and the state to keep."""

    current: int
    target: int
    reason: str
    state: State

    @property
    def changes(self) -> bool:
        return self.target != self.current


def window_load(before: Mapping[str, float], after: Mapping[str, float]) -> Load | None:
    """The :class:`Load` of one version between two scrapes of its counters.

    ``before``/``after`` hold ``queue_us`` (cumulative queue microseconds), ``requests``
    (cumulative success + failure) and ``pending`` (the gauge). None when a counter went
    backwards (the version was reloaded or Triton restarted): that window says nothing.
    """
    requests = after.get("requests", 0.0) - before.get("requests", 0.0)
    queue_us = after.get("queue_us", 0.0) - before.get("queue_us", 0.0)
    if requests < 0 or queue_us < 0:
        return None
    mean_ms = queue_us / requests / 1000.0 if requests > 0 else 0.0
    return Load(int(requests), mean_ms, int(after.get("pending", 0.0)))


def decide(policy: Policy, current: int, loads: Mapping[int, Load], state: State, now: float) -> Decision:
    """The instance count of one model after this window (see the module doc for the rules).

    Args:
        policy: bounds, thresholds, cool-down.
        current: the count Triton runs now.
        loads: version → its load in this window (versions without a usable window left out).
        state: what the previous decisions left.
        now: monotonic seconds.
    """
    if current < policy.min_instances or current > policy.max_instances:
        target = min(max(current, policy.min_instances), policy.max_instances)
        return Decision(current, target, f"outside the bounds [{policy.min_instances}, {policy.max_instances}]",
                        State(last_change_at=now))
    cooling = state.last_change_at is not None and now - state.last_change_at < policy.cooldown_s
    busiest = max(loads.items(), key=lambda item: (item[1].queue_ms, item[1].pending), default=None)
    if busiest is None:  # no usable window (first scrape, reload): nothing is known, nothing changes
        return Decision(current, current, "no samples", replace(state, low_since=None))
    version, load = busiest
    high = load.queue_ms >= policy.up_queue_ms or any(x.pending >= policy.up_pending for x in loads.values())
    low = all(x.queue_ms <= policy.down_queue_ms and x.pending == 0 for x in loads.values())
    seen = f"version {version}: queue {load.queue_ms:.1f} ms/request over {load.requests} requests, " \
           f"{max(x.pending for x in loads.values())} pending"
    if high:
        if current >= policy.max_instances:
            return Decision(current, current, f"{seen}; at max_instances", State(state.last_change_at, None))
        if cooling:
            return Decision(current, current, f"{seen}; cooling down", State(state.last_change_at, None))
        target = min(current + policy.step, policy.max_instances)
        return Decision(current, target, f"{seen} >= up threshold ({policy.up_queue_ms:g} ms or "
                        f"{policy.up_pending} pending)", State(now, None))
    if not low:  # between the thresholds: hold, and a low spell must start over
        return Decision(current, current, f"{seen}; between the thresholds", State(state.last_change_at, None))
    low_since = state.low_since if state.low_since is not None else now
    if current <= policy.min_instances:
        return Decision(current, current, f"{seen}; at min_instances", State(state.last_change_at, low_since))
    if cooling or now - low_since < policy.cooldown_s:
        return Decision(current, current, f"{seen}; low for {now - low_since:.0f} s of {policy.cooldown_s:g} s",
                        State(state.last_change_at, low_since))
    target = max(current - policy.step, policy.min_instances)
    return Decision(current, target, f"low for {now - low_since:.0f} s (queue <= {policy.down_queue_ms:g} ms, "
                    "nothing pending)", State(now, None))
