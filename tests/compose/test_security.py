"""The hardened topology from the inside: networks by role, authenticated internals, least-privilege containers.

Runs last in the checks' container (docker/compose-test.sh), after the release story and the observability
checks (a model is served then). The checks' own container is on every network; what a *member* of one
network can reach is asked from throwaway containers of the project image that the engine (its socket is
mounted here) attaches to that network alone: a probe script passed on the command line, its answer one
JSON line. docs/operations/security.md has the matrix these checks hold the topology to.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
import requests

from modelops.config import Settings
from modelops.serving.pbtxt import PATH_SCORE
from tests.compose.engine import Engine
from tests.compose.hardening import NOT_FROM_EDGE, SERVICES, TEST_UIDS

pytestmark = pytest.mark.compose

#: TCP reachability of host:port targets, in parallel: "open", "closed" (refused, dropped, timed out) or
#: "unresolved" (the name is unknown on this container's networks).
TCP_PROBE = r"""
import json, socket, sys
from concurrent.futures import ThreadPoolExecutor
targets = json.loads(sys.argv[1])
def reach(target):
    host, port = target.rsplit(":", 1)
    try:
        address = socket.getaddrinfo(host, int(port), socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except OSError:
        return "unresolved"
    try:
        with socket.create_connection((address, int(port)), timeout=2.0):
            return "open"
    except OSError:
        return "closed"
with ThreadPoolExecutor(len(targets) or 1) as pool:
    print(json.dumps(dict(zip(targets, pool.map(reach, targets)))))
"""

#: HTTP calls [method, url, headers, body] -> [status, first 200 characters of the answer].
HTTP_PROBE = r"""
import json, sys, urllib.error, urllib.request
out = []
for method, url, headers, body in json.loads(sys.argv[1]):
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **headers}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            out.append([response.status, response.read(200).decode(errors="replace")])
    except urllib.error.HTTPError as exc:
        out.append([exc.code, exc.read(200).decode(errors="replace")])
    except OSError as exc:
        out.append([0, str(exc)])
print(json.dumps(out))
"""

#: The first lines the Redis server answers to PING, without a password and after AUTH with $REDIS_PASSWORD.
REDIS_PROBE = r"""
import json, os, socket
def ask(*commands):
    with socket.create_connection(("redis", 6379), timeout=5) as s:
        answers = []
        for command in commands:
            s.sendall(command.encode() + b"\r\n")
            answers.append(s.recv(200).decode().strip())
        return answers
print(json.dumps({"anonymous": ask("PING"), "with_password": ask("AUTH " + os.environ["REDIS_PASSWORD"], "PING")}))
"""

#: Each (role, password variable, database) connection: "ok" or the server's refusal.
POSTGRES_PROBE = r"""
import json, os, sys
import psycopg2
out = {}
for role, password_env, database in json.loads(sys.argv[1]):
    try:
        psycopg2.connect(host="postgres", user=role, password=os.environ[password_env], dbname=database,
                         connect_timeout=10).close()
        out[f"{role}@{database}"] = "ok"
    except psycopg2.Error as exc:
        out[f"{role}@{database}"] = str(exc).strip()
print(json.dumps(out))
"""

#: A Spark driver on the cluster without the authentication secret: "refused" as soon as the master turns its
#: registration down (no SASL), "accepted" if a job ran, "undecided" after the deadline.
SPARK_PROBE = r"""
import json, subprocess, sys, threading, time
DRIVER = '''
import sys
from pyspark.sql import SparkSession
from modelops.discovery import address_toward
address = address_toward("spark-master", 7077)
spark = (SparkSession.builder.master("spark://spark-master:7077").appName(sys.argv[1])
         .config("spark.driver.host", address).config("spark.driver.bindAddress", address)
         .config("spark.ui.enabled", "false").config("spark.driver.memory", "512m").getOrCreate())
print("ACCEPTED", spark.sparkContext.parallelize(range(10), 2).sum(), flush=True)
'''
verdict = {"verdict": "undecided", "evidence": ""}
done = threading.Event()
proc = subprocess.Popen([sys.executable, "-c", DRIVER, sys.argv[1]], stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True)
def watch():
    for line in proc.stdout:
        if "ACCEPTED" in line:
            verdict.update(verdict="accepted", evidence=line.strip())
        elif "SaslMessage" in line or "All masters are unresponsive" in line:
            verdict.update(verdict="refused", evidence=line.strip())
        else:
            continue
        done.set()
        return
    done.set()
