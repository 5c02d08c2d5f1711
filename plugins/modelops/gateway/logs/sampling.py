"""Which requests' scored items (with their features) go to the scored-samples log.

The log exists for the nightly drift job, which reads at most ``max_rows`` rows per version
and day (1,000,000 by default) and samples down to that. Logging every request costs the
gateway more than anything else it does per request at high throughput (the record, its
Parquet conversion and upload: about a third of its CPU at ~1,500 requests/s), for rows the
job throws away. So two settings decide:

* ``share`` (``MODELOPS_SCORED_SAMPLE_SHARE``, default 1): the share of requests logged;
* ``max_per_s`` (``MODELOPS_SCORED_SAMPLE_MAX_PER_S``, default 200, 0: no cap): at most this
  many logged requests a second per gateway process, a token bucket of one second's worth:
  below the cap every request (of the share) is logged, as without it, and a burst of up to
  ``max_per_s`` too; above it ~``max_per_s`` a second are, the requests that find a token.

200 requests a second of 10 items is 2,000 rows a second, 173 million a day per process:
far above the drift job's 1 million a version, even for a canary at 1 % of the traffic
(1.7 million). Above the cap the sample is spread evenly over time instead of over requests
(a busy hour weighs as much as a quiet one); the baseline day is sampled the same way.

The share is drawn by a hash of the request id (:func:`sampled`: the same request id, the
same answer), the cap by the bucket; the gateway decides once per request, so an explained
answer's explanation is logged exactly when its scored sample is.
"""

from __future__ import annotations

import hashlib


def sampled(request_id: str, share: float) -> bool:
    """Whether ``request_id`` falls in the first ``share`` of the hash space (deterministic)."""
    digest = hashlib.blake2b(request_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64 < share


class ScoredSampling:
    """The share of requests logged, capped at ``max_per_s`` a second (see the module's text).

    Args:
        share: the configured share (0..1).
        max_per_s: the cap in logged requests per second (also the burst); 0 means none.
        window_s: how often :attr:`current` (the share logged lately, a metric) is recomputed.
    """

    def __init__(self, share: float, max_per_s: float, window_s: float = 1.0) -> None:
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"share: must be between 0 and 1, got {share}")
        if max_per_s < 0:
            raise ValueError(f"max_per_s: must be 0 (no cap) or positive, got {max_per_s}")
        self.share = share
        self.max_per_s = max_per_s
        self.window_s = window_s
        self.current = share  # the share of requests logged in the last window
        self._tokens = max_per_s
        self._last: float | None = None
        self._window_start: float | None = None
        self._seen = self._logged = 0

    def take(self, request_id: str, now: float) -> bool:
        """Whether to log this request's scored items; ``now`` is a monotonic clock in seconds."""
        logged = self.share >= 1.0 or (self.share > 0.0 and sampled(request_id, self.share))
        if logged and self.max_per_s > 0:
            if self._last is not None:
                self._tokens = min(self.max_per_s, self._tokens + (now - self._last) * self.max_per_s)
            self._last = now
            logged = self._tokens >= 1.0
            if logged:
                self._tokens -= 1.0
        if self._window_start is None:
            self._window_start = now
        elif now - self._window_start >= self.window_s:
            self.current = self._logged / self._seen if self._seen else self.share
            self._window_start, self._seen, self._logged = now, 0, 0
        self._seen += 1
        self._logged += logged
        return logged
