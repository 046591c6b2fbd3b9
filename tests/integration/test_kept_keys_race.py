"""PostgreSQL: a removal deletes a row only once every snapshot can see its key.

An insert asks denpyo_keys on its statement's snapshot (the transaction's, in
REPEATABLE READ), and meets a live row through the unique index. A session whose
snapshot predates the key would miss it, and would insert the key again were the
row deleted meanwhile. `remove` waits for such sessions; these tests hold one open
and watch the removal wait for it, give up after its bound, and, without the wait,
let the key in twice.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import date
from typing import Any, cast

import psycopg
import pytest

from denpyo import Status
from denpyo.domain.moves import Settle
from denpyo.domain.policy import AttemptDecision
from denpyo.domain.retention import Retention
from denpyo.domain.submission import Submission
from denpyo.store import NewSubmission, open_store
from denpyo.store import postgresql as pg
from denpyo.store.params import insert_params
from denpyo.store.postgresql import PostgresStore
from denpyo.store.sealing import CLEAR

RETENTION = Retention.of(older_than=0)
EVER = (date(2000, 1, 1), date(9999, 1, 1))
BOUND = 10.0
"""Seconds any step may take before the test fails (never reached when it passes)."""


def new(key: str) -> NewSubmission:
    return NewSubmission("c", key, str(uuid.uuid4()), '{"n": 1}')


@pytest.fixture
def store(postgres_url: str) -> Iterator[PostgresStore]:
    opened = cast(PostgresStore, open_store(postgres_url))
    yield opened
    opened.close()


@contextmanager
def snapshot_held(postgres_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A session holding a REPEATABLE READ snapshot taken now (it sees the rows there
    now, and no key remembered afterwards), until it commits or rolls back."""
    with psycopg.connect(postgres_url) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        conn.execute("SELECT COUNT(*) FROM denpyo_keys").fetchone()
        yield conn
        conn.rollback()


def synced(store: PostgresStore, key: str) -> Submission:
    sub, _ = store.record(new(key), actor="h", lease=60)
    [after] = store.move([Settle.of(sub, "h", AttemptDecision(Status.SYNCED, remote_id="r"), 5)])
    assert after is not None
    return after


def insert_in(conn: psycopg.Connection[Any], store: PostgresStore, key: str) -> bool:
    """Whether `record_submission`, run in `conn`'s transaction, wrote a row."""
    params = {**insert_params(new(key), "late", None, CLEAR), "actor": "late", "detail": None}
    return conn.execute(store.queries["record_submission"], params).fetchone() is not None


def rows_of(postgres_url: str, key: str) -> tuple[int, int]:
    """(live rows, remembered keys) of `key`, as a session that starts now sees them."""
    with psycopg.connect(postgres_url) as conn:
        [(live, kept)] = conn.execute(
            "SELECT (SELECT COUNT(*) FROM denpyo_submissions WHERE key = %(key)s),"
            " (SELECT COUNT(*) FROM denpyo_keys WHERE key = %(key)s)",
            {"key": key},
        ).fetchall()
        return int(live), int(kept)


class Clock:
    """The removal's clock, telling when it first sleeps: it found a session to wait for."""

    monotonic = staticmethod(time.monotonic)

    def __init__(self) -> None:
        self.waiting = threading.Event()

    def sleep(self, seconds: float) -> None:
        self.waiting.set()
        time.sleep(seconds)


