"""A full disk on SQLite: writes refused with a clear error, nothing half-written,
and a worker that cannot record an outcome neither loses it nor calls again.

The disk is made full with `PRAGMA max_page_count` set to the database's page
count: a write that needs a new page fails with SQLITE_FULL ("database or disk
is full"), as on a full disk. The pragma belongs to each connection, so it is set
on every connection of the ledger's store. A write that fits in the room left in
existing pages would still succeed, so the writes under test are made to need new
pages: a large payload, a long remote id.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import denpyo
from denpyo import Status, Submission
from denpyo.engine.worker import Worker
from denpyo.store.sqlite import SqliteStore

LARGE = {"blob": "x" * 20_000}  # needs overflow pages
REMOTE_ID = "msg_" + "r" * 15_000  # so does a settle that records it (kept whole: under 16,000)
LEASE = 1.0


def set_full(ledger: denpyo.Ledger, full: bool) -> None:
    """No new page (full), or room again, on every connection the store has opened."""
    store = ledger.store
    assert isinstance(store, SqliteStore)
    with store._lock:
        connections = list(store._all)
    assert connections, "the store has opened no connection yet"
    for conn in connections:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages if full else 1 << 30}")


def counts(path: Path) -> tuple[int, int, int]:
    """(rows, events, rows without their `created` event), read on a connection of its own."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT count(*) FROM denpyo_submissions").fetchone()[0]
        events = conn.execute("SELECT count(*) FROM denpyo_events").fetchone()[0]
        orphans = conn.execute(
            "SELECT count(*) FROM denpyo_submissions s WHERE NOT EXISTS (SELECT 1 "
            "FROM denpyo_events e WHERE e.submission_id = s.id AND e.kind = 'created')"
        ).fetchone()[0]
    conn.close()
    return rows, events, orphans


@pytest.fixture
def path(tmp_path: Path) -> Path:
    path = tmp_path / "full.db"
    with denpyo.Ledger(f"sqlite:///{path}") as ledger:
        ledger.migrate()
    conn = sqlite3.connect(path)
    conn.execute("VACUUM")  # no free pages: every new page would grow the file
    conn.close()
    return path


@pytest.fixture
def ledger(path: Path) -> Iterator[denpyo.Ledger]:
    with denpyo.Ledger(f"sqlite:///{path}") as ledger:
        yield ledger


def assert_disk_full(exc: pytest.ExceptionInfo[denpyo.StoreError]) -> None:
    cause = exc.value.__cause__
    assert isinstance(cause, sqlite3.OperationalError), repr(cause)
    assert "full" in str(cause)
    assert "full" in str(exc.value), "the error says what happened"


def test_enqueue_and_submit_on_a_full_disk_write_nothing(ledger: denpyo.Ledger, path: Path) -> None:
    calls: list[str] = []

    def send(sub: Submission) -> str:
        calls.append(sub.key)
        return "msg_1"

    ledger.channel("c")(send)
    ledger.enqueue("c", "before", {"n": 1})  # this thread's connection, opened
    before = counts(path)
    set_full(ledger, True)

    with pytest.raises(denpyo.StoreError) as enqueued:
        ledger.enqueue("c", "queued", LARGE)
    assert_disk_full(enqueued)
    with pytest.raises(denpyo.StoreError) as submitted:
        ledger.submit("c", "inline", LARGE)
    assert_disk_full(submitted)

    assert counts(path) == before, "nothing half-written"
    assert before[2] == 0
    assert ledger.get("c", "queued") is None and ledger.get("c", "inline") is None
    assert calls == [], "no call for a row that could not be recorded"

    set_full(ledger, False)  # room again: the same calls go through
    ledger.enqueue("c", "queued", LARGE)
    assert ledger.submit("c", "inline", LARGE).status is Status.SYNCED
    assert calls == ["inline"]


def test_a_settle_refused_for_a_full_disk_is_verified_once_there_is_room(
    ledger: denpyo.Ledger, path: Path
) -> None:
    calls: Counter[str] = Counter()

    def send(sub: Submission) -> str:
        calls["send"] += 1
        set_full(ledger, True)  # the disk fills while the call is out
        return REMOTE_ID

    def verify(sub: Submission) -> denpyo.Verdict:
        calls["verify"] += 1
        return denpyo.Delivered(REMOTE_ID) if calls["send"] else denpyo.NotDelivered()

    ledger.channel("c", verify=verify, lease=LEASE)(send)
    sub = ledger.enqueue("c", "k", {"n": 1})
    watched = 3.0  # three leases
    seen: list[Submission] = []

    async def main() -> None:
        worker = Worker(ledger, poll_interval=0.05)  # polls often: a hot loop would show
        task = asyncio.create_task(worker.run())
        try:
            while not calls["send"] or worker.runs:
                await asyncio.sleep(0.01)  # until the call is made and its flow has ended
            row = await asyncio.to_thread(ledger.get_by_id, sub.id)
            assert row is not None
            seen.append(row)
            await asyncio.sleep(watched)
        finally:
            worker.stop()
            await task

    started = time.monotonic()
    asyncio.run(main())
    elapsed = time.monotonic() - started

    after_call = seen[0]
    assert after_call.status is Status.REQUESTING, "the outcome is not lost: still in flight"
    # the call is counted once its outcome is recorded (here, once verify finds it)
    assert after_call.attempts == 0 and after_call.remote_id is None
    assert calls["send"] == 1, "never called again while the outcome cannot be recorded"
    # In doubt once its lease runs out, the row is verified about once per lease,
    # not at every poll.
    assert calls["verify"] <= elapsed / LEASE + 2, calls

    set_full(ledger, False)
    time.sleep(LEASE)  # the last hold's lease runs out
    ledger.reconcile()
    settled = ledger.get_by_id(sub.id)
    assert settled is not None
    assert settled.status is Status.SYNCED and settled.remote_id == REMOTE_ID
    assert settled.attempts == 1
    assert any(
        e.detail == f"verify: delivered, remote id {REMOTE_ID}" for e in ledger.events(sub.id)
    )
    assert calls["send"] == 1, "exactly one call at the provider"
    assert counts(path)[2] == 0
