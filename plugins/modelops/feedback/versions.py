"""Numbering a run's model versions so that "earliest prediction per token" is a min of one long.

The feedback join matches a token's events against its earliest prediction: the smallest
``(ts, model, model_version)``. A Spark ``min`` over that struct cannot use a hash aggregate
(its buffer is not fixed-width) and becomes a sort aggregate: two sorts of every prediction
that survives the Bloom filter. :class:`VersionCodes` numbers the run's versions in the
struct's own order (nulls first, as Spark orders structs) and packs a prediction into

    key = (ts_us - start_us) * n + code        (0 <= ts_us - start_us < span_us, 0 <= code < n)

so ``min(key)`` picks the same prediction, as a hash aggregate of one long. :meth:`VersionCodes.of`
refuses a run whose keys would not fit in a signed 64-bit integer. Pure code, no Spark.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from modelops.feedback.definitions import check_interval, micros_between

Version = tuple[str | None, int | None]
"""A ``(model, model_version)`` pair as the prediction log holds it (either may be null)."""

MAX_KEY = 2**63 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def version_order(version: Version) -> tuple[bool, str, bool, int]:
    """Spark's ascending order of ``struct(model, model_version)``: a null field sorts first."""
    model, number = version
    return (model is not None, model or "", number is not None, number or 0)


@dataclass(frozen=True)
class VersionCodes:
    """The run's versions numbered in struct order, and the run's start and length in microseconds."""

    versions: tuple[Version, ...]
    start_us: int
    span_us: int

    @classmethod
    def of(cls, versions: Iterable[Version], start: datetime, end: datetime) -> VersionCodes:
        """Number ``versions`` (duplicates collapse) for the run ``[start, end)``.

        Raises:
            ValueError: the interval is empty, or ``span * versions`` does not fit in 63 bits
                (a run of one day allows about 10^8 versions).
        """
        start, end = check_interval(start, end)
        ordered = tuple(sorted(set(versions), key=version_order))
        span_us = micros_between(start, end)
        if span_us * max(len(ordered), 1) - 1 > MAX_KEY:
            raise ValueError(
                f"run too long for its number of versions: {span_us} us x {len(ordered)} versions exceeds "
                f"a 64-bit key (at most {(MAX_KEY + 1) // span_us} versions for this run); split the run "
                f"(example: one day per run, --start 2026-11-01T00:00:00Z --end 2026-11-02T00:00:00Z)"
            )
        return cls(versions=ordered, start_us=micros_between(_EPOCH, start), span_us=span_us)

    @property
    def n(self) -> int:
        """The multiplier of the packed key (at least 1, so an empty run still divides)."""
        return max(len(self.versions), 1)

    def code(self, version: Version) -> int:
        """The number of ``version``.

        Raises:
            KeyError: naming the version when it is not one of the run's.
        """
        try:
            return self.versions.index(version)
        except ValueError:
            raise KeyError(f"version {version!r} is not among the run's versions {list(self.versions)}") from None

    def pack(self, ts_us: int, version: Version) -> int:
        """The key of a prediction at ``ts_us`` (microseconds since the epoch) of ``version``.

        Raises:
            ValueError: ``ts_us`` is outside the run.
        """
        offset = ts_us - self.start_us
        if not 0 <= offset < self.span_us:
            raise ValueError(f"ts_us {ts_us} is outside the run [{self.start_us}, {self.start_us + self.span_us})")
        return offset * self.n + self.code(version)

    def unpack(self, key: int) -> tuple[int, Version]:
        """``(ts_us, version)`` of a packed key: the inverse of :meth:`pack`."""
        offset, code = divmod(key, self.n)
        return self.start_us + offset, self.versions[code]
