"""Notifications: message formatting (pure) and apprise delivery (adapter)."""

from __future__ import annotations

from modelops.notify.apprise_notifier import AppriseNotifier, Notifier, NotifyError, default_notifier
from modelops.notify.message import Message, table

__all__ = ["AppriseNotifier", "Message", "Notifier", "NotifyError", "default_notifier", "table"]
