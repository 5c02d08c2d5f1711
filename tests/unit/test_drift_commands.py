"""``modelops drift`` argument parsing (modelops.drift.commands)."""

from __future__ import annotations

import argparse

import pytest

from modelops.drift import commands


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="modelops")
    commands.add_commands(parser.add_subparsers(dest="command", required=True))
    return parser


def test_defaults_follow_the_spec() -> None:
    args = _parser().parse_args(
        ["drift", "--baseline", "b/", "--current", "c.parquet", "--features", "f.yaml", "--out", "o/"]
    )
    assert (args.baseline, args.current, args.features, args.out) == ("b/", "c.parquet", "f.yaml", "o/")
    assert args.threshold == 0.05 and args.max_rows == 1_000_000 and args.master is None
    assert args.func is commands._run


def test_options_are_parsed() -> None:
    args = _parser().parse_args(
        ["drift", "--baseline", "s3a://b/x", "--current", "y", "--features", "f", "--out", "s3://r/p",
         "--threshold", "0.1", "--max-rows", "5000", "--master", "spark://m:7077"]
    )
    assert args.threshold == 0.1 and args.max_rows == 5000 and args.master == "spark://m:7077"


@pytest.mark.parametrize("extra", [
    ["--threshold", "0"], ["--threshold", "1.5"], ["--threshold", "x"], ["--max-rows", "0"],
])
def test_bad_values_are_refused(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(["drift", "--baseline", "b", "--current", "c", "--features", "f", "--out", "o", *extra])
    assert exc.value.code == 2
    assert "--" in capsys.readouterr().err


@pytest.mark.parametrize("missing", ["--baseline", "--current", "--features", "--out"])
def test_required_arguments(missing: str) -> None:
    argv = ["drift", "--baseline", "b", "--current", "c", "--features", "f", "--out", "o"]
    at = argv.index(missing)
    with pytest.raises(SystemExit):
        _parser().parse_args(argv[:at] + argv[at + 2:])
