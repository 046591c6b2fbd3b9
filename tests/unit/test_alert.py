"""An alert (domain/alert.py), and how `Alerts` (engine/alerts.py) tells it."""

import logging
from dataclasses import replace

import pytest

from denpyo import Alert, Status, Submission
from denpyo.engine.alerts import Alerts

ROW = Submission(
    id=42,
    channel="invoice-email",
    key="order:7",
    idempotency_key="i",
    payload={},
    status=Status.REJECTED,
)


def test_an_alert_names_its_row_when_it_has_one() -> None:
    decided = Alert("rejected", "rejected by the provider: HTTP 422")
    assert str(decided) == "[rejected] rejected by the provider: HTTP 422"
    told = decided.about(ROW)
    assert (told.reason, told.message, told.submission) == (decided.reason, decided.message, ROW)
    assert str(told) == (
        "[rejected] invoice-email:order:7 (id 42): rejected by the provider: HTTP 422"
    )
    assert decided.submission is None  # `about` makes a new alert


def test_alerts_tell_every_handler_and_skip_one_that_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The settle that caused an alert is committed already: a handler's bug must not
    undo it, nor keep the alert from the other handlers."""
    alerts = Alerts()
    seen: list[Alert] = []

    def broken(alert: Alert) -> None:
        raise RuntimeError("pager down")

    alerts.add(broken)
    alerts.add(seen.append)
    with caplog.at_level(logging.WARNING, logger="denpyo.alerts"):
        told = alerts.raise_alert("in_doubt", "verify could not tell", ROW)
    assert seen == [told] and told.submission is ROW
    assert "[in_doubt] invoice-email:order:7 (id 42): verify could not tell" in caplog.text
    assert "alert handler" in caplog.text and "pager down" in caplog.text


def test_an_alert_line_shows_control_characters_escaped(caplog: pytest.LogCaptureFixture) -> None:
    """The key is the caller's and the message quotes the provider: a line break in
    them must not forge a log line, nor an escape sequence reach a terminal. The
    handlers get the alert as recorded."""
    row = replace(ROW, key="order:7\nINFO nothing needs attention")
    error = "rejected by the provider: \x1b]0;owned\x07\x1b[2J\r"
    line = (
        "[rejected] invoice-email:order:7\\nINFO nothing needs attention (id 42): "
        "rejected by the provider: \\x1b]0;owned\\x07\\x1b[2J\\r"
    )
    alerts = Alerts()
    seen: list[Alert] = []
    alerts.add(seen.append)
    with caplog.at_level(logging.WARNING, logger="denpyo.alerts"):
        told = alerts.raise_alert("rejected", error, row)
    assert str(told) == line
    assert [record.getMessage() for record in caplog.records] == [line]
    assert seen[0].message == error and seen[0].submission is row
    assert str(Alert("renewal_failing", "lost (\x1b[2J)")) == "[renewal_failing] lost (\\x1b[2J)"
