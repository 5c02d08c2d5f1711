"""The Docker Engine API over its unix socket, for the checks that crash a container of the topology.

docker/compose-test.sh mounts the engine's socket into the checks' container (with the socket's group);
no docker CLI is needed there. Only the calls the checks use: list a service's containers, inspect one,
run a command in one.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.parse
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

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        connection = _UnixConnection(self.socket_path, self.timeout_s)
        try:
            payload = None if body is None else json.dumps(body).encode()
            connection.request(method, path, body=payload, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            data = response.read()
        finally:
            connection.close()
        if response.status >= 300:
            raise RuntimeError(f"docker engine {method} {path}: HTTP {response.status}: {data[:300]!r}")
        return json.loads(data) if data else None

    def containers(self, service: str) -> list[str]:
        """Ids of the service's running containers, in a stable order (by name)."""
        filters = json.dumps({"label": [f"com.docker.compose.project={self.project}",
                                        f"com.docker.compose.service={service}"]})
        rows = self._call("GET", f"/containers/json?filters={urllib.parse.quote(filters)}")
        return [row["Id"] for row in sorted(rows, key=lambda row: row["Names"][0])]

    def inspect(self, container: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/containers/{container}/json"))

    def address(self, container: str) -> str:
        """The container's address on the project's network."""
        networks = self.inspect(container)["NetworkSettings"]["Networks"]
        return str(networks[f"{self.project}_default"]["IPAddress"])

    def start(self, container: str, command: list[str]) -> None:
        """Start ``command`` in the container (as its user) and return at once (a command that crashes
        the container, e.g. a SIGKILL of its server, ends with it)."""
        created = self._call("POST", f"/containers/{container}/exec",
                             {"Cmd": command, "AttachStdout": False, "AttachStderr": False})
        self._call("POST", f"/exec/{created['Id']}/start", {"Detach": True, "Tty": False})
