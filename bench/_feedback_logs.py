"""The synthetic logs' building blocks shared by bench/feedback.py and bench/feedback_labels.py."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from modelops.records import partition_path

_HEX = np.array([f"{i:02x}".encode() for i in range(256)], dtype="S2")


def hex_tokens(rng: np.random.Generator, n: int, nbytes: int = 16) -> pa.Array:
    """``n`` random lowercase hex strings of ``2 * nbytes`` characters."""
    raw = rng.integers(0, 256, size=(n, nbytes), dtype=np.uint8)
    fixed = np.ascontiguousarray(_HEX[raw]).view(f"S{2 * nbytes}").reshape(n)
    return pa.array(fixed, type=pa.binary()).cast(pa.string())


def _micros(when: datetime) -> int:
    return int(when.timestamp()) * 1_000_000


def _write_partitioned(table: pa.Table, by: str, root: Path) -> None:
    """Write ``table`` sorted by column ``by`` into ``root/dt=…/hour=…/part-0.parquet``."""
    table = table.sort_by(by)
    micros = table.column(by).cast(pa.int64()).to_numpy(zero_copy_only=False)
    hours = micros // 3_600_000_000
    bounds = np.flatnonzero(np.diff(hours)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(hours)], strict=True):
        when = datetime.fromtimestamp(int(hours[lo]) * 3600, tz=UTC)
        folder = Path(partition_path(str(root), when))
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.slice(lo, hi - lo), folder / "part-0.parquet")


