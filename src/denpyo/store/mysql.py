"""MariaDB (10.6 or later): the second production store, through PyMySQL.

Claims use `FOR UPDATE SKIP LOCKED`, as on PostgreSQL. Each thread keeps one
connection of its own (PyMySQL connections are not thread-safe), opened with
autocommit off, READ COMMITTED (under REPEATABLE READ a worker's snapshot would
hide rows that others committed since, and gap locks would make claims queue
behind each other), strict SQL mode, and the FOUND_ROWS flag, so that an UPDATE
reports the rows it *matched*: that is how a compare-and-set learns it won.

MariaDB has no `UPDATE ... RETURNING` and no `ON CONFLICT`: its writes are the
portable ones of store/portable.py, and `MysqlTx.insert` reads a duplicate
(channel, key) as "no row". It has no LISTEN/NOTIFY: workers poll.

A removal (`remove_in`) commits the keys of the rows it removes, waits until every
transaction that may still read denpyo_keys as it was before has ended, and only
then deletes the rows: the database user needs the PROCESS privilege to see them.

A connection that the server dropped (restart, KILL, idle timeout) is thrown
away; the next transaction opens a fresh one. A transaction that was open when
it happened fails with StoreError and is rolled back by the server; one that
had not started yet is retried once on a new connection, which is safe because
nothing was sent but BEGIN.
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, ClassVar
from urllib.parse import parse_qsl, unquote, urlsplit

import pymysql
import pymysql.connections
import pymysql.cursors
from pymysql.charset import charset_by_name
from pymysql.constants import CLIENT

# Bound once, at import: a process that also installs PyMySQL as Django's MySQLdb can
# end up with a second copy of `pymysql.err` whose classes PyMySQL never raises.
from pymysql.err import IntegrityError, InterfaceError, MySQLError

from denpyo.errors import ConfigurationError, InvalidDatabaseURL, StoreError, StoreUnavailable
from denpyo.store import shown_url
from denpyo.store.base import Row, Tx
from denpyo.store.conflicts import retried
from denpyo.store.connections import DriverErrors
from denpyo.store.dialects import DIALECTS
from denpyo.store.portable import PortableSqlStore
from denpyo.store.queries import split_statements

MYSQL = DIALECTS["mysql"]
SCHEMES = MYSQL.schemes
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
# No server answered (CR_CONNECTION_ERROR: its socket; CR_CONN_HOST_ERROR: host and
# port) or it takes no one now (ER_CON_COUNT_ERROR): with CONNECTION_LOST, an outage.
UNREACHABLE = frozenset({2002, 2003, 1040}) | CONNECTION_LOST
# ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT: the transaction may succeed if run again.
ER_LOCK_WAIT_TIMEOUT = 1205
CONFLICTS = frozenset({1213, ER_LOCK_WAIT_TIMEOUT})
ER_DUP_ENTRY = 1062
ER_NO_SUCH_TABLE = 1146
ER_SPECIFIC_ACCESS_DENIED = 1227
CHANNEL_KEY_INDEX = "denpyo_submissions_channel_key"
MINIMUM_MARIADB = (10, 6)  # FOR UPDATE SKIP LOCKED; INSERT/DELETE ... RETURNING since 10.5
COUNTS_FOLD_LIMIT = 20_000  # rows of running counts per fold
COUNTS_FOLD_BATCHES = 5  # folds per heartbeat at most
# Ids per DELETE of folded rows. With thousands in one IN list the optimizer gives up
# the primary key's point lookups for a scan, which waits on every row another
# transaction holds (a paused writer's, another fold's) and deadlocks with a fold
# doing the same: seen under the chaos tests.
COUNTS_DROP_CHUNK = 500
# Ids per statement of a removal, for the same reason: it locks the rows it reads.
REMOVE_CHUNK = 500
# Seconds a removal waits for the transactions older than its keys before it gives up
# (removing nothing that time).
REMOVAL_WAIT = 30.0
# InnoDB refreshes its list of transactions (information_schema.INNODB_TRX) only once
# 0.1 s passed without anyone reading it: a quicker read gets the same copy and puts
# the refresh off again. So a removal reads it less often than this.
TRX_LIST_IDLE = 0.12

Connection = pymysql.connections.Connection
log = logging.getLogger("denpyo.store")


def _code(exc: MySQLError) -> int | None:
    code = exc.args[0] if exc.args else None
    return code if isinstance(code, int) else None


def _message(exc: MySQLError) -> str:
    if len(exc.args) >= 2 and isinstance(exc.args[1], str):
        return exc.args[1]
    return str(exc) or type(exc).__name__


ERRORS = DriverErrors(
    MYSQL,
    MySQLError,
    lambda exc: _code(exc) == ER_NO_SUCH_TABLE and "denpyo_" in _message(exc),
    _message,
    unavailable=lambda exc: _code(exc) in UNREACHABLE,
    conflict=lambda exc: _code(exc) in CONFLICTS,
    waited=lambda exc: _code(exc) == ER_LOCK_WAIT_TIMEOUT,
)
"""PyMySQL's errors as denpyo's, read by their message (ER_NO_SUCH_TABLE on a
denpyo_ table: the tables are missing; UNREACHABLE: StoreUnavailable; CONFLICTS:
StoreConflict)."""


def connect_args(url: str) -> dict[str, Any]:
    """`mysql://user:pass@host:port/db?charset=...` as keyword arguments of pymysql.connect.

    `mariadb://` and `mysql+pymysql://` are the same. Options in the query string:
    charset (default utf8mb4), connect_timeout (seconds), unix_socket, ssl_ca.
    """
    shown = repr(shown_url(url))
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
        if name == "charset" and charset_by_name(value) is None:
            raise InvalidDatabaseURL(f"unknown charset {value!r} in {shown}")
        if name == "connect_timeout":
            try:
                args[name] = float(value)
            except ValueError:
                raise InvalidDatabaseURL(f"connect_timeout in {shown} is not a number") from None
        else:
            args[name] = value
    return args


class MysqlTx(Tx):
    def __init__(self, store: MysqlStore, conn: Connection) -> None:
        self.queries = store.queries
        self.conn = conn

    def fetch_one(self, query: str, params: Mapping[str, Any] | None = None) -> Row | None:
        with self._run(query, params) as cursor:
            row: Row | None = cursor.fetchone()
            return row

    def fetch_all(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        with self._run(query, params) as cursor:
            return list(cursor.fetchall())

    def execute(self, query: str, params: Mapping[str, Any] | None = None) -> int:
        """The rows matched, not changed: the store's connections carry the FOUND_ROWS
        flag, so a compare-and-set that wins counts 1 even when it changed no value."""
        with self._run(query, params) as cursor:
            return int(cursor.rowcount)

    def execute_many(self, query: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """PyMySQL writes an INSERT ... VALUES for many rows as one multi-row INSERT,
        once the statement's name comment is off."""
        sql = "\n".join(
            line for line in self.queries[query].splitlines() if not line.startswith("--")
        )
        with self.conn.cursor() as cursor:
            cursor.executemany(sql, [dict(row) for row in rows])

    def insert(self, query: str, params: Mapping[str, Any]) -> Row | None:
        """INSERT ... RETURNING; an existing (channel, key) gives None, as ON CONFLICT DO
        NOTHING does elsewhere: a remembered one because the statement's SELECT finds
        nothing to insert and so returns no row, a live one by error 1062 on its unique
        index. Only that index counts: a clash on the idempotency key, or any other
        error, still raises. InnoDB undoes just the failed statement, so the
        transaction goes on (and the caller's, on its connection)."""
        try:
            return self.fetch_one(query, params)
        except IntegrityError as exc:
            if _channel_key_taken(exc):
                return None
            raise

    def script(self, sql: str) -> None:
        with self.conn.cursor() as cursor:
            for statement in split_statements(sql):
                cursor.execute(statement)

    def _run(self, query: str, params: Mapping[str, Any] | None) -> pymysql.cursors.DictCursor:
        cursor = self.conn.cursor(pymysql.cursors.DictCursor)
        # Always a mapping, so `%%` in a query means the same with or without parameters.
        cursor.execute(self.queries[query], dict(params or {}))
        return cursor


