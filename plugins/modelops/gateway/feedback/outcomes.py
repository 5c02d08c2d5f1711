"""What ``POST /v1/feedback`` takes for a model, and what a labelled model's prediction record keeps.

Pure functions over the version's declared outcomes (:class:`modelops.modelspec.spec.Outcomes`; a
version without a spec, the reference recommender, is ``Outcomes()``: the platform's actions).

A feedback body is ``{feedback_token, timestamp}`` plus exactly one of:

* ``action``: one of the actions the model accepts (:meth:`Outcomes.accepted_actions`);
* ``label``: the ground truth of a ``binary`` label (``0``/``1``, ``true``/``false`` or one of its
  two declared classes, logged as ``"0"``/``"1"``) or of a ``multiclass`` one (one of its
  ``classes``, logged as given);
* ``value``: the ground truth of a ``numeric`` label, a finite number.

Anything else is a :class:`Violation` naming the field, the rule and an example (HTTP 400).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from modelops.gateway.protocol.contract import Violation
from modelops.modelspec.spec import Label, ModelSpec, Outcomes

FORMS: tuple[str, ...] = ("action", "label", "value")
"""The outcome fields of a feedback body; exactly one per body."""


class BadFeedback(ValueError):
    """A feedback body the model's declaration refuses (HTTP 400)."""

    def __init__(self, violation: Violation) -> None:
        super().__init__(violation.message)
        self.violation = violation


@dataclass(frozen=True)
class Outcome:
    """One accepted feedback event's outcome: exactly one field is set."""

    action: str | None = None
    label: str | None = None
    value: float | None = None

    @property
    def form(self) -> str:
        """``action``, ``label`` or ``value``: which one the event carries."""
        return "action" if self.action is not None else "label" if self.label is not None else "value"


def outcome_form(document: Mapping[str, Any]) -> str:
    """Which outcome field a (schema-checked) body carries.

    Raises:
        BadFeedback: none, or more than one.
    """
    present = [f for f in FORMS if f in document]
    if len(present) == 1:
        return present[0]
    if not present:
        raise BadFeedback(Violation("action", "required", None,
                                    "one of action, label or value is required (example: \"action\": \"click\"; "
                                    "a labelled model: \"label\": 1 or \"value\": 12.5)"))
    raise BadFeedback(Violation(present[1], "oneOf", document[present[1]],
                                f"send one of {', '.join(present)} per event, not several (example: \"label\": 1)"))


def parse_outcome(document: Mapping[str, Any], outcomes: Outcomes, model: str) -> Outcome:
    """The outcome of a body for a model that declares ``outcomes``.

    Raises:
        BadFeedback: the body's outcome is not one the model declares, naming the field, the rule and an example.
    """
    form = outcome_form(document)
    raw = document[form]
    label = outcomes.label
    if form == "action":
        accepted = outcomes.accepted_actions()
        if not accepted:
            raise BadFeedback(Violation("action", "not declared", raw,
                                        f"model {model} declares no actions; send its label instead "
                                        f"(example: {_label_example(label)})"))
        if not isinstance(raw, str) or raw not in accepted:
            raise BadFeedback(Violation("action", f"enum {list(accepted)}", raw,
                                        f"action must be one of {list(accepted)} for model {model} "
                                        f"(example: \"action\": \"{accepted[0]}\")"))
        return Outcome(action=raw)
    if label is None:
        raise BadFeedback(Violation(form, "not declared", raw,
                                    f"model {model} declares no label (outcomes.label); send an action "
                                    f"(example: \"action\": \"{outcomes.accepted_actions()[0]}\")"))
    if label.kind == "numeric":
        return Outcome(value=_numeric(form, raw, model))
    if form == "value":
        raise BadFeedback(Violation("value", f"{label.kind} label", raw,
                                    f"model {model} declares a {label.kind} label: send it as label, not value "
                                    f"(example: {_label_example(label)})"))
    if label.kind == "binary":
        return Outcome(label=_binary(raw, label, model))
    if not isinstance(raw, str) or raw not in label.classes:
        raise BadFeedback(Violation("label", f"enum {list(label.classes)}", raw,
                                    f"label must be one of the classes {list(label.classes)} of model {model} "
                                    f"(example: {_label_example(label)})"))
    return Outcome(label=raw)


def _numeric(form: str, raw: Any, model: str) -> float:
    if form != "value":
        raise BadFeedback(Violation("label", "numeric label", raw,
                                    f"model {model} declares a numeric label: send it as value, a finite number "
                                    "(example: \"value\": 12.5)"))
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
        raise BadFeedback(Violation("value", "finite number", raw,
                                    f"value must be a finite number for model {model} (example: \"value\": 12.5)"))
    return float(raw)


def _binary(raw: Any, label: Label, model: str) -> str:
    if isinstance(raw, bool):
        return "1" if raw else "0"
    if isinstance(raw, (int, float)) and raw in (0, 1):
        return str(int(raw))
    if isinstance(raw, str) and raw in label.classes:
        return str(label.classes.index(raw))  # the second class is the positive one
    named = f", or one of the classes {list(label.classes)}" if label.classes else ""
    rule = "binary label: 0, 1, true, false" + "".join(f", {c}" for c in label.classes)
    raise BadFeedback(Violation("label", rule, raw, f"label must be 0, 1, true or false{named} for model {model} "
                                                    f"(example: {_label_example(label)})"))


def _label_example(label: Label | None) -> str:
    if label is None:
        return "\"action\": \"click\""
    if label.kind == "numeric":
        return "\"value\": 12.5"
    if label.kind == "multiclass":
        return f"\"label\": \"{label.classes[0]}\""
    return f"\"label\": \"{label.classes[1]}\"" if label.classes else "\"label\": 1"


def prediction_columns(spec: ModelSpec, outputs: Mapping[str, npt.NDArray[Any]],
                       rows: int) -> tuple[float | None, list[float] | None]:
    """``(prediction, probabilities)`` of a labelled model's one-row answer for its prediction record.

    Binary: the first output's probability of the positive class (column 1 of a ``[1, 2]`` output,
    the value of a ``[1, 1]`` one); numeric: the first output's value; multiclass: the first output's
    row as ``probabilities``. ``(None, None)`` for a model without a label, a request of several rows
    (one token, several predictions: a label could not say which it judges), or a non-finite answer.
    """
    label = spec.outcomes.label
    if label is None or rows != 1 or not spec.outputs:
        return None, None
    first = outputs.get(spec.outputs[0].name)
    if first is None:
        return None, None
    row = np.asarray(first, dtype=np.float64).reshape(-1)
    if not row.size or not np.all(np.isfinite(row)):
        return None, None
    if label.kind == "multiclass":
        return None, [float(x) for x in row]
    if label.kind == "binary" and row.size >= 2:
        return float(row[1]), None
    return float(row[0]), None
