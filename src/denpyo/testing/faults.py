"""A seeded fault injector for psycopg: the failures a distributed SQL engine gives
its clients, on a plain PostgreSQL.

Installed (`inject(...)`, or `DENPYO_TEST_FAULTS=seed,rate` read by
`install_from_env`), it makes a share `rate` of denpyo's statements on the
databases it targets fail, as CockroachDB's may:

- `40001` serialization failure, before the statement runs (the transaction is
  rolled back by its owner and run again);
- `40003` "result is ambiguous", after a COMMIT (or a statement that is its own
  transaction) ran: committed, but the client cannot know;
- a connection reset, before or after a COMMIT or such a statement ran: the
  connection is closed and the client sees the server gone.

Only statements that read or write denpyo's tables, and COMMITs, fail; BEGIN,
ROLLBACK and the sessions' SET statements run (a pool's setup is not what is
tested). `Faults.counts` says how many of each were injected.
"""

from __future__ import annotations

import os
import random
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq

KINDS = ("40001", "40003", "reset")
_WRITES = ("WITH", "INSERT", "UPDATE", "DELETE", "SELECT", "COMMIT")


class Faults:
    """The faults of one run: seeded, so that a run can be told again."""

    def __init__(self, seed: int, rate: float, databases: frozenset[str] | None = None) -> None:
        self.random = random.Random(seed)
        self.rate = rate
        self.databases = databases
        self.counts: Counter[str] = Counter()
        self.statements = 0
        self.lock = threading.Lock()

    def draw(self, conn: Any, query: Any) -> tuple[str, bool] | None:
        """The fault for this statement, and whether it comes after the statement
        ran (None: no fault)."""
        text = _text(query).lstrip().upper()
        if not text.startswith(_WRITES):
            return None
        if self.databases is not None and conn.info.dbname not in self.databases:
            return None
        with self.lock:
            self.statements += 1
            if self.random.random() >= self.rate:
                return None
            commits = text.startswith("COMMIT") or (
                conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE
            )
            kind = self.random.choice(KINDS if commits else ("40001", "reset"))
            after = kind == "40003" or (kind == "reset" and commits and self.random.random() < 0.5)
            self.counts[kind] += 1
        return kind, after


def _text(query: Any) -> str:
    if isinstance(query, bytes):
        return query.decode(errors="replace")
    return query if isinstance(query, str) else str(query)


def _error(kind: str) -> psycopg.Error:
    if kind == "40001":
        return pg_errors.SerializationFailure("injected: could not serialize access")
    if kind == "40003":
        return pg_errors.StatementCompletionUnknown("injected: result is ambiguous")
    return psycopg.OperationalError("injected: server closed the connection unexpectedly")


_active: Faults | None = None
_originals: dict[str, Any] = {}
_recording: set[str] | None = None
"""Where `record_statements` collects the statements of the profile's connections."""


def _record(conn: Any, query: Any) -> None:
    """Keep a statement run on a connection of a distributed profile's store (each
    says so on itself: `denpyo_profile`)."""
    if _recording is not None and getattr(conn, "denpyo_profile", None):
        _recording.add(_text(query))


def _fail(conn: Any, kind: str) -> None:
    if kind == "reset":
        conn.close()
    raise _error(kind)


def _sync_execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
    _record(self.connection, query)
    faults = _active
    fault = faults.draw(self.connection, query) if faults is not None else None
    if fault is not None and not fault[1]:
        _fail(self.connection, fault[0])
    result = _originals["sync"](self, query, *args, **kwargs)
    if fault is not None:
        _fail(self.connection, fault[0])
    return result


async def _async_execute(
    self: psycopg.AsyncCursor[Any], query: Any, *args: Any, **kwargs: Any
) -> Any:
    _record(self.connection, query)
    faults = _active
    fault = faults.draw(self.connection, query) if faults is not None else None
    if fault is not None and not fault[1]:
        await _afail(self.connection, fault[0])
    result = await _originals["async"](self, query, *args, **kwargs)
    if fault is not None:
        await _afail(self.connection, fault[0])
    return result


async def _afail(conn: Any, kind: str) -> None:
    if kind == "reset":
        await conn.close()
    raise _error(kind)


def _patch() -> None:
    """psycopg's cursors run their statements through this module (once)."""
    if not _originals:
        _originals["sync"] = psycopg.Cursor.execute
        _originals["async"] = psycopg.AsyncCursor.execute
        psycopg.Cursor.execute = _sync_execute  # type: ignore[method-assign]
        psycopg.AsyncCursor.execute = _async_execute  # type: ignore[method-assign]


def _unpatch() -> None:
    if _originals and _active is None and _recording is None:
        psycopg.Cursor.execute = _originals.pop("sync")  # type: ignore[method-assign]
        psycopg.AsyncCursor.execute = _originals.pop("async")  # type: ignore[method-assign]


def install(faults: Faults) -> None:
    """Inject `faults` into every psycopg cursor of this process from now on."""
    global _active
    _patch()
    _active = faults


def uninstall() -> None:
    global _active
    _active = None
    _unpatch()


@contextmanager
def record_statements() -> Iterator[set[str]]:
    """The distinct statements the distributed profile's stores run inside the
    `with`, as they were sent (the named queries with their header line)."""
    global _recording
    found: set[str] = set()
    _recording = found
    _patch()
    try:
        yield found
    finally:
        _recording = None
        _unpatch()


@contextmanager
def inject(seed: int, rate: float, databases: frozenset[str] | None = None) -> Iterator[Faults]:
    """Faults injected inside the `with` (on the named databases only, if given)."""
    faults = Faults(seed, rate, databases)
    install(faults)
    try:
        yield faults
    finally:
        uninstall()


ENV = "DENPYO_TEST_FAULTS"
"""`seed,rate`: a process started with it injects faults from its start (the chaos
run's workers)."""


def install_from_env() -> Faults | None:
    """The faults `DENPYO_TEST_FAULTS` asks for, installed; None when it is unset."""
    value = os.environ.get(ENV)
    if not value:
        return None
    seed, _, rate = value.partition(",")
    faults = Faults(int(seed) + os.getpid(), float(rate))
    install(faults)
    return faults
