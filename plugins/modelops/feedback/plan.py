"""Every feedback event's verdict and the kept counts, as lazy Spark frames (joins and aggregates only).

:func:`build_plan` is used by :func:`modelops.feedback.job.run_feedback_join`; the rules are in
:mod:`modelops.feedback.definitions`. No Python UDFs; one window function, over the few
repeated ``(token, action)`` pairs only.

1. Earliest prediction per token: a hash aggregate ``min`` of one long key per prediction
   (:class:`~modelops.feedback.versions.VersionCodes`: ``(ts - start) * n + code``; the code
   comes from a broadcast join with the run's few versions). Spark's runtime Bloom filter
   (see ``RUNTIME_BLOOM_FILTER`` in the job) drops the predictions nobody reacted to before
   they are shuffled.
2. One shuffled hash join of the well-formed events with those keys: ``matched`` (cached by
   the job) holds the event's own columns, a row id, the key and the unknown/outside verdict.
   Everything after it is partitioned by token already: no further shuffle.
3. Duplicates: a count per ``(token, action)`` finds the repeated pairs; only their events
   are ordered (``ts``, ``received_at`` nulls last, row id) and all but the first rejected.
4. Kept counts: one aggregate per ``(token, code)`` gives the token's actions (a duplicate
   never adds an action, so it needs no de-duplication), then one per ``code``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from modelops.feedback.definitions import Reason
from modelops.feedback.versions import VersionCodes
from modelops.records import ACTIONS, FEEDBACK

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

PARTITION_COLUMNS = ("dt", "hour")
CODE = "_fb_code"
"""Column of :attr:`FeedbackPlan.kept` holding the version's number in :class:`VersionCodes`."""
KEPT_COLUMNS = ("clicked", "converted", "skipped", "purchase_without_click")
REASON = "reason"

# Internal column names (prefixed so they never clash with a log's own columns).
_EID, _KEY, _PRE, _P_TOKEN = "_fb_eid", "_fb_key", "_fb_pre", "_fb_p_token"
_LAST = "9999-12-31 23:59:59.999999"


@dataclass(frozen=True)
class FeedbackPlan:
    """The lazy frames of one run: ``matched`` should be cached, it feeds the other two."""

    matched: DataFrame  # well-formed events: own columns, row id, prediction key, pre-verdict
    rejected: DataFrame  # every rejected event: its own columns plus ``reason``
    kept: DataFrame  # per version code: the kept counts (KEPT_COLUMNS)


def original_columns(raw_events: DataFrame) -> list[str]:
    """The event log's own columns: without the ``dt``/``hour`` folders Spark adds as columns."""
    return [c for c in raw_events.columns if c not in PARTITION_COLUMNS or c in FEEDBACK.names]


