"""SQLite: the embedded default. One file, WAL, one writer at a time.

Every write runs in `BEGIN IMMEDIATE`, which takes the database's write lock
up front: two processes on one host never interleave a claim, and a busy
timeout makes them wait for each other instead of failing. `synchronous=FULL`
because a ledger that forgets a committed row after a power cut is no ledger.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any

from denpyo.errors import ConfigurationError, SchemaError, StoreError
from denpyo.store.driver import Row, Tx
from denpyo.store.generic import GenericSqlStore
from denpyo.store.queries import split_statements

BUSY_TIMEOUT_MS = 30_000


class SqliteTx(Tx):
    def __init__(self, store: SqliteStore, conn: sqlite3.Connection) -> None:
        self.queries = store.queries
        self.conn = conn

    def fetch_one(self, query: str, params: Mapping[str, Any] | None = None) -> Row | None:
        cursor = self.conn.execute(self.queries[query], params or {})
        row = cursor.fetchone()
        cursor.close()  # a RETURNING statement completes only when its cursor is done
        return dict(row) if row is not None else None

    def fetch_all(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        return [dict(row) for row in self.conn.execute(self.queries[query], params or {})]

    def execute(self, query: str, params: Mapping[str, Any] | None = None) -> int:
        cursor = self.conn.execute(self.queries[query], params or {})
        matched = cursor.rowcount
        cursor.close()
        return matched

    def execute_many(self, query: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self.conn.executemany(self.queries[query], rows).close()

    def script(self, sql: str) -> None:
        for statement in split_statements(sql):
            self.conn.execute(statement).close()


class SqliteStore(GenericSqlStore):
    dialect = "sqlite"

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def id_list(self, ids: Sequence[int]) -> Any:
        return json.dumps(sorted(ids))

    def text_list(self, values: Sequence[str]) -> Any:
        return json.dumps(list(values))

    def time_param(self, value: datetime) -> Any:
        """The stored text form ('YYYY-MM-DD HH:MM:SS.SSS', UTC), which compares as text."""
        utc = value.astimezone(UTC)
        return f"{utc:%Y-%m-%d %H:%M:%S}.{utc.microsecond // 1000:03d}"

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False, timeout=30
                )
            except sqlite3.Error as exc:
                raise ConfigurationError(f"cannot open SQLite database {self.path}: {exc}") from exc
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def transaction(self, conn: Any = None, *, write: bool = True) -> Iterator[Tx]:
        if conn is not None:
            if not isinstance(conn, sqlite3.Connection):
                raise ConfigurationError(
                    f"this ledger stores in SQLite; conn must be a sqlite3.Connection, "
                    f"not {type(conn).__name__}"
                )
            # The caller's transaction: run inside it, never commit it.
            with _wrapped():
                previous = conn.row_factory
                conn.row_factory = sqlite3.Row
                try:
                    yield SqliteTx(self, conn)
                finally:
                    conn.row_factory = previous
            return
        own = self._connection()
        with _wrapped():
            own.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield SqliteTx(self, own)
            except BaseException:
                own.execute("ROLLBACK")
                raise
            own.execute("COMMIT")

    def reading(self) -> AbstractContextManager[Tx]:
        """Readers do not queue behind writers: in WAL mode they see the last commit."""
        return self.transaction(write=False)

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()


@contextmanager
def _wrapped() -> Iterator[None]:
    """Driver errors leave as StoreError (missing tables as SchemaError), cause kept."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        if "no such table: denpyo_" in str(exc):
            raise SchemaError("the denpyo tables are missing: run `denpyo migrate`") from exc
        raise StoreError(f"SQLite: {exc}") from exc
    except sqlite3.Error as exc:
        raise StoreError(f"SQLite: {exc}") from exc
