"""The gateway's tuning options, and how ``modelops gateway serve`` hands them to uvicorn's workers."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

OPTIONS_ENV = "_MODELOPS_GATEWAY_OPTIONS"
"""Internal: how ``modelops gateway serve`` hands its options to uvicorn's worker processes."""

@dataclass(frozen=True)
class GatewayOptions:
    """Gateway tuning; module defaults until they become settings (see the report to the lead)."""

    max_body_bytes: int = 2 * 1024 * 1024
    max_deadline_ms: float = 2000.0
    routes_poll_s: float = 0.5
    features_poll_s: float = 5.0
    retry_after_s: int = 1
    collapse_threshold: float = 0.005
    collapse_hold_s: float = 300.0
    collapse_min_scores: int = 50
    score_window_s: int = 60
    segment_max_bytes: int = 8 * 1024 * 1024
    segment_max_age_s: float = 10.0
    spool_budget_bytes: int = 1024 * 1024 * 1024
    spool_dir: str = ""  # empty: <MODELOPS_HOME>/gateway/spool
    triton_stats_poll_s: float = 1.0  # Triton's per-version statistics, for the delay origin's queue/compute split
    drill_feature_delay_ms: float = 0.0  # fault drill: added to every feature lookup (tests of X-Delay-Origin)
    explain_permutations: int = 2  # Shapley sampling: permutations per item (antithetic pairs) for explain=true
    explain_concurrency: int = 8  # Triton calls in flight per explained request
    shadow_max_in_flight: int = 32  # mirrored calls to a shadow version in flight at once; more are dropped, counted
    shadow_timeout_ms: float = 2000.0  # a mirrored call unanswered by then fails (timeout) and frees its slot

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> GatewayOptions:
        raw = os.environ.get(OPTIONS_ENV)
        return cls(**json.loads(raw)) if raw else cls()
