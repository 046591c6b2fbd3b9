"""Rows written besides a plain record: one adopted from the provider's records, a
resend of a removed row with its memory, rows recorded inside an asyncio
application's own transaction; and the reads that link rows to each other (the
resend of a row, an earlier row of the same ordering key)."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace

import pytest
from store_helpers import REJECTED, SYNCED, new, settled

from app_connections import app_connection
from denpyo import Status
from denpyo.domain.actions import ActionKind, Scope
from denpyo.domain.moves import Move, Settle
from denpyo.domain.retention import Retention
from denpyo.errors import LeaseLost
from denpyo.store import NewSubmission, Store
from denpyo.store.actions import NewAction


def test_an_adopted_call_is_recorded_synced_in_one_step(store: Store) -> None:
    adopted = store.adopt(new("lost"), remote_id="r-7", actor="audit", note="found there")
    assert adopted is not None and adopted.status is Status.SYNCED
    assert (adopted.remote_id, adopted.attempts, adopted.locked_by) == ("r-7", 1, None)
    assert [e.kind for e in store.events(adopted.id)] == ["created", "adopted"]
    assert store.adopt(new("lost"), remote_id="r-8", actor="audit", note="again") is None
    assert store.claim("c", holder="w", limit=10, lease=60) == [], "never due to a worker"


def test_a_removed_rows_resend_is_remembered_with_it(store: Store) -> None:
    old = settled(store, "a", REJECTED)
    [gave_up] = store.move([Move.give_up(old, "operator:bob", "abandon", "abandoned", "n")])
    assert gave_up is not None
    time.sleep(0.02)  # created strictly before the cutoff, on a millisecond clock
    assert store.remove([old.id], Retention.of(older_than=0)) == 1
    log = NewAction(ActionKind.RESEND, Scope.ROWS, "rows", "operator:ada", "resend")
    created, memory = store.record_resend_of_removed(
        new("a-2"),
        actor="operator:ada",
        detail=f"resend of #{old.id}",
        old_id=old.id,
        resolution=lambda new_id: f"resent as #{new_id}",
        log=log,
    )
    assert created.status is Status.REQUESTING and created.supersedes is None
    assert (memory.resolution, memory.superseded_by) == (f"resent as #{created.id}", created.id)
    found = store.find_superseding(old.id)
    assert found is not None and found.id == created.id
    [entry] = store.actions(kind=ActionKind.RESEND)
    assert (entry.total, entry.done) == (1, 1)

    with pytest.raises(LeaseLost):
        store.record_resend_of_removed(
            new("a-3"),
            actor="operator:bob",
            detail="again",
            old_id=old.id,
            resolution=lambda new_id: f"resent as #{new_id}",
        )
    assert store.get_by_key("c", "a-3") is None, "the second resend wrote nothing"


def test_a_resend_is_found_from_the_row_it_replaces(store: Store) -> None:
    old = settled(store, "a", REJECTED)
    resend, _ = store.record(replace(new("a-2"), supersedes=old.id), actor="operator:ada")
    found = store.find_superseding(old.id)
    assert found is not None and found.id == resend.id
    assert store.find_superseding(resend.id) is None


def test_a_row_waits_for_the_earlier_open_rows_of_its_ordering_key(store: Store) -> None:
    def ordered(key: str, ordering: str | None = "o") -> NewSubmission:
        return replace(new(key), ordering_key=ordering)

    first, _ = store.record(ordered("1"), actor="h", lease=60)
    second, _ = store.record(ordered("2"), actor="t")
    other, _ = store.record(ordered("x", "p"), actor="t")
    loose, _ = store.record(ordered("y", None), actor="t")
    assert not store.ordering_waits(first) and store.ordering_waits(second)
    assert not store.ordering_waits(other) and not store.ordering_waits(loose)
    assert store.move([Settle.of(first, "h", SYNCED, 5)]) != [None]
    assert not store.ordering_waits(second), "the earlier one is closed"


def test_rows_recorded_in_an_applications_transaction_commit_with_it(
    store: Store, backend: str, db_url: str
) -> None:
    seen: list[str] = []

    async def run(commit: bool, suffix: str) -> tuple[bool, int]:
        async with app_connection(backend, db_url) as conn:
            _, created = await store.arecord(new(f"one{suffix}"), actor="app", conn=conn)
            many = await store.arecord_many(
                [new(f"two{suffix}"), new(f"three{suffix}"), new(f"one{suffix}")],
                actor="app",
                check=lambda fresh, old: seen.append(old.key),
                conn=conn,
            )
            await (conn.commit() if commit else conn.rollback())
        return created, many

    assert asyncio.run(run(False, "-rolled-back")) == (True, 2)
    assert store.get_by_key("c", "one-rolled-back") is None, "rolled back with the application"
    assert asyncio.run(run(True, "")) == (True, 2)
    assert seen == ["one-rolled-back", "one"], "the key recorded in the same transaction"
    rows = [store.get_by_key("c", key) for key in ("one", "two", "three")]
    assert all(row is not None and row.status is Status.REQUESTING for row in rows)
    again = NewSubmission("c", "one", str(uuid.uuid4()), "{}")

    async def twice() -> bool:
        async with app_connection(backend, db_url) as conn:
            _, created = await store.arecord(again, actor="app", conn=conn)
            await conn.commit()
        return created

    assert not asyncio.run(twice()), "recorded already"
