"""``python -m modelops.gateway serve``: the gateway's commands without the full ``modelops`` CLI."""

from __future__ import annotations

import argparse
import sys

from modelops.gateway.commands import add_commands


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m modelops.gateway")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["gateway", *sys.argv[1:]])
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
