"""The provider's idempotency window: an in-doubt row of an idempotent channel is
resent under its key only while the provider still remembers that key; past the
window it is verified if the channel can verify, and otherwise waits for a person.
Every backend."""

from __future__ import annotations

import time
from collections import Counter

import pytest

import denpyo
from denpyo import Status, Submission

QUICK = denpyo.Backoff(initial=0.01, maximum=0.01)


def dropping_channel(calls: Counter[str]) -> object:
    """The first call of each key arrives and its reply is lost (ambiguous); a resend
    under the same key is answered with the first call's id, as an idempotent provider
    does while it remembers the key."""

    def send(sub: Submission) -> str:
        calls[sub.idempotency_key] += 1
        if calls[sub.idempotency_key] == 1:
            raise ConnectionResetError("connection lost before the reply")
        return f"r-{sub.key}"

    return send


def in_doubt(ledger: denpyo.Ledger, key: str) -> Submission:
    with pytest.raises(denpyo.SubmissionInDoubt) as raised:
        ledger.submit("charge", key, {"amount": 100})
    return raised.value.submission


def test_inside_the_window_an_in_doubt_row_is_resent_under_its_key(
    ledger: denpyo.Ledger,
) -> None:
    calls: Counter[str] = Counter()
    ledger.channel("charge", idempotent=True, idempotency_window=3600, lease=5, backoff=QUICK)(
        dropping_channel(calls)
    )
    sub = in_doubt(ledger, "order:1")
    time.sleep(0.05)
    ledger.reconcile()
    after = ledger.get("charge", "order:1")
    assert after is not None and after.status is Status.SYNCED and after.remote_id == "r-order:1"
    assert calls == {sub.idempotency_key: 2}


def test_past_the_window_an_in_doubt_row_waits_for_a_person(ledger: denpyo.Ledger) -> None:
    calls: Counter[str] = Counter()
    alerts: list[denpyo.Alert] = []
    ledger.on_alert(alerts.append)
    ledger.channel("charge", idempotent=True, idempotency_window=1.0, lease=0.5, backoff=QUICK)(
        dropping_channel(calls)
    )
    sub = in_doubt(ledger, "order:1")
    time.sleep(0.6)  # a resend now could arrive after the provider forgot the key
    ledger.reconcile()
    ledger.work(until_idle=True)
    held = ledger.get("charge", "order:1")
    assert held is not None and held.in_doubt and held.next_attempt_at is None
    assert calls == {sub.idempotency_key: 1}, "never resent blind past the window"
    assert any("idempotency window" in alert.message for alert in alerts)
    events = ledger.events(held.id)
    assert events[-1].kind == "verify" and "window closed" in (events[-1].detail or "")


def test_past_the_window_a_channel_that_can_verify_asks_the_provider(
    ledger: denpyo.Ledger,
) -> None:
    calls: Counter[str] = Counter()
    asked: list[str] = []

    def lookup(sub: Submission) -> denpyo.Verdict:
        asked.append(sub.idempotency_key)
        return denpyo.Delivered(f"r-{sub.key}")

    ledger.channel(
        "charge",
        idempotent=True,
        idempotency_window=1.0,
        lease=0.5,
        backoff=QUICK,
        verify=lookup,
    )(dropping_channel(calls))
    sub = in_doubt(ledger, "order:1")
    time.sleep(0.6)
    ledger.reconcile()
    after = ledger.get("charge", "order:1")
    assert after is not None and after.status is Status.SYNCED
    assert asked == [sub.idempotency_key] and calls == {sub.idempotency_key: 1}


def test_the_window_must_be_positive(ledger: denpyo.Ledger) -> None:
    with pytest.raises(denpyo.ConfigurationError, match="idempotency_window"):
        ledger.channel("charge", idempotent=True, idempotency_window=0)(lambda sub: None)


def test_the_history_says_when_the_window_closes(ledger: denpyo.Ledger) -> None:
    from datetime import timedelta

    from denpyo.engine import operator as op

    calls: Counter[str] = Counter()
    ledger.channel("charge", idempotent=True, idempotency_window=86400, backoff=QUICK)(
        dropping_channel(calls)
    )
    sub = in_doubt(ledger, "order:1")
    found = op.history(ledger, sub.id)
    first = next(event.at for event in found.events if event.kind == "attempt")
    assert found.window_closes_at == first + timedelta(days=1)
    assert found.to_json()["idempotency_window_closes_at"] == found.window_closes_at.isoformat()
    ledger.channel("mail")(lambda s: None)
    assert op.history(ledger, ledger.submit("mail", "m", {}).id).window_closes_at is None
