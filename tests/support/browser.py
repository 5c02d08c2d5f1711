"""A headless Chromium (Debian's) driven through the DevTools protocol, for the UI tests.

Only what the tests need: open a page, type into a field, click, read text, wait for a
condition, save a PNG. No selenium, no chromedriver: the protocol over one WebSocket.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import requests

from modelops.process import free_port


class Browser:
    """``with Browser() as page:`` — one tab of a fresh headless Chromium profile."""

    def __init__(self, width: int = 1280, height: int = 900, timeout_s: float = 30.0) -> None:
        binary = shutil.which("chromium") or shutil.which("chromium-browser")
        assert binary, "chromium is not installed (make test installs Debian's chromium)"
        self.binary, self.width, self.height, self.timeout_s = binary, width, height, timeout_s
        self._ids = itertools.count(1)
        self._profile = tempfile.mkdtemp(prefix="modelops-chromium-")
        self._proc: subprocess.Popen[bytes] | None = None
        self._ws: Any = None

    def __enter__(self) -> Browser:
        from websockets.sync.client import connect

        port = free_port()
        self._proc = subprocess.Popen(
            [self.binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             f"--remote-debugging-port={port}", "--remote-debugging-address=127.0.0.1",
             f"--user-data-dir={self._profile}", f"--window-size={self.width},{self.height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                targets = requests.get(f"http://127.0.0.1:{port}/json/list", timeout=2).json()
                page = next(t for t in targets if t.get("type") == "page")
                break
            except (requests.RequestException, StopIteration, ValueError):
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    raise AssertionError("chromium did not open its DevTools port") from None
                time.sleep(0.2)
        self._ws = connect(page["webSocketDebuggerUrl"], max_size=2**26, open_timeout=self.timeout_s)
        self.call("Page.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height, deviceScaleFactor=1,
                  mobile=False)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._ws is not None:
            self._ws.close()
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        shutil.rmtree(self._profile, ignore_errors=True)

    # ---------------------------------------------------------------- protocol
    def call(self, method: str, **params: Any) -> dict[str, Any]:
        message_id = next(self._ids)
        self._ws.send(json.dumps({"id": message_id, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            reply = json.loads(self._ws.recv(timeout=self.timeout_s))
            if reply.get("id") == message_id:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))
        raise AssertionError(f"{method}: no reply within {self.timeout_s} s")

    def js(self, expression: str) -> Any:
        """Evaluate ``expression`` in the page (promises awaited) and return its JSON value."""
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    # ---------------------------------------------------------------- what the tests do
    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'")

    def wait_for(self, condition: str, timeout_s: float | None = None, what: str = "") -> Any:
        """Poll a JavaScript condition until it is truthy; returns its value."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = self.js(f"(() => {{ try {{ return {condition}; }} catch (e) {{ return null; }} }})()")
            except AssertionError:
                last = None
            if last:
                return last
            time.sleep(0.25)
        raise AssertionError(f"timed out waiting for {what or condition} (last: {last!r}; at {self.url()})")

    def type_into(self, selector: str, text: str) -> None:
        """Focus the element and type (real input events, so React-controlled fields see it)."""
        self.wait_for(f"document.querySelector({json.dumps(selector)}) !== null", what=selector)
        self.js(f"document.querySelector({json.dumps(selector)}).focus()")
        self.call("Input.insertText", text=text)

    def click(self, selector: str) -> None:
        self.wait_for(f"document.querySelector({json.dumps(selector)}) !== null", what=selector)
        self.js(f"document.querySelector({json.dumps(selector)}).click()")

    def text(self, selector: str = "body") -> str:
        return str(self.js(f"(document.querySelector({json.dumps(selector)}) || {{}}).innerText || ''"))

    def url(self) -> str:
        try:
            return str(self.js("location.href"))
        except AssertionError:
            return "?"

    def cookies(self) -> dict[str, str]:
        return {c["name"]: c["value"] for c in self.call("Network.getAllCookies").get("cookies", [])}

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path
