"""``modelops contracts …``: export the generated suites, validate a file against one."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SUITES = ("requests", "features")


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``contracts`` with its sub-commands ``export`` and ``validate``."""
    parser = sub.add_parser("contracts", help="data contracts: GX suites generated from the contract sources")
    contracts = parser.add_subparsers(dest="contracts_command", metavar="ACTION", required=True)

    export = contracts.add_parser("export", help="write the generated suites as JSON (for inspection)")
    export.add_argument(
        "--out", type=Path, default=None, help="output directory (default: MODELOPS_HOME/suites)"
    )
    export.set_defaults(func=_export)

    validate = contracts.add_parser("validate", help="validate a Parquet/CSV file or Parquet directory")
    validate.add_argument("--suite", choices=SUITES, required=True)
    validate.add_argument(
        "--data", type=Path, required=True, help="a .parquet/.csv file or a Parquet directory"
    )
    validate.add_argument("--engine", choices=("pandas", "spark"), default="pandas")
    validate.add_argument("--json", type=Path, default=None, help="also write the result as JSON here")
    validate.add_argument("--html", type=Path, default=None, help="also write the HTML page here")
    validate.add_argument("--all", action="store_true", help="list passed expectations too")
    validate.set_defaults(func=_validate)


def _export(args: argparse.Namespace) -> int:
    from modelops.config import settings
    from modelops.contracts.suites import load_suite

    args.out = args.out or settings().home / "suites"
    args.out.mkdir(parents=True, exist_ok=True)
    for name in SUITES:
        suite = load_suite(name)
        path = args.out / f"{name}.json"
        path.write_text(json.dumps(suite.to_json_dict(), indent=2, default=str) + "\n")
        print(f"{path}: {len(suite.expectations)} expectations")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from modelops.contracts.report import render_html
    from modelops.contracts.validation import format_table, table_rows, validate_path

    report = validate_path(args.data, args.suite, engine=args.engine)
    rows = table_rows(report, only_failed=not args.all)
    if rows:
        print(format_table(rows))
        print()
    print(report.summary().splitlines()[0])
    if args.json:
        args.json.write_text(json.dumps(report.to_json_dict(), indent=2) + "\n")
    if args.html:
        args.html.write_text(render_html(report))
    return 0 if report.success else 1