class MysqlStore(PortableSqlStore):
    dialect = MYSQL.name
    driver_errors = ERRORS
    QUERIES: ClassVar[frozenset[str]] = frozenset(
        {
            "take_submission_counts",
            "drop_submission_counts",
            "add_submission_counts",
            "count_submission_channels",
            "unlock_schema",
            "find_keys_remembered",
            "lock_submission_remove",
            "add_removed_counts",
            "remove_submissions",
            "mark_transaction",
            "list_transactions_open",
        }
    )

    def __init__(self, url: str) -> None:
        super().__init__()
        self.args = connect_args(url)
        self.where = f"{self.args['host']}:{self.args['port']}/{self.args['database']}"
        self._local = threading.local()
        self._all: list[Connection] = []
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str) -> MysqlStore:
        return cls(url)

    # -- conversions (store/rows.py, store/params.py): DATETIME(6) is naive UTC ----

    def parse_time(self, value: Any) -> datetime | None:
        """DATETIME(6) arrives naive; every time denpyo writes is UTC."""
        if isinstance(value, datetime) and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return super().parse_time(value)

    def time_param(self, value: datetime) -> Any:
        """Naive UTC, as DATETIME(6) stores it."""
        return value.astimezone(UTC).replace(tzinfo=None)

    def migrate(self) -> list[int]:
        """Run the base migration under the session lock `lock_schema` takes.

        MariaDB commits DDL implicitly, so no lock that ends with a transaction
        would outlast the first CREATE TABLE: GET_LOCK belongs to the session.
        It is taken (and checked) here first; the base's own `lock_schema` then
        re-enters it on the same connection; closing that connection at the end
        releases it, however the migration ended.
        """
        try:
            with self.transaction() as tx:
                row = tx.fetch_one("lock_schema")
            if row is None or row["locked"] != 1:
                raise StoreError(
                    f"another process has held the migration lock of {self.where} (GET_LOCK "
                    "'denpyo_migrate:<database>') for 60 s: is a `denpyo migrate` stuck?"
                )
            return super().migrate()
        finally:
            conn: Connection | None = getattr(self._local, "conn", None)
            if conn is not None:
                self._discard(conn)

    def attention_params(self, tx: Tx, channel: str | None) -> dict[str, Any]:
        """The channels by name (`count_submissions_needs_person` says why)."""
        if channel is not None:
            return {"channel": channel, "channels": [channel]}
        names = [row["channel"] for row in tx.fetch_all("count_submission_channels")]
        return {"channel": None, "channels": names or [""]}  # IN () is no SQL

    def fold_counts(self) -> None:
        """Fold the running counts (rows the triggers append, schema 8) into one row per
        channel, status, kind and resolution, a few batches at most: a busy database
        catches up over several heartbeats."""
        for _ in range(COUNTS_FOLD_BATCHES):
            if self.fold_counts_batch() < COUNTS_FOLD_LIMIT:
                return

    @retried
    def fold_counts_batch(self, limit: int = COUNTS_FOLD_LIMIT) -> int:
        """Replace the oldest `limit` rows of running counts by their totals per group;
        returns how many rows it replaced (0: they were folded already). The rows stay
        locked until the commit, so two folds never count one twice, and a crash leaves
        them folded with their totals, or not at all."""
        with self.transaction() as tx:
            rows = tx.fetch_all("take_submission_counts", {"limit": limit})
            totals: dict[tuple[str, str, str, int], int] = defaultdict(int)
            for row in rows:
                group = (row["channel"], row["status"], row["kind"], int(row["resolved"]))
                totals[group] += int(row["n"])
            if len(totals) == len(rows) and all(totals.values()):
                return 0
            ids = sorted(int(row["id"]) for row in rows)
            for start in range(0, len(ids), COUNTS_DROP_CHUNK):
                chunk = ids[start : start + COUNTS_DROP_CHUNK]
                tx.execute("drop_submission_counts", {"ids": chunk})
            folded = [
                {"channel": channel, "status": status, "kind": kind, "resolved": resolved, "n": n}
                for (channel, status, kind, resolved), n in totals.items()
                if n
            ]
            if folded:
                tx.execute_many("add_submission_counts", folded)
        return len(rows)

    # -- removal (store/removal.py) ---------------------------------------------------

    def remove_in(self, params: dict[str, Any]) -> int:
        """Remember the keys, wait, then delete; how many rows went (0 when the wait
        gave up).

        Once a row is gone, only the NOT EXISTS of `insert_submission` stops a second
        row with its key, and it reads denpyo_keys through a read view: one per
        statement in READ COMMITTED (this store's connections), one per transaction in
        REPEATABLE READ (an application's transaction that `enqueue(conn=...)` joins;
        there InnoDB even reads an INSERT ... SELECT's source as it is now). A view
        made before the keys were committed may not see them, and InnoDB makes a view
        only inside a transaction it has started, so every such view belongs to a
        transaction that began before the commit: once all of those have ended, every
        insert sees the keys, and the rows can go. Until then an insert of a removed
        key still meets its live row. A transaction that has only begun (BEGIN, no
        read yet) has no view and is not listed; one that holds a consistent snapshot
        is listed, whether or not it has read a row. The keys are remembered without
        locking the rows: an insert in REPEATABLE READ reads denpyo_keys with locks,
        and the keys wait for it to end instead.
        """
        ids = self._remember(params)
        if not ids:
            return 0
        # Committed. A crash from here on leaves keys remembered for rows still live:
        # reads prefer the live row, an insert meets it, and the next removal takes
        # them again.
        if not self._wait_for_older_writers():
            return 0
        return self._remove_remembered(params, ids)

    @retried
    def _remember(self, params: dict[str, Any]) -> list[int]:
        """`remove_in`'s first transaction: the keys remembered; the rows they are of."""
        ids: list[int] = []
        with self.transaction() as tx:
            for chunk in _chunks(params["ids"]):
                tx.execute("remember_keys", {**params, "ids": chunk})
                remembered = tx.fetch_all("find_keys_remembered", {"ids": chunk})
                ids += [int(row["id"]) for row in remembered]
        return ids

    @retried
    def _remove_remembered(self, params: dict[str, Any], ids: list[int]) -> int:
        """`remove_in`'s last transaction: the rows whose keys the wait covered go."""
        removed = 0
        with self.transaction() as tx:
            for chunk in _chunks(ids):  # only keys the wait covered
                # The keys' records first, then the rows: the order in which an insert
                # of one of the keys locks them in REPEATABLE READ (its NOT EXISTS, then
                # the live row), so that neither waits for the other in a circle.
                tx.execute("remember_keys", {**params, "ids": chunk})
                rows = tx.fetch_all("lock_submission_remove", {**params, "ids": chunk})
                if not rows:
                    continue
                # The rows retention still lets go, locked until the commit: their
                # memory, their counts and the delete are about the same rows.
                final = {**params, "ids": [int(row["id"]) for row in rows]}
                tx.execute("remember_keys", final)  # as they are now, locked
                tx.execute("add_removed_counts", final)
                # Their events go with them (ON DELETE CASCADE).
                removed += len(tx.fetch_all("remove_submissions", final))
        # A crash before that commit rolled all of it back: the keys stay remembered,
        # the rows live, and the counts as they were.
        return removed

    def _wait_for_older_writers(self) -> bool:
        """Wait until every transaction open now (but read-only ones, which cannot
        insert) has ended: True; False (and a warning) after REMOVAL_WAIT seconds.

        They are read from information_schema.INNODB_TRX, a copy that InnoDB refreshes
        only once 0.1 s passed without a read: the copy at hand may be older than the
        keys' commit. So a new connection begins a read-only transaction first (the
        mark; connection ids are never reused), and a copy counts only once it shows
        that connection: it was made after the commit, and lists every older
        transaction still open, as does every later copy. No clock is compared (the
        list gives a transaction's start in whole seconds, in the server's own time
        zone). A transaction is known by its connection and start (its id changes when
        it first writes); a newer one of the same connection begun in the same second
        is waited for as well, which only waits longer. The list is the server's: a
        long transaction in another database holds removals up too.
        """
        began = time.monotonic()
        waiting: set[tuple[int, datetime]] | None = None
        rows: list[Row] = []
        mark = self._connect()
        try:
            with ERRORS.wrapped():
                with mark.cursor() as cursor:
                    cursor.execute("START TRANSACTION READ ONLY")
                tx = MysqlTx(self, mark)
                tx.fetch_one("mark_transaction")
                while True:
                    rows = self._open_transactions(tx)
                    if waiting is not None or any(row["own"] for row in rows):
                        now_open = {
                            (int(row["thread"]), row["started"]) for row in rows if not row["own"]
                        }
                        waiting = now_open if waiting is None else waiting & now_open
                        if not waiting:
                            return True
                    if time.monotonic() - began >= REMOVAL_WAIT:
                        break
                    # At random, so that removals reading the list at once leave it
                    # unread for 0.1 s now and then.
                    time.sleep(TRX_LIST_IDLE * (1 + random.random()))
        finally:
            _close_quietly(mark)  # ends its transaction
        waited = time.monotonic() - began
        if waiting is None:
            log.warning(
                "removed nothing from %s: in %.0f s its list of open transactions "
                "(information_schema.INNODB_TRX) was never refreshed after the keys were "
                "remembered (something reads it more often than every 0.1 s?)",
                self.where,
                waited,
            )
            return False
        thread, started = min(waiting, key=lambda trx: trx[1])
        mine = [row["started"] for row in rows if row["own"]]
        age = waited + ((mine[0] - started).total_seconds() if mine else 0.0)
        log.warning(
            "removed nothing from %s: a transaction that began before the removed rows' "
            "keys were remembered was still open after %.0f s (the oldest: connection "
            "%d, open for %.0f s); the rows stay, and their keys are remembered",
            self.where,
            waited,
            thread,
            age,
        )
        return False

    def _open_transactions(self, tx: Tx) -> list[Row]:
        """`list_transactions_open`; without the PROCESS privilege, a StoreError that says so."""
        try:
            return tx.fetch_all("list_transactions_open")
        except MySQLError as exc:
            if _code(exc) == ER_SPECIFIC_ACCESS_DENIED:
                raise StoreError(
                    f"MariaDB at {self.where}: removing rows needs the PROCESS privilege, to "
                    "see which transactions are open (information_schema.INNODB_TRX); "
                    "their keys are remembered, no row was removed"
                ) from exc
            raise

    # -- connections --------------------------------------------------------------

    def _connection(self) -> Connection:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is not None and conn.open:
            return conn
        if conn is not None:
            self._discard(conn)
        conn = self._connect()
        with self._lock:
            if self.closed:  # closed while it connected: not kept past close()
                _close_quietly(conn)
                self.check_open()
            self._all.append(conn)
        self._local.conn = conn
        return conn

    def _connect(self) -> Connection:
        """A new connection, set up (SESSION_SETUP), not yet any thread's own."""
        self.check_open()
        try:
            conn = pymysql.connect(**self.args, autocommit=False, client_flag=CLIENT.FOUND_ROWS)
        except MySQLError as exc:
            if _code(exc) in CONNECT_REFUSED:
                raise ConfigurationError(
                    f"MariaDB at {self.where} refused: {_message(exc)}"
                ) from exc
            failed = f"cannot connect to MariaDB at {self.where}: {_message(exc)}"
            if _code(exc) in UNREACHABLE:
                raise StoreUnavailable(failed) from exc
            raise StoreError(failed) from exc
        except (OSError, ValueError, LookupError) as exc:  # the URL's options: an ssl_ca file
            raise ConfigurationError(f"cannot connect to MariaDB at {self.where}: {exc}") from exc
        try:
            check_server(conn.get_server_info())  # type: ignore[no-untyped-call]
            with conn.cursor() as cursor:
                for statement in SESSION_SETUP:
                    cursor.execute(statement)
        except ConfigurationError:
            _close_quietly(conn)
            raise
        except MySQLError as exc:
            _close_quietly(conn)
            raise StoreError(f"MariaDB at {self.where}: {_message(exc)}") from exc
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
        except MySQLError as exc:
            self._discard(conn)
            if not _lost(exc):
                raise ERRORS.translated(exc) from exc
        conn = self._connection()
        try:
            conn.begin()
        except MySQLError as exc:
            self._discard(conn)
            raise ERRORS.translated(exc) from exc
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
            with ERRORS.wrapped():
                tx = MysqlTx(self, conn)
                self.check_same_database(tx, conn)
                yield tx
            return
        own = self._begin()
        try:
            with ERRORS.wrapped():
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

    def duplicate(self, exc: BaseException) -> bool:
        return _channel_key_taken(exc)

    def _abandon(self, conn: Connection) -> None:
        """Roll back after an error; a connection that cannot roll back is dropped."""
        if conn.open:
            try:
                conn.rollback()
                return
            except MySQLError:
                pass
        self._discard(conn)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            for conn in self._all:
                _close_quietly(conn)
            self._all.clear()
        self._local = threading.local()


