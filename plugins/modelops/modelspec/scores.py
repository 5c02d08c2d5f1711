"""One score per row of a model's answer: what the logs, the canary's collapse gate and the drift job read.

The recommender answers one score per item; a model published from its spec answers its first output,
whose shape says what it is (:func:`row_scores`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


def row_scores(output: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    """One score per row of a model's first output.

    ``[n]`` or ``[n, 1]``: the value itself (a regressor, a score); ``[n, 2]``: the second column (a
    binary classifier's positive-class probability: a constant answer then has std 0, where the two
    columns together would show the spread between them); ``[n, k > 2]``: each row's largest value
    (a multiclass classifier's confidence).
    """
    values = np.asarray(output, dtype=np.float64)
    if values.ndim <= 1:
        return values.reshape(-1)
    rows = values.reshape(values.shape[0], -1)
    if rows.shape[1] == 1:
        return rows[:, 0]
    if rows.shape[1] == 2:
        return rows[:, 1]
    return np.asarray(rows.max(axis=1), dtype=np.float64)
