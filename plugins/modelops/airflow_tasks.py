"""Helpers for task bodies: a failed gate fails the task at once; other errors may retry."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from modelops.errors import GateFailed

P = ParamSpec("P")
R = TypeVar("R")


def gate(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn``; a :class:`GateFailed` becomes Airflow's fail-without-retry exception.

    A failed contract or a refused candidate will fail the same way on every retry, so
    retrying only delays the release's verdict; infrastructure errors keep their retries.
    """

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except GateFailed as exc:
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(str(exc)) from exc

    return wrapper
