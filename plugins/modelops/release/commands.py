"""``modelops release start|abort|pause|resume``: drive ``model_release`` through the Airflow REST API."""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

from modelops.names import cli_model_name


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    release = sub.add_parser(
        "release", help="start a model release (canary) and follow it; abort, pause or resume one",
        description="start triggers the model_release DAG (contract gate, publish, canary) and prints its progress "
                    "(run state, canary phase, weight, last analysis) until it ends; abort / pause / resume "
                    "trigger model_release_control, applied by the release at its next analysis window.")
    actions = release.add_subparsers(dest="release_command", metavar="ACTION", required=True)

    start = actions.add_parser("start", help="trigger model_release and follow it until it ends")
    start.add_argument("--model", required=True, type=cli_model_name, help="registered model name")
    start.add_argument("--version", required=True, help="MLflow version number or alias (challenger)")
    start.add_argument("--steps", default="", help="canary weights in percent, e.g. 5,25,50,100")
    start.add_argument("--interval-s", type=int, default=0, help="seconds per analysis window")
    start.add_argument("--min-requests", type=int, default=0, help="requests per version for a conclusive gate")
    start.add_argument("--approve", action="store_true",
                       help="require a person's approval before 100%% (Required Actions in the Airflow UI)")
    start.add_argument("--grace-s", type=int, default=-1,
                       help="seconds the previous stable version stays loaded after a promotion "
                            "(default: the DAG's stable_grace_s)")
    start.add_argument("--shadow", type=float, default=0.0, metavar="SHARE",
                       help="a shadow phase first, mirroring this share (0.1-1) of the stable's requests to the "
                            "candidate before any user sees it (default 0: the release's default)")
    start.add_argument("--timeout-s", type=float, default=3600.0, help="stop following after this long")
    start.add_argument("--no-follow", action="store_true", help="print the run id and return")
    start.set_defaults(func=_start)

    for name, text in (("abort", "roll the running release back now"),
                       ("pause", "hold the canary weight (no analysis, no promotion)"),
                       ("resume", "go on with a paused release")):
        control = actions.add_parser(name, help=text)
        control.add_argument("--model", required=True, type=cli_model_name, help="registered model name")
        control.add_argument("--version", type=int, required=True,
                             help="the canary's Triton version (printed by release start)")
        control.add_argument("--reason", default="", help="recorded in the status and the notification")
        control.add_argument("--by", default="cli", help="who asks")
        control.set_defaults(func=_control, action=name)


def _control(args: argparse.Namespace) -> int:
    from modelops.airflow_client import client_from_settings

    client = client_from_settings()
    conf = {"model": args.model, "version": args.version, "action": args.action, "reason": args.reason,
            "requested_by": args.by}
    run_id = client.trigger("model_release_control", conf, run_id=f"cli-{args.action}-{uuid.uuid4().hex[:8]}")
    state = client.wait("model_release_control", run_id, timeout_s=300)
    if state != "success":
        print(f"{args.action} {args.model} v{args.version}: control run {run_id} {state} "
              "(no running release of that version?)")
        return 1
    print(f"{args.action} {args.model} v{args.version}: requested; the release applies it at its next window")
    return 0


def progress_line(run_state: str, status: dict[str, Any] | None) -> str:
    """One progress line: run state, canary phase and weight, last analysis."""
    if status is None:
        return f"run {run_state}"
    line = (f"run {run_state} | canary v{status['canary_version']} vs v{status['stable_version']}: "
            f"{status['phase']} at {float(status['weight']):.0%}, {status['analyses']} analyses, "
            f"{status['failed_checks']} failed")
    last = status.get("last_analysis")
    if last:
        gates = ", ".join(f"{g['name']} {g['verdict']}" for g in last.get("gates", []))
        line += f" | last: {last.get('verdict')} ({gates})"
    if status.get("mttr_s") is not None:
        line += f" | MTTR {float(status['mttr_s']):.1f} s"
    return line


PAUSED_EXIT = 3
"""``release start``'s exit status when the release paused and waits for a person (its run goes on)."""


def _start(args: argparse.Namespace) -> int:
    from modelops.airflow_client import TERMINAL_STATES, client_from_settings
    from modelops.canary.machine import waits_for_person
    from modelops.canary.report import pause_note
    from modelops.canary.status import Phase
    from modelops.release.follow import canary_status, canary_version, of_this_run

    client = client_from_settings()
    conf: dict[str, Any] = {"model": args.model, "version": str(args.version), "started_by": "cli",
                            "require_approval": bool(args.approve)}
    if args.steps:
        conf["canary_steps"] = args.steps
    if args.interval_s:
        conf["analysis_interval_s"] = args.interval_s
    if args.min_requests:
        conf["min_requests"] = args.min_requests
    if args.grace_s >= 0:
        conf["stable_grace_s"] = args.grace_s
    if args.shadow:
        conf.update(shadow=True, shadow_share=args.shadow)
    run_id = client.trigger("model_release", conf, run_id=f"cli-{uuid.uuid4().hex[:8]}")
    print(f"model_release run {run_id} started")
    if args.no_follow:
        return 0
    deadline = time.monotonic() + args.timeout_s
    last, state, published = "", "", None
    while time.monotonic() < deadline:
        run = client.request("GET", f"/api/v2/dags/model_release/dagRuns/{run_id}")
        state = str(run["state"])
        if published is None:
            published = canary_version(client, run_id)
            if published is not None:
                print(f"canary: Triton version {published} (modelops release abort --model {args.model} "
                      f"--version {published})")
        status = canary_status(args.model, published)
        status = status if status is not None and of_this_run(status, run) else None
        line = progress_line(state, None if status is None else status.to_dict())
        if line != last:
            print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)
            if "waiting_approval" in line:
                print("  approve in the Airflow UI (Required Actions) or reject there to roll back")
            if status is not None and status.phase is Phase.PAUSED:
                print("  " + pause_note(status).replace("\n", "\n  "), flush=True)
            last = line
        if state in TERMINAL_STATES:
            break
        if state == "running" and waits_for_person(status):
            print(f"paused: the release waits for a person (run {run_id} keeps running); exit status 3")
            return PAUSED_EXIT
        if "promoted at" in line and _task_state(client, run_id, "canary_finish") == "success":
            print("promoted; the previous stable version stays loaded for the grace period (task "
                  "retire_previous_stable), then is unloaded")
            state = "success"
            break
        time.sleep(2.0)
    else:
        print(f"still {state} after {args.timeout_s:.0f} s; follow it in the Airflow UI (run {run_id})")
        return 1
    note = client.request("GET", f"/api/v2/dags/model_release/dagRuns/{run_id}").get("note")
    if note:
        print(note)
    return 0 if state == "success" else 1


def _task_state(client: Any, run_id: str, task_id: str) -> str | None:
    states = {t["task_id"]: t.get("state") for t in client.task_instances("model_release", run_id)}
    return states.get(task_id)
