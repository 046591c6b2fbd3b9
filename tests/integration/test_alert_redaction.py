"""Alerts and logs carry no hidden value: an alert handler gets the row's payload
redacted and its text scrubbed, the worker's log lines quote no hidden value a
provider's error quoted, and the channel still gets the whole payload. The rule's
names come from `Ledger(redact=)` and $DENPYO_REDACT."""

from __future__ import annotations

import json
import logging

import pytest

import denpyo
from denpyo.domain.redaction import REDACTED

CARD = "4111111111111111"
BEARER = "Bearer sk_live_0123456789"


def payload(outcome: str) -> dict[str, object]:
    return {
        "outcome": outcome,
        "to": "ann@example.com",
        "headers": {"Authorization": BEARER},
        "card": [{"card-number": CARD}],
    }


def quoting_channel(ledger: denpyo.Ledger, sent: list[object]) -> None:
    """A channel whose provider quotes the card and the header back in its errors."""

    @ledger.channel("pay", max_attempts=1)
    def send(sub: denpyo.Submission) -> str:
        sent.append(sub.payload)
        quoted = f"card {CARD} refused for {BEARER}"
        outcome = sub.payload["outcome"]
        if outcome == "rejected":
            raise denpyo.Rejected(f"402 {quoted}")
        if outcome == "transient":
            raise denpyo.Transient(f"503 {quoted}")
        raise TimeoutError(f"read timed out: {quoted}")  # ambiguous: in doubt


def test_an_alert_handler_gets_the_row_redacted_and_its_text_scrubbed(
    ledger: denpyo.Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    sent: list[object] = []
    quoting_channel(ledger, sent)
    told: list[denpyo.Alert] = []
    webhook: list[str] = []

    @ledger.on_alert
    def sink(alert: denpyo.Alert) -> None:
        told.append(alert)
        sub = alert.submission
        assert sub is not None
        webhook.append(
            json.dumps({"text": str(alert), "payload": sub.payload, "last_error": sub.last_error})
        )

    with caplog.at_level(logging.DEBUG, logger="denpyo"):
        for outcome in ("rejected", "transient", "ambiguous"):
            with pytest.raises(denpyo.SubmissionError) as raised:
                ledger.submit("pay", f"order-{outcome}", payload(outcome))
            assert CARD not in str(raised.value) and BEARER not in str(raised.value)
    assert sorted(alert.reason for alert in told) == ["exhausted", "in_doubt", "rejected"]
    for alert, line in zip(told, webhook, strict=True):
        assert CARD not in line and BEARER not in line, line
        assert alert.submission is not None
        assert alert.submission.payload["card"] == [{"card-number": REDACTED}]
        assert alert.submission.payload["headers"] == {"Authorization": REDACTED}
        assert alert.submission.payload["to"] == "ann@example.com"
        assert "\n" not in str(alert)
    assert any(REDACTED in alert.message for alert in told)
    assert "[rejected] pay:order-rejected" in caplog.text
    assert CARD not in caplog.text and BEARER not in caplog.text
    # The channel got the whole payload, and the row keeps it.
    assert all(body == payload(body["outcome"]) for body in sent)  # type: ignore[index]
    row = ledger.get("pay", "order-rejected")
    assert row is not None and row.payload == payload("rejected") and CARD in (row.last_error or "")


def test_the_worker_logs_no_hidden_value_a_provider_quoted(
    ledger: denpyo.Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    sent: list[object] = []
    quoting_channel(ledger, sent)
    for outcome in ("rejected", "transient", "ambiguous"):
        ledger.enqueue("pay", f"order-{outcome}", payload(outcome))
    with caplog.at_level(logging.DEBUG, logger="denpyo"):
        ledger.work(until_idle=True)
    assert len(sent) == 3
    about_rows = [r for r in caplog.records if "pay:order-" in r.getMessage()]
    assert len(about_rows) >= 3, caplog.text
    assert any(REDACTED in record.getMessage() for record in about_rows)
    assert CARD not in caplog.text and BEARER not in caplog.text


def test_the_names_come_from_the_ledger_and_the_environment(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DENPYO_REDACT", "address, phone")
    with denpyo.Ledger(db_url, redact=["customerEmail"]) as ledger:
        rule = ledger.redaction
        for name in ("customer_email", "address", "Phone", "password", "authorization"):
            assert rule.hides(name), name
        assert ledger.alerts.redaction is rule
    only = denpyo.Redaction.only("iban")
    with denpyo.Ledger(db_url, redact=only) as ledger:
        assert ledger.redaction.hides("iban") and ledger.redaction.hides("address")
        assert not ledger.redaction.hides("password")
    monkeypatch.setenv("DENPYO_REDACT", ",")
    with denpyo.Ledger(db_url) as ledger:
        assert ledger.redaction == denpyo.Redaction.default()
    with pytest.raises(denpyo.InvalidInput, match="not the string"):
        denpyo.Ledger(db_url, redact="password")


def test_a_channel_down_or_held_keeps_no_hidden_value_a_provider_quoted(
    ledger: denpyo.Ledger,
) -> None:
    """The channel's state outlives its rows: its notes, and the `channel_down`
    alert, quote the provider's error scrubbed with the row that met it."""
    told: list[denpyo.Alert] = []
    ledger.on_alert(told.append)

    @ledger.channel("pay", down_after=2, max_attempts=1)
    def send(sub: denpyo.Submission) -> str:
        if sub.key == "wait":
            raise denpyo.Transient(f"429 slow down, card {CARD}", retry_after=0.5)
        raise denpyo.Transient(f"503 card {CARD} refused for {BEARER}")

    for n in range(2):
        ledger.enqueue("pay", f"order-{n}", payload("transient"))
    ledger.work(until_idle=True)
    [state] = ledger.store.channel_states()
    assert state.down_since is not None and state.down_note is not None
    assert REDACTED in state.down_note and CARD not in state.down_note
    assert BEARER not in state.down_note
    [down] = [alert for alert in told if alert.reason == "channel_down"]
    assert CARD not in str(down) and BEARER not in str(down)

    ledger.channel("hold", max_attempts=1)(send)
    ledger.enqueue("hold", "wait", payload("transient"))
    ledger.work(until_idle=True)
    held = {state.channel: state for state in ledger.store.channel_states()}["hold"]
    assert held.throttled_note is not None and REDACTED in held.throttled_note
    assert CARD not in held.throttled_note
