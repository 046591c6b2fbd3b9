"""SQLite: the embedded default. One file, WAL, one writer at a time.

Every write runs in `BEGIN IMMEDIATE`, which takes the database's write lock
up front: two processes on one host never interleave a claim, and a busy
timeout makes them wait for each other instead of failing. `synchronous=FULL`
because a ledger that forgets a committed row after a power cut is no ledger.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, ClassVar

from denpyo.errors import ConfigurationError, SchemaError
from denpyo.store import sqlite_path
from denpyo.store.base import Row, Tx
from denpyo.store.connections import DriverErrors
from denpyo.store.dialects import DIALECTS
from denpyo.store.portable import PortableSqlStore
from denpyo.store.queries import split_statements

BUSY_TIMEOUT_MS = 30_000
PRAGMAS = (
    f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = FULL",
    "PRAGMA foreign_keys = ON",
)
SQLITE = DIALECTS["sqlite"]
ERRORS = DriverErrors(
    SQLITE,
    sqlite3.Error,
    lambda exc: isinstance(exc, sqlite3.OperationalError) and "no such table: denpyo_" in str(exc),
)
"""sqlite3's errors as denpyo's ("no such table: denpyo_…": the tables are missing)."""


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


class SqliteStore(PortableSqlStore):
    dialect = SQLITE.name
    driver_errors = ERRORS
    MOVE_RETURNS_ROW = True
    QUERIES: ClassVar[frozenset[str]] = frozenset(
        {"add_removed_counts", "remove_events", "remove_submissions"}
    )

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str) -> SqliteStore:
        return cls(sqlite_path(url))

    # -- conversions (store/rows.py, store/params.py): times are stored as text ----

    def id_list(self, ids: Sequence[int]) -> Any:
        return json.dumps(sorted(ids))

    def text_list(self, values: Sequence[str]) -> Any:
        return json.dumps(list(values))

    def parse_time(self, value: Any) -> datetime | None:
        """The stored text (UTC, no offset) as an aware datetime: parsed with its
        offset appended, five times faster than parsing it and then `replace`. A
        time some other writer stored with an offset of its own is read as written."""
        if value is None or isinstance(value, datetime):
            return value
        try:
            return datetime.fromisoformat(f"{value}+00:00")
        except ValueError:
            return super().parse_time(value)

    def remove_in(self, params: dict[str, Any]) -> int:
        """One transaction: SQLite has one writer, so no insert of a removed key can
        pass between its row leaving and its key arriving."""
        with self.transaction() as tx:
            tx.execute("remember_keys", params)
            tx.execute("add_removed_counts", params)
            tx.execute("remove_events", params)
            return len(tx.fetch_all("remove_submissions", params))

    def day_param(self, day: date) -> Any:
        return day.isoformat()

    def time_param(self, value: datetime) -> Any:
        """The stored text form ('YYYY-MM-DD HH:MM:SS.SSS', UTC), which compares as text."""
        utc = value.astimezone(UTC)
        return f"{utc:%Y-%m-%d %H:%M:%S}.{utc.microsecond // 1000:03d}"

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        return conn if conn is not None else self._keep(self._open(create=False))

    def _keep(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        with self._lock:
            if self.closed:  # closed while it opened: not kept past close()
                conn.close()
                self.check_open()
            self._all.append(conn)
        self._local.conn = conn
        return conn

    def _open(self, *, create: bool) -> sqlite3.Connection:
        """A connection set up for the ledger. Only `migrate` creates a missing file:
        a command that reads, pointed at a mistyped path, must not leave an empty
        database there that a later `migrate` would make look healthy."""
        self.check_open()
        where = os.path.abspath(self.path)
        uri = f"{Path(where).as_uri()}?mode={'rwc' if create else 'rw'}"
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(
                uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30
            )
            conn.row_factory = sqlite3.Row
            for pragma in PRAGMAS:
                conn.execute(pragma)
            return conn
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            if not create and not os.path.exists(where):
                raise SchemaError(
                    f"no SQLite database at {where}: `denpyo migrate` creates it"
                ) from exc
            raise ConfigurationError(f"cannot open SQLite database {where}: {exc}") from exc

    def migrate(self) -> list[int]:
        """The one operation that creates the database file."""
        if getattr(self._local, "conn", None) is None:
            self._keep(self._open(create=True))
        return super().migrate()

    def transaction(self, conn: Any = None, *, write: bool = True) -> AbstractContextManager[Tx]:
        if conn is None:
            return _OwnTransaction(self, "BEGIN IMMEDIATE" if write else "BEGIN")
        if not isinstance(conn, sqlite3.Connection):
            raise ConfigurationError(
                f"this ledger stores in SQLite; conn must be a sqlite3.Connection, "
                f"not {type(conn).__name__}"
            )
        return self._theirs(conn)

    @contextmanager
    def _theirs(self, conn: sqlite3.Connection) -> Iterator[Tx]:
        """The caller's transaction: run inside it, never commit it."""
        with ERRORS.wrapped():
            previous = conn.row_factory
            conn.row_factory = sqlite3.Row
            try:
                tx = SqliteTx(self, conn)
                self.check_same_database(tx, conn)
                yield tx
            finally:
                conn.row_factory = previous

    def own_identity(self) -> Row:
        """The file itself, without opening it: the caller's transaction may hold the
        write lock, and opening a connection here would wait on it (setting up WAL)."""
        return {"file": os.path.abspath(self.path)}

    def same_database(self, ours: Row, theirs: Row) -> bool:
        """The same file, however its path was spelled (a temporary one is nobody's)."""
        mine, other = ours.get("file"), theirs.get("file")
        return bool(mine and other and os.path.exists(other) and os.path.samefile(mine, other))

    def reading(self) -> AbstractContextManager[Tx]:
        """Readers do not queue behind writers: in WAL mode they see the last commit."""
        return self.transaction(write=False)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()


class _OwnTransaction:
    """A transaction on this thread's own connection: BEGIN, then COMMIT, or ROLLBACK
    on any error. A class, not a generator: it opens and closes twice per inline
    submit, where a generator's machinery costs as much as the BEGIN itself."""

    __slots__ = ("begin", "conn", "store")

    def __init__(self, store: SqliteStore, begin: str) -> None:
        self.store, self.begin = store, begin
        self.conn = store._connection()

    def __enter__(self) -> Tx:
        try:
            self.conn.execute(self.begin)
        except sqlite3.Error as exc:
            raise ERRORS.translated(exc) from exc
        return SqliteTx(self.store, self.conn)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _tb: Any
    ) -> None:
        conn = self.conn
        try:
            if kind is None:
                conn.execute("COMMIT")
            elif conn.in_transaction:  # SQLite may have rolled back already (a full disk)
                conn.execute("ROLLBACK")
        except sqlite3.Error as error:
            if conn.in_transaction:  # a COMMIT that failed: never leave it open
                with contextlib.suppress(sqlite3.Error):  # the first error is the one to tell
                    conn.execute("ROLLBACK")
            raise ERRORS.translated(error) from (exc or error)
        if isinstance(exc, sqlite3.Error):
            raise ERRORS.translated(exc) from exc
