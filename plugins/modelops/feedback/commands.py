"""``modelops feedback``: CTR/CVR per version; ``modelops outcomes``: action rates and realized performance per day."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date, datetime

from modelops.feedback.definitions import DEFAULT_WINDOW_HOURS, iso, parse_iso
from modelops.feedback.outcome_metrics import DEFAULT_OUTCOME_DAYS


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
    _add_outcomes(sub)


def _day(text: str) -> str:
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a day YYYY-MM-DD (example: 2026-11-01), got {text!r}") from None


def _days(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of days >= 1 (example: 7), got {text!r}")
    return int(text)


def _add_outcomes(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "outcomes",
        help="action rates and realized performance (AUC, log loss, RMSE ...) per model, version and day (Spark)",
        description=(
            "Recompute DAYS prediction days ending with DAY from every label and action in EVENTS: per model, "
            "version and day the rate of each declared action and, for labelled models, label coverage, delay "
            "p50/p90 and realized performance. Writes OUT/dt=YYYY-MM-DD/<model>.json for each model and day "
            "(replaced by later runs: late labels update earlier days)."
        ),
    )
    parser.add_argument("--predictions", required=True, nargs="+", metavar="PATH",
                        help="prediction log of the days (trees or files, local or s3://)")
    parser.add_argument("--events", required=True, nargs="+", metavar="PATH",
                        help="feedback log received since the first day (trees or files, local or s3://)")
    parser.add_argument("--day", required=True, type=_day, metavar="YYYY-MM-DD", help="the last day recomputed")
    parser.add_argument("--days", type=_days, default=DEFAULT_OUTCOME_DAYS, metavar="N",
                        help=f"days recomputed, ending with DAY (default {DEFAULT_OUTCOME_DAYS})")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder or s3://bucket/prefix of the documents")
    parser.add_argument("--specs", default=None, metavar="ROOT",
                        help="Triton repository root holding <model>/<version>/model-spec.json (folder or s3://); "
                             "omitted: no version has a spec (each declares click, purchase, skip)")
    parser.add_argument("--window-hours", type=_hours, default=DEFAULT_WINDOW_HOURS, metavar="H",
                        help=f"an action counts up to H hours after its prediction (default {DEFAULT_WINDOW_HOURS:g})")
    parser.add_argument("--master", default=None, metavar="URL",
                        help="Spark master URL (default: MODELOPS_SPARK_MASTER)")
    parser.set_defaults(func=_outcomes)


def _outcomes(args: argparse.Namespace) -> int:
    from modelops.feedback.declared import repository_reader
    from modelops.feedback.outcome_job import run_outcomes
    from modelops.feedback.outcome_metrics import covered_days

    start, end = covered_days(args.day, args.days)
    result = run_outcomes(args.predictions, args.events, start, end, args.out,
                          specs=repository_reader(args.specs) if args.specs else None,
                          window_hours=args.window_hours, master=args.master)
    print(json.dumps({"documents": sorted(result.documents)}, indent=2))
    return 0


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
