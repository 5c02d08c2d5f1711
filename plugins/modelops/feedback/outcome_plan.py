"""The outcome job's lazy Spark frames: joins, aggregates and built-in functions only (no Python UDFs).

Used by :func:`modelops.feedback.outcome_job.run_outcomes`; the rules are in
:mod:`modelops.feedback.outcome_metrics`.

1. Earliest prediction per token, as in the CTR join (:mod:`modelops.feedback.plan`): a hash
   aggregate ``min`` of one packed long (:class:`~modelops.feedback.versions.VersionCodes`), here
   with the prediction's ``prediction`` / ``probabilities`` taken by ``min_by`` of the same key when
   a version of the run declares a label. Spark's runtime Bloom filter (the job's session options)
   keeps the predictions nobody reacted to from being shuffled.
2. One shuffled hash join of the well-formed events with those keys: ``matched`` (cached by the job)
   holds the event, the version code, the prediction's day index and ``ts - prediction ts``.
3. Actions: one flag per action and token, then counts per ``(code, day)``.
4. Labels: checked against the version's declared kind (literal maps keyed by version code), the
   first per token by ``min_by`` over ``(ts, received_at, row id)``, then sums per ``(code, day)``
   and the delays at the ranks of the p50 / p90 (one sort per group); the AUC sums come from a
   count of positives and negatives per distinct score and a running sum of the negatives below it
   (one window per ``(code, day)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING

from modelops.feedback.declared import Declaration
from modelops.feedback.outcome_metrics import DELAY_QUANTILES, EPS
from modelops.feedback.versions import VersionCodes

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

US_PER_DAY = 86_400_000_000
CODE, DAY = "_o_code", "_o_day"
_TOKEN, _KEY, _PRED, _PROBS, _DELTA, _EID = "_o_token", "_o_key", "_o_pred", "_o_probs", "_o_delta", "_o_eid"
_LAST = "9999-12-31 23:59:59.999999"


@dataclass(frozen=True)
class OutcomePlan:
    """The lazy frames of one run; ``matched`` and ``labels`` should be cached (each feeds several)."""

    matched: DataFrame
    labels: DataFrame  # the counted label per token: code, day, y, delay, prediction, probabilities, copies
    actions: DataFrame  # per (code, day): one count per action (``a<i>``) and ``converted``
    label_sums: DataFrame  # per (code, day): the sums of OutcomeSums
    auc: DataFrame  # per (code, day): the AUC sum of binary labels
    delays: DataFrame  # per (code, day): the delays at the ranks the p50 / p90 interpolate between
    rejected: DataFrame  # per (code, day): label events not counted, by reason


def build_outcome_plan(raw_events: DataFrame, preds: DataFrame, codes: VersionCodes,
                       declared: Mapping[int, Declaration], actions: tuple[str, ...], window_us: int) -> OutcomePlan:
    """Build the frames of ``raw_events`` against the run's ``preds``.

    Args:
        raw_events: the feedback log (``feedback_token, action, ts, received_at, label, value``).
        preds: the run's predictions (``feedback_token, ts, model, model_version, prediction, probabilities``).
        codes: the run's versions; its start is the first day's midnight.
        declared: version code -> what the version declares.
        actions: every action any version declares (the order of the ``a<i>`` columns).
        window_us: how long after its prediction an action counts.
    """
    from pyspark.sql import functions as F

    labelled = any(d.kind is not None for d in declared.values())
    multiclass = any(d.kind == "multiclass" for d in declared.values())
    earliest = _earliest(preds, codes, labelled, multiclass)
    token, ts = F.col("feedback_token"), F.col("ts").cast("timestamp")
    received = F.coalesce(F.col("received_at").cast("timestamp"), F.lit(_LAST).cast("timestamp"))
    events = raw_events.where(token.isNotNull() & (token != "") & ts.isNotNull()).select(
        token, F.col("action"), F.col("label"), F.col("value"), ts.alias("ts"), received.alias("received"),
        F.monotonically_increasing_id().alias(_EID))
    p_ts_us = F.lit(codes.start_us) + F.expr(f"{_KEY} div {codes.n}")
    # A left join filtered afterwards, as in the CTR join: Spark then builds its runtime Bloom filter
    # from the events' tokens and applies it to the prediction scan (an inner join left it out).
    joined = events.join(earliest.hint("shuffle_hash"), token == F.col(_TOKEN), "left").where(F.col(_KEY).isNotNull())
    matched = joined.select(
        token, "action", "label", "value", "ts", "received", _EID,
        (F.col(_KEY) % codes.n).cast("int").alias(CODE),
        F.expr(f"({codes.start_us} + {_KEY} div {codes.n}) div {US_PER_DAY} - {codes.start_us // US_PER_DAY}")
        .cast("int").alias(DAY),
        (F.unix_micros("ts") - p_ts_us).alias(_DELTA),
        F.col(_PRED) if labelled else F.lit(None).cast("double").alias(_PRED),
        F.col(_PROBS) if multiclass else F.lit(None).cast("array<double>").alias(_PROBS),
    )
    labels, rejected = _labels(matched, declared)
    label_sums, auc = _label_sums(labels)
    return OutcomePlan(matched=matched, labels=labels, actions=_actions(matched, actions, window_us),
                       label_sums=label_sums, auc=auc, delays=_delay_ranks(labels), rejected=rejected)


def _earliest(preds: DataFrame, codes: VersionCodes, labelled: bool, multiclass: bool) -> DataFrame:
    """One row per token: the key of its earliest prediction and, when labels are declared, its prediction.

    ``min_by`` of a double keeps a hash aggregate; an array value (multiclass probabilities) makes it a
    sort aggregate, so ``probabilities`` is taken only when a version declares a multiclass label.
    """
    from pyspark.sql import functions as F

    table = preds.sparkSession.createDataFrame(
        [(model, version, code) for code, (model, version) in enumerate(codes.versions)],
        "_c_model string, _c_version long, _c_code long")
    same = preds["model"].eqNullSafe(table["_c_model"]) & preds["model_version"].eqNullSafe(table["_c_version"])
    key = (F.unix_micros(F.col("ts")) - F.lit(codes.start_us)) * F.lit(codes.n) + F.col("_c_code")
    taken = [F.min_by("prediction", key).alias(_PRED)] if labelled else []
    if multiclass:
        taken.append(F.min_by("probabilities", key).alias(_PROBS))
    return (preds.where(F.col("feedback_token").isNotNull()).join(F.broadcast(table), same)
            .groupBy(F.col("feedback_token").alias(_TOKEN)).agg(F.min(key).alias(_KEY), *taken))


def _actions(matched: DataFrame, actions: tuple[str, ...], window_us: int) -> DataFrame:
    from pyspark.sql import functions as F

    kept = matched.where(F.col("action").isNotNull() & F.col(_DELTA).between(0, window_us))
    flags = [F.max(F.col("action") == a).alias(f"f{i}") for i, a in enumerate(actions)]
    per_token = kept.groupBy("feedback_token", CODE, DAY).agg(*flags) if actions else kept.select(CODE, DAY)
    counts = [F.count_if(F.col(f"f{i}")).alias(f"a{i}") for i in range(len(actions))]
    if "click" in actions and "purchase" in actions:
        click, purchase = f"f{actions.index('click')}", f"f{actions.index('purchase')}"
        counts.append(F.count_if(F.col(click) & F.col(purchase)).alias("converted"))
    return per_token.groupBy(CODE, DAY).agg(*counts, F.count(F.lit(1)).alias("_tokens"))


def _literal_map(entries: Mapping[str, object]) -> Column:
    from pyspark.sql import functions as F

    if not entries:
        return F.create_map().cast("map<string,string>")
    return F.create_map(*chain.from_iterable((F.lit(k), F.lit(v)) for k, v in entries.items()))


def _labels(matched: DataFrame, declared: Mapping[int, Declaration]) -> tuple[DataFrame, DataFrame]:
    """The counted label per token and the label events not counted, per ``(code, day)``."""
    from pyspark.sql import functions as F

    kinds = _literal_map({str(c): d.kind for c, d in declared.items() if d.kind is not None})
    classes = _literal_map({f"{c}/{name}": str(i) for c, d in declared.items() if d.kind == "multiclass"
                            for i, name in enumerate(d.classes)})
    code_text = F.col(CODE).cast("string")
    kind = F.try_element_at(kinds, code_text)
    label, value = F.col("label"), F.col("value")
    finite = value.isNotNull() & ~F.isnan(value) & (F.abs(value) < F.lit(float("inf")))
    y = (F.when((kind == "binary") & value.isNull() & label.isin("0", "1"), label.cast("double"))
         .when((kind == "numeric") & label.isNull() & finite, value)
         .when((kind == "multiclass") & value.isNull(),
               F.try_element_at(classes, F.concat(code_text, F.lit("/"), label)).cast("double")))
    events = matched.where(F.col("action").isNull() & (label.isNotNull() | value.isNotNull())).select(
        "feedback_token", CODE, DAY, kind.alias("kind"), y.alias("y"), _DELTA, _PRED, _PROBS, "ts", "received", _EID)
    counted = events.where(F.col("y").isNotNull() & (F.col(_DELTA) >= 0))
    first = F.min_by(F.struct("kind", "y", _DELTA, _PRED, _PROBS), F.struct("ts", "received", _EID))
    labels = counted.groupBy("feedback_token", CODE, DAY).agg(first.alias("f"), F.count(F.lit(1)).alias("copies"))
    labels = labels.select(CODE, DAY, "f.kind", "f.y", (F.col(f"f.{_DELTA}") / 1e6).alias("delay_s"),
                           F.col(f"f.{_PRED}").alias("p"), F.col(f"f.{_PROBS}").alias("probs"), "copies")
    rejected = events.groupBy(CODE, DAY).agg(
        F.count_if(F.col("y").isNotNull() & (F.col(_DELTA) < 0)).alias("before_prediction"),
        F.count_if(F.col("y").isNull()).alias("not_declared"))
    return labels, rejected


def _label_sums(labels: DataFrame) -> tuple[DataFrame, DataFrame]:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    kind, y, p, probs = F.col("kind"), F.col("y"), F.col("p"), F.col("probs")
    index = y.cast("int")
    scored = (F.when(kind == "multiclass", probs.isNotNull() & (F.size(probs) > index))
              .otherwise(p.isNotNull()))

    def clip(x: Column) -> Column:
        return F.least(F.greatest(x, F.lit(EPS)), F.lit(1.0 - EPS))

    chosen = F.when(kind == "multiclass", F.try_element_at(probs, index + 1)).when(y == 1.0, p).otherwise(1.0 - p)
    correct = F.when(kind == "multiclass", F.array_position(probs, F.array_max(probs)) - 1 == index) \
        .otherwise((p > 0.5) == (y == 1.0))
    on = scored & (kind != "numeric")
    sums = labels.groupBy(CODE, DAY).agg(
        F.count(F.lit(1)).alias("labelled"),
        F.count_if(scored).alias("scored"),
        F.count_if(scored & (kind == "binary") & (y == 1.0)).alias("positives"),
        F.count_if(on & correct).alias("correct"),
        F.sum(F.when(on, -F.ln(clip(chosen)))).alias("log_loss_sum"),
        F.sum(F.when(scored & (kind != "multiclass"), (p - y) * (p - y))).alias("squared_sum"),
        F.sum(F.when(scored & (kind == "numeric"), F.abs(p - y))).alias("absolute_sum"),
        F.sum(F.col("copies") - 1).alias("duplicate"),
    )
    binary = labels.where((kind == "binary") & p.isNotNull())
    per_score = binary.groupBy(CODE, DAY, "p").agg(F.count_if(y == 1.0).alias("pos"), F.count_if(y == 0.0).alias("neg"))
    below = F.sum("neg").over(Window.partitionBy(CODE, DAY).orderBy("p").rowsBetween(Window.unboundedPreceding, -1))
    auc = per_score.select(CODE, DAY, "pos", "neg", F.coalesce(below, F.lit(0)).alias("below")).groupBy(CODE, DAY).agg(
        F.sum(F.col("pos") * (F.col("below") + F.col("neg") / 2.0)).alias("auc_sum"))
    return sums, auc


def _delay_ranks(labels: DataFrame) -> DataFrame:
    """The delays at the ranks the p50 / p90 interpolate between, per ``(code, day)``: ``rank``, ``n``, ``delay_s``.

    Exact, from one sort per ``(code, day)``: Spark's exact ``percentile`` keeps a map of every distinct
    value per group (each delay is distinct) and was the slowest aggregate of the job.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    group = Window.partitionBy(CODE, DAY)
    ranked = labels.select(CODE, DAY, "delay_s", (F.row_number().over(group.orderBy("delay_s")) - 1).alias("rank"),
                           F.count(F.lit(1)).over(group).alias("n"))
    wanted = [F.floor(F.lit(q) * (F.col("n") - 1)) for q in DELAY_QUANTILES]
    wanted += [F.ceil(F.lit(q) * (F.col("n") - 1)) for q in DELAY_QUANTILES]
    return ranked.where(F.col("rank").isin(*wanted))
