"""``modelops traffic``: simulated users against the gateway, with live progress."""

from __future__ import annotations

import argparse

from modelops.names import cli_model_name


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    traffic = sub.add_parser(
        "traffic", help="send simulated users' requests and feedback through the gateway",
        description="Simulated users call POST /v1/models/MODEL/predict at a fixed rate and send feedback "
                    "(click, purchase after a click, skip) through the feedback_token, with probabilities "
                    "per model version. Bounded by --requests and --seconds; prints progress every second.")
    traffic.add_argument("--model", default="recommender", type=cli_model_name, help="model name (routes document)")
    traffic.add_argument("--url", default="", help="gateway base URL (default: the configured gateway)")
    traffic.add_argument("--rate", type=float, default=20.0, help="requests per second")
    traffic.add_argument("--requests", type=int, default=1000, help="stop after this many requests")
    traffic.add_argument("--seconds", type=float, default=60.0, help="stop after this many seconds")
    traffic.add_argument("--users", type=int, default=1000, help="distinct users u_000000 …")
    traffic.add_argument("--items", type=int, default=1000, help="distinct items i_000000 …")
    traffic.add_argument("--items-per-request", type=int, nargs=2, default=(1, 10), metavar=("MIN", "MAX"))
    traffic.add_argument("--id-width", type=int, default=6, help="digits of the zero-padded ids")
    traffic.add_argument("--click", type=float, default=0.1, help="click probability (every version)")
    traffic.add_argument("--purchase", type=float, default=0.2, help="purchase probability after a click")
    traffic.add_argument("--skip", type=float, default=0.1, help="skip probability without a click")
    traffic.add_argument("--version-click", nargs="*", default=[], metavar="V=P",
                         help="click probability of one Triton version, e.g. 4=0.15")
    traffic.add_argument("--version-purchase", nargs="*", default=[], metavar="V=P",
                         help="purchase probability of one Triton version, e.g. 4=0.3")
    traffic.add_argument("--concurrency", type=int, default=32, help="most requests in flight")
    traffic.add_argument("--seed", type=int, default=0)
    traffic.set_defaults(func=_traffic)


def _traffic(args: argparse.Namespace) -> int:
    import asyncio

    from modelops.config import settings
    from modelops.traffic.runner import run_traffic
    from modelops.traffic.simulation import Behaviour, TrafficSpec, parse_version_probabilities

    default = Behaviour(args.click, args.purchase, args.skip)
    clicks = parse_version_probabilities(args.version_click, "click")
    purchases = parse_version_probabilities(args.version_purchase, "purchase")
    per_version = {v: Behaviour(clicks.get(v, default.click), purchases.get(v, default.purchase), default.skip)
                   for v in set(clicks) | set(purchases)}
    spec = TrafficSpec(model=args.model, rate=args.rate, max_requests=args.requests, max_seconds=args.seconds,
                       n_users=args.users, n_items=args.items, items_per_request=tuple(args.items_per_request),
                       id_width=args.id_width, default=default, per_version=per_version,
                       concurrency=args.concurrency, seed=args.seed)
    url = args.url or settings().gateway_url
    report = asyncio.run(run_traffic(spec, url, progress=lambda line: print(line, flush=True)))
    return 0 if report.status.get(200, 0) > 0 else 1
