"""``modelops config``: show the effective configuration or the configuration reference table."""

from __future__ import annotations

import argparse

from modelops.config import SETTINGS, load_settings, markdown_table


def _run(args: argparse.Namespace) -> int:
    if args.markdown:
        print(markdown_table())
        return 0
    current = load_settings()
    for setting in SETTINGS:
        value = getattr(current, setting.attr)
        shown = "<hidden>" if setting.secret and value else setting.render(value)
        print(f"{setting.env:36} {shown}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("config", help="show the effective configuration (validated)")
    parser.add_argument("--markdown", action="store_true", help="print the configuration reference table")
    parser.set_defaults(func=_run)
