"""Alertmanager's webhook into the platform's notifier: a person hears alerts like releases.

Alertmanager POSTs its webhook payload (version 4: ``status``, ``alerts`` with ``labels``,
``annotations``, ``startsAt``, ``fingerprint``...) to ``/alerts``; each alert becomes one
:class:`modelops.notify.Message` (title from the alert name and summary, the description
and runbook line in the body, the labels as facts) sent through ``MODELOPS_NOTIFY_URLS``.
A resolved alert is sent too, as a success. ``modelops alerts relay`` runs the server
(``modelops.observability.alert_relay:serve``); ``GET /healthz`` answers 200.

Bad payloads are refused with 400 and a reason naming the field; a notifier failure
answers 502 so Alertmanager retries.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from modelops.notify.message import Message, Severity

log = logging.getLogger(__name__)

Send = Callable[[Message], object]


class PayloadError(ValueError):
    """The webhook body is not an Alertmanager payload (the message names the field)."""


def _mapping(raw: object, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise PayloadError(f"{where}: must be an object, got {type(raw).__name__} "
                           '(example: {"labels": {"alertname": "ModelopsScrapeTargetDown"}})')
    return raw


def messages(payload: object) -> list[Message]:
    """One message per alert of an Alertmanager webhook payload.

    Raises:
        PayloadError: ``alerts`` missing or not a list, an alert without ``labels.alertname``.
    """
    body = _mapping(payload, "payload")
    alerts = body.get("alerts")
    if not isinstance(alerts, list):
        raise PayloadError('alerts: must be a list of alerts (example: {"alerts": [{"status": "firing", ...}]})')
    out = []
    for index, raw in enumerate(alerts):
        alert = _mapping(raw, f"alerts[{index}]")
        labels = {str(k): str(v) for k, v in _mapping(alert.get("labels", {}), f"alerts[{index}].labels").items()}
        name = labels.get("alertname")
        if not name:
            raise PayloadError(f"alerts[{index}].labels.alertname: required (example: ModelopsPredictionCollapse)")
        notes = {str(k): str(v) for k, v in
                 _mapping(alert.get("annotations", {}), f"alerts[{index}].annotations").items()}
        status = str(alert.get("status", body.get("status", "firing")))
        resolved = status == "resolved"
        severity: Severity = "success" if resolved else ("failure" if labels.get("severity") == "page" else "warning")
        summary = notes.get("summary", name)
        text = "\n".join(line for line in (notes.get("description", ""),
                                           f"Runbook: {notes['runbook']}" if notes.get("runbook") else "") if line)
        facts = {"status": status, "since": str(alert.get("startsAt", "")),
                 **{k: v for k, v in sorted(labels.items()) if k != "alertname"}}
        key = f"alert/{name}/{alert.get('fingerprint') or json.dumps(labels, sort_keys=True)}/{status}"
        out.append(Message(title=f"{'RESOLVED' if resolved else 'ALERT'} {name}: {summary}",
                           body=text or summary, severity=severity, key=key, facts=facts))
    return out


def handler_class(send: Send) -> type[BaseHTTPRequestHandler]:
    """The request handler of the relay, delivering through ``send``."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: Mapping[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._answer(200, {"status": "ok"})
            else:
                self._answer(404, {"error": f"{self.path}: not found (POST /alerts, GET /healthz)"})

        def do_POST(self) -> None:
            if self.path != "/alerts":
                self._answer(404, {"error": f"{self.path}: not found (POST /alerts)"})
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                notes = messages(json.loads(self.rfile.read(length) or b"null"))
            except (ValueError, PayloadError) as exc:  # json.JSONDecodeError is a ValueError
                self._answer(400, {"error": str(exc)})
                return
            try:
                for note in notes:
                    send(note)
            except Exception as exc:
                log.warning("alert relay: delivery failed: %s", exc)
                self._answer(502, {"error": f"notifier failed: {exc}"})
                return
            self._answer(200, {"delivered": len(notes)})

        def log_message(self, format: str, *args: Any) -> None:
            log.debug(format, *args)

    return Handler


def serve(host: str, port: int, send: Send | None = None) -> None:
    """Run the relay until interrupted (the notifier of ``MODELOPS_NOTIFY_URLS`` by default)."""
    if send is None:
        from modelops.notify.apprise_notifier import default_notifier

        send = default_notifier().send
    server = ThreadingHTTPServer((host, port), handler_class(send))
    log.info("alert relay on http://%s:%d/alerts", host, port)
    try:
        server.serve_forever()
    finally:
        server.server_close()


if __name__ == "__main__":  # python -m modelops.observability.alert_relay HOST PORT
    import sys

    logging.basicConfig(level=logging.INFO)
    serve(sys.argv[1], int(sys.argv[2]))
