"""The records that cross process boundaries: the event logs and their layout.

The gateway writes these logs; the Spark jobs read them. Keep both sides on these
definitions. Every log is Parquet under ``<prefix>/dt=YYYY-MM-DD/hour=HH/``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import pyarrow as pa

SCHEMA_VERSION = 1

ACTIONS: tuple[str, ...] = ("click", "purchase", "skip")
"""The feedback actions a user can send through a ``feedback_token``."""

TS = pa.timestamp("us", tz="UTC")

PREDICTIONS = pa.schema(
    [
        ("request_id", pa.string()),
        ("feedback_token", pa.string()),
        ("ts", TS),
        ("model", pa.string()),
        ("model_version", pa.int64()),
        ("model_sha256", pa.string()),
        ("user_hash", pa.string()),
        ("n_items", pa.int32()),
        ("score_mean", pa.float64()),
        ("score_max", pa.float64()),
        ("score_std", pa.float64()),
        ("latency_ms", pa.float64()),
        ("delay_origin", pa.string()),
        ("prediction", pa.float64()),
        ("probabilities", pa.list_(pa.float64())),
    ]
)
"""One row per served request.

``prediction`` and ``probabilities`` (added with delayed labels; null in files written before, and
for models that declare no label) are what a label is judged against: for a model served from its
spec whose outcomes declare a ``binary`` label, the first output's probability of the positive class
(column 1 of a ``[n, 2]`` output, the value of a ``[n, 1]`` one); ``numeric``: the first output's
value; ``multiclass``: the first output's row in ``probabilities`` (its classes in the order of the
label's ``classes``; ``prediction`` stays null). One token covers
one request, so these are logged for one-row requests only (null for a request of several rows).
"""

FEEDBACK = pa.schema(
    [
        ("feedback_token", pa.string()),
        ("action", pa.string()),
        ("ts", TS),
        ("received_at", TS),
        ("label", pa.string()),
        ("value", pa.float64()),
    ]
)
"""One row per feedback event; ``ts`` is when the user acted (or the ground truth was observed),
``received_at`` when the gateway got it.

An event holds exactly one of: ``action`` (a user action), ``label`` (the ground truth of a
``binary`` label as ``"0"``/``"1"``, of a ``multiclass`` one as its class name) or ``value`` (a
``numeric`` label). ``label`` and ``value`` were added with delayed labels: files written before
lack them and read as null (:data:`OPTIONAL_COLUMNS`).
"""

OPTIONAL_COLUMNS: dict[str, frozenset[str]] = {
    "predictions": frozenset({"prediction", "probabilities"}),
    "feedback": frozenset({"label", "value"}),
}
"""Columns added after the first version of a log: readers fill them with nulls for older files."""

SCORED_SAMPLE_BASE = pa.schema(
    [
        ("request_id", pa.string()),
        ("ts", TS),
        ("model", pa.string()),
        ("model_version", pa.int64()),
        ("item_index", pa.int32()),
        ("score", pa.float64()),
    ]
)


EXPLANATIONS = pa.schema(
    [
        ("request_id", pa.string()),
        ("ts", TS),
        ("model", pa.string()),
        ("model_version", pa.int64()),
        ("explanations", pa.string()),
    ]
)
"""One row per explained request that is sampled like the scored samples: the answer's ``explanations`` (JSON)."""


MODEL_SAMPLES = pa.schema(
    [
        ("request_id", pa.string()),
        ("ts", TS),
        ("model", pa.string()),
        ("model_version", pa.int64()),
        ("spec", pa.string()),
        ("row_index", pa.int32()),
        ("features", pa.list_(pa.float64())),
        ("outputs", pa.list_(pa.float64())),
    ]
)
"""Scored samples of models served from their spec: one row per scored request row.

``features``: the row's values in the order of the version's spec ``features`` (NaN where the
request sent null); the columns' names are that spec's, named by ``spec`` (its object key,
``triton/repository/<model>/<version>/model-spec.json``), so one log holds any number of models,
each with its own columns. ``outputs``: the row of the model's first output (a classifier's
probabilities, a regressor's value)."""


SHADOW = pa.schema(
    [
        ("request_id", pa.string()),
        ("ts", TS),
        ("model", pa.string()),
        ("stable_version", pa.int64()),
        ("shadow_version", pa.int64()),
        ("outcome", pa.string()),
        ("n_items", pa.int32()),
        ("stable_latency_ms", pa.float64()),
        ("shadow_latency_ms", pa.float64()),
        ("score_mean", pa.float64()),
        ("score_std", pa.float64()),
        ("abs_diff_median", pa.float64()),
        ("abs_diff_max", pa.float64()),
        ("compared", pa.int32()),
        ("disagreed", pa.int32()),
    ]
)
"""One row per request mirrored to a shadow version, after the stable version answered it.

``request_id`` is the stable answer's (the user's request, whose prediction-log row names the stable
version); ``outcome`` is ``ok``, ``upstream`` / ``timeout`` (the shadow failed) or ``mismatch`` (an
answer of another shape); ``stable_latency_ms`` / ``shadow_latency_ms`` the two Triton calls (the
stable's null when its answer was precomputed); ``score_mean`` / ``score_std`` the shadow's scores;
``abs_diff_median`` / ``abs_diff_max`` |shadow − stable| over the scores; ``compared`` / ``disagreed``
the ranked request (top-k order) or classified rows (class) compared and those that changed. The
shadow answers no user: these rows are kept apart from the prediction log, whose rows are the
answers users got."""


def scored_samples_schema(feature_names: Sequence[str]) -> pa.Schema:
    """Scored samples: the base columns, then one float64 column per feature (null when missing)."""
    return pa.schema([*SCORED_SAMPLE_BASE, *(pa.field(name, pa.float64()) for name in feature_names)])


LOG_PREFIXES = {
    "predictions": "logs/predictions",
    "feedback": "logs/feedback",
    "scored_samples": "logs/scored_samples",
    "explanations": "logs/explanations",
    "model_samples": "logs/model_samples",
    "shadow": "logs/shadow",
}
"""Key prefixes of the gateway's logs inside the platform bucket."""


def partition_path(prefix: str, when: datetime) -> str:
    """``<prefix>/dt=YYYY-MM-DD/hour=HH`` for a UTC timestamp."""
    return f"{prefix.rstrip('/')}/dt={when:%Y-%m-%d}/hour={when:%H}"
