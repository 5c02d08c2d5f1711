"""Reading the gateway's event logs back from the object store (Parquet under ``LOG_PREFIXES[kind]``)."""

from __future__ import annotations

import io
from collections.abc import Collection

import pyarrow.parquet as pq

from modelops.objectstore import ObjectStore
from modelops.records import LOG_PREFIXES


def logged_values(store: ObjectStore, kind: str, column: str, among: Collection[str]) -> set[str]:
    """The values of ``column`` in the ``kind`` log's Parquet files that are in ``among``."""
    wanted = set(among)
    found: set[str] = set()
    for key in store.list_keys(LOG_PREFIXES[kind].rstrip("/") + "/"):
        if key.endswith(".parquet"):
            table = pq.read_table(io.BytesIO(store.get_bytes(key)), columns=[column])
            found.update(v for v in table.column(column).to_pylist() if v in wanted)
    return found
