"""A provider's webhook event settles the row it names (`Ledger.receive_provider_event`):
a row in doubt or failed becomes synced, a synced row gets a history line (and an
alert for a bounce), an event that names no row is listed by the audit, and the same
event twice is recorded once; on every backend."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from ledger_helpers import ok

import denpyo
from denpyo import Status, Submission
from denpyo.domain.moves import Move, Settle
from denpyo.domain.submission import Event


def _in_doubt(ledger: denpyo.Ledger, key: str = "k") -> Submission:
    """What a crash during the call leaves: `requesting`, its lease run out."""
    ledger.enqueue("c", key, {"email": "ann@example.com"})
    [held] = ledger.store.claim("c", holder="crashed-worker", limit=1, lease=60)
    [moved] = ledger.store.move(
        [
            Move(
                held.id,
                Status.REQUESTING,
                Status.REQUESTING,
                "dead",
                holder=held.locked_by,
                new_holder=held.locked_by,
                lease=0,
                retry_in=0,
                keep_error=True,
            )
        ]
    )
    assert moved is not None and moved.in_doubt
    return moved


def _history(ledger: denpyo.Ledger, sub: Submission) -> list[Event]:
    return ledger.events(sub.id)


def test_a_row_in_doubt_is_confirmed_synced_with_the_providers_id(
    ledger: denpyo.Ledger,
) -> None:
    ledger.channel("c")(ok)
    sub = _in_doubt(ledger)
    got = ledger.receive_provider_event(
        "stripe",
        "evt_1",
        "payment_intent.succeeded",
        idempotency_key=sub.idempotency_key,
        remote_id="pi_1",
    )
    assert got.confirmed and not got.duplicate
    after = ledger.get("c", "k")
    assert after is not None and after.status is Status.SYNCED and after.remote_id == "pi_1"
    assert after.attempts == 1 and after.locked_by is None
    last = _history(ledger, sub)[-1]
    assert (last.kind, last.from_status, last.to_status) == (
        "verify",
        Status.REQUESTING,
        Status.SYNCED,
    )
    assert last.actor == "webhook:stripe"
    assert last.detail == (
        "confirmed by the provider's webhook (stripe event evt_1: "
        "payment_intent.succeeded), remote id pi_1"
    )


def test_a_failed_row_found_by_its_remote_id_is_confirmed(ledger: denpyo.Ledger) -> None:
    ledger.channel("c", max_attempts=1)(ok)
    ledger.enqueue("c", "k", {})
    [held] = ledger.store.claim("c", holder="w", limit=1, lease=60)
    settle = Settle(held, "w", Status.FAILED, remote_id="SM1", last_error="timed out")
    [failed] = ledger.store.move([settle])
    assert failed is not None and failed.status is Status.FAILED
    got = ledger.receive_provider_event("twilio", "SM1:delivered", "delivered", remote_id="SM1")
    assert got.confirmed
    after = ledger.get("c", "k")
    assert after is not None and after.status is Status.SYNCED and after.attempts == 1


def test_a_synced_row_gets_the_event_in_its_history_and_a_bounce_alerts(
    ledger: denpyo.Ledger,
) -> None:
    alerts: list[denpyo.Alert] = []
    ledger.on_alert(alerts.append)
    ledger.channel("c")(ok)
    sub = ledger.submit("c", "k", {})
    assert sub.status is Status.SYNCED and sub.remote_id == "remote-k"
    delivered = ledger.receive_provider_event("ses", "n-1", "Delivery", remote_id="remote-k")
    bounced = ledger.receive_provider_event(
        "ses", "n-2", "Bounce", remote_id="remote-k", detail="Permanent: General"
    )
    assert not delivered.confirmed and not bounced.confirmed
    after = ledger.get("c", "k")
    assert after is not None and after.status is Status.SYNCED
    lines = [(e.kind, e.to_status, e.detail) for e in _history(ledger, sub)[-2:]]
    assert lines == [
        ("provider", Status.SYNCED, "Delivery, told by the provider's webhook (ses event n-1)"),
        (
            "provider",
            Status.SYNCED,
            "Bounce, told by the provider's webhook (ses event n-2): Permanent: General",
        ),
    ]
    assert [a.reason for a in alerts] == ["provider_reported"]
    assert alerts[0].submission is not None and alerts[0].submission.id == sub.id
    assert "Bounce" in alerts[0].message


def test_a_rejected_row_keeps_its_status(ledger: denpyo.Ledger) -> None:
    ledger.channel("c")(ok)
    ledger.enqueue("c", "k", {})
    [held] = ledger.store.claim("c", holder="w", limit=1, lease=60)
    [rejected] = ledger.store.move([Settle(held, "w", Status.REJECTED, last_error="400")])
    assert rejected is not None
    got = ledger.receive_provider_event(
        "stripe",
        "evt_r",
        "payment_intent.payment_failed",
        idempotency_key=held.idempotency_key,
    )
    assert not got.confirmed and got.submission is not None
    after = ledger.get("c", "k")
    assert after is not None and after.status is Status.REJECTED
    assert _history(ledger, held)[-1].kind == "provider"


def test_the_same_event_twice_is_recorded_once(ledger: denpyo.Ledger) -> None:
    ledger.channel("c")(ok)
    sub = ledger.submit("c", "k", {})
    first = ledger.receive_provider_event("sendgrid", "sg-1", "open", remote_id="remote-k")
    again = ledger.receive_provider_event("sendgrid", "sg-1", "open", remote_id="remote-k")
    assert not first.duplicate and again.duplicate
    assert [e.kind for e in _history(ledger, sub)].count("provider") == 1
    assert len(ledger.store.provider_events_of(sub.id)) == 1


def test_an_event_naming_no_row_is_listed_by_the_audit(ledger: denpyo.Ledger) -> None:
    ledger.channel("c", list_remote=lambda since, until: [])(ok)
    got = ledger.receive_provider_event(
        "stripe", "evt_x", "charge.refunded", idempotency_key="nobody", remote_id="pi_x"
    )
    assert got.submission is None and not got.duplicate
    now = ledger.store.now()
    report = ledger.audit("c", since=now - timedelta(hours=1), until=now + timedelta(minutes=1))
    [unknown] = report.unknown_events
    assert (unknown.provider, unknown.event_id, unknown.kind, unknown.remote_id) == (
        "stripe",
        "evt_x",
        "charge.refunded",
        "pi_x",
    )
    assert not report.clean


@pytest.mark.parametrize("first", ["webhook", "worker"])
def test_a_webhook_and_the_workers_settle_at_once_make_one_synced_move(
    ledger: denpyo.Ledger, first: str
) -> None:
    """The worker holds the row (its call in flight) when the provider's event comes:
    whichever commits first moves the row, the other's guarded move finds it moved,
    and the history has one move to synced."""
    ledger.channel("c")(ok)
    ledger.enqueue("c", "k", {})
    [held] = ledger.store.claim("c", holder="worker/1", limit=1, lease=60)
    settle = Settle(held, "worker/1", Status.SYNCED, remote_id="pi_1")
    results: dict[str, object] = {}

    def webhook() -> None:
        results["webhook"] = ledger.receive_provider_event(
            "stripe",
            "evt_1",
            "payment_intent.succeeded",
            idempotency_key=held.idempotency_key,
            remote_id="pi_1",
        )

    def worker() -> None:
        results["worker"] = ledger.store.move([settle])[0]

    order = [webhook, worker] if first == "webhook" else [worker, webhook]
    threads = [threading.Thread(target=run) for run in order]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    after = ledger.get("c", "k")
    assert after is not None and after.status is Status.SYNCED and after.attempts == 1
    moves = [
        e
        for e in ledger.events(held.id)
        if e.to_status is Status.SYNCED and e.from_status is not Status.SYNCED
    ]
    assert len(moves) == 1
    settled = results["worker"] is not None
    got = results["webhook"]
    assert isinstance(got, denpyo.Received)
    assert got.confirmed is not settled  # exactly one of them moved it
    if settled:
        assert ledger.events(held.id)[-1].kind == "provider"


def test_the_same_event_delivered_twice_at_once_is_recorded_once(ledger: denpyo.Ledger) -> None:
    """Providers retry when an answer is slow: two deliveries may be in flight at
    once. The unique (provider, event id) lets one of them through."""
    ledger.channel("c")(ok)
    sub = _in_doubt(ledger)
    start = threading.Barrier(4)
    results: list[denpyo.Received] = []

    def deliver() -> None:
        start.wait()
        results.append(
            ledger.receive_provider_event(
                "sendgrid", "sg-9", "delivered", idempotency_key=sub.idempotency_key
            )
        )

    threads = [threading.Thread(target=deliver) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.duplicate for r in results) == [False, True, True, True]
    assert sum(r.confirmed for r in results) == 1
    assert len(ledger.store.provider_events_of(sub.id)) == 1
    moves = [e for e in ledger.events(sub.id) if e.to_status is Status.SYNCED]
    assert len(moves) == 1


def test_an_event_about_a_pruned_row_names_it_and_is_not_unknown(ledger: denpyo.Ledger) -> None:
    ledger.channel("c", list_remote=lambda since, until: [])(ok)
    sub = ledger.submit("c", "k", {})
    assert ledger.prune(older_than=0) == 1
    got = ledger.receive_provider_event(
        "sendgrid", "sg-late", "bounce", idempotency_key=sub.idempotency_key
    )
    assert got.submission is not None and got.submission.id == sub.id
    assert got.submission.removed_at is not None and not got.confirmed
    now = ledger.store.now()
    report = ledger.audit("c", since=now - timedelta(hours=1), until=now + timedelta(minutes=1))
    assert report.unknown_events == []
    assert [e.event_id for e in ledger.store.provider_events_of(sub.id)] == ["sg-late"]
