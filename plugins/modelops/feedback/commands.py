"""``modelops feedback``: join one window's predictions with their feedback into CTR/CVR per version."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime

from modelops.feedback.definitions import DEFAULT_WINDOW_HOURS, iso, parse_iso


def _instant(text: str) -> datetime:
    try:
        return parse_iso(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _hours(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number of hours > 0 (example: 24), got {text!r}")
    return value


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``feedback`` sub-command."""
    parser = sub.add_parser(
        "feedback",
        help="join predictions with feedback events into CTR/CVR per model version (Spark)",
        description=(
            "Take the predictions with START <= ts < END, classify every feedback event read from "
            "EVENTS (kept, or rejected as malformed / unknown_token / outside_window / duplicate), "
            "and write DIR/ctr_cvr.json, DIR/ctr_cvr.parquet and DIR/quarantine/. Re-running the "
            "same window replaces DIR. Inputs and DIR are local paths or object-store locations "
            "(s3://bucket/prefix, read and written by the Spark executors)."
        ),
    )
    parser.add_argument("--predictions", required=True, nargs="+", metavar="PATH",
                        help="prediction log: dt=YYYY-MM-DD/hour=HH/ Parquet trees or Parquet files, local or "
                             "s3://bucket/prefix (example: s3://modelops/logs/predictions/dt=2026-11-01/hour=00)")
    parser.add_argument("--events", required=True, nargs="+", metavar="PATH",
                        help="feedback log (trees or files, local or s3://); every event in it gets a verdict")
    parser.add_argument("--start", required=True, type=_instant, metavar="ISO",
                        help="inclusive start, e.g. 2026-11-01T00:00:00Z (naive means UTC)")
    parser.add_argument("--end", required=True, type=_instant, metavar="ISO", help="exclusive end")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="output folder or s3://bucket/prefix (dedicated to this window)")
    parser.add_argument("--window-hours", type=_hours, default=DEFAULT_WINDOW_HOURS, metavar="H",
                        help=f"feedback counts up to H hours after its prediction (default {DEFAULT_WINDOW_HOURS:g})")
    parser.add_argument("--master", default=None, metavar="URL",
                        help="Spark master URL (default: MODELOPS_SPARK_MASTER)")
    parser.set_defaults(func=_feedback)


def _feedback(args: argparse.Namespace) -> int:
    if not args.start < args.end:
        print(f"modelops feedback: error: --start {iso(args.start)} must be before --end {iso(args.end)}",
              file=sys.stderr)
        return 2
    from modelops.feedback.job import run_feedback_join

    result = run_feedback_join(
        args.predictions, args.events, args.start, args.end, args.out,
        window_hours=args.window_hours, master=args.master,
    )
    print(json.dumps(result.document, indent=2))
    print(f"wrote {result.json_path}, {result.parquet_path} and {result.quarantine_path}/")
    return 0