def check_server(info: str) -> None:
    """Refuse, clearly, a server this store's SQL does not run on (MySQL has neither
    INSERT ... RETURNING nor the nopad_bin collation; older MariaDB lacks SKIP LOCKED)."""
    found = re.search(r"(\d+)\.(\d+)\.\d+-MariaDB", info)
    if found is None or (int(found[1]), int(found[2])) < MINIMUM_MARIADB:
        need = ".".join(map(str, MINIMUM_MARIADB))
        raise ConfigurationError(
            f"denpyo's MySQL store needs MariaDB {need} or later; this server is {info!r}"
        )


def _chunks(ids: Sequence[int]) -> Iterator[list[int]]:
    """`ids` in order, REMOVE_CHUNK at a time."""
    ordered = sorted(ids)
    for start in range(0, len(ordered), REMOVE_CHUNK):
        yield ordered[start : start + REMOVE_CHUNK]


def _lost(exc: MySQLError) -> bool:
    """The connection is gone (or PyMySQL already closed it after a socket error)."""
    return _code(exc) in CONNECTION_LOST or isinstance(exc, InterfaceError)


def _channel_key_taken(exc: BaseException) -> bool:
    """ "Duplicate entry '...' for key 'denpyo_submissions_channel_key'": the index is
    named last (the entry itself is the caller's text, so it is not searched)."""
    if not isinstance(exc, IntegrityError) or _code(exc) != ER_DUP_ENTRY:
        return False
    return _message(exc).endswith((f"'{CHANNEL_KEY_INDEX}'", f".{CHANNEL_KEY_INDEX}'"))


def _close_quietly(conn: Connection) -> None:
    with contextlib.suppress(Exception):
        conn.close()