threading.Thread(target=watch, daemon=True).start()
done.wait(float(sys.argv[2]))
proc.kill()
print(json.dumps(verdict))
"""


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.from_env()


@pytest.fixture(scope="module")
def topology(engine: Engine) -> dict[str, list[dict[str, Any]]]:
    containers = engine.project_containers()
    assert containers.get("gateway"), f"no running gateway in the project: {sorted(containers)}"
    return containers


@pytest.fixture(scope="module")
def image(topology: dict[str, list[dict[str, Any]]]) -> str:
    """The project image, as the running gateways use it."""
    return str(topology["gateway"][0]["Config"]["Image"])


def _probe(engine: Engine, image: str, networks: list[str], script: str, *args: str,
           env: dict[str, str] | None = None, timeout_s: float = 120.0) -> Any:
    code, output = engine.run(image, ["python", "-c", script, *args], networks, env=env, timeout_s=timeout_s)
    lines = [line for line in output.splitlines() if line.startswith(("{", "["))]
    assert code == 0 and lines, f"probe on {networks} exited {code}:\n{output[-2000:]}"
    return json.loads(lines[-1])


def test_every_container_is_on_its_declared_networks_only(engine: Engine, topology: dict) -> None:
    for service, containers in topology.items():
        assert service in SERVICES, f"{service} runs but is not declared in tests/compose/hardening.py"
        expected = SERVICES[service][0]
        for container in containers:
            assert set(engine.addresses(container["Id"])) == expected, (service, container["Name"])


def test_from_the_edge_network_no_internal_service_is_reachable(engine: Engine, image: str, topology: dict) -> None:
    """By name (unknown there) and by every address the service has on any network (dropped)."""
    targets = {f"{service}:{port}" for service, port in NOT_FROM_EDGE}
    for service, port in NOT_FROM_EDGE:
        for container in topology.get(service, []):
            targets |= {f"{address}:{port}" for address in engine.addresses(container["Id"]).values()}
    reachable = ["gateway-lb:8400", "gateway:8400", "mlflow:5000", "airflow-api-server:8080"]  # the probe works
    seen = _probe(engine, image, ["edge"], TCP_PROBE, json.dumps(sorted(targets) + reachable))
    assert {t: seen[t] for t in reachable} == dict.fromkeys(reachable, "open"), seen
    opened = sorted(t for t in targets if seen[t] == "open")
    assert opened == [], f"reachable from the edge network: {opened}"
    for service, port in NOT_FROM_EDGE:
        assert seen[f"{service}:{port}"] == "unresolved", (service, seen[f"{service}:{port}"])


def _routed_ensemble(compose_settings: Settings) -> tuple[str, int]:
    from modelops.serving.publisher import specs_for
    from tests.compose.test_release_story import MODEL, STORY

    assert STORY.get("stable_tv"), "the release story did not run (tests/compose/test_release_story.py)"
    return specs_for(MODEL, compose_settings)["ensemble"].name, int(STORY["stable_tv"])


def _inference_body(url: str, model: str, version: int) -> dict[str, Any]:
    """A request of zeros shaped after the version's own metadata (variable dimensions: 1), its required
    inputs only (the config marks the explanation inputs optional)."""
    meta = requests.get(f"{url}/v2/models/{model}/versions/{version}", timeout=10).json()
    config = requests.get(f"{url}/v2/models/{model}/versions/{version}/config", timeout=10).json()
    optional = {tensor["name"] for tensor in config.get("input", []) if tensor.get("optional")}
    inputs = []
    for tensor in (t for t in meta["inputs"] if t["name"] not in optional):
        shape = [1 if dim < 0 else dim for dim in tensor["shape"]]
        size = 1
        for dim in shape:
            size *= dim
        zero: Any = "" if tensor["datatype"] == "BYTES" else 0
        inputs.append({"name": tensor["name"], "shape": shape, "datatype": tensor["datatype"],
                       "data": [zero] * size})
    outputs = [{"name": t["name"]} for t in meta["outputs"] if t["name"] != PATH_SCORE]  # not an explanation
    return {"inputs": inputs, "outputs": outputs}


def _successes(url: str, model: str, version: int) -> int:
    """Requests the server answered for the version since it loaded it (Triton's statistics API, open)."""
    stats = requests.get(f"{url}/v2/models/{model}/versions/{version}/stats", timeout=10).json()
    return int(stats["model_stats"][0]["inference_stats"]["success"]["count"])


def test_on_the_serving_network_inference_is_open_and_the_repository_needs_the_key(
    engine: Engine, image: str, compose_settings: Settings,
) -> None:
    from modelops.errors import ServingError
    from modelops.serving.triton import ADMIN_HEADER, TritonClient

    key = compose_settings.triton_admin_key
    assert key, "the checks' env has no MODELOPS_TRITON_ADMIN_KEY"
    model, version = _routed_ensemble(compose_settings)
    server = compose_settings.triton_url_list[0]
    body = _inference_body(server, model, version)
    triton = "http://triton:8000"
    calls = [
        ["POST", f"{triton}/v2/models/{model}/versions/{version}/infer", {}, body],
        ["POST", f"{triton}/v2/repository/index", {}, {}],
        ["POST", f"{triton}/v2/repository/models/{model}/unload", {}, {}],
        ["POST", f"{triton}/v2/repository/models/{model}/load", {}, {}],
        ["POST", f"{triton}/v2/repository/models/{model}/unload", {ADMIN_HEADER: "not-the-key"}, {}],
        ["POST", f"{triton}/v2/repository/index", {ADMIN_HEADER: key}, {}],
    ]
    (infer, index, unload, load, wrong_key, keyed_index) = _probe(
        engine, image, ["serving"], HTTP_PROBE, json.dumps(calls))
    assert infer[0] == 200 and '"outputs"' in infer[1], infer
    for refused in (index, unload, load, wrong_key):
        assert refused[0] == 403 and "restricted" in refused[1], refused
    assert keyed_index[0] == 200, keyed_index
    # With the key the repository API works: unload the routed pipeline's ensemble from one server; the
    # reconciler (which holds the key too) loads it there again: a fresh load, its counters restarted.
    for _ in range(3):
        answer = requests.post(f"{server}/v2/models/{model}/versions/{version}/infer", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
    before = _successes(server, model, version)
    assert before >= 3, before
    client = TritonClient(server, timeout_s=10.0)
    client.unload(model)
    deadline = time.monotonic() + 120
    while not (client.is_model_ready(model, version) and _successes(server, model, version) < before):
        assert time.monotonic() < deadline, f"the reconciler did not load {model} v{version} again on {server}"
        time.sleep(1)
    with pytest.raises(ServingError, match="restricted"):  # the platform's client without the key
        TritonClient(server, admin_key="").repository_index()


def test_a_spark_driver_without_the_secret_is_refused(engine: Engine, image: str, compose_settings: Settings) -> None:
    name = f"unauthenticated-{uuid.uuid4().hex[:6]}"
    result = _probe(engine, image, ["control"], SPARK_PROBE, name, "100", timeout_s=180)
    assert result["verdict"] == "refused", result
    master = requests.get("http://spark-master:8080/json/", timeout=10).json()
    apps = [app["name"] for app in [*master.get("activeapps", []), *master.get("completedapps", [])]]
    assert name not in apps, apps


def test_redis_answers_noauth_without_the_password(engine: Engine, image: str) -> None:
    import os

    answers = _probe(engine, image, ["data"], REDIS_PROBE, env={"REDIS_PASSWORD": os.environ["REDIS_PASSWORD"]})
    assert answers["anonymous"][0].startswith("-NOAUTH"), answers
    assert answers["with_password"] == ["+OK", "+PONG"], answers


def test_each_database_role_opens_its_own_database_only(engine: Engine, image: str) -> None:
    import os

    attempts = [["airflow", "POSTGRES_AIRFLOW_PASSWORD", db] for db in ("airflow", "mlflow", "mlflow_auth", "postgres")]
    attempts += [["mlflow", "POSTGRES_MLFLOW_PASSWORD", db] for db in ("mlflow", "mlflow_auth", "airflow", "postgres")]
    env = {name: os.environ[name] for name in ("POSTGRES_AIRFLOW_PASSWORD", "POSTGRES_MLFLOW_PASSWORD")}
    seen = _probe(engine, image, ["data"], POSTGRES_PROBE, json.dumps(attempts), env=env)
    own = {"airflow@airflow", "mlflow@mlflow", "mlflow@mlflow_auth"}
    assert {k for k, v in seen.items() if v == "ok"} == own, seen
    for attempt, answer in seen.items():
        if attempt not in own:
            assert "permission denied for database" in answer, (attempt, answer)


def test_every_container_runs_as_its_declared_user_read_only_without_capabilities(
    engine: Engine, topology: dict,
) -> None:
    problems = []
    for service, containers in topology.items():
        uid = TEST_UIDS.get(service, SERVICES[service][1])
        for container in containers:
            host, name = container["HostConfig"], container["Name"]
            uids = set(engine.process_uids(container["Id"]))
            if not uids or 0 in uids or (uid is not None and uids != {uid}):
                problems.append(f"{name}: processes run as uids {sorted(uids)}, declared {uid or 'not root'}")
            if not host.get("ReadonlyRootfs"):
                problems.append(f"{name}: its root filesystem is writable")
            if host.get("CapDrop") != ["ALL"] or host.get("CapAdd"):
                problems.append(f"{name}: capabilities dropped {host.get('CapDrop')}, added {host.get('CapAdd')}")
            if "no-new-privileges:true" not in (host.get("SecurityOpt") or []):
                problems.append(f"{name}: no no-new-privileges ({host.get('SecurityOpt')})")
            if not host.get("Memory") or not host.get("NanoCpus"):
                problems.append(f"{name}: no memory or CPU limit (memory {host.get('Memory')}, "
                                f"nano-cpus {host.get('NanoCpus')})")
    assert problems == [], "\n".join(problems)


def test_the_gateway_identity_writes_its_event_logs_only(compose_settings: Settings) -> None:
    """A compromised gateway reads the routes, repositories and feature tables but cannot rewrite them."""
    import os

    from modelops.errors import ObjectStoreError
    from modelops.objectstore import ObjectStore

    gateway = ObjectStore(compose_settings.s3_endpoint, compose_settings.bucket, os.environ["S3_GATEWAY_ACCESS_KEY"],
                          os.environ["S3_GATEWAY_SECRET_KEY"], compose_settings.s3_region)
    allowed = f"logs/_compose-{uuid.uuid4().hex[:8]}/part.parquet"
    gateway.put_bytes(allowed, b"a log")
    assert gateway.get_bytes(allowed) == b"a log"
    gateway.delete(allowed)
    tag = uuid.uuid4().hex[:8]
    for refused in (f"routes/_compose-{tag}.json", f"triton/repository/_compose-{tag}"):
        with pytest.raises(ObjectStoreError, match=r"AccessDenied|Forbidden|403"):
            gateway.put_bytes(refused, b"refused")
