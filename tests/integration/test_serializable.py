"""A PostgreSQL database whose default isolation is SERIALIZABLE (as an application
may set it: `ALTER DATABASE ... SET default_transaction_isolation`): denpyo's own
sessions run READ COMMITTED, the SQL they were written for; a conflict (a
serialization failure, a deadlock) in a transaction denpyo owns is tried again; one
in the application's transaction reaches the application as StoreConflict."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import denpyo
from conftest import driver_connection
from denpyo import Status, Submission
from denpyo.domain.actions import ActionKind, Scope
from denpyo.domain.moves import Move
from denpyo.engine.worker import Worker
from denpyo.errors import StoreConflict
from denpyo.store.actions import NewAction
from denpyo.store.queries import load_queries
from doc_pages import named

QUIET = 10.0
"""Seconds with no row settled after which the workers are taken to be done."""


@pytest.fixture
def unpinned(monkeypatch: pytest.MonkeyPatch) -> None:
    """denpyo's sessions keep the database's default isolation, as where a session
    cannot be pinned: every conflict must be tried again."""
    for queries in (load_queries("postgresql"), load_queries("postgresql-partitioned")):
        monkeypatch.setitem(queries, "make_session_read_committed", "SELECT 1")


@pytest.fixture
def ledgers(serializable_url: str) -> Iterator[list[denpyo.Ledger]]:
    """Four processes' ledgers on one serializable database."""
    opened = [denpyo.Ledger(serializable_url) for _ in range(4)]
    yield opened
    for ledger in opened:
        ledger.close()


def synced(ledger: denpyo.Ledger, channel: str) -> int:
    counts = ledger.store.count_by_status(channel)
    return sum(n for _, status, n in counts if status is Status.SYNCED)


