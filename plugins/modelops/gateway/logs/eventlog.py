"""The event logs of the gateway: spooled records -> Parquet in ``modelops.records`` schemas.

Spool records are compact lists (see the ``*_record`` functions); the converters turn a
segment's records into one Parquet file per UTC hour with exactly the columns of
:data:`~modelops.records.PREDICTIONS`, :data:`~modelops.records.FEEDBACK` and
:func:`~modelops.records.scored_samples_schema` (and :data:`~modelops.records.EXPLANATIONS`
for sampled ``explain=true`` answers). Predictions, scored samples and explanations are
partitioned by ``ts`` (when served), feedback by ``received_at`` (the client's ``ts``
may be anything within the token's life).

:class:`EventLogs` owns a group committer and an uploader per log, the upload loop, and
the backlog figures for ``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from modelops.errors import ModelopsError
from modelops.gateway.logs.groupcommit import GroupCommitter
from modelops.gateway.logs.spool import SegmentWriter, spool_usage
from modelops.gateway.logs.upload import BlobStore, SegmentConverter, Uploader, iter_hours
from modelops.records import (
    EXPLANATIONS,
    FEEDBACK,
    LOG_PREFIXES,
    MODEL_SAMPLES,
    PREDICTIONS,
    SHADOW,
    scored_samples_schema,
)

log = logging.getLogger(__name__)

KINDS: tuple[str, ...] = ("predictions", "feedback", "scored_samples", "explanations", "model_samples", "shadow")


def to_us(epoch_s: float) -> int:
    """Epoch seconds -> integer microseconds (the spool's time unit)."""
    return round(epoch_s * 1_000_000)


def prediction_record(*, request_id: str, feedback_token: str, ts: float, model: str, model_version: int,
                      model_sha256: str, user_hash: str, n_items: int, score_mean: float, score_max: float,
                      score_std: float, latency_ms: float, delay_origin: str, prediction: float | None = None,
                      probabilities: list[float] | None = None) -> list[Any]:
    """A prediction-log record in :data:`PREDICTIONS` column order (``ts`` in epoch seconds).

    ``prediction`` / ``probabilities``: what a delayed label is judged against (labelled models only).
    """
    return [request_id, feedback_token, to_us(ts), model, model_version, model_sha256, user_hash, n_items,
            score_mean, score_max, score_std, latency_ms, delay_origin, prediction, probabilities]


def feedback_record(*, feedback_token: str, action: str | None, ts: float, received_at: float,
                    label: str | None = None, value: float | None = None) -> list[Any]:
    """A feedback-log record in :data:`FEEDBACK` column order (one of ``action``, ``label``, ``value`` set)."""
    return [feedback_token, action, to_us(ts), to_us(received_at), label, value]


def scored_record(*, request_id: str, ts: float, model: str, model_version: int, scores: npt.NDArray[Any],
                  features: npt.NDArray[Any]) -> list[Any]:
    """A scored-samples record: one per request, the float32 scores and feature matrix as bytes."""
    return [request_id, to_us(ts), model, model_version,
            np.ascontiguousarray(scores, dtype=np.float32).tobytes(),
            np.ascontiguousarray(features, dtype=np.float32).tobytes()]


def model_sample_record(*, request_id: str, ts: float, model: str, model_version: int, spec: str,
                        features: npt.NDArray[Any], outputs: npt.NDArray[Any]) -> list[Any]:
    """A model-samples record: one per request, its ``[n, k]`` features and ``[n, m]`` first output as float64 bytes."""
    rows = features.shape[0]
    return [request_id, to_us(ts), model, model_version, spec, rows,
            np.ascontiguousarray(features, dtype=np.float64).tobytes(),
            np.ascontiguousarray(outputs, dtype=np.float64).reshape(rows, -1).tobytes()]


def shadow_record(*, request_id: str, ts: float, model: str, stable_version: int, shadow_version: int, outcome: str,
                  n_items: int, stable_latency_ms: float | None, shadow_latency_ms: float, score_mean: float,
                  score_std: float, abs_diff_median: float, abs_diff_max: float, compared: int,
                  disagreed: int) -> list[Any]:
    """A shadow-log record in :data:`~modelops.records.SHADOW` column order (NaN where not measured)."""
    return [request_id, to_us(ts), model, stable_version, shadow_version, outcome, n_items, stable_latency_ms,
            shadow_latency_ms, score_mean, score_std, abs_diff_median, abs_diff_max, compared, disagreed]


def explanation_record(*, request_id: str, ts: float, model: str, model_version: int,
                       explanations_json: str) -> list[Any]:
    """An explanations-log record in :data:`~modelops.records.EXPLANATIONS` column order."""
    return [request_id, to_us(ts), model, model_version, explanations_json]


def _parquet(table: pa.Table, split: Sequence[str] = ()) -> bytes:
    """Parquet (zstd) of ``table``; the ``split`` float columns with BYTE_STREAM_SPLIT and no dictionary.

    Dictionary encoding suits the strings and repeated values of the small logs; for the scored
    samples' measured floats it only builds a dictionary that overflows and is thrown away:
    BYTE_STREAM_SPLIT (Parquet's encoding for floats, read by Spark's parquet-java since 1.12,
    DuckDB and pyarrow) writes 2,000 samples of 10 x 128 features in 21 us per sample instead
    of 104, and 9.0 MB instead of 15.5.
    """
    sink = io.BytesIO()
    if split:
        floats = set(split)
        pq.write_table(table, sink, compression="zstd",
                       use_dictionary=[name for name in table.column_names if name not in floats],
                       column_encoding=dict.fromkeys(split, "BYTE_STREAM_SPLIT"))
    else:
        pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def _rows_converter(schema: pa.Schema, partition_column: int) -> SegmentConverter:
    width = len(schema)

    def convert(records: list[list[Any]]) -> dict[datetime, bytes]:
        out: dict[datetime, bytes] = {}
        # A segment spooled before a log gained columns (the labels' own) holds shorter records:
        # the missing trailing columns are nulls.
        records = [r if len(r) >= width else [*r, *([None] * (width - len(r)))] for r in records]
        for hour, indexes in iter_hours([r[partition_column] for r in records]):
            columns = [pa.array([records[i][c] for i in indexes], type=f.type) for c, f in enumerate(schema)]
            out[hour] = _parquet(pa.Table.from_arrays(columns, schema=schema))
        return out

    return convert


convert_predictions = _rows_converter(PREDICTIONS, 2)
convert_feedback = _rows_converter(FEEDBACK, 3)
convert_explanations = _rows_converter(EXPLANATIONS, 1)
convert_shadow = _rows_converter(SHADOW, 1)


def scored_converter(feature_names: Sequence[str]) -> SegmentConverter:
    """The converter of scored-samples records: one row per scored item, NaN features as nulls."""
    schema = scored_samples_schema(feature_names)
    width = len(feature_names)
    feature_columns = tuple(feature_names)

    def convert(records: list[list[Any]]) -> dict[datetime, bytes]:
        out: dict[datetime, bytes] = {}
        for hour, indexes in iter_hours([r[1] for r in records]):
            ids: list[str] = []
            ts: list[int] = []
            models: list[str] = []
            versions: list[int] = []
            item_index: list[npt.NDArray[Any]] = []
            scores: list[npt.NDArray[Any]] = []
            features: list[npt.NDArray[Any]] = []
            for i in indexes:
                request_id, ts_us, model, version, score_bytes, feature_bytes = records[i]
                s = np.frombuffer(score_bytes, dtype=np.float32)
                n = len(s)
                ids.extend([request_id] * n)
                ts.extend([ts_us] * n)
                models.extend([model] * n)
                versions.extend([version] * n)
                item_index.append(np.arange(n, dtype=np.int32))
                scores.append(s.astype(np.float64))
                features.append(np.frombuffer(feature_bytes, dtype=np.float32).reshape(n, width))
            # Column-major, so each feature column is one contiguous run; NaN becomes null (from_pandas).
            matrix = np.asfortranarray(np.concatenate(features) if features else np.zeros((0, width)),
                                       dtype=np.float64)
            columns: list[pa.Array] = [
                pa.array(ids, pa.string()), pa.array(ts, schema.field("ts").type), pa.array(models, pa.string()),
                pa.array(versions, pa.int64()), pa.array(np.concatenate(item_index), pa.int32()),
                pa.array(np.concatenate(scores), pa.float64()),
            ]
            columns.extend(pa.array(matrix[:, c], pa.float64(), from_pandas=True) for c in range(width))
            out[hour] = _parquet(pa.Table.from_arrays(columns, schema=schema), split=feature_columns)
        return out

    return convert


def convert_model_samples(records: list[list[Any]]) -> dict[datetime, bytes]:
    """The converter of model-samples records: one row per scored request row (:data:`MODEL_SAMPLES`)."""
    out: dict[datetime, bytes] = {}
    for hour, indexes in iter_hours([r[1] for r in records]):
        base: list[list[Any]] = [[], [], [], [], [], []]
        features: list[pa.Array] = []
        outputs: list[pa.Array] = []
        for i in indexes:
            request_id, ts_us, model, version, spec, rows, feature_bytes, output_bytes = records[i]
            for column, value in zip(base[:5], (request_id, ts_us, model, version, spec), strict=True):
                column.extend([value] * rows)
            base[5].extend(range(rows))
            values = np.frombuffer(feature_bytes, dtype=np.float64)
            answers = np.frombuffer(output_bytes, dtype=np.float64)
            features.append(_lists(values, rows))
            outputs.append(_lists(answers, rows))
        columns: list[pa.Array | pa.ChunkedArray] = [
            pa.array(values, type=MODEL_SAMPLES.field(c).type) for c, values in enumerate(base[:5])]
        columns.append(pa.array(base[5], pa.int32()))
        columns.extend([pa.chunked_array(features, pa.list_(pa.float64())),
                        pa.chunked_array(outputs, pa.list_(pa.float64()))])
        out[hour] = _parquet(pa.Table.from_arrays(columns, schema=MODEL_SAMPLES))
    return out


def _lists(flat: npt.NDArray[np.float64], rows: int) -> pa.Array:
    """``flat`` (``rows`` equal rows, row-major) as a list array, one list per row."""
    width = len(flat) // rows if rows else 0
    offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * width, pa.int32())
    return pa.ListArray.from_arrays(offsets, pa.array(flat, pa.float64()))


