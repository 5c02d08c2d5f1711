"""Delivery through apprise (Slack, e-mail, Teams, JSON webhooks …), behind a small port."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from modelops.errors import ModelopsError
from modelops.notify.message import Message


class NotifyError(ModelopsError):
    """No configured target accepted a notification."""


class Notifier(Protocol):
    def send(self, message: Message) -> bool:
        """Deliver ``message``; True when at least one target accepted it (False when none configured)."""
        ...


_TYPES = {"info": "info", "success": "success", "warning": "warning", "failure": "failure"}


def redacted(url: str) -> str:
    """``url`` with everything after its scheme hidden (apprise URLs hold credentials anywhere in them)."""
    scheme, sep, _rest = url.partition("://")
    plain = scheme.replace("+", "").replace("-", "").replace(".", "")  # RFC 3986 scheme characters
    return f"{scheme}://…" if sep and scheme.isascii() and plain.isalnum() else "…"


class AppriseNotifier:
    """Sends to every apprise URL given; raises :class:`NotifyError` when all of them fail."""

    def __init__(self, urls: Sequence[str]) -> None:
        self.urls = list(urls)

    def send(self, message: Message) -> bool:
        if not self.urls:
            return False
        import apprise

        app = apprise.Apprise()
        for index, url in enumerate(self.urls, start=1):
            if not app.add(url):
                # Never the URL itself: apprise URLs carry tokens and passwords (slack://A/B/C, mailto://u:p@…).
                raise NotifyError(f"MODELOPS_NOTIFY_URLS: URL #{index} ({redacted(url)}) is not an apprise URL "
                                  "it understands (example: json://127.0.0.1:8999/hook)")
        delivered = app.notify(title=message.title, body=message.text(), notify_type=_TYPES[message.severity])
        if not delivered:
            raise NotifyError(f"notification {message.title!r} was not accepted by any of {len(self.urls)} target(s)")
        return True


def default_notifier() -> AppriseNotifier:
    """The notifier configured by ``MODELOPS_NOTIFY_URLS``."""
    from modelops.config import settings

    return AppriseNotifier(settings().notify_url_list)
