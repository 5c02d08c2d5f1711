"""``modelops contracts`` and ``modelops example requests`` through their argparse wiring."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import pytest

from modelops.contracts.commands import add_commands as contracts_commands
from modelops.example.commands import add_commands as example_commands


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="modelops")
    sub = parser.add_subparsers(dest="command", required=True)
    contracts_commands(sub)
    example_commands(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_validate_exits_0_on_a_valid_batch_and_1_naming_the_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.parquet"
    assert run("example", "requests", "--out", str(good), "--n", "50") == 0
    assert run("contracts", "validate", "--suite", "requests", "--data", str(good)) == 0
    assert "passed" in capsys.readouterr().out

    frame = pd.read_parquet(good)
    frame.loc[3, "timestamp"] = 42
    bad = tmp_path / "bad.parquet"
    frame.to_parquet(bad)
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    code = run("contracts", "validate", "--suite", "requests", "--data", str(bad),
               "--json", str(out_json), "--html", str(out_html))  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 1
    assert "expect_column_values_to_be_between" in printed and "timestamp" in printed and "42" in printed
    document = json.loads(out_json.read_text())
    assert [o["column"] for o in document["outcomes"] if not o["success"]] == ["timestamp"]
    assert "FAILED" in out_html.read_text()


def test_validate_reads_a_directory_of_parquet_files(tmp_path: Path) -> None:
    folder = tmp_path / "batch"
    folder.mkdir()
    assert run("example", "requests", "--out", str(folder / "part-0.parquet"), "--n", "20", "--seed", "1") == 0
    assert run("example", "requests", "--out", str(folder / "part-1.parquet"), "--n", "20", "--seed", "2") == 0
    assert run("contracts", "validate", "--suite", "requests", "--data", str(folder)) == 0


def test_export_writes_round_trippable_suites(tmp_path: Path) -> None:
    from modelops.contracts.suites import suite_from_json

    assert run("contracts", "export", "--out", str(tmp_path)) == 0
    for name in ("requests", "features"):
        suite = suite_from_json(json.loads((tmp_path / f"{name}.json").read_text()))
        assert suite.name == name and suite.expectations
