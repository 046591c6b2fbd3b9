"""The providers' webhook events (`denpyo_provider_events`): an event confirms a row in
doubt `synced`, adds a history line to a synced row, is recorded once per (provider,
event id), and one that names no row is kept for the audit."""

from __future__ import annotations

from datetime import timedelta

from store_helpers import SYNCED, new, settled

from denpyo import Status
from denpyo.domain.moves import Move
from denpyo.domain.provider_events import ProviderEvent, Received
from denpyo.domain.submission import Submission
from denpyo.store import Store


def _in_doubt(store: Store, key: str) -> Submission:
    """A row whose call started and whose holder died: `requesting`, its lease run out."""
    sub, _ = store.record(new(key), actor="h", lease=60)
    [moved] = store.move(
        [
            Move(
                sub.id,
                Status.REQUESTING,
                Status.REQUESTING,
                "dead",
                holder="h",
                new_holder="h",
                lease=0,
                retry_in=0,
                keep_error=True,
            )
        ]
    )
    assert moved is not None and moved.in_doubt
    return moved


def _tell(store: Store, event: ProviderEvent) -> Received:
    return store.record_provider_event(event, actor="webhook:ses", scrub=lambda d, _row: d)


def test_an_event_naming_a_row_in_doubt_confirms_it_synced(store: Store) -> None:
    sub = _in_doubt(store, "k")
    got = _tell(store, ProviderEvent("ses", "e-1", "Delivery", sub.idempotency_key, "m-1"))
    assert got.confirmed and not got.duplicate
    assert got.submission is not None and got.submission.status is Status.SYNCED
    after = store.get(sub.id)
    assert after is not None and after.status is Status.SYNCED and after.remote_id == "m-1"
    assert after.locked_by is None and not after.in_doubt
    last = store.events(sub.id)[-1]
    assert (last.kind, last.from_status, last.to_status, last.actor) == (
        "verify",
        Status.REQUESTING,
        Status.SYNCED,
        "webhook:ses",
    )
    assert "confirmed by the provider's webhook (ses event e-1: Delivery)" in (last.detail or "")
    [kept] = store.provider_events_of(sub.id)
    assert (kept.provider, kept.event_id, kept.submission_id) == ("ses", "e-1", sub.id)


def test_an_event_on_a_synced_row_adds_a_history_line_and_a_duplicate_writes_nothing(
    store: Store,
) -> None:
    sub = settled(store, "k", SYNCED)
    event = ProviderEvent("ses", "e-2", "Bounce", remote_id="r-1", detail="mailbox full")
    got = _tell(store, event)
    assert not got.confirmed and not got.duplicate
    after = store.get(sub.id)
    assert after is not None and after.status is Status.SYNCED and after.remote_id == "r-1"
    last = store.events(sub.id)[-1]
    assert (last.kind, last.from_status, last.to_status, last.actor) == (
        "provider",
        Status.SYNCED,
        Status.SYNCED,
        "webhook:ses",
    )
    assert last.detail == ("Bounce, told by the provider's webhook (ses event e-2): mailbox full")
    history = store.events(sub.id)

    again = _tell(store, event)
    assert again.duplicate and not again.confirmed
    assert store.events(sub.id) == history
    assert [e.event_id for e in store.provider_events_of(sub.id)] == ["e-2"]


def test_an_event_naming_no_row_is_listed_for_the_audit_within_its_window(
    store: Store,
) -> None:
    before = store.now() - timedelta(seconds=1)
    got = _tell(store, ProviderEvent("sns", "e-3", "Delivery", "no-such-key", "no-such-id"))
    assert got.submission is None and not got.confirmed and not got.duplicate
    after = store.now() + timedelta(seconds=1)
    [unknown] = store.unknown_provider_events(before, after)
    assert (unknown.provider, unknown.event_id, unknown.submission_id) == ("sns", "e-3", None)
    assert unknown.remote_id == "no-such-id" and unknown.received_at is not None
    assert store.unknown_provider_events(before - timedelta(hours=1), before) == []
    assert store.unknown_provider_events(after, after + timedelta(hours=1)) == []
    assert _tell(store, ProviderEvent("sns", "e-3", "Delivery", "no-such-key")).duplicate
    assert len(store.unknown_provider_events(before, after)) == 1


def test_a_rows_events_are_listed_oldest_first(store: Store) -> None:
    sub = settled(store, "k", SYNCED)
    other = settled(store, "other", SYNCED)
    for n, kind in enumerate(["Send", "Delivery", "Open"]):
        _tell(store, ProviderEvent("ses", f"e-{n}", kind, sub.idempotency_key))
    _tell(store, ProviderEvent("ses", "e-other", "Delivery", other.idempotency_key))
    events = store.provider_events_of(sub.id)
    assert [(e.event_id, e.kind) for e in events] == [
        ("e-0", "Send"),
        ("e-1", "Delivery"),
        ("e-2", "Open"),
    ]
    assert all(e.submission_id == sub.id and e.received_at is not None for e in events)
    assert [e.event_id for e in store.provider_events_of(other.id)] == ["e-other"]
