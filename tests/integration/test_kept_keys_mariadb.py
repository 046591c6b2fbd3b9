"""MariaDB: a removal deletes a row only once every transaction older than its key ended.

An insert asks denpyo_keys through a read view (its statement's in READ COMMITTED)
and meets a live row through the unique index. A view made before the key was
committed misses it, and would let the key in again were the row deleted
meanwhile. `remove` commits the keys, waits for every transaction open then
(information_schema.INNODB_TRX), and only then deletes. These tests hold such a
transaction open, or pause an insert half-way through its statement, and watch
the removal wait for it, give up after its bound, and, without the wait, let the
key in twice.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import date, datetime
from typing import Any, cast

import pymysql
import pytest

from denpyo import Status
from denpyo.domain.moves import Settle
from denpyo.domain.policy import AttemptDecision
from denpyo.domain.retention import Retention
from denpyo.domain.submission import Submission
from denpyo.errors import StoreError
from denpyo.store import NewSubmission, mysql, open_store
from denpyo.store.base import Row, Tx
from denpyo.store.mysql import MysqlStore, MysqlTx, connect_args
from denpyo.store.params import insert_params
from denpyo.store.sealing import CLEAR

Connection = pymysql.connections.Connection

RETENTION = Retention.of(older_than=0)
EVER = (date(2000, 1, 1), date(9999, 1, 1))
BOUND = 10.0
"""Seconds any step may take before the test fails (never reached when it passes)."""


@pytest.fixture
def backend() -> str:
    """Every fixture of conftest (db_url, store) on MariaDB only."""
    return "mysql"


@pytest.fixture
def store(db_url: str) -> Iterator[MysqlStore]:
    opened = cast(MysqlStore, open_store(db_url))
    yield opened
    opened.close()


def new(key: str) -> NewSubmission:
    return NewSubmission("c", key, str(uuid.uuid4()), '{"n": 1}')


def raw(url: str, **options: Any) -> Connection:
    return pymysql.connect(**connect_args(url), **options)


def synced(store: MysqlStore, key: str) -> Submission:
    sub, _ = store.record(new(key), actor="h", lease=60)
    [after] = store.move([Settle.of(sub, "h", AttemptDecision(Status.SYNCED, remote_id="r"), 5)])
    assert after is not None
    return after


def insert_in(conn: Connection, store: MysqlStore, key: str, query: str | None = None) -> bool:
    """Whether `insert_submission` (or `query`), run in `conn`'s transaction, wrote a row."""
    tx = MysqlTx(store, conn)
    if query is not None:
        tx.queries = {**store.queries, "insert_submission": query}
    return tx.insert("insert_submission", insert_params(new(key), "late", None, CLEAR)) is not None


def rows_of(url: str, key: str) -> tuple[int, int]:
    """(live rows, remembered keys) of `key`, as a connection that starts now sees them."""
    conn = raw(url, autocommit=True)
    try:
        with conn.cursor() as cursor:
            cursor.execute(
                "SELECT (SELECT COUNT(*) FROM denpyo_submissions WHERE `key` = %(key)s),"
                " (SELECT COUNT(*) FROM denpyo_keys WHERE `key` = %(key)s)",
                {"key": key},
            )
            [(live, kept)] = cursor.fetchall()
        return int(live), int(kept)
    finally:
        conn.close()


def thread_of(conn: Connection) -> int:
    with conn.cursor() as cursor:
        cursor.execute("SELECT CONNECTION_ID()")
        [(thread,)] = cursor.fetchall()
    return int(thread)


HOLDS = {
    "a read in REPEATABLE READ": ("REPEATABLE READ", "BEGIN", True),
    "a read in READ COMMITTED": ("READ COMMITTED", "BEGIN", True),
    "a consistent snapshot, no read": (
        "REPEATABLE READ",
        "START TRANSACTION WITH CONSISTENT SNAPSHOT",
        False,
    ),
}


