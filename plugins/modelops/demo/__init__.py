"""``modelops demo``: the platform's story as a sequence of named steps with progress output.

The reference recommender's story (:mod:`modelops.demo.recommender`), then a second, different model
logged the ordinary MLflow way (:mod:`modelops.demo.second_model`), then the batch jobs over the
traffic of both.
"""

from __future__ import annotations

import argparse
import time

from modelops.config import Settings, settings
from modelops.demo import recommender, second_model
from modelops.demo.common import Step, stack_up, urls

STEPS: tuple[Step, ...] = (
    Step("bring the embedded stack up", stack_up),
    Step("show where to look", urls),
    *recommender.STEPS,
    *second_model.STEPS,
    recommender.JOBS,
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
