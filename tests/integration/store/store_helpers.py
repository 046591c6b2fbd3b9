"""What the store's tests share. The store's contract is the same on SQLite,
PostgreSQL and MariaDB; each test runs on a fresh real database of each (the
`store` fixture of tests/conftest.py), under concurrency where it matters."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from conftest import driver_connection
from database_records import database_record
from denpyo import Status
from denpyo.domain.moves import Settle
from denpyo.domain.policy import AttemptDecision
from denpyo.domain.status import ErrorKind
from denpyo.domain.submission import Submission
from denpyo.store import NewSubmission, Store

SQL = Callable[[str], list[tuple[Any, ...]]]


GONE = 2**62
"""The id of no row: above every id, a creation time in nanoseconds on PostgreSQL's
partitioned layout included."""


def new(key: str, channel: str = "c") -> NewSubmission:
    return NewSubmission(channel, key, str(uuid.uuid4()), '{"n": 1}')


@contextmanager
def plans(store: Store, backend: str, db_url: str) -> Iterator[Callable[[str, Any], str]]:
    """`plan(name, params)`: the database's plan of a named query, on a connection of its
    own (PostgreSQL with sequential scans off, so that an empty table's plan shows
    whether an index can serve the query at all)."""
    conn = driver_connection(backend, db_url)
    try:
        cursor = conn.cursor()
        record = database_record(backend)
        for setting in record.plan_settings:
            cursor.execute(setting)
        explain = record.explain
        partitions = store.capabilities.partitions

        def plan(name: str, params: Any) -> str:
            cursor.execute(f"{explain} {store.queries[name]}", params)  # type: ignore[attr-defined]
            text = "\n".join(str(row) for row in cursor.fetchall())
            return _parent_indexes(cursor, text) if partitions else text

        yield plan
    finally:
        conn.rollback()
        conn.close()


def _parent_indexes(cursor: Any, plan: str) -> str:
    """A plan over PostgreSQL's partitions names each partition's index: named here by
    the index of the partitioned table it belongs to, as a plain table's plan would."""
    cursor.execute(
        "SELECT c.relname, p.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " JOIN pg_class p ON p.oid = i.inhparent WHERE c.relkind = 'i'"
    )
    for child, parent in cursor.fetchall():
        plan = plan.replace(f" {child} ", f" {parent} ")
    return plan


def settled(store: Store, key: str, outcome: AttemptDecision, channel: str = "c") -> Submission:
    """A row recorded, sent once, and settled with `outcome`."""
    sub, _ = store.record(new(key, channel), actor="h", lease=60)
    [after] = store.move([Settle.of(sub, "h", outcome, 5)])
    assert after is not None
    return after


SYNCED = AttemptDecision(Status.SYNCED, remote_id="r-1")
REJECTED = AttemptDecision(Status.REJECTED, ErrorKind.REJECTED, "no such address")
EXHAUSTED = AttemptDecision(Status.FAILED, ErrorKind.TRANSIENT, "503", retry_in=None)
RETRYING = AttemptDecision(Status.FAILED, ErrorKind.TRANSIENT, "503", retry_in=60)
AMBIGUOUS = AttemptDecision(Status.FAILED, ErrorKind.AMBIGUOUS, "timeout", retry_in=60)