@dataclass(frozen=True)
class SpoolConfig:
    """Spool tuning (module defaults until they become settings)."""

    max_segment_bytes: int = 8 * 1024 * 1024
    max_segment_age_s: float = 10.0
    budget_bytes: int = 1024 * 1024 * 1024
    upload_interval_s: float = 1.0
    max_backoff_s: float = 10.0
    sync: str = "write"  # predictions, feedback, explanations: what an acknowledged record is (spool.SYNC_MODES)


class EventLogs:
    """The gateway process' logs (:data:`KINDS`): committers, uploaders and the upload loop."""

    def __init__(self, root: Path, store: BlobStore, feature_names: Sequence[str],
                 config: SpoolConfig = SpoolConfig()) -> None:
        self.root = root
        self.config = config
        self._usage_bytes, self._usage_segments = spool_usage(root) if root.exists() else (0, 0)
        converters: dict[str, SegmentConverter] = {
            "predictions": convert_predictions, "feedback": convert_feedback,
            "scored_samples": scored_converter(feature_names), "explanations": convert_explanations,
            "model_samples": convert_model_samples, "shadow": convert_shadow,
        }
        self.committers: dict[str, GroupCommitter] = {}
        self.uploaders: dict[str, Uploader] = {}
        for kind in KINDS:
            directory = root / kind
            writer = SegmentWriter(directory, max_bytes=config.max_segment_bytes,
                                   max_age_s=config.max_segment_age_s)
            committer = GroupCommitter(writer, budget_bytes=config.budget_bytes, usage=self.usage_bytes,
                                       sync=config.sync)
            committer.on_sealed = self._on_sealed
            self.committers[kind] = committer
            self.uploaders[kind] = Uploader(directory, LOG_PREFIXES[kind], store, converters[kind])
        self._kick: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.store_ok = True
        self.upload_failures = 0

    def usage_bytes(self) -> int:
        return self._usage_bytes

    @property
    def backlog_bytes(self) -> int:
        return self._usage_bytes

    @property
    def backlog_segments(self) -> int:
        return self._usage_segments

    def _on_sealed(self, _path: Path) -> None:
        if self._kick is not None:
            self._kick.set()

    async def start(self) -> None:
        for committer in self.committers.values():
            committer.start()
        self._kick = asyncio.Event()
        self._kick.set()  # upload leftovers of earlier runs right away
        self._task = asyncio.get_running_loop().create_task(self._upload_loop(), name="spool-upload")

    def upload_all(self) -> int:
        """One upload pass over every log (blocking; runs in a thread). Raises on store failure."""
        return sum(uploader.run_once() for uploader in self.uploaders.values())

    def _refresh_usage(self) -> None:
        self._usage_bytes, self._usage_segments = spool_usage(self.root)

    async def _upload_loop(self) -> None:
        assert self._kick is not None
        backoff = self.config.upload_interval_s
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(backoff):
                    await self._kick.wait()
            self._kick.clear()
            try:
                await asyncio.to_thread(self.upload_all)
            except (ModelopsError, OSError) as exc:
                self.store_ok = False
                self.upload_failures += 1
                backoff = min(self.config.max_backoff_s, backoff * 2)
                log.warning("event log upload failed (retry in %.0f s): %s", backoff, exc)
            except Exception:  # a defect must not end the loop: the spool would fill and every write get 503
                self.upload_failures += 1
                backoff = min(self.config.max_backoff_s, backoff * 2)
                log.exception("event log upload pass failed unexpectedly (retry in %.0f s)", backoff)
            else:
                self.store_ok = True
                backoff = self.config.upload_interval_s
            await asyncio.to_thread(self._refresh_usage)

    async def close(self, *, upload_timeout_s: float = 5.0) -> None:
        """Flush and seal every log, then try one last upload (bounded)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for committer in self.committers.values():
            await committer.close()
        started = time.monotonic()
        try:
            async with asyncio.timeout(upload_timeout_s):
                await asyncio.to_thread(self.upload_all)
        except (TimeoutError, ModelopsError, OSError) as exc:
            log.warning("final event log upload incomplete after %.1f s (segments stay for the next start): %s",
                        time.monotonic() - started, exc)
