"""The serving sub-commands parse their arguments (no servers are called)."""

from __future__ import annotations

import argparse

import pytest

from modelops.serving.commands import add_commands


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="modelops")
    add_commands(root.add_subparsers(dest="command", required=True))
    return root


def test_publish_takes_model_and_version() -> None:
    args = parser().parse_args(["publish", "--model", "recsys", "--version", "3"])
    assert (args.model, args.version, args.no_load, args.triton_name) == ("recsys", "3", False, None)
    assert callable(args.func)


def test_unload_needs_an_integer_triton_version() -> None:
    assert parser().parse_args(["unload", "--model", "recsys", "--triton-version", "2"]).triton_version == 2
    with pytest.raises(SystemExit):
        parser().parse_args(["unload", "--model", "recsys", "--triton-version", "two"])


def test_publish_without_version_is_refused() -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["publish", "--model", "recsys"])
