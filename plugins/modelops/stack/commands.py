"""``modelops stack up|down|status|logs``: the embedded stack on loopback."""

from __future__ import annotations

import argparse
import sys
import time

from modelops.config import settings
from modelops.credentials import airflow_password
from modelops.stack import launcher


def _up(args: argparse.Namespace) -> int:
    cfg = settings()
    print(f"==> modelops stack up (state in {cfg.home})", flush=True)
    states = launcher.up(cfg, progress=lambda line: print(line, flush=True))
    print(launcher.format_table(states))
    print(f"\nAirflow UI   {cfg.airflow_api_url}   user {cfg.airflow_user}   password {airflow_password(cfg)}")
    print(f"MLflow UI    {cfg.mlflow_uri}")
    return 0


def _down(args: argparse.Namespace) -> int:
    cfg = settings()
    stopped = launcher.down(cfg, progress=lambda line: print(line, flush=True))
    print(f"stopped {len(stopped)} service(s)" if stopped else "nothing was running")
    return 0


def _status(args: argparse.Namespace) -> int:
    states = launcher.status(settings())
    print(launcher.format_table(states))
    for state in states:
        if state.state == "unhealthy" and state.detail:
            print(f"  {state.name}: {state.detail}")
    return 0 if all(s.state == "healthy" for s in states) else 1


def _logs(args: argparse.Namespace) -> int:
    from modelops.process import tail

    cfg = settings()
    services = [s for s in launcher.all_services(cfg) if not args.service or s.name in args.service]
    if not services:
        names = ", ".join(s.name for s in launcher.all_services(cfg))
        print(f"unknown service {args.service}; choose from: {names}", file=sys.stderr)
        return 2
    for service in services:
        print(f"==> {service.name}: {service.log_file(cfg.home)}")
        print(tail(service.log_file(cfg.home), args.lines))
    if args.follow and len(services) == 1:
        path = services[0].log_file(cfg.home)
        with path.open() as fh:
            fh.seek(0, 2)
            while True:
                line = fh.readline()
                if line:
                    print(line, end="", flush=True)
                else:
                    time.sleep(0.3)
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    stack = sub.add_parser("stack", help="the embedded stack: object store, MLflow, Triton, Airflow")
    verbs = stack.add_subparsers(dest="verb", metavar="VERB", required=True)
    verbs.add_parser("up", help="start every service and wait until healthy (idempotent)").set_defaults(func=_up)
    verbs.add_parser("down", help="stop exactly the processes the stack started").set_defaults(func=_down)
    verbs.add_parser("status", help="healthy / unhealthy / stopped per service").set_defaults(func=_status)
    logs = verbs.add_parser("logs", help="the last lines of each service's log")
    logs.add_argument("service", nargs="*", help="service names (default: all)")
    logs.add_argument("-n", "--lines", type=int, default=30)
    logs.add_argument("-f", "--follow", action="store_true", help="follow one service's log")
    logs.set_defaults(func=_logs)
