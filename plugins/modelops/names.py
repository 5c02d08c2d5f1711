"""One rule for model names, checked at every entrance.

A model name travels far: MLflow registered model, DAG params, CLI arguments, the routes
document, Triton model folders (``<name>``, ``<name>_preprocess``, ``<name>_model``; the
folder name is written into ``config.pbtxt``) and object-store keys (``routes/<name>.json``,
``canary/<name>/…``, ``triton/<name>/…``). A name that is fine in one place (``Rec.v2``
in MLflow) breaks another (a Triton folder, an S3 prefix that a ``..`` escapes), so one
rule holds everywhere and is checked where the name first enters, with an error that
names the field, the rule and an example.
"""

from __future__ import annotations

import re

from modelops.errors import ConfigError

MODEL_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
"""Lowercase letter, then up to 63 lowercase letters, digits or underscores (JSON Schema / DAG param form)."""
MODEL_NAME_EXAMPLE = "recommender"
_MODEL_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


def model_name_problem(name: object, field: str = "model") -> str:
    """Why ``name`` is not a valid model name ("" when it is)."""
    if isinstance(name, str) and _MODEL_NAME.fullmatch(name):
        return ""
    return (f"{field}={name!r}: a model name must match {MODEL_NAME_PATTERN} (a lowercase letter, then up to 63 "
            f"lowercase letters, digits or underscores; example: {MODEL_NAME_EXAMPLE})")


def check_model_name(name: object, field: str = "model") -> str:
    """``name`` when it is a valid model name.

    Raises:
        ConfigError: naming the field, the rule and an example.
    """
    problem = model_name_problem(name, field)
    if problem:
        raise ConfigError(problem)
    return str(name)


def cli_model_name(value: str) -> str:
    """argparse ``type=`` for ``--model``: the same rule, as a usage error."""
    import argparse

    problem = model_name_problem(value, "--model")
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value
