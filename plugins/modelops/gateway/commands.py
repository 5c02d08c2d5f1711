"""``modelops gateway serve``: the serving gateway under uvicorn."""

from __future__ import annotations

import argparse
import os
from dataclasses import fields


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from modelops.gateway.options import GatewayOptions

    gateway = sub.add_parser("gateway", help="the serving gateway")
    gateway_sub = gateway.add_subparsers(dest="gateway_command", metavar="ACTION", required=True)
    serve = gateway_sub.add_parser(
        "serve", help="serve predictions and feedback (host, port, workers from MODELOPS_BIND_HOST, "
                      "MODELOPS_GATEWAY_PORT, MODELOPS_GATEWAY_WORKERS)")
    serve.add_argument("--port", type=int, default=None, help="override MODELOPS_GATEWAY_PORT")
    serve.add_argument("--workers", type=int, default=None, help="override MODELOPS_GATEWAY_WORKERS")
    defaults = GatewayOptions()
    for option in fields(GatewayOptions):
        default = getattr(defaults, option.name)
        serve.add_argument(f"--{option.name.replace('_', '-')}", type=type(default), default=default,
                           help=f"(default: {default!r})")
    serve.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from modelops.config import settings
    from modelops.gateway.options import OPTIONS_ENV, GatewayOptions
    from modelops.gateway.server import OneWriteHttpToolsProtocol

    cfg = settings()
    options = GatewayOptions(**{f.name: getattr(args, f.name) for f in fields(GatewayOptions)})
    os.environ[OPTIONS_ENV] = options.to_env()  # inherited by uvicorn's worker processes
    uvicorn.run(
        "modelops.gateway.app:create_app",
        factory=True,
        host=cfg.bind_host,
        port=args.port or cfg.gateway_port,
        workers=args.workers or cfg.gateway_workers,
        loop="uvloop",
        http=OneWriteHttpToolsProtocol,  # httptools, a response's head and body in one write
        access_log=False,
        proxy_headers=False,  # the gateway never reads the client address: no X-Forwarded-* middleware per request
        log_level="info",
        timeout_graceful_shutdown=10,
    )
    return 0
