"""``modelops publish|load|unload|served``: Triton versions of MLflow models from the command line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from modelops.names import cli_model_name


def _publish(args: argparse.Namespace) -> int:
    if args.from_spec:
        return _publish_from_spec(args)
    from modelops.serving.publisher import publish_version

    result = publish_version(args.model, args.version, triton_name=args.triton_name, load=not args.no_load)
    print(json.dumps({
        "model": result.model, "triton_version": result.triton_version, "sha256": result.sha256,
        "uploaded": result.uploaded, "loaded": result.loaded, "repository_uri": result.repository_uri,
        "mlflow_version": result.mlflow_version,
    }, indent=2))
    return 0


def _publish_from_spec(args: argparse.Namespace) -> int:
    from modelops.errors import ConfigError
    from modelops.serving.spec_publish import publish_model, route_first

    if args.triton_name or args.no_load:
        raise ConfigError("--from-spec: the Triton name is the registered model's and the version is always loaded "
                          "and verified (drop --triton-name / --no-load)")
    result = publish_model(args.model, args.version)
    routed = route_first(result) if args.route else False
    print(json.dumps({
        "model": result.model, "triton_version": result.triton_version, "sha256": result.sha256,
        "uploaded": result.uploaded, "max_abs_diff": result.max_abs_diff, "spec_uri": result.spec_uri,
        "timings_s": {k: round(v, 3) for k, v in result.timings_s.items()}, "routed": routed,
        "served_as": result.served_as, "verified_by": result.verified_by, "notes": list(result.notes),
    }, indent=2))
    return 0


def _load(args: argparse.Namespace) -> int:
    from modelops.serving.api import load_version

    served = load_version(args.model, args.triton_version)
    print(f"{args.model}: serving versions {served}")
    return 0


def _unload(args: argparse.Namespace) -> int:
    from modelops.serving.api import unload_version

    left = unload_version(args.model, args.triton_version)
    print(f"{args.model}: serving versions {left or 'none'}")
    return 0


def _served(args: argparse.Namespace) -> int:
    from modelops.serving.loader import verify_served
    from modelops.serving.triton import triton_clients

    clients = triton_clients()
    served_everywhere = True
    for client in clients:  # every server of MODELOPS_TRITON_URL (a dns+ name: each address)
        versions = client.ready_versions(args.model)
        where = f" on {client.base_url}" if len(clients) > 1 else ""
        print(f"{args.model}: serving versions {versions or 'none'}{where}")
        for version in versions:
            check = verify_served(client, args.model, version)
            print(f"  version {check.version}: answers features -> score for {check.rows} rows")
        served_everywhere = served_everywhere and bool(versions)
    return 0 if served_everywhere else 1


def _reconcile(args: argparse.Namespace) -> int:
    import logging
    import time

    from modelops.config import settings
    from modelops.objectstore import ObjectStore
    from modelops.serving.publisher import local_repository, specs_for
    from modelops.serving.reconcile import Reconciler, status_file_of, targets_of, tick_and_record

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = settings()
    if args.triton:
        urls, repository = list(args.triton), Path(args.repository) if args.repository else None
    else:  # the configured Triton; the embedded one reads the local repository the reconciler mirrors into
        urls, repository = [cfg.triton_http_url], None if cfg.triton_url else local_repository(cfg)
    # dns+http://name:port: every server behind the name, resolved again at each tick.
    reconciler = Reconciler(ObjectStore.from_settings(cfg), [], lambda model: specs_for(model, cfg),
                            grace_s=args.grace_s, discover=lambda: targets_of(urls, repository),
                            server_backend=cfg.triton_backend, server_gpus=cfg.triton_gpus)
    status_file = status_file_of(cfg)
    while True:
        started = time.monotonic()
        outcomes = tick_and_record(reconciler, status_file, strict=args.once)
        if args.once:
            print(json.dumps([o.to_dict() for o in outcomes], indent=2))
            return 1 if any(o.action == "error" for o in outcomes) else 0
        time.sleep(max(0.0, args.interval_s - (time.monotonic() - started)))


def _scale(args: argparse.Namespace) -> int:
    import logging
    import time
    from urllib.parse import urlsplit

    from prometheus_client import CollectorRegistry

    from modelops.config import settings
    from modelops.errors import ModelopsError
    from modelops.objectstore import ObjectStore
    from modelops.observability.pushed import PushGroup, push_if_configured
    from modelops.serving import scaler
    from modelops.serving.index_store import model_lock
    from modelops.serving.triton import TritonClient

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = settings()
    store = ObjectStore.from_settings(cfg)

    def lock(name: str, owner: str) -> object:
        return model_lock(store, name, owner=owner, wait_s=30.0, ttl_s=300.0)

    def push(registry: CollectorRegistry) -> None:  # the change counters, as the batch jobs push theirs
        push_if_configured([PushGroup(scaler.PUSH_JOB, {}, registry)], "scaling")

    metrics = scaler.Metrics()  # one set of counters for every server's controller
    controllers: dict[str, scaler.Controller] = {}

    def discovered() -> list[scaler.Controller]:
        """One controller per Triton server (MODELOPS_TRITON_URL's dns+ name resolved at each tick)."""
        urls = cfg.triton_url_list
        for gone in set(controllers) - set(urls):
            del controllers[gone]
        for url in urls:
            if url not in controllers:
                controllers[url] = scaler.Controller(
                    TritonClient(url, load_timeout_s=300.0),
                    f"http://{urlsplit(url).hostname}:{cfg.triton_metrics_port}/metrics", scaler.policy_of(cfg),
                    cfg.scaling_models, scaler.audit_path_of(cfg), mode=cfg.scaling_mode, lock=lock, push=push,
                    metrics=metrics)
        return [controllers[url] for url in urls]

    status_file = scaler.status_file_of(cfg)
    while True:
        started = time.monotonic()
        changes, errors, ticked = [], [], []
        try:
            ticked = discovered()
        except ModelopsError as exc:  # no server resolves: nothing is changed this tick
            errors.append(str(exc))
        for controller in ticked:
            try:
                changes += controller.tick()
            except ModelopsError as exc:  # this Triton unreachable: nothing is changed on it this tick
                errors.append(f"{controller.client.base_url}: {exc}")
        for error in errors:
            logging.getLogger("modelops.scaling").warning("tick skipped: %s", error)
        scaler.write_status(status_file, ticked, error="; ".join(errors)[-500:])
        if args.once:
            print(json.dumps(changes, indent=2))
            return 0
        time.sleep(max(0.0, cfg.scaling_interval_s - (time.monotonic() - started)))


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``publish``, ``load``, ``unload`` and ``served`` to the ``modelops`` command line."""
    publish = sub.add_parser("publish", help="publish an MLflow model version as a Triton version and load it")
    publish.add_argument("--model", required=True, type=cli_model_name,
                         help="registered model name (also the Triton name)")
    publish.add_argument("--version", required=True, help="registered model version")
    publish.add_argument("--triton-name", default=None, type=cli_model_name,
                         help="Triton pipeline name if not the model name")
    publish.add_argument("--no-load", action="store_true", help="upload and mirror only, do not load")
    publish.add_argument("--from-spec", action="store_true",
                         help="any MLflow model (onnx, sklearn flavors): derive its model spec, convert and "
                              "parity-check, publish as one Triton model, verify Triton's answers against the "
                              "model's own on its evaluation sample")
    publish.add_argument("--route", action="store_true",
                         help="with --from-spec: send all of the model's traffic at the gateway to this version "
                              "when the model has no routes yet (its first serving; later versions are released)")
    publish.set_defaults(func=_publish)

    load = sub.add_parser("load", help="serve a published Triton version beside those already served")
    load.add_argument("--model", required=True, type=cli_model_name, help="Triton pipeline name")
    load.add_argument("--triton-version", type=int, required=True)
    load.set_defaults(func=_load)

    unload = sub.add_parser("unload", help="stop serving one Triton version (the others keep serving)")
    unload.add_argument("--model", required=True, type=cli_model_name, help="Triton pipeline name")
    unload.add_argument("--triton-version", type=int, required=True)
    unload.set_defaults(func=_unload)

    served = sub.add_parser("served", help="list the versions Triton serves and check each answers")
    served.add_argument("--model", required=True, type=cli_model_name, help="Triton pipeline name")
    served.set_defaults(func=_served)

    reconcile = sub.add_parser("reconcile", help="make every Triton serve exactly the routed versions "
                               "(a loop; the embedded stack runs it as the 'reconciler' service)")
    reconcile.add_argument("--once", action="store_true", help="one pass, print what it did, exit")
    reconcile.add_argument("--interval-s", type=float, default=1.0, help="seconds between passes (default 1)")
    reconcile.add_argument("--grace-s", type=float, default=600.0,
                           help="seconds a version stays loaded after the routes stopped naming it (default 600)")
    reconcile.add_argument("--triton", action="append", default=[], metavar="URL",
                           help="a Triton HTTP URL to keep in line, or dns+http://name:port for every server "
                                "behind a name (repeatable; default: the configured MODELOPS_TRITON_URL)")
    reconcile.add_argument("--repository", default="", metavar="DIR",
                           help="with --triton: the model repository folder those servers read (a shared volume); "
                                "versions are mirrored into it from the object store before a load")
    reconcile.set_defaults(func=_reconcile)

    scale = sub.add_parser("scale", help="change Triton models' instance counts by their queue time (a loop; the "
                           "embedded stack runs it as the 'scaler' service when MODELOPS_SCALING=on)")
    scale.add_argument("--once", action="store_true", help="one pass (the first only records counters), exit")
    scale.set_defaults(func=_scale)
