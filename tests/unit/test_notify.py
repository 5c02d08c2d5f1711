"""Notification formatting and apprise delivery to a local receiver."""

from __future__ import annotations

import pytest

from modelops.notify import AppriseNotifier, Message, NotifyError, table
from tests.support.receiver import NotificationReceiver


def test_message_text_lists_facts_aligned() -> None:
    message = Message("Rollback", "recommender v4 rolled back", "failure", facts={"gate": "error_rate", "mttr": "12 s"})
    assert message.text() == "recommender v4 rolled back\n\ngate  error_rate\nmttr  12 s"


def test_table_has_header_rule_and_rows() -> None:
    assert table([["ks", 0.12], ["p", 0.5]], ["name", "value"]) == "name  value\n----  -----\nks    0.12\np     0.5"


def test_apprise_delivers_title_and_body_to_a_json_receiver() -> None:
    with NotificationReceiver() as receiver:
        assert AppriseNotifier([receiver.url]).send(Message("Drift found", "3 features moved", "warning"))
        [got] = receiver.wait_for(1)
    assert got["title"] == "Drift found"
    assert "3 features moved" in got["message"]
    assert got["type"] == "warning"


def test_no_target_configured_sends_nothing() -> None:
    assert AppriseNotifier([]).send(Message("t", "b")) is False


def test_unreachable_target_raises() -> None:
    with pytest.raises(NotifyError, match="not accepted"):
        AppriseNotifier(["json://127.0.0.1:9/nothing-listens"]).send(Message("t", "b"))


def test_bad_url_names_which_url_and_its_scheme_but_never_its_credentials() -> None:
    with pytest.raises(NotifyError, match="not an apprise URL") as caught:
        AppriseNotifier(["json://127.0.0.1:9/ok", "nonsense-scheme://user:hunter2@host/tok3n"]).send(Message("t", "b"))
    text = str(caught.value)
    assert "URL #2" in text and "nonsense-scheme://" in text and "MODELOPS_NOTIFY_URLS" in text
    assert "hunter2" not in text and "tok3n" not in text and "user" not in text
