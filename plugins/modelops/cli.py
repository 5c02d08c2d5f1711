"""The ``modelops`` command line.

Each area of the platform contributes its sub-commands from a ``commands`` module
exposing ``add_commands(subparsers)``; every sub-command sets ``func`` (a callable
taking the parsed namespace and returning an exit code). Heavy imports (Spark,
MLflow, pandas) happen inside those functions, so ``modelops --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from modelops.errors import ModelopsError

COMMAND_MODULES: tuple[str, ...] = (
    "modelops.stack.commands",
    "modelops.example.commands",
    "modelops.contracts.commands",
    "modelops.serving.commands",
    "modelops.release.commands",
    "modelops.release.webhook_commands",
    "modelops.gateway.commands",
    "modelops.traffic.commands",
    "modelops.feedback.commands",
    "modelops.drift.commands",
    "modelops.demo",
    "modelops.config_commands",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="modelops",
        description="Release, serve and watch ML models: MLflow -> GX contracts -> Triton -> canary -> Spark jobs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = args.func(args)
    except ModelopsError as exc:
        print(f"modelops: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("modelops: interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
