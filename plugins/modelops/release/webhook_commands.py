"""``modelops webhook register|status|test``: the MLflow webhook that starts releases from the alias challenger."""

from __future__ import annotations

import argparse

from modelops.config import settings


def _register(args: argparse.Namespace) -> int:
    from modelops.registry.webhooks import ensure_release_webhook, rotate_secret

    cfg = settings()
    secret = rotate_secret(cfg) if args.rotate else None
    state = ensure_release_webhook(cfg, secret=secret)
    if state.action == "absent":
        print("release webhooks are off (MODELOPS_RELEASE_WEBHOOKS=off) and MLflow has none: nothing to do")
        return 0
    print(f"webhook {state.webhook_id} {state.action}: {state.status} {', '.join(state.events)} -> {state.url}")
    if state.removed_duplicates:
        print(f"  removed {state.removed_duplicates} duplicate(s)")
    if args.rotate:
        print("  secret rotated; the receiver accepts the previous one for 10 more minutes")
    return 0


def _status(args: argparse.Namespace) -> int:
    from modelops.registry.webhooks import describe_release_webhook

    cfg = settings()
    state = describe_release_webhook(cfg)
    if state.action == "absent":
        print(f"no release webhook in MLflow at {cfg.mlflow_uri} (register: modelops webhook register)")
        return 1
    print(f"webhook {state.webhook_id}: {state.status} {', '.join(state.events)} -> {state.url}")
    print(f"setting MODELOPS_RELEASE_WEBHOOKS={cfg.release_webhooks}, receiver {cfg.release_webhook_target}")
    return 0 if (state.status == "ACTIVE") == (cfg.release_webhooks == "on") else 1


def _test(args: argparse.Namespace) -> int:
    from modelops.registry.webhooks import probe_release_webhook

    delivered, detail = probe_release_webhook(settings())
    print(f"{'delivered' if delivered else 'NOT delivered'}: {detail}")
    return 0 if delivered else 1


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    hook = sub.add_parser(
        "webhook", help="the MLflow webhook that starts a release when the alias challenger is set",
        description="MLflow posts model_version_alias.created, signed with a generated secret, to the receiver on "
                    "Airflow's API server; `stack up` registers it, these commands manage it.")
    verbs = hook.add_subparsers(dest="webhook_command", metavar="ACTION", required=True)
    register = verbs.add_parser(
        "register", help="create or update the webhook in MLflow as the settings say (idempotent: one webhook; "
                         "disabled when MODELOPS_RELEASE_WEBHOOKS=off)")
    register.add_argument("--rotate", action="store_true",
                          help="generate a new secret first (the previous one stays accepted for 10 minutes)")
    register.set_defaults(func=_register)
    verbs.add_parser("status", help="the webhook as MLflow holds it (exit 1 when it disagrees with the setting)"
                     ).set_defaults(func=_status)
    verbs.add_parser("test", help="MLflow sends a signed example delivery to the receiver (exit 1 when refused)"
                     ).set_defaults(func=_test)