def test_a_removal_waits_for_an_older_snapshot_and_the_key_goes_in_once(
    store: PostgresStore, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key is committed, the removal waits for the session that cannot see it; that
    session's insert meets the live row and writes nothing. Once it ends, the row goes,
    and an insert of the key writes nothing either: it sees the key."""
    sub = synced(store, "k")
    clock = Clock()
    monkeypatch.setattr(pg, "time", clock)
    with snapshot_held(postgres_url) as old, ThreadPoolExecutor(1) as pool:
        removed: Future[int] = pool.submit(store.remove, [sub.id], RETENTION)
        assert clock.waiting.wait(BOUND), "the removal did not wait"
        assert not removed.done()
        assert rows_of(postgres_url, "k") == (1, 1)  # the key committed, the row still there
        assert not insert_in(old, store, "k"), "the older snapshot wrote the key again"
        old.commit()
        assert removed.result(BOUND) == 1
    assert rows_of(postgres_url, "k") == (0, 1)
    again, created = store.record(new("k"), actor="t")
    assert not created and again.id == sub.id and again.removed_at is not None
    with psycopg.connect(postgres_url) as conn:
        assert not insert_in(conn, store, "k")
    assert rows_of(postgres_url, "k") == (0, 1)


def test_without_the_wait_an_older_snapshot_sends_the_key_again(
    store: PostgresStore, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the wait prevents: the row deleted while a snapshot older than its key
    lives, that snapshot's insert misses the key and finds no row in its way."""
    sub = synced(store, "k")
    monkeypatch.setattr(PostgresStore, "_wait_for_snapshots_before", lambda self, xid: True)
    with snapshot_held(postgres_url) as old:
        assert store.remove([sub.id], RETENTION) == 1
        assert insert_in(old, store, "k")
        old.commit()
    assert rows_of(postgres_url, "k") == (1, 1)


def test_a_removal_gives_up_after_its_bound_and_removes_nothing(
    store: PostgresStore,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A snapshot that outlives the bound puts the removal off: nothing deleted, the
    session named; the key remembered meanwhile changes nothing the row's readers see,
    and the next removal takes the row."""
    sub = synced(store, "k")
    assert sub.created_at is not None
    counted = [(sub.created_at.date(), "c", "synced", "", 1)]
    monkeypatch.setattr(pg, "REMOVAL_WAIT", 0.05)
    with snapshot_held(postgres_url) as old:
        with caplog.at_level(logging.WARNING, logger="denpyo.store"):
            assert store.remove([sub.id], RETENTION) == 0
        pid = str(old.info.backend_pid)
        assert any(pid in record.getMessage() for record in caplog.records), caplog.text
        assert rows_of(postgres_url, "k") == (1, 1)
        live = store.get_by_key("c", "k")
        assert live is not None and live.removed_at is None and live.payload == {"n": 1}
        assert store.report_counts(*EVER) == counted
        assert not insert_in(old, store, "k")
    assert store.remove([sub.id], RETENTION) == 1
    assert store.report_counts(*EVER) == counted
    assert rows_of(postgres_url, "k") == (0, 1)


def test_a_copied_batch_with_a_remembered_key_is_written_again_without_it(
    store: PostgresStore, postgres_url: str
) -> None:
    """COPY cannot skip a key: a batch large enough to be copied that holds a removed
    row's key is undone and written by statements, which skip it; the rest go in once,
    each with its created event."""
    sub = synced(store, "k")
    assert store.remove([sub.id], RETENTION) == 1
    batch = [new(f"n{i}") for i in range(pg.COPY_FROM)]
    batch.insert(pg.COPY_FROM // 2, new("k"))
    seen: list[Submission] = []
    created = store.record_many(batch, actor="t", check=lambda fresh, old: seen.append(old))
    assert created == pg.COPY_FROM
    assert [(old.id, old.removed_at is not None) for old in seen] == [(sub.id, True)]
    with psycopg.connect(postgres_url) as conn:
        [(rows, events, kept)] = conn.execute(
            "SELECT (SELECT COUNT(*) FROM denpyo_submissions),"
            " (SELECT COUNT(*) FROM denpyo_events WHERE kind = 'created'),"
            " (SELECT COUNT(*) FROM denpyo_submissions WHERE key = 'k')"
        ).fetchall()
    assert (rows, events, kept) == (pg.COPY_FROM, pg.COPY_FROM, 0)
