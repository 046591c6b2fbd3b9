"""Claiming: two claimers take disjoint rows, a row another transaction has
locked is skipped, an expired lease counts as nobody's (the row in doubt), and the
claims read their indexes."""

from __future__ import annotations

import threading

import pytest
from store_helpers import SQL, new, plans

from conftest import driver_connection
from database_records import database_record
from denpyo.domain.moves import Move
from denpyo.store import Store, open_store


def test_two_claims_at_once_take_disjoint_rows(store: Store, db_url: str, sql: SQL) -> None:
    for i in range(200):
        store.record(new(f"k{i}"), actor="t")
    other = open_store(db_url)
    claimed: dict[str, list[int]] = {}
    start = threading.Barrier(2)

    def claim(name: str, s: Store) -> None:
        start.wait()
        claimed[name] = [sub.id for sub in s.claim("c", holder=name, limit=150, lease=60)]

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
    if not store.capabilities.skip_locked:
        pytest.skip(
            "a claim without SKIP LOCKED (the distributed SQL profile's) waits for a locked "
            "row: tests/integration/store/test_store_distributed.py checks what it does"
        )
    ids = [store.record(new(f"k{i}"), actor="t")[0].id for i in range(10)]
    locker = driver_connection(backend, db_url)
    try:
        cursor = locker.cursor()
        for setting in database_record(backend).row_lock_settings:
            cursor.execute(setting)
        for row_id in ids[:5]:
            cursor.execute(f"SELECT id FROM denpyo_submissions WHERE id = {row_id} FOR UPDATE")
        claimed = store.claim("c", holder="w", limit=10, lease=60)
        assert sorted(sub.id for sub in claimed) == ids[5:]
    finally:
        locker.rollback()
        locker.close()
    assert sorted(sub.id for sub in store.claim("c", holder="w", limit=10, lease=60)) == ids[:5]


def test_an_expired_lease_counts_as_nobody_and_in_doubt(store: Store) -> None:
    sub, _ = store.record(new("k"), actor="holder", lease=60)
    [expired] = store.move([Move.still_in_doubt(sub, "holder", 0, "lease run out")])
    assert expired is not None and expired.in_doubt
    [verifying] = store.claim("c", holder="r", limit=5, lease=30, in_doubt=True)
    assert verifying.id == sub.id and verifying.locked_by == "r" and not verifying.in_doubt
    assert store.claim("c", holder="r2", limit=5, lease=30, in_doubt=True) == []


CLAIM_INDEXES = {
    "sqlite": {
        "find_submissions_ready": "denpyo_submissions_ready",
        "find_submissions_in_doubt": "denpyo_submissions_in_doubt",
        "count_submissions_in_doubt_due": "denpyo_submissions_in_doubt",
    },
    "postgresql": {
        "claim_submissions_ready": "denpyo_submissions_ready",
        "claim_submissions_in_doubt": "denpyo_submissions_in_doubt",
        "count_submissions_in_doubt_due": "denpyo_submissions_in_doubt",
    },
    "mysql": {
        "find_submissions_ready": "denpyo_submissions_due",
        "find_submissions_in_doubt": "denpyo_submissions_due",
    },
}


def test_claims_are_planned_on_their_indexes(store: Store, backend: str, db_url: str) -> None:
    """The claims (and the reconciler's count) read their partial index, not the table:
    the shared "in doubt" predicate must not hide the index's own from the planner.
    PostgreSQL is asked with sequential scans off, so that an empty table's plan shows
    whether the index can serve the query at all."""
    params = {"channel": "c", "limit": 64, "holder": "w", "lease": 30.0}
    with plans(store, backend, db_url) as plan:
        for name, index in CLAIM_INDEXES[backend].items():
            found = plan(name, params)
            assert index in found, (name, found)


def test_the_ready_claim_and_the_in_doubt_claim_take_their_own_rows(store: Store) -> None:
    """`claim_ready` starts the next attempt of due rows; `claim_in_doubt` holds rows
    in doubt for one reconciler without changing their status (`claim` picks one)."""
    waiting, _ = store.record(new("waiting"), actor="t")
    doubtful, _ = store.record(new("doubt"), actor="h", lease=60)
    [run_out] = store.move([Move.still_in_doubt(doubtful, "h", 0, "lease run out")])
    assert run_out is not None and run_out.in_doubt
    assert store.claim_in_doubt("sms", holder="r", limit=10, lease=60) == []

    [ready] = store.claim_ready("c", holder="w", limit=10, lease=60)
    assert (ready.id, ready.locked_by, ready.status) == (waiting.id, "w", waiting.status)
    assert store.events(waiting.id)[-1].kind == "attempt"
    [verify] = store.claim_in_doubt("c", holder="r", limit=10, lease=60)
    assert (verify.id, verify.locked_by, verify.status) == (doubtful.id, "r", run_out.status)
    assert verify.attempts == run_out.attempts, "verifying starts no attempt"
    assert store.claim_in_doubt("c", holder="r2", limit=10, lease=60) == [], "one at a time"
    assert store.claim_ready("c", holder="w2", limit=10, lease=60) == []
