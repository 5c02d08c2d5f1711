"""The Docker Engine API over its unix socket, for the checks that crash a container of the topology.

docker/compose-test.sh mounts the engine's socket into the checks' container (with the socket's group);
no docker CLI is needed there. Only the calls the checks use: list a service's containers, inspect one,
list its processes, run a command in one, and run a throwaway container on chosen networks of the project.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import struct
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import Any

SOCKET = "/var/run/docker.sock"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout_s: float) -> None:
        super().__init__("localhost", timeout=timeout_s)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


@dataclass(frozen=True)
class Engine:
    """The engine that runs the compose project ``project``."""

    project: str
    socket_path: str = SOCKET
    timeout_s: float = 30.0

    @classmethod
    def from_env(cls) -> Engine:
        return cls(os.environ["COMPOSE_TEST_PROJECT"])

    def _raw(self, method: str, path: str, body: Any = None, timeout_s: float | None = None) -> bytes:
        connection = _UnixConnection(self.socket_path, timeout_s or self.timeout_s)
        try:
            payload = None if body is None else json.dumps(body).encode()
            connection.request(method, path, body=payload, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            data = response.read()
        finally:
            connection.close()
        if response.status >= 300:
            raise RuntimeError(f"docker engine {method} {path}: HTTP {response.status}: {data[:300]!r}")
        return data

    def _call(self, method: str, path: str, body: Any = None, timeout_s: float | None = None) -> Any:
        data = self._raw(method, path, body, timeout_s)
        return json.loads(data) if data else None

    def containers(self, service: str) -> list[str]:
        """Ids of the service's running containers, in a stable order (by name)."""
        filters = json.dumps({"label": [f"com.docker.compose.project={self.project}",
                                        f"com.docker.compose.service={service}"]})
        rows = self._call("GET", f"/containers/json?filters={urllib.parse.quote(filters)}")
        return [row["Id"] for row in sorted(rows, key=lambda row: row["Names"][0])]

    def inspect(self, container: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/containers/{container}/json"))

    def project_containers(self) -> dict[str, list[dict[str, Any]]]:
        """The project's running containers (their inspect documents) by service."""
        filters = json.dumps({"label": [f"com.docker.compose.project={self.project}"]})
        by_service: dict[str, list[dict[str, Any]]] = {}
        for row in self._call("GET", f"/containers/json?filters={urllib.parse.quote(filters)}"):
            service = row["Labels"].get("com.docker.compose.service", "")
            by_service.setdefault(service, []).append(self.inspect(row["Id"]))
        return by_service

    def address(self, container: str, network: str = "serving") -> str:
        """The container's address on the project's network ``network`` (Triton's: serving)."""
        networks = self.inspect(container)["NetworkSettings"]["Networks"]
        return str(networks[f"{self.project}_{network}"]["IPAddress"])

    def addresses(self, container: str) -> dict[str, str]:
        """The container's address on each network it is on (network name without the project prefix)."""
        networks = self.inspect(container)["NetworkSettings"]["Networks"]
        return {name.removeprefix(f"{self.project}_"): str(net["IPAddress"]) for name, net in networks.items()}

    def process_uids(self, container: str) -> list[int]:
        """The user id of every process of the container (the engine's `top`, run on the host)."""
        top = self._call("GET", f"/containers/{container}/top?ps_args={urllib.parse.quote('-o uid,pid')}")
        column = top["Titles"].index("UID")
        return [int(row[column]) for row in top["Processes"]]

    def run(self, image: str, command: list[str], networks: list[str], env: dict[str, str] | None = None,
            timeout_s: float = 180.0) -> tuple[int, str]:
        """Run a throwaway container of ``image`` attached to the project's ``networks`` only (the first at
        creation, the others before it starts); returns its exit code and output (stdout + stderr)."""
        name = f"{self.project}-probe-{uuid.uuid4().hex[:8]}"
        body = {"Image": image, "Cmd": command, "Env": [f"{k}={v}" for k, v in (env or {}).items()],
                "Labels": {"modelops.compose-test.probe": self.project},
                "HostConfig": {"NetworkMode": f"{self.project}_{networks[0]}"}}
        created = self._call("POST", f"/containers/create?name={name}", body)["Id"]
        try:
            for network in networks[1:]:
                self._call("POST", f"/networks/{self.project}_{network}/connect", {"Container": created})
            self._call("POST", f"/containers/{created}/start")
            status = self._call("POST", f"/containers/{created}/wait", timeout_s=timeout_s)["StatusCode"]
            return int(status), _demux(self._raw("GET", f"/containers/{created}/logs?stdout=1&stderr=1"))
        finally:
            self._raw("DELETE", f"/containers/{created}?force=1")

    def start(self, container: str, command: list[str]) -> None:
        """Start ``command`` in the container (as its user) and return at once (a command that crashes
        the container, e.g. a SIGKILL of its server, ends with it)."""
        created = self._call("POST", f"/containers/{container}/exec",
                             {"Cmd": command, "AttachStdout": False, "AttachStderr": False})
        self._call("POST", f"/exec/{created['Id']}/start", {"Detach": True, "Tty": False})


def _demux(stream: bytes) -> str:
    """The output of a container without a TTY: frames of an 8-byte header (stream, 0, 0, 0, size) and data."""
    out, at = [], 0
    while at + 8 <= len(stream):
        (size,) = struct.unpack(">I", stream[at + 4:at + 8])
        out.append(stream[at + 8:at + 8 + size])
        at += 8 + size
    return b"".join(out).decode(errors="replace")
