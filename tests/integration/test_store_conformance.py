"""The store's contract under concurrency, the same on SQLite, PostgreSQL and MariaDB:
two claimers take disjoint rows, a locked row is skipped, a compare-and-set loses
when the row moved, an expired lease counts as nobody's, renewal extends only the
holder's leases. Each test on a fresh real database."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from conftest import driver_connection
from denpyo import Status
from denpyo.domain.moves import Move
from denpyo.store import NewSubmission, Store, open_store

SQL = Callable[[str], list[tuple[Any, ...]]]


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    opened = open_store(db_url)
    yield opened
    opened.close()


def new(key: str, channel: str = "c") -> NewSubmission:
    return NewSubmission(channel, key, str(uuid.uuid4()), '{"n": 1}')


def test_two_claims_at_once_take_disjoint_rows(store: Store, db_url: str, sql: SQL) -> None:
    for i in range(200):
        store.insert(new(f"k{i}"), actor="t")
    other = open_store(db_url)
    claimed: dict[str, list[int]] = {}
    start = threading.Barrier(2)

    def claim(name: str, s: Store) -> None:
        start.wait()
        claimed[name] = [sub.id for sub in s.claim("c", worker=name, limit=150, lease=60)]

    threads = [
        threading.Thread(target=claim, args=("a", store)),
        threading.Thread(target=claim, args=("b", other)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    other.close()
    a, b = set(claimed["a"]), set(claimed["b"])
    assert len(a) == len(claimed["a"]) and len(b) == len(claimed["b"])
    assert not a & b
    assert len(a | b) == 200
    attempts = sql(
        "SELECT COUNT(*) FROM denpyo_events WHERE kind = 'attempt' GROUP BY submission_id"
    )
    assert attempts == [(1,)] * 200


@pytest.mark.parametrize("backend", ["postgresql", "mysql"], indirect=True)
def test_claim_skips_rows_another_transaction_has_locked(
    store: Store, backend: str, db_url: str
) -> None:
    """(SQLite has one writer at a time and no row locks: nothing to skip.) If the
    claim waited for the locked rows, it would never return while they are held."""
    ids = [store.insert(new(f"k{i}"), actor="t")[0].id for i in range(10)]
    locker = driver_connection(backend, db_url)
    try:
        cursor = locker.cursor()
        if backend == "mysql":
            # READ COMMITTED and one row at a time: under REPEATABLE READ a scan of this
            # tiny table would keep every row it read locked, not only the five.
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            cursor.execute("BEGIN")
        for row_id in ids[:5]:
            cursor.execute(f"SELECT id FROM denpyo_submissions WHERE id = {row_id} FOR UPDATE")
        claimed = store.claim("c", worker="w", limit=10, lease=60)
        assert sorted(sub.id for sub in claimed) == ids[5:]
    finally:
        locker.rollback()
        locker.close()
    assert sorted(sub.id for sub in store.claim("c", worker="w", limit=10, lease=60)) == ids[:5]


def test_a_move_that_loses_its_compare_and_set_returns_none(store: Store) -> None:
    sub, _ = store.insert(new("k"), actor="holder", lease=60)

    def to_synced(expect: str | None) -> Move:
        return Move(
            sub.id, Status.REQUESTING, Status.SYNCED, "x", expect_locked_by=expect, event="settle"
        )

    # another holder, or "nobody" while a live lease is held: both lose
    assert store.move([to_synced("thief"), to_synced(None)]) == [None, None]
    # a wrong expected status loses too
    wrong = Move(sub.id, Status.FAILED, Status.SYNCED, "x", expect_locked_by="holder")
    assert store.move([wrong]) == [None]
    [won] = store.move([to_synced("holder")])
    assert won is not None and won.status is Status.SYNCED and won.locked_by is None
    assert won.synced_at is not None and not won.in_doubt
    assert store.move([to_synced("holder")]) == [None]  # already moved
    assert [e.kind for e in store.events(sub.id)] == ["created", "attempt", "settle"]


def test_an_expired_lease_counts_as_nobody_and_in_doubt(store: Store) -> None:
    sub, _ = store.insert(new("k"), actor="holder", lease=60)
    [expired] = store.move([Move.still_in_doubt(sub, "holder", 0, "lease run out")])
    assert expired is not None and expired.in_doubt
    [verifying] = store.claim("c", worker="r", limit=5, lease=30, in_doubt=True)
    assert verifying.id == sub.id and verifying.locked_by == "r" and not verifying.in_doubt
    assert store.claim("c", worker="r2", limit=5, lease=30, in_doubt=True) == []


def test_renewal_extends_only_the_holders_leases(store: Store) -> None:
    sub, _ = store.insert(new("k"), actor="holder", lease=1)
    assert store.renew([(sub.id, "holder", 60), (sub.id, "thief", 60)]) == {sub.id}
    assert store.renew([(sub.id, "thief", 60)]) == set()
    renewed = store.get(sub.id)
    assert renewed is not None and renewed.locked_until is not None
    assert renewed.locked_until - store.now() > timedelta(seconds=50)
    assert renewed.status is Status.REQUESTING and renewed.locked_by == "holder"
