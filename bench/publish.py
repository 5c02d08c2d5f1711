"""Publish latency: from "the MLflow version exists" to "Triton serves it", and the idempotent re-publish.

Runs against a running stack (``modelops stack up``; the MODELOPS_* settings choose which).
Setup (not timed) logs and registers ``rounds`` distinct versions under a fresh model
name: the reference model (``modelops.example``, one training per version) or the tiny
fixture model (``--source fixture``). Each round then times, alternately:

- first publish of a new version: ``publish_version`` (download artifacts, allocate the
  integer, build, upload + read-back verification + ``_COMPLETE``, mirror, load beside
  the version already served, config check) followed by one verified inference;
- re-publish of that same version (idempotent: nothing uploaded, nothing reloaded) and
  the same inference.

Before each first publish only the previous version stays loaded (stable + canary, as in
a release). Prints per-round times, medians, and last the ratio re-publish / first publish.

    .venv/bin/python bench/publish.py --rounds 3 --source fixture
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path


def _register_fixture(mlflow_uri: str, name: str, seed: int) -> str:
    import mlflow

    from modelops.registry.mlflow_registry import MlflowRegistry
    from modelops.serving.testing import fixture_artifacts

    mlflow.set_tracking_uri(mlflow_uri)
    mlflow.set_experiment("modelops-bench-publish")
    with mlflow.start_run() as run, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "onnx"
        folder.mkdir()
        for file_name, data in fixture_artifacts(seed).as_files().items():
            (folder / file_name).write_bytes(data)
        mlflow.log_artifacts(str(folder), artifact_path="onnx")
    return MlflowRegistry(mlflow_uri).register(f"runs:/{run.info.run_id}/onnx", name).version


def _register_reference(mlflow_uri: str, name: str, seed: int, n_requests: int) -> str:
    from dataclasses import replace

    from modelops.example.synthetic import WorldSpec
    from modelops.example.tracking import log_trained_model
    from modelops.example.train import TrainSpec, train

    spec = TrainSpec(world=replace(WorldSpec(), seed=seed, n_requests=n_requests), max_iter=20)
    logged = log_trained_model(train(spec), mlflow_uri, register_name=name, experiment="modelops-bench-publish")
    return str(logged.registered_version)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="distinct versions published (default 5)")
    parser.add_argument("--source", choices=("reference", "fixture"), default="reference")
    parser.add_argument("--n-requests", type=int, default=1500, help="reference model: synthetic requests")
    args = parser.parse_args(argv)
    print("load average at start (1/5/15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)

    from modelops.config import settings
    from modelops.objectstore import ObjectStore
    from modelops.serving.loader import unload_version, verify_served
    from modelops.serving.pbtxt import step_names
    from modelops.serving.publisher import publish_version, specs_for
    from modelops.serving.triton import TritonClient

    cfg = settings()
    client = TritonClient.from_settings(cfg)
    if not client.is_ready():
        print(f"Triton at {cfg.triton_http_url} is not ready: start the stack first", file=sys.stderr)
        return 2
    store = ObjectStore.from_settings(cfg)
    store.ensure_bucket()
    name = f"bench_{uuid.uuid4().hex[:8]}"
    print(f"setup: registering {args.rounds} {args.source} versions of {name} ...", flush=True)
    versions = [
        _register_fixture(cfg.mlflow_uri, name, 1000 + i) if args.source == "fixture"
        else _register_reference(cfg.mlflow_uri, name, 1000 + i, args.n_requests)
        for i in range(args.rounds)
    ]
    specs = specs_for(name, cfg)
    first: list[float] = []
    again: list[float] = []
    try:
        for version in versions:
            for old in client.ready_versions(name)[:-1]:
                unload_version(client, specs, old)
            t0 = time.perf_counter()
            result = publish_version(name, version, cfg=cfg, store=store, client=client)
            verify_served(client, name, result.triton_version)
            first.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            repeat = publish_version(name, version, cfg=cfg, store=store, client=client)
            verify_served(client, name, repeat.triton_version)
            again.append(time.perf_counter() - t0)
            if repeat.uploaded or repeat.triton_version != result.triton_version:
                print(f"re-publish of {version} was not idempotent: {repeat}", file=sys.stderr)
                return 1
            print(f"  mlflow v{version} -> triton v{result.triton_version}: first {first[-1]:6.2f} s, "
                  f"re-publish {again[-1]:6.2f} s  (serving {client.ready_versions(name)})", flush=True)
    finally:
        for triton_model in step_names(name).values():
            if client.ready_versions(triton_model):
                client.unload(triton_model)
    print(f"median first publish (MLflow version -> served): {statistics.median(first):.2f} s "
          f"over {len(first)} versions")
    print(f"median idempotent re-publish:                    {statistics.median(again):.2f} s")
    print("load average at end (1/5/15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print(f"ratio re-publish / first publish: {statistics.median(again) / statistics.median(first):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
