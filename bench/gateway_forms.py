"""Benchmark: a zoo model straight from Triton (the anchor) vs through the gateway's tabular form and OIP v2.

The model is the zoo's sklearn classifier (breast cancer, 30 columns, a scaler and a logistic
regression), saved the ordinary MLflow way, prepared from its spec and published into a private
stack's Triton (``--port-base``: Triton and the object store only, stopped at the end) or the
running stack's; its first routes send all traffic to it. One gateway (one worker) is started on a
free port. Then, alternating who goes first, several rounds of ``--requests`` requests of ``--rows``
rows at concurrency 1 and 16 from one asyncio client (aiohttp, keep-alive):

- direct: ``POST /v2/models/NAME/versions/1/infer`` with the binary tensor extension (the anchor:
  the cheapest way to ask Triton for the same answer);
- tabular: ``POST /v1/models/NAME/predict`` with MLflow's ``dataframe_split`` body;
- oip: ``POST /v2/models/NAME/infer`` through the gateway, binary tensors both ways (what
  ``tritonclient.http`` sends by default).

Prints the medians per mode, the added p50 latency, and last the throughput ratio of each form to
direct at each concurrency.

    .venv/bin/python bench/gateway_forms.py --port-base 8950 --requests 500 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))
sys.path.insert(0, str(ROOT))

from bench.gateway import pct, run_load, start_gateway, start_profiler  # noqa: E402

from modelops.process import free_port  # noqa: E402


def publish(model: str, work: Path) -> tuple[Any, str]:
    """Save, prepare, publish and route the classifier; returns (feature frame, input datatype)."""
    import mlflow.sklearn
    from mlflow.models import infer_signature
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from modelops.serving.mlflow_models import prepare_model
    from modelops.serving.spec_publish import publish_prepared, route_first

    data = load_breast_cancer(as_frame=True)
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(data.data, data.target)
    mlflow.sklearn.save_model(clf, str(work / "model"), input_example=data.data.iloc[:20],
                              signature=infer_signature(data.data, clf.predict_proba(data.data)))
    prepared = prepare_model(work / "model", model)
    result = publish_prepared(prepared)
    route_first(result, by="bench/gateway_forms.py")
    return data.data, prepared.spec.inputs[0].dtype


def bodies(frame: Any, datatype: str, n: int, rows: int) -> dict[str, list[tuple[bytes, dict[str, str]]]]:
    rng = np.random.default_rng(2)
    dtype = np.float32 if datatype == "FP32" else np.float64
    out: dict[str, list[tuple[bytes, dict[str, str]]]] = {"direct": [], "tabular": [], "oip": []}
    for _ in range(n):
        sample = frame.iloc[rng.integers(0, len(frame), size=rows)]
        matrix = np.ascontiguousarray(sample.to_numpy(dtype))
        header = json.dumps({"inputs": [{"name": "input", "shape": list(matrix.shape), "datatype": datatype,
                                         "parameters": {"binary_data_size": matrix.nbytes}}],
                             "outputs": [{"name": "probabilities", "parameters": {"binary_data": True}}]}).encode()
        binary = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(header))}
        out["direct"].append((header + matrix.tobytes(), binary))
        out["oip"].append((header + matrix.tobytes(), binary))
        split = {"dataframe_split": {"columns": list(sample.columns), "data": sample.to_numpy().tolist()}}
        out["tabular"].append((json.dumps(split).encode(), {"Content-Type": "application/json"}))
    return out


def bench(args: argparse.Namespace) -> None:
    from modelops.config import settings

    cfg = settings()
    model = f"bench_forms_{uuid.uuid4().hex[:6]}"
    work = Path(tempfile.mkdtemp(prefix="bench-forms-"))
    frame, datatype = publish(model, work)
    sent = bodies(frame, datatype, args.requests, args.rows)
    port = free_port()
    proc = start_gateway(port, work / "spool", work / "gateway.log")
    gateway = f"http://127.0.0.1:{port}"
    urls = {"direct": f"{cfg.triton_http_url}/v2/models/{model}/versions/1/infer",
            "tabular": f"{gateway}/v1/models/{model}/predict", "oip": f"{gateway}/v2/models/{model}/infer"}
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    try:
        import requests

        deadline = 60
        while requests.get(f"{gateway}/v2/models/{model}/ready", timeout=5).status_code != 200 and deadline:
            asyncio.run(asyncio.sleep(0.5))
            deadline -= 1
        for conc in args.concurrency:  # warm-up every path
            for name, url in urls.items():
                asyncio.run(run_load(url, sent[name][:100], conc))
        profiler = None if args.flame is None else start_profiler(proc.pid, args.flame)
        for round_ in range(args.rounds):
            for conc in args.concurrency:
                order = list(urls) if round_ % 2 == 0 else list(urls)[::-1]
                for name in order:
                    seconds, lat = asyncio.run(run_load(urls[name], sent[name], conc))
                    results.setdefault((name, conc), []).append((len(sent[name]) / seconds, pct(lat, 50)))
                    print(f"round {round_ + 1} c={conc:<2} {name:<8} {len(sent[name]) / seconds:8.0f} req/s  "
                          f"p50 {pct(lat, 50):6.2f} ms  p99 {pct(lat, 99):6.2f} ms", flush=True)
        if profiler is not None:  # idle samples are left out: direct's rounds add nothing
            profiler.send_signal(signal.SIGINT)
            profiler.wait(timeout=60)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    med = {key: (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
           for key, runs in results.items()}
    print(f"\nmedians over {args.rounds} rounds ({args.rows} rows per request)")
    for conc in args.concurrency:
        for name in urls:
            added = med[(name, conc)][1] - med[("direct", conc)][1]
            print(f"  c={conc:<2} {name:<8} {med[(name, conc)][0]:8.0f} req/s  p50 {med[(name, conc)][1]:6.2f} ms"
                  + ("" if name == "direct" else f"  (p50 {added:+.2f} ms over direct)"))
    for conc in args.concurrency:
        for name in ("tabular", "oip"):
            print(f"throughput ratio {name}/direct c={conc}: {med[(name, conc)][0] / med[('direct', conc)][0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000, help="requests per mode per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=10, help="rows per request")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--flame", type=Path, default=None,
                        help="record the gateway with py-spy into this file (.svg: flame graph, else collapsed "
                             "stacks); BENCH_PYSPY_ARGS overrides '--gil --nonblocking'")
    parser.add_argument("--port-base", type=int, default=None,
                        help="start a private stack (Triton and the object store only) at this port base")
    args = parser.parse_args()
    if args.rounds < 3 or args.requests < 100:
        parser.error(f"--rounds: at least 3 (medians), --requests: at least 100; got {args.rounds} and {args.requests}")
    from bench._stack import on_private_stack

    on_private_stack(args.port_base, "modelops-bench-forms-", lambda: bench(args), only=["objectstore", "triton"],
                     MODELOPS_FEEDBACK_SECRET="modelops-bench-forms-secret", MODELOPS_OBSERVABILITY="off")


if __name__ == "__main__":
    main()