@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "unpinned"])
def test_postgresql_workers_settle_every_row_when_serializable(
    request: pytest.FixtureRequest,
    ledgers: list[denpyo.Ledger],
    pinned: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Four workers of eight calls each over 300 rows: every row ends synced, each
    key called once at the provider. Unpinned, their transactions run SERIALIZABLE
    and conflict: each is tried again until it goes through."""
    if not pinned:
        request.getfixturevalue("unpinned")
    caplog.set_level(logging.INFO, logger="denpyo.store")
    calls: Counter[str] = Counter()
    lock = threading.Lock()

    async def send(sub: Submission) -> str:
        with lock:
            calls[sub.idempotency_key] += 1
        await asyncio.sleep(0.001)
        return f"r-{sub.key}"

    for ledger in ledgers:
        ledger.channel("email", verify=lambda sub: denpyo.NotDelivered())(send)
    rows = 300
    ledgers[0].enqueue_many("email", [(f"k{i}", {"n": i}) for i in range(rows)])

    async def main() -> None:
        workers = [Worker(ledger, concurrency=8, poll_interval=0.05) for ledger in ledgers]
        tasks = [asyncio.create_task(worker.run()) for worker in workers]
        seen, moved_at = -1, time.monotonic()
        while (done := await asyncio.to_thread(synced, ledgers[0], "email")) < rows:
            if done != seen:
                seen, moved_at = done, time.monotonic()
            elif time.monotonic() - moved_at > QUIET:
                break
            await asyncio.sleep(0.1)
        for worker in workers:
            worker.stop()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert synced(ledgers[0], "email") == rows
    assert len(calls) == rows and set(calls.values()) == {1}
    retries = [r for r in caplog.records if "after conflicts" in r.getMessage()]
    assert bool(retries) is not pinned  # unpinned, some did conflict


def test_postgresql_sessions_of_denpyo_run_read_committed(serializable_url: str) -> None:
    """The database's default is not denpyo's: its own sessions, sync and asyncio,
    pin READ COMMITTED."""
    with denpyo.Ledger(serializable_url) as ledger, ledger.store.reading() as tx:  # type: ignore[attr-defined]
        assert tx.cursor.execute("SHOW transaction_isolation").fetchone() == {
            "transaction_isolation": "read committed"
        }
    with psycopg.connect(serializable_url) as app:
        assert app.execute("SHOW transaction_isolation").fetchone() == ("serializable",)


def blocked_then_committed(url: str, lock_sql: str, run: Callable[[], Any]) -> Any:
    """`run()` while another session holds the row `lock_sql` updates; that session
    commits once `run`'s statement waits for it, so `run`'s transaction (its
    snapshot older than that commit) fails as SERIALIZABLE says it must: 40001."""
    with psycopg.connect(url) as other:
        other.execute(lock_sql)
        result: list[Any] = []
        thread = threading.Thread(target=lambda: result.append(run()))
        thread.start()
        with psycopg.connect(url, autocommit=True) as look:
            for _ in range(1000):
                waiting = look.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                ).fetchone()
                if waiting and waiting[0]:
                    break
                time.sleep(0.01)
        other.commit()
        thread.join()
    return result[0] if result else None


@pytest.mark.usefixtures("unpinned")
def test_postgresql_store_transaction_that_lost_to_a_concurrent_one_runs_again(
    serializable_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The store's own transaction (BEGIN ... COMMIT), and an operation that is one
    statement: each meets a real serialization failure, runs again, and succeeds."""
    caplog.set_level(logging.INFO, logger="denpyo.store")
    with denpyo.Ledger(serializable_url) as ledger:
        entry = NewAction(ActionKind.RETRY, Scope.ROWS, "rows", "operator:ann", "why")
        action = ledger.store.add_action(entry)
        lock = f"UPDATE denpyo_actions SET note = 'other' WHERE id = {action.id}"
        run = lambda: ledger.store.take_action(action.id, holder="h", lease=60.0)  # noqa: E731
        assert blocked_then_committed(serializable_url, lock, run) is True
        assert "store.take_action: succeeded at try 2" in caplog.text

        ledger.channel("email")(lambda sub: "r")
        sub = ledger.enqueue("email", "k", {})
        lock = f"UPDATE denpyo_submissions SET ordering_key = 'x' WHERE id = {sub.id}"
        move = Move.claim(sub.id, Status.REQUESTING, "worker:a", 30.0, verify=False)
        moved = blocked_then_committed(serializable_url, lock, lambda: ledger.store.move([move]))
        assert moved is not None and moved[0] is not None and moved[0].locked_by == "worker:a"
        assert "succeeded at try 2" in caplog.text.split("take_action")[-1]


def test_postgresql_applications_transaction_gets_store_conflict_and_runs_again(
    serializable_url: str,
) -> None:
    """An enqueue in the application's SERIALIZABLE transaction that loses to a
    concurrent one raises StoreConflict (the driver's error its cause), rolls back
    with the application's own writes, and goes through when the application runs
    its transaction again: the retry loop of the docs."""
    with denpyo.Ledger(serializable_url) as ledger, psycopg.connect(serializable_url) as app:
        ledger.channel("email")(lambda sub: "r")
        app.execute("CREATE TABLE orders (id int PRIMARY KEY)")
        app.commit()
        app.execute("SELECT 1")  # the application's snapshot, from before the other commit
        ledger.enqueue("email", "order:1", {"n": 1})  # another process, meanwhile
        with pytest.raises(StoreConflict) as conflict:
            app.execute("INSERT INTO orders VALUES (1)")
            ledger.enqueue("email", "order:1", {"n": 1}, conn=app)
        assert isinstance(conflict.value.__cause__, psycopg.errors.SerializationFailure)
        app.rollback()

        raced = Raced(ledger, denpyo.Ledger(serializable_url))
        raced.other.channel("email")(lambda sub: "r")
        place_order = documented_retry_loop()
        place_order(raced, serializable_url, 2)  # loses once, then goes through
        raced.other.close()
        assert raced.calls == 2
        assert app.execute("SELECT id FROM orders").fetchall() == [(2,)]
        row = ledger.get("email", "order:2")
        assert row is not None and row.payload == {"order": 2}
        assert sum(n for _, _, n in ledger.store.count_by_status("email")) == 2


class Raced:
    """A ledger whose first enqueue in the caller's transaction meets the same key
    committed by another process after that transaction took its snapshot."""

    def __init__(self, ledger: denpyo.Ledger, other: denpyo.Ledger) -> None:
        self.ledger, self.other = ledger, other
        self.calls = 0

    def enqueue(self, channel: str, key: str, payload: Any, *, conn: Any) -> Submission:
        self.calls += 1
        if self.calls == 1:
            self.other.enqueue(channel, key, payload)
        return self.ledger.enqueue(channel, key, payload, conn=conn)


def documented_retry_loop() -> Callable[..., None]:
    """`place_order`, as docs/guide/using.md shows it."""
    namespace: dict[str, Any] = {}
    exec(named("guide/using.md", "using")["retry"], namespace)
    return namespace["place_order"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("backend", ["mysql"])
def test_a_mariadb_deadlock_runs_the_store_transaction_again(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A real deadlock (1213): the store's move locks row b, then waits for row a,
    which the application's bigger transaction holds and which then wants row b.
    InnoDB rolls back the smaller transaction, the store's: it runs again once the
    application committed, and takes both rows."""
    caplog.set_level(logging.INFO, logger="denpyo.store")
    with denpyo.Ledger(db_url) as ledger:
        ledger.channel("email")(lambda sub: "r")
        subs = [ledger.enqueue("email", f"k{i}", {}) for i in range(20)]
        a, b = subs[0], subs[1]
        moves = [
            Move.claim(sub.id, Status.REQUESTING, "worker:a", 30.0, verify=False) for sub in (b, a)
        ]
        app = driver_connection("mysql", db_url)
        look = driver_connection("mysql", db_url)
        try:  # READ COMMITTED: the application locks the rows it updates and no other
            app.cursor().execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            app.begin()
            others = ",".join(str(sub.id) for sub in subs[2:])
            app.cursor().execute(
                f"UPDATE denpyo_submissions SET last_error = 'app' WHERE id IN ({a.id},{others})"
            )
            result: list[Any] = []
            thread = threading.Thread(target=lambda: result.append(ledger.store.move(moves)))
            thread.start()
            for _ in range(200):
                look.commit()  # a fresh read of the list
                cursor = look.cursor()
                cursor.execute(
                    "SELECT count(*) FROM information_schema.INNODB_TRX"
                    " WHERE trx_state = 'LOCK WAIT'"
                )
                if cursor.fetchone()[0]:
                    break
                time.sleep(0.15)  # InnoDB refreshes the list only after 0.1 s unread
            app.cursor().execute(
                f"UPDATE denpyo_submissions SET last_error = 'app' WHERE id = {b.id}"
            )
            app.commit()
            thread.join()
        finally:
            app.close()
            look.close()
    assert [sub is not None and sub.locked_by == "worker:a" for sub in result[0]] == [True, True]
    assert "store.move: succeeded at try 2" in caplog.text
