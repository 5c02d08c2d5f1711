"""Custom GX expectations for list columns (request ``item_ids``).

Great Expectations 1.24 has no expectation for the number of elements of a list
column (``ExpectColumnValueLengthsToBeBetween`` measures string length), so this
module defines two column-map expectations, each backed by a condition metric with a
pandas and a Spark implementation:

* :class:`ExpectColumnListLengthsToBeBetween` — ``min_value <= len(value) <= max_value``
  (Spark: ``size(col)``).
* :class:`ExpectColumnListElementLengthsToBeBetween` — every element is a string whose
  length is within bounds (Spark: ``forall(col, x -> length(x) between ...)``).

GX registers an expectation class when it is defined. A suite that names one of these
types but is loaded in a process that never imported this module silently loses the
expectation (GX logs a line and drops it), so :mod:`modelops.contracts.suites` imports
this module, and every code path that loads suites goes through that module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from great_expectations.execution_engine.pandas_execution_engine import PandasExecutionEngine
from great_expectations.execution_engine.sparkdf_execution_engine import SparkDFExecutionEngine
from great_expectations.expectations.expectation import ColumnMapExpectation
from great_expectations.expectations.metrics.map_metric_provider.column_condition_partial import (
    column_condition_partial,
)
from great_expectations.expectations.metrics.map_metric_provider.column_map_metric_provider import (
    ColumnMapMetricProvider,
)
from numpy.typing import NDArray


def _as_sequence(value: Any) -> Sequence[Any] | None:
    """A list-like cell as a sequence (Parquet lists arrive as numpy arrays), else None."""
    if isinstance(value, list | tuple | np.ndarray):
        return value  # type: ignore[return-value]
    return None


def list_length_ok(value: Any, min_value: int | None, max_value: int | None) -> bool:
    """True when ``value`` is a list whose number of elements lies in [min_value, max_value]."""
    seq = _as_sequence(value)
    if seq is None:
        return False
    n = len(seq)
    return (min_value is None or n >= min_value) and (max_value is None or n <= max_value)


def element_lengths_ok(value: Any, min_value: int | None, max_value: int | None) -> bool:
    """True when ``value`` is a list of strings, each of a length in [min_value, max_value]."""
    seq = _as_sequence(value)
    if seq is None:
        return False
    for element in seq:
        if not isinstance(element, str):
            return False
        n = len(element)
        if (min_value is not None and n < min_value) or (max_value is not None and n > max_value):
            return False
    return True


def arrow_list_array(column: pd.Series) -> pa.Array | None:
    """The column as one Arrow list array when it is Arrow-backed (``pd.ArrowDtype(list<...>)``), else None."""
    dtype = column.dtype
    if not isinstance(dtype, pd.ArrowDtype):
        return None
    if not (pa.types.is_list(dtype.pyarrow_dtype) or pa.types.is_large_list(dtype.pyarrow_dtype)):
        return None
    array = column.array.__arrow_array__()
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


def _arrow_between(values: pa.Array, min_value: int | None, max_value: int | None) -> NDArray[np.bool_]:
    lengths = np.asarray(pc.fill_null(values, -1).to_numpy(zero_copy_only=False))
    ok = lengths >= 0  # null: unexpected
    if min_value is not None:
        ok &= lengths >= min_value
    if max_value is not None:
        ok &= lengths <= max_value
    return ok


def arrow_list_lengths_ok(array: pa.Array, min_value: int | None, max_value: int | None) -> NDArray[np.bool_]:
    """Vectorised :func:`list_length_ok` over an Arrow list array."""
    return _arrow_between(pc.list_value_length(array), min_value, max_value)


def arrow_element_lengths_ok(array: pa.Array, min_value: int | None, max_value: int | None) -> NDArray[np.bool_]:
    """Vectorised :func:`element_lengths_ok` over an Arrow list array."""
    ok = np.asarray(array.is_valid().to_numpy(zero_copy_only=False)).copy()
    value_type = array.type.value_type
    flat = pc.list_flatten(array)
    parents = np.asarray(pc.list_parent_indices(array).to_numpy(zero_copy_only=False))
    if pa.types.is_string(value_type) or pa.types.is_large_string(value_type):
        bad = ~_arrow_between(pc.utf8_length(flat), min_value, max_value)
    else:  # not strings at all: every non-empty list is unexpected
        bad = np.ones(len(flat), dtype=bool)
    ok[np.unique(parents[bad])] = False
    return ok


def _spark_between(expr: Any, min_value: int | None, max_value: int | None) -> Any:
    from pyspark.sql import functions as F

    cond = F.lit(True)
    if min_value is not None:
        cond = cond & (expr >= F.lit(min_value))
    if max_value is not None:
        cond = cond & (expr <= F.lit(max_value))
    return cond


class ColumnValuesListLengthBetween(ColumnMapMetricProvider):  # type: ignore[misc]
    """Condition metric: the number of elements of a list value lies within bounds."""

    condition_metric_name = "column_values.list_length.between"
    condition_value_keys = ("min_value", "max_value")

    @column_condition_partial(engine=PandasExecutionEngine)  # type: ignore[misc]
    def _pandas(
        cls, column: pd.Series, min_value: int | None = None, max_value: int | None = None, **kwargs: Any
    ) -> pd.Series:
        array = arrow_list_array(column)
        if array is not None:
            return pd.Series(arrow_list_lengths_ok(array, min_value, max_value), index=column.index)
        return column.map(lambda v: list_length_ok(v, min_value, max_value)).astype(bool)

    @column_condition_partial(engine=SparkDFExecutionEngine)  # type: ignore[misc]
    def _spark(cls, column: Any, min_value: int | None = None, max_value: int | None = None, **kwargs: Any) -> Any:
        from pyspark.sql import functions as F

        # A null condition would be neither expected nor unexpected: coalesce to False.
        return F.coalesce(_spark_between(F.size(column), min_value, max_value), F.lit(False))


class ColumnValuesListElementLengthBetween(ColumnMapMetricProvider):  # type: ignore[misc]
    """Condition metric: every element of a list value is a string of a length within bounds."""

    condition_metric_name = "column_values.list_element_length.between"
    condition_value_keys = ("min_value", "max_value")

    @column_condition_partial(engine=PandasExecutionEngine)  # type: ignore[misc]
    def _pandas(
        cls, column: pd.Series, min_value: int | None = None, max_value: int | None = None, **kwargs: Any
    ) -> pd.Series:
        array = arrow_list_array(column)
        if array is not None:
            return pd.Series(arrow_element_lengths_ok(array, min_value, max_value), index=column.index)
        return column.map(lambda v: element_lengths_ok(v, min_value, max_value)).astype(bool)

    @column_condition_partial(engine=SparkDFExecutionEngine)  # type: ignore[misc]
    def _spark(cls, column: Any, min_value: int | None = None, max_value: int | None = None, **kwargs: Any) -> Any:
        from pyspark.sql import functions as F

        # A null element gives length null: coalesce makes it unexpected instead of unknown.
        each = F.forall(column, lambda x: F.coalesce(_spark_between(F.length(x), min_value, max_value), F.lit(False)))
        return F.coalesce(each, F.lit(False))


_LIBRARY_METADATA: dict[str, str | list[Any] | bool] = {
    "maturity": "experimental",
    "tags": ["modelops", "list column"],
    "contributors": ["@modelops"],
    "requirements": [],
    "has_full_test_suite": False,
    "manually_reviewed_code": True,
}


class ExpectColumnListLengthsToBeBetween(ColumnMapExpectation):  # type: ignore[misc]
    """Expect the number of elements of each list value to be between min_value and max_value.

    Args:
        column: the list column.
        min_value: the smallest allowed number of elements (inclusive), or None.
        max_value: the largest allowed number of elements (inclusive), or None.
        mostly: the share of non-null rows that must pass.
    """

    min_value: int | None = None
    max_value: int | None = None

    library_metadata: ClassVar[dict[str, str | list[Any] | bool]] = _LIBRARY_METADATA
    map_metric = "column_values.list_length.between"
    success_keys = ("min_value", "max_value", "mostly")
    args_keys = ("column", "min_value", "max_value")


class ExpectColumnListElementLengthsToBeBetween(ColumnMapExpectation):  # type: ignore[misc]
    """Expect every element of each list value to be a string of length min_value..max_value.

    Args:
        column: the list column.
        min_value: the shortest allowed element (inclusive), or None.
        max_value: the longest allowed element (inclusive), or None.
        mostly: the share of non-null rows that must pass.
    """

    min_value: int | None = None
    max_value: int | None = None

    library_metadata: ClassVar[dict[str, str | list[Any] | bool]] = _LIBRARY_METADATA
    map_metric = "column_values.list_element_length.between"
    success_keys = ("min_value", "max_value", "mostly")
    args_keys = ("column", "min_value", "max_value")


CUSTOM_EXPECTATION_TYPES: tuple[str, ...] = (
    "expect_column_list_lengths_to_be_between",
    "expect_column_list_element_lengths_to_be_between",
)
"""The snake-case type names under which GX registered the classes above."""