def build_plan(raw_events: DataFrame, preds: DataFrame, codes: VersionCodes, window_us: int) -> FeedbackPlan:
    """Build the verdicts and counts of ``raw_events`` against the run's ``preds``.

    Args:
        raw_events: the feedback log as read (any column types; bad ones are malformed).
        preds: the run's predictions: ``feedback_token`` (string), ``ts`` (timestamp within the
            run), ``model`` (string), ``model_version`` (long).
        codes: the run's versions (every ``(model, model_version)`` of ``preds``).
        window_us: the window in microseconds.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, TimestampType

    fields = {f.name: f.dataType for f in raw_events.schema.fields}

    def text(name: str) -> Column:
        return F.col(name) if isinstance(fields[name], StringType) else F.lit(None).cast("string")

    def stamp(name: str) -> Column:
        if name not in fields:
            return F.lit(None).cast("timestamp")
        return F.col(name) if isinstance(fields[name], TimestampType) else F.col(name).try_cast("timestamp")

    # The expressions are over the log's own columns (a bare column when its type is right), so
    # the cached frame holds each value once.
    token, action, ts = text("feedback_token"), text("action"), stamp("ts")
    # Copies are ordered by (ts, received_at nulls last): a null sorts as the latest time.
    received = F.coalesce(stamp("received_at"), F.lit(_LAST).cast("timestamp"))
    keep = original_columns(raw_events)
    well_formed = token.isNotNull() & (token != "") & action.isin(*ACTIONS) & ts.isNotNull()
    malformed = raw_events.where(~F.coalesce(well_formed, F.lit(False))).select(
        *keep, F.lit(Reason.MALFORMED.value).alias(REASON)
    )
    # The plain filter (not wrapped) lets the runtime Bloom filter drop the predictions nobody
    # reacted to before they are shuffled.
    candidates = raw_events.where(well_formed).select(*keep, F.monotonically_increasing_id().alias(_EID))

    earliest = _earliest(preds, codes)
    p_ts_us = F.lit(codes.start_us) + F.expr(f"{_KEY} div {codes.n}")  # keys are >= 0: div is floor
    delta = F.unix_micros(ts) - p_ts_us
    pre = F.when(F.col(_KEY).isNull(), F.lit(Reason.UNKNOWN_TOKEN.value)).when(
        (delta < 0) | (delta > window_us), F.lit(Reason.OUTSIDE_WINDOW.value)
    )
    matched = candidates.join(earliest.hint("shuffle_hash"), token == F.col(_P_TOKEN), "left").select(
        *keep, _EID, _KEY, pre.alias(_PRE)
    )

    valid = matched.where(F.col(_PRE).isNull())
    repeated = (
        valid.groupBy(token.alias("_r_token"), action.alias("_r_action"))
        .agg(F.count(F.lit(1)).alias("_copies"))
        .where(F.col("_copies") > 1)
        .drop("_copies")
    )
    order = Window.partitionBy(token, action).orderBy(ts, received, F.col(_EID))
    duplicates = (
        valid.join(repeated.hint("shuffle_hash"), (token == F.col("_r_token")) & (action == F.col("_r_action")))
        .withColumn("_copy", F.row_number().over(order))
        .where(F.col("_copy") > 1)
        .select(*keep, F.lit(Reason.DUPLICATE.value).alias(REASON))
    )
    outside = matched.where(F.col(_PRE).isNotNull()).select(*keep, F.col(_PRE).alias(REASON))
    rejected = malformed.unionByName(outside).unionByName(duplicates)

    def has(name: str) -> Column:
        return F.max(action == name)

    # The code depends on the token alone: grouping by it too keeps the partitioning by token.
    per_token = valid.groupBy(token.alias("_k_token"), (F.col(_KEY) % codes.n).cast("int").alias(CODE)).agg(
        has("click").alias("c"), has("purchase").alias("pu"), has("skip").alias("s")
    )
    kept = per_token.groupBy(CODE).agg(
        F.count_if("c").alias("clicked"),
        F.count_if(F.col("c") & F.col("pu")).alias("converted"),
        F.count_if("s").alias("skipped"),
        F.count_if(F.col("pu") & ~F.col("c")).alias("purchase_without_click"),
    )
    return FeedbackPlan(matched=matched, rejected=rejected, kept=kept)


def _earliest(preds: DataFrame, codes: VersionCodes) -> DataFrame:
    """One row per token: ``(_fb_p_token, _fb_key)``, the key of its earliest prediction."""
    from pyspark.sql import functions as F

    table = preds.sparkSession.createDataFrame(
        [(model, version, code) for code, (model, version) in enumerate(codes.versions)],
        "_c_model string, _c_version long, _c_code long",
    )
    same = preds["model"].eqNullSafe(table["_c_model"]) & preds["model_version"].eqNullSafe(table["_c_version"])
    key = (F.unix_micros(F.col("ts")) - F.lit(codes.start_us)) * F.lit(codes.n) + F.col("_c_code")
    return (
        preds.where(F.col("feedback_token").isNotNull())
        .join(F.broadcast(table), same)
        .groupBy(F.col("feedback_token").alias(_P_TOKEN))
        .agg(F.min(key).alias(_KEY))
    )
