"""``modelops feedback`` argument parsing (no Spark: only the parser and the early checks)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

import pytest

from modelops.feedback.commands import add_commands

REQUIRED = ["--predictions", "p", "--events", "e", "--start", "2026-11-01T00:00:00Z",
            "--end", "2026-11-02T00:00:00+00:00", "--out", "o"]


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="modelops")
    add_commands(root.add_subparsers(dest="command", required=True))
    return root


def test_defaults_and_parsed_instants() -> None:
    args = parser().parse_args(["feedback", *REQUIRED])
    assert args.start == datetime(2026, 11, 1, tzinfo=UTC)
    assert args.end == datetime(2026, 11, 2, tzinfo=UTC)
    assert args.window_hours == 24.0
    assert args.master is None
    # --predictions and --events take one or more locations (local paths or s3:// prefixes).
    assert (args.predictions, args.events, args.out) == (["p"], ["e"], "o")
    assert callable(args.func)


def test_several_input_locations() -> None:
    args = parser().parse_args(["feedback", *REQUIRED, "--predictions", "s3://b/p/hour=00", "s3://b/p/hour=01"])
    assert args.predictions == ["s3://b/p/hour=00", "s3://b/p/hour=01"]


def test_window_and_master_flags() -> None:
    args = parser().parse_args(["feedback", *REQUIRED, "--window-hours", "1.5", "--master", "local[1]"])
    assert (args.window_hours, args.master) == (1.5, "local[1]")


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--start", "yesterday", "example: 2026-11-01T00:00:00Z"),
        ("--window-hours", "0", "must be a number of hours > 0"),
        ("--window-hours", "abc", "must be a number of hours > 0"),
    ],
)
def test_bad_values_name_the_rule(flag: str, value: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["feedback", *REQUIRED]
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    with pytest.raises(SystemExit):
        parser().parse_args(argv)
    assert message in capsys.readouterr().err


def test_empty_interval_fails_before_spark_starts(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["feedback", *REQUIRED]
    argv[argv.index("--end") + 1] = "2026-11-01T00:00:00Z"
    args = parser().parse_args(argv)
    assert args.func(args) == 2
    assert "must be before --end" in capsys.readouterr().err