@contextmanager
def held(url: str, how: str) -> Iterator[Connection]:
    """A transaction begun now (`how`: one of HOLDS), open until it commits or rolls back."""
    level, begin, reads = HOLDS[how]
    conn = raw(url, autocommit=False)
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"SET SESSION TRANSACTION ISOLATION LEVEL {level}")
            cursor.execute(begin)
            if reads:
                cursor.execute("SELECT COUNT(*) FROM denpyo_submissions")
        yield conn
        conn.rollback()
    finally:
        conn.close()


class Clock:
    """The removal's clock, telling when it first sleeps: it is waiting (for a
    transaction, or for the server to refresh its list)."""

    monotonic = staticmethod(time.monotonic)

    def __init__(self) -> None:
        self.waiting = threading.Event()

    def sleep(self, seconds: float) -> None:
        self.waiting.set()
        time.sleep(seconds)


@pytest.mark.parametrize("how", list(HOLDS))
def test_a_removal_waits_for_an_older_transaction_and_the_key_goes_in_once(
    store: MysqlStore, db_url: str, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The key is committed, the removal waits for the transaction begun before it;
    that transaction's insert meets the live row and writes nothing. Once it ends, the
    row goes, and an insert of the key writes nothing either: it sees the key."""
    sub = synced(store, "k")
    clock = Clock()
    monkeypatch.setattr(mysql, "time", clock)
    with held(db_url, how) as old, ThreadPoolExecutor(1) as pool:
        removed: Future[int] = pool.submit(store.remove, [sub.id], RETENTION)
        assert clock.waiting.wait(BOUND), "the removal did not wait"
        assert rows_of(db_url, "k") == (1, 1)  # the key committed, the row still there
        assert not removed.done()
        assert not insert_in(old, store, "k"), "the older transaction wrote the key again"
        old.commit()
        assert removed.result(BOUND) == 1
    assert rows_of(db_url, "k") == (0, 1)
    again, created = store.record(new("k"), actor="t")
    assert not created and again.id == sub.id and again.removed_at is not None
    conn = raw(db_url, autocommit=False)
    try:
        assert not insert_in(conn, store, "k")
        conn.commit()
    finally:
        conn.close()
    assert rows_of(db_url, "k") == (0, 1)


def test_a_transaction_that_has_read_nothing_is_not_waited_for_and_sees_the_key(
    store: MysqlStore, db_url: str
) -> None:
    """BEGIN alone starts no InnoDB transaction and makes no read view: the removal
    goes on at once, and that transaction's first read is newer than the key."""
    sub = synced(store, "k")
    conn = raw(db_url, autocommit=False)
    try:
        conn.begin()
        assert store.remove([sub.id], RETENTION) == 1
        assert not insert_in(conn, store, "k")
        conn.commit()
    finally:
        conn.close()
    assert rows_of(db_url, "k") == (0, 1)


@contextmanager
def insert_paused(
    store: MysqlStore, db_url: str, key: str, level: str = "READ COMMITTED"
) -> Iterator[Future[bool]]:
    """An insert of `key` in a transaction of `level` on a connection of its own,
    paused half-way through its statement: after its NOT EXISTS has read
    denpyo_keys, before its row goes in (it waits on a named lock held here until the
    block ends). Yields whether it wrote a row; its transaction commits once the
    statement is done."""
    gate = f"denpyo_test_{uuid.uuid4().hex}"
    # The SELECT's columns are computed once its WHERE (the NOT EXISTS) has passed.
    column = "%(idempotency_key)s, %(payload)s,"
    query = store.queries["insert_submission"]
    assert query.count(column) == 1 and "NOT EXISTS" in query.split(column)[1]
    query = query.replace(
        column, f"%(idempotency_key)s, IF(GET_LOCK('{gate}', {BOUND}), %(payload)s, NULL),"
    )
    holder, late = raw(db_url, autocommit=True), raw(db_url, autocommit=False)
    try:
        with late.cursor() as cursor:
            cursor.execute(f"SET SESSION TRANSACTION ISOLATION LEVEL {level}")
        with holder.cursor() as cursor:
            cursor.execute("SELECT GET_LOCK(%s, 0)", (gate,))
            assert cursor.fetchall() == ((1,),)
        late_thread = thread_of(late)

        def insert() -> bool:
            wrote = insert_in(late, store, key, query)
            late.commit()
            return wrote

        with ThreadPoolExecutor(1) as pool:
            inserted = pool.submit(insert)
            deadline = time.monotonic() + BOUND
            while not paused(holder, late_thread):
                assert time.monotonic() < deadline, "the insert never reached the gate"
                time.sleep(0.01)
            try:
                yield inserted
            finally:
                with holder.cursor() as cursor:
                    cursor.execute("SELECT RELEASE_LOCK(%s)", (gate,))
            inserted.result(BOUND)
    finally:
        holder.close()
        late.close()


def paused(conn: Connection, thread: int) -> bool:
    with conn.cursor() as cursor:
        cursor.execute("SELECT STATE FROM information_schema.PROCESSLIST WHERE ID = %s", (thread,))
        return cursor.fetchall() == (("User lock",),)


def test_without_the_wait_an_insert_begun_before_the_key_sends_it_again(
    store: MysqlStore, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the wait prevents, in READ COMMITTED (the store's own connections): an
    insert whose statement read denpyo_keys before the key was committed, and reaches
    the unique index after the row was deleted, finds nothing in its way."""
    sub = synced(store, "k")
    monkeypatch.setattr(MysqlStore, "_wait_for_older_writers", lambda self: True)
    with insert_paused(store, db_url, "k") as inserted:
        assert store.remove([sub.id], RETENTION) == 1
    assert inserted.result(BOUND), "the paused insert saw the key"
    assert rows_of(db_url, "k") == (1, 1)


def test_a_removal_waits_for_an_insert_half_way_through_its_statement(
    store: MysqlStore, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same insert, with the wait: its transaction began before the key, so the
    row stays until it has ended, and its insert meets the row."""
    sub = synced(store, "k")
    clock = Clock()
    monkeypatch.setattr(mysql, "time", clock)
    with ThreadPoolExecutor(1) as pool:
        with insert_paused(store, db_url, "k") as inserted:
            removed: Future[int] = pool.submit(store.remove, [sub.id], RETENTION)
            assert clock.waiting.wait(BOUND), "the removal did not wait"
            assert rows_of(db_url, "k") == (1, 1)
            assert not removed.done()
        assert not inserted.result(BOUND), "the paused insert wrote the key again"
        assert removed.result(BOUND) == 1
    assert rows_of(db_url, "k") == (0, 1)


def test_in_repeatable_read_the_key_waits_for_the_insert_that_read_its_place(
    store: MysqlStore, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In REPEATABLE READ, InnoDB reads an INSERT ... SELECT's NOT EXISTS with locks
    (the key's place in denpyo_keys): the key cannot be committed until that insert's
    transaction ends, with or without the wait; the insert meets the live row."""
    sub = synced(store, "k")
    monkeypatch.setattr(MysqlStore, "_wait_for_older_writers", lambda self: True)
    with ThreadPoolExecutor(1) as pool:
        with insert_paused(store, db_url, "k", "REPEATABLE READ") as inserted:
            removed: Future[int] = pool.submit(store.remove, [sub.id], RETENTION)
            deadline = time.monotonic() + BOUND
            while not lock_waits(db_url):
                assert time.monotonic() < deadline, "the removal never waited for a lock"
                time.sleep(0.15)  # quicker reads would keep getting the same copy
            assert rows_of(db_url, "k") == (1, 0)
            assert not removed.done()
        assert not inserted.result(BOUND), "the paused insert wrote the key again"
        assert removed.result(BOUND) == 1
    assert rows_of(db_url, "k") == (0, 1)


def lock_waits(url: str) -> int:
    conn = raw(url, autocommit=True)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT COUNT(*) FROM information_schema.INNODB_LOCK_WAITS")
            [(waits,)] = cursor.fetchall()
        return int(waits)
    finally:
        conn.close()


def test_a_removal_gives_up_after_its_bound_and_removes_nothing(
    store: MysqlStore,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A transaction that outlives the bound puts the removal off: nothing deleted,
    the connection named; the key remembered meanwhile changes nothing the row's
    readers see, and the next removal takes the row."""
    sub = synced(store, "k")
    assert sub.created_at is not None
    counted = [(sub.created_at.date(), "c", "synced", "", 1)]
    real = MysqlStore._open_transactions

    def open_transactions(self: MysqlStore, tx: Tx) -> list[Row]:
        """The list as a server running nothing else would show it (tests in other
        databases hold transactions too), and the bound run out once a copy made
        after the mark shows the held transaction."""
        rows = [row for row in real(self, tx) if row["own"] or row["thread"] == old_thread]
        if len(rows) == 2:
            monkeypatch.setattr(mysql, "REMOVAL_WAIT", 0.0)
        return rows

    monkeypatch.setattr(MysqlStore, "_open_transactions", open_transactions)
    with held(db_url, "a read in READ COMMITTED") as old:
        old_thread = thread_of(old)
        with caplog.at_level(logging.WARNING, logger="denpyo.store"):
            assert store.remove([sub.id], RETENTION) == 0
        thread = f"connection {old_thread},"
        assert any(thread in record.getMessage() for record in caplog.records), caplog.text
        assert rows_of(db_url, "k") == (1, 1)
        live = store.get_by_key("c", "k")
        assert live is not None and live.removed_at is None and live.payload == {"n": 1}
        assert store.report_counts(*EVER) == counted
        assert not insert_in(old, store, "k")
    monkeypatch.setattr(MysqlStore, "_open_transactions", real)
    monkeypatch.setattr(mysql, "REMOVAL_WAIT", BOUND)
    assert store.remove([sub.id], RETENTION) == 1
    assert store.report_counts(*EVER) == counted
    assert rows_of(db_url, "k") == (0, 1)


def test_a_copy_of_the_list_older_than_the_mark_is_not_trusted(
    store: MysqlStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """INNODB_TRX is a copy refreshed at most every 0.1 s: until a copy shows the
    removal's own marking transaction, it may predate the keys, and an empty one
    proves nothing. The transactions of the first copy that shows it are waited for,
    not those begun since; a removal whose copies never show it gives up."""
    mine: Row = {"thread": 1, "started": datetime(2030, 1, 1, 0, 0, 5), "own": 1}
    older: Row = {"thread": 7, "started": datetime(2030, 1, 1, 0, 0, 1), "own": 0}
    newer: Row = {"thread": 8, "started": datetime(2030, 1, 1, 0, 0, 6), "own": 0}
    copies = [[], [older], [mine, older], [mine, older, newer], [mine, newer]]
    read: list[list[Row]] = []

    def open_transactions(self: MysqlStore, tx: Tx) -> list[Row]:
        read.append(copies[len(read)] if len(read) < len(copies) else [])
        return read[-1]

    monkeypatch.setattr(MysqlStore, "_open_transactions", open_transactions)
    monkeypatch.setattr(mysql, "TRX_LIST_IDLE", 0.001)
    assert store._wait_for_older_writers()
    assert read == copies
    read.clear()
    copies.clear()
    monkeypatch.setattr(mysql, "REMOVAL_WAIT", 0.05)
    with caplog.at_level(logging.WARNING, logger="denpyo.store"):
        assert not store._wait_for_older_writers()
    assert "never refreshed" in caplog.text


def test_without_the_process_privilege_a_removal_says_so_and_removes_nothing(
    store: MysqlStore, db_url: str
) -> None:
    sub = synced(store, "k")
    user = f"denpyo_np_{uuid.uuid4().hex[:12]}"
    database = connect_args(db_url)["database"]
    admin = raw(db_url, autocommit=True)
    try:
        with admin.cursor() as cursor:
            cursor.execute(f"CREATE USER '{user}'@'%'")
            cursor.execute(f"GRANT ALL ON `{database}`.* TO '{user}'@'%'")
        args = connect_args(db_url)
        limited = MysqlStore(f"mysql://{user}@{args['host']}:{args['port']}/{database}")
        try:
            with pytest.raises(StoreError, match="PROCESS privilege"):
                limited.remove([sub.id], RETENTION)
        finally:
            limited.close()
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP USER IF EXISTS '{user}'@'%'")
        admin.close()
    assert rows_of(db_url, "k") == (1, 1)
