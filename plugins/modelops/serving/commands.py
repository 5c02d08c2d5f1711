"""``modelops publish|load|unload|served``: Triton versions of MLflow models from the command line."""

from __future__ import annotations

import argparse
import json


def _publish(args: argparse.Namespace) -> int:
    from modelops.serving.publisher import publish_version

    result = publish_version(args.model, args.version, triton_name=args.triton_name, load=not args.no_load)
    print(json.dumps({
        "model": result.model, "triton_version": result.triton_version, "sha256": result.sha256,
        "uploaded": result.uploaded, "loaded": result.loaded, "repository_uri": result.repository_uri,
        "mlflow_version": result.mlflow_version,
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
    from modelops.serving.triton import TritonClient

    client = TritonClient.from_settings()
    versions = client.ready_versions(args.model)
    print(f"{args.model}: serving versions {versions or 'none'}")
    for version in versions:
        check = verify_served(client, args.model, version)
        print(f"  version {check.version}: answers features -> score for {check.rows} rows")
    return 0 if versions else 1


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``publish``, ``load``, ``unload`` and ``served`` to the ``modelops`` command line."""
    publish = sub.add_parser("publish", help="publish an MLflow model version as a Triton version and load it")
    publish.add_argument("--model", required=True, help="registered model name (also the Triton name)")
    publish.add_argument("--version", required=True, help="registered model version")
    publish.add_argument("--triton-name", default=None, help="Triton pipeline name if not the model name")
    publish.add_argument("--no-load", action="store_true", help="upload and mirror only, do not load")
    publish.set_defaults(func=_publish)

    load = sub.add_parser("load", help="serve a published Triton version beside those already served")
    load.add_argument("--model", required=True, help="Triton pipeline name")
    load.add_argument("--triton-version", type=int, required=True)
    load.set_defaults(func=_load)

    unload = sub.add_parser("unload", help="stop serving one Triton version (the others keep serving)")
    unload.add_argument("--model", required=True, help="Triton pipeline name")
    unload.add_argument("--triton-version", type=int, required=True)
    unload.set_defaults(func=_unload)

    served = sub.add_parser("served", help="list the versions Triton serves and check each answers")
    served.add_argument("--model", required=True, help="Triton pipeline name")
    served.set_defaults(func=_served)
