"""MariaDB (10.6 or later): the second production store, through PyMySQL.

Claims use `FOR UPDATE SKIP LOCKED`, as on PostgreSQL. Each thread keeps one
connection of its own (PyMySQL connections are not thread-safe), opened with
autocommit off, READ COMMITTED (under REPEATABLE READ a worker's snapshot would
hide rows that others committed since, and gap locks would make claims queue
behind each other), strict SQL mode, and the FOUND_ROWS flag, so that an UPDATE
reports the rows it *matched*: that is how a compare-and-set learns it won.

MariaDB has no `UPDATE ... RETURNING` and no `ON CONFLICT`, so three named
queries get help from `MysqlTx` (see `fetch_one`), inside the one transaction.
It has no LISTEN/NOTIFY: workers poll.

A connection that the server dropped (restart, KILL, idle timeout) is thrown
away; the next transaction opens a fresh one. A transaction that was open when
it happened fails with StoreError and is rolled back by the server; one that
had not started yet is retried once on a new connection, which is safe because
nothing was sent but BEGIN.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import pymysql
import pymysql.connections
import pymysql.cursors
from pymysql.constants import CLIENT

from denpyo.domain.moves import Move
from denpyo.domain.submission import Submission
from denpyo.errors import ConfigurationError, InvalidDatabaseURL, SchemaError, StoreError
from denpyo.store.base import Row, Store, Tx, event_params, move_params
from denpyo.store.queries import split_statements

SCHEMES = ("mysql", "mariadb", "mysql+pymysql")
URL_OPTIONS = ("charset", "connect_timeout", "unix_socket", "ssl_ca")
CONNECT_TIMEOUT = 10
SESSION_SETUP = (
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,ERROR_FOR_DIVISION_BY_ZERO'",
)

# Error numbers (server ER_*, client CR_*) that mean the connection is gone.
CONNECTION_LOST = frozenset({1053, 1927, 2006, 2013, 2055, 4031})
# Refusals at connect time that no retry can mend: bad user, password or database.
CONNECT_REFUSED = frozenset({1044, 1045, 1049})
ER_DUP_ENTRY = 1062
ER_NO_SUCH_TABLE = 1146
CHANNEL_KEY_INDEX = "denpyo_submissions_channel_key"
MINIMUM_MARIADB = (10, 6)  # FOR UPDATE SKIP LOCKED; INSERT/DELETE ... RETURNING since 10.5

EXTRA_QUERIES = frozenset({"submission_get_many"})
"""Queries only MariaDB has: the read-back of a batch of moves (`MysqlStore._apply`)."""

# Named UPDATEs that end in RETURNING on the other databases. Here the UPDATE runs
# alone, and MysqlTx gives back what RETURNING would: the row, read back by id with
# the named query, or (None) just the id.
UPDATE_RETURNING: dict[str, str | None] = {
    "submission_move": "submission_get",
}

Connection = pymysql.connections.Connection


def connect_args(url: str) -> dict[str, Any]:
    """`mysql://user:pass@host:port/db?charset=...` as keyword arguments of pymysql.connect.

    `mariadb://` and `mysql+pymysql://` are the same. Options in the query string:
    charset (default utf8mb4), connect_timeout (seconds), unix_socket, ssl_ca.
    """
    shown = _redacted(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidDatabaseURL(f"malformed MySQL URL {shown}: {exc}") from exc
    if parts.scheme.lower() not in SCHEMES:
        raise InvalidDatabaseURL(f"{shown} is not a MySQL URL (expected {', '.join(SCHEMES)})")
    if parts.fragment:
        raise InvalidDatabaseURL(f"malformed MySQL URL {shown}: unexpected #fragment")
    database = unquote(parts.path[1:])
    if not database or "/" in database:
        raise InvalidDatabaseURL(f"{shown} must name one database: mysql://user@host/dbname")
    args: dict[str, Any] = {
        "host": parts.hostname or "localhost",
        "port": port or 3306,
        "database": database,
        "charset": "utf8mb4",
        "connect_timeout": CONNECT_TIMEOUT,
    }
    if parts.username:
        args["user"] = unquote(parts.username)
    if parts.password is not None:
        args["password"] = unquote(parts.password)
    try:
        options = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True)
    except ValueError as exc:
        if parts.query:
            raise InvalidDatabaseURL(f"malformed query string in {shown}") from exc
        options = []
    for name, value in options:
        if name not in URL_OPTIONS:
            raise InvalidDatabaseURL(
                f"unknown option {name!r} in {shown}; supported: {', '.join(URL_OPTIONS)}"
            )
        if not value:
            raise InvalidDatabaseURL(f"option {name!r} in {shown} has no value")
        if name == "connect_timeout":
            try:
                args[name] = float(value)
            except ValueError:
                raise InvalidDatabaseURL(f"connect_timeout in {shown} is not a number") from None
        else:
            args[name] = value
    return args


# Reads that take a shared lock when they run on the caller's connection. That
# transaction is often REPEATABLE READ (MySQL's default), whose plain reads see a
# snapshot taken at its first read; when an INSERT then fails on a duplicate
# (channel, key) that another process committed since, a plain read of that row
# would miss it. A locking read sees the latest committed version, and costs no
# new lock: the failed INSERT already holds a shared lock on that row.
LOCKING_ON_CALLERS_CONNECTION = frozenset({"submission_get_by_key"})


class MysqlTx(Tx):
    def __init__(self, store: MysqlStore, conn: Connection, *, callers: bool = False) -> None:
        self.queries = store.queries
        self.conn = conn
        self.callers = callers  # the caller's connection, in the caller's transaction

    def fetch_one(self, query: str, params: Mapping[str, Any] | None = None) -> Row | None:
        if query == "submission_insert":
            return self._insert(params or {})
        if query in UPDATE_RETURNING:
            return self._update(query, params or {})
        with self._run(query, params) as cursor:
            row: Row | None = cursor.fetchone()
            return row

    def fetch_all(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        with self._run(query, params) as cursor:
            return list(cursor.fetchall())

    def execute(self, query: str, params: Mapping[str, Any] | None = None) -> None:
        self._run(query, params).close()

    def script(self, sql: str) -> None:
        with self.conn.cursor() as cursor:
            for statement in split_statements(sql):
                cursor.execute(statement)

    def _run(self, query: str, params: Mapping[str, Any] | None) -> pymysql.cursors.DictCursor:
        sql = self.queries[query]
        if self.callers and query in LOCKING_ON_CALLERS_CONNECTION:
            sql += "\nLOCK IN SHARE MODE"
        cursor = self.conn.cursor(pymysql.cursors.DictCursor)
        # Always a mapping, so `%%` in a query means the same with or without parameters.
        cursor.execute(sql, dict(params or {}))
        return cursor

    def _insert(self, params: Mapping[str, Any]) -> Row | None:
        """INSERT ... RETURNING; an existing (channel, key) gives None, as ON CONFLICT DO
        NOTHING does elsewhere. Only that unique index counts: a clash on the
        idempotency key, or any other error, still raises. InnoDB undoes just the failed
        statement, so the transaction goes on (and the caller's, on its connection)."""
        try:
            with self._run("submission_insert", params) as cursor:
                row: Row | None = cursor.fetchone()
                return row
        except pymysql.err.IntegrityError as exc:
            # "Duplicate entry '...' for key 'denpyo_submissions_channel_key'": the index
            # is named last (the entry itself is the caller's text, so it is not searched).
            index_named = _message(exc).endswith(
                (f"'{CHANNEL_KEY_INDEX}'", f".{CHANNEL_KEY_INDEX}'")
            )
            if _code(exc) == ER_DUP_ENTRY and index_named:
                return None
            raise

    def _update(self, query: str, params: Mapping[str, Any]) -> Row | None:
        """A compare-and-set UPDATE of the row `params["id"]`, then what RETURNING gives."""
        if not self.matched(query, params):
            return None
        read_back = UPDATE_RETURNING[query]
        if read_back is None:
            return {"id": params["id"]}
        return self.fetch_one(read_back, {"id": params["id"]})

    def matched(self, query: str, params: Mapping[str, Any]) -> bool:
        """Run a compare-and-set UPDATE of the row `params["id"]`: did it win?

        The UPDATE matches the row only while it is still where the caller expects
        (status, holder); FOUND_ROWS makes the row count mean "matched", so 0 is a
        lost race even when nothing would have changed, and 1 a win. The winner holds
        the row's lock until commit, so a read-back sees exactly what it wrote.
        Only the store's own connections carry FOUND_ROWS; these queries never run on
        a caller's connection (`Store.insert` is the only operation that does).
        """
        with self._run(query, params) as cursor:
            matched = cursor.rowcount
        if matched > 1:  # pragma: no cover - id is the primary key
            raise StoreError(f"{query} matched {matched} rows for id {params['id']}")
        return matched == 1

    def insert_rows(self, query: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """A one-row INSERT ... VALUES query, for many rows in one statement (PyMySQL
        writes them as one multi-row INSERT once the name comment is off)."""
        sql = "\n".join(
            line for line in self.queries[query].splitlines() if not line.startswith("--")
        )
        with self.conn.cursor() as cursor:
            cursor.executemany(sql, [dict(row) for row in rows])


class MysqlStore(Store):
    dialect = "mysql"

    def __init__(self, url: str) -> None:
        super().__init__()
        self.args = connect_args(url)
        self.where = f"{self.args['host']}:{self.args['port']}/{self.args['database']}"
        self._local = threading.local()
        self._all: list[Connection] = []
        self._lock = threading.Lock()

    def parse_time(self, value: Any) -> datetime | None:
        """DATETIME(6) arrives naive; every time denpyo writes is UTC."""
        if isinstance(value, datetime) and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return super().parse_time(value)

    def migrate(self) -> list[int]:
        """Run the base migration under the session lock `schema_lock` takes.

        MariaDB commits DDL implicitly, so no lock that ends with a transaction
        would outlast the first CREATE TABLE: GET_LOCK belongs to the session.
        It is taken (and checked) here first; the base's own `schema_lock` then
        re-enters it on the same connection; closing that connection at the end
        releases it, however the migration ended.
        """
        try:
            with self.transaction() as tx:
                row = tx.fetch_one("schema_lock")
            if row is None or row["locked"] != 1:
                raise StoreError(
                    "another process has held the migration lock (GET_LOCK "
                    "'denpyo_migrate') for 60 s: is a `denpyo migrate` stuck?"
                )
            return super().migrate()
        finally:
            conn: Connection | None = getattr(self._local, "conn", None)
            if conn is not None:
                self._discard(conn)

    # -- connections --------------------------------------------------------------

    def _connection(self) -> Connection:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is not None and conn.open:
            return conn
        if conn is not None:
            self._discard(conn)
        try:
            conn = pymysql.connect(**self.args, autocommit=False, client_flag=CLIENT.FOUND_ROWS)
        except pymysql.err.MySQLError as exc:
            if _code(exc) in CONNECT_REFUSED:
                raise ConfigurationError(
                    f"MariaDB at {self.where} refused: {_message(exc)}"
                ) from exc
            raise StoreError(f"cannot connect to MariaDB at {self.where}: {_message(exc)}") from exc
        try:
            check_server(conn.get_server_info())  # type: ignore[no-untyped-call]
            with conn.cursor() as cursor:
                for statement in SESSION_SETUP:
                    cursor.execute(statement)
        except ConfigurationError:
            _close_quietly(conn)
            raise
        except pymysql.err.MySQLError as exc:
            _close_quietly(conn)
            raise StoreError(f"MariaDB at {self.where}: {_message(exc)}") from exc
        self._local.conn = conn
        with self._lock:
            self._all.append(conn)
        return conn

    def _discard(self, conn: Connection) -> None:
        """Forget a connection and close it; the server rolls back whatever it had open."""
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._lock:
            if conn in self._all:
                self._all.remove(conn)
        _close_quietly(conn)

    def _begin(self) -> Connection:
        """BEGIN on this thread's connection; once more on a new one if the old was dead."""
        conn = self._connection()
        try:
            conn.begin()
            return conn
        except pymysql.err.MySQLError as exc:
            self._discard(conn)
            if not _lost(exc):
                raise _translated(exc) from exc
        conn = self._connection()
        try:
            conn.begin()
        except pymysql.err.MySQLError as exc:
            self._discard(conn)
            raise _translated(exc) from exc
        return conn

    @contextmanager
    def transaction(self, conn: Any = None) -> Iterator[Tx]:
        if conn is not None:
            if not isinstance(conn, Connection):
                raise ConfigurationError(
                    f"this ledger stores in MariaDB; conn must be a pymysql Connection, "
                    f"not {type(conn).__name__}"
                )
            # The caller's transaction: run inside it, never commit it.
            with _wrapped():
                yield MysqlTx(self, conn, callers=True)
            return
        own = self._begin()
        try:
            with _wrapped():
                yield MysqlTx(self, own)
                own.commit()
        except Exception:
            self._abandon(own)
            raise
        except BaseException:
            # Interrupted, perhaps half-way through reading a reply: the protocol may be
            # out of step, so the connection is closed (the server rolls back) rather
            # than asked to ROLLBACK.
            self._discard(own)
            raise

    def _abandon(self, conn: Connection) -> None:
        """Roll back after an error; a connection that cannot roll back is dropped."""
        if conn.open:
            try:
                conn.rollback()
                return
            except pymysql.err.MySQLError:
                pass
        self._discard(conn)

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                _close_quietly(conn)
            self._all.clear()
        self._local = threading.local()

    def _apply(self, tx: Tx, moves: Sequence[Move]) -> list[Submission | None]:
        """Each move's compare-and-set UPDATE on its own (its row count says whether it
        won), then one read-back of the rows that moved and one INSERT of their events:
        n + 2 statements, not 3n. A batch naming a row twice reads each move back at once."""
        assert isinstance(tx, MysqlTx)
        if len({move.submission_id for move in moves}) != len(moves):
            return super()._apply(tx, moves)
        won = [move for move in moves if tx.matched("submission_move", move_params(move))]
        if not won:
            return [None] * len(moves)
        ids = [move.submission_id for move in won]
        rows = tx.fetch_all("submission_get_many", {"ids": ids})
        known = {move.submission_id: move.row for move in won}
        moved = {sub.id: sub for sub in (self.to_submission(row, known[row["id"]]) for row in rows)}
        events = [
            event_params(move, moved[move.submission_id].attempts) for move in won if move.event
        ]
        if events:
            tx.insert_rows("event_insert", events)
        return [moved.get(move.submission_id) for move in moves]


def check_server(info: str) -> None:
    """Refuse, clearly, a server this store's SQL does not run on (MySQL has neither
    INSERT ... RETURNING nor the nopad_bin collation; older MariaDB lacks SKIP LOCKED)."""
    found = re.search(r"(\d+)\.(\d+)\.\d+-MariaDB", info)
    if found is None or (int(found[1]), int(found[2])) < MINIMUM_MARIADB:
        need = ".".join(map(str, MINIMUM_MARIADB))
        raise ConfigurationError(
            f"denpyo's MySQL store needs MariaDB {need} or later; this server is {info!r}"
        )


@contextmanager
def _wrapped() -> Iterator[None]:
    """Driver errors leave as StoreError (missing tables as SchemaError), cause kept."""
    try:
        yield
    except pymysql.err.MySQLError as exc:
        raise _translated(exc) from exc


def _translated(exc: pymysql.err.MySQLError) -> StoreError | SchemaError:
    if _code(exc) == ER_NO_SUCH_TABLE and "denpyo_" in _message(exc):
        return SchemaError("the denpyo tables are missing: run `denpyo migrate`")
    return StoreError(f"MariaDB: {_message(exc)}")


def _lost(exc: pymysql.err.MySQLError) -> bool:
    """The connection is gone (or PyMySQL already closed it after a socket error)."""
    return _code(exc) in CONNECTION_LOST or isinstance(exc, pymysql.err.InterfaceError)


def _code(exc: pymysql.err.MySQLError) -> int | None:
    code = exc.args[0] if exc.args else None
    return code if isinstance(code, int) else None


def _message(exc: pymysql.err.MySQLError) -> str:
    if len(exc.args) >= 2 and isinstance(exc.args[1], str):
        return exc.args[1]
    return str(exc) or type(exc).__name__


def _close_quietly(conn: Connection) -> None:
    with contextlib.suppress(Exception):
        conn.close()


def _redacted(url: str) -> str:
    """The URL for an error message, without its password."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return repr(url)
    return repr(f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}")
