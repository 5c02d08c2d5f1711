"""``modelops demo``: the platform's story as a sequence of named steps with progress output."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

from modelops.config import Settings, settings


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[Settings], str]


def _stack_up(cfg: Settings) -> str:
    from modelops.stack import launcher

    states = launcher.up(cfg, progress=lambda line: print(line, flush=True))
    print(launcher.format_table(states))
    return f"{len(states)} services healthy"


def _urls(cfg: Settings) -> str:
    from modelops.stack.services import airflow_password

    print(f"    Airflow UI  {cfg.airflow_api_url}  (user {cfg.airflow_user}, password {airflow_password(cfg)})")
    print(f"    MLflow UI   {cfg.mlflow_uri}")
    print(f"    Triton      {cfg.triton_http_url}")
    print(f"    S3 store    {cfg.s3_endpoint}  (buckets {cfg.bucket}, {cfg.mlflow_bucket})")
    return "URLs printed"


STEPS: tuple[Step, ...] = (
    Step("bring the embedded stack up", _stack_up),
    Step("show where to look", _urls),
)


def run(cfg: Settings) -> int:
    total = time.monotonic()
    for index, step in enumerate(STEPS, start=1):
        print(f"\n[{index}/{len(STEPS)}] {step.name} ...", flush=True)
        t0 = time.monotonic()
        outcome = step.run(cfg)
        print(f"[{index}/{len(STEPS)}] done in {time.monotonic() - t0:.1f} s: {outcome}", flush=True)
    print(f"\ndemo finished in {time.monotonic() - total:.1f} s; stop the stack with `make stack-down`")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("demo", help="run the platform's story end to end (what `make demo` runs)")
    parser.set_defaults(func=lambda args: run(settings()))
