"""Removal's reads and the memory it leaves: the dry run's counts, a batch's history
for the archive, the report that counts removed rows as they went, and the
remembered keys let go once they are old enough."""

from __future__ import annotations

import time
from datetime import timedelta

from store_helpers import REJECTED, SYNCED, new, settled

from denpyo.domain.retention import Retention
from denpyo.store import Store

EVERYTHING = Retention.of(older_than=0)


def test_a_dry_run_counts_what_retention_lets_go_per_channel_and_status(store: Store) -> None:
    settled(store, "a", SYNCED)
    settled(store, "b", SYNCED)
    settled(store, "s", SYNCED, channel="sms")
    settled(store, "r", REJECTED)  # no person resolved it: it stays
    store.record(new("open"), actor="t")
    time.sleep(0.02)  # created strictly before the cutoff, on a millisecond clock
    assert sorted(store.count_removable(EVERYTHING)) == [("c", "synced", 2), ("sms", "synced", 1)]
    assert store.count_removable(Retention.of(synced=3600)) == [], "not old enough"
    assert store.count_removable(Retention.of(rejected=0)) == []


def test_the_histories_of_a_batch_oldest_first(store: Store) -> None:
    a = settled(store, "a", SYNCED)
    b = settled(store, "b", REJECTED)
    other = settled(store, "o", SYNCED)
    events = store.events_of([b.id, a.id])
    assert {e.submission_id for e in events} == {a.id, b.id} and other.id not in events
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert [e for e in events if e.submission_id == a.id] == store.events(a.id)
    assert store.events_of([]) == []


def test_the_report_counts_removed_rows_as_they_went(store: Store) -> None:
    a = settled(store, "a", SYNCED)
    settled(store, "b", SYNCED)
    settled(store, "r", REJECTED)
    settled(store, "s", SYNCED, channel="sms")
    today = store.now().date()
    window = (today - timedelta(days=1), today + timedelta(days=1))
    before = store.report_counts(*window)
    assert sorted(before) == [
        (today, "c", "rejected", "rejected", 1),
        (today, "c", "synced", "", 2),
        (today, "sms", "synced", "", 1),
    ]
    time.sleep(0.02)
    assert store.remove([a.id], EVERYTHING) == 1
    assert sorted(store.report_counts(*window)) == sorted(before), "a removed row still counts"
    assert sorted(store.report_counts(*window, channel="sms")) == [(today, "sms", "synced", "", 1)]
    assert store.report_counts(today + timedelta(days=1), today + timedelta(days=2)) == []


def test_remembered_keys_are_let_go_when_old_enough(store: Store) -> None:
    subs = [settled(store, f"k{i}", SYNCED) for i in range(3)]
    time.sleep(0.02)
    assert store.remove([sub.id for sub in subs], EVERYTHING) == 3
    assert store.expire_keys(3600) == 0, "created a moment ago"
    kept = store.get_by_key("c", "k0")
    assert kept is not None and kept.removed_at is not None
    assert store.expire_keys(0, limit=2) == 2
    assert store.expire_keys(0, limit=2) == 1
    assert all(store.get(sub.id) is None for sub in subs), "forgotten: the key may be used again"
    again, created = store.record(new("k0"), actor="t")
    assert created and again.id not in {sub.id for sub in subs}
