"""PostgreSQL: the production store, through psycopg 3 and a connection pool.

Claims use `FOR UPDATE SKIP LOCKED`, so workers on many hosts take disjoint
rows without waiting on each other; `enqueue` sends a NOTIFY that fires when
the caller's transaction commits, so workers wake without polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from contextlib import AbstractContextManager, contextmanager
from typing import Any, ClassVar

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from denpyo.domain.durability import Durability
from denpyo.domain.moves import Change, Move, Settle
from denpyo.domain.retention import Retention
from denpyo.domain.submission import Submission
from denpyo.errors import (
    ConfigurationError,
    InvalidDatabaseURL,
    StoreConflict,
    StoreError,
    StoreUnavailable,
)
from denpyo.store import masked, shown_url
from denpyo.store.base import AsyncStore, NewSubmission, Partition, Row, Tx
from denpyo.store.conflicts import (
    CONFLICT_STATES,
    Conflicts,
    again_on_conflict,
    in_retried,
    retried,
)
from denpyo.store.connections import DriverErrors
from denpyo.store.dialects import DIALECTS, POSTGRESQL, POSTGRESQL_PARTITIONED, Dialect
from denpyo.store.params import (
    Group,
    distinct_groups,
    insert_params,
    move_params,
    seconds,
    settle_params,
)
from denpyo.store.queries import load_migrations, load_queries
from denpyo.store.removal import retention_params
from denpyo.store.sealing import Sealing
from denpyo.store.sql_store import SqlStore

log = logging.getLogger("denpyo.store")


UNREACHABLE_STATES = ("57P01", "57P02", "57P03", "53300")
"""The server ended the session (shutdown, crash) or takes none now (starting up,
too many clients); class 08, a connection exception, too."""
UNREACHABLE_SIGNS = (
    "Connection refused", "timeout expired", "timed out", "No route to host",
    "Network is unreachable", "Connection reset", "No such file or directory",
    "server closed the connection", "could not receive data from server",
    "could not send data to server", "the connection is lost", "SSL SYSCALL error",
    "the database system is", "too many clients", "remaining connection slots",
)  # fmt: skip
"""How libpq says, without a SQLSTATE, that no server answered or the connection
broke: refused, timed out, unreachable, no socket file, hung up; and the server's
own refusals of the moment (starting up, shutting down, full). A server that
refuses who we are or what we ask for (password, role, database) is not here."""


def _unreachable(exc: psycopg.Error) -> bool:
    """Whether the server is out of reach (an outage), not refusing the request."""
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    if state is not None:
        return state.startswith("08") or state in UNREACHABLE_STATES
    text = str(exc)
    return any(sign in text for sign in UNREACHABLE_SIGNS)


ERRORS = DriverErrors(
    POSTGRESQL,
    psycopg.Error,
    lambda exc: isinstance(exc, pg_errors.UndefinedTable),
    unavailable=_unreachable,
    conflict=lambda exc: exc.sqlstate in CONFLICT_STATES,
)
"""psycopg's errors as denpyo's (`UndefinedTable`: the tables are missing; a server
out of reach: StoreUnavailable; CONFLICT_STATES: StoreConflict)."""


def connect_failure(exc: psycopg.Error, conninfo: str) -> StoreUnavailable | ConfigurationError:
    """A first connection that failed: an outage (StoreUnavailable), or a refusal of
    the settings (ConfigurationError), named by the URL without its password."""
    message = f"cannot connect to PostgreSQL at {shown_url(conninfo)}: {masked(str(exc), conninfo)}"
    return StoreUnavailable(message) if _unreachable(exc) else ConfigurationError(message)


class PostgresTx(Tx):
    def __init__(
        self,
        store: PostgresStore,
        cursor: psycopg.Cursor[dict[str, Any]],
        reconnect: Callable[[], psycopg.Cursor[dict[str, Any]]] | None = None,
        *,
        repeatable: bool = False,
        own: bool = False,
    ) -> None:
        self.queries = store.queries
        self.cursor = cursor
        self.reconnect = reconnect  # for the first statement only
        self.repeatable = repeatable
        self.own = own
        """Each statement is a transaction of the store's own (autocommit)."""

    def _run(self, query: str, params: Mapping[str, Any] | None) -> None:
        """A statement that is a transaction of the store's own runs again after a
        conflict (store/conflicts.py), unless the method around it is retried whole."""
        if self.own and not in_retried():
            again_on_conflict(lambda: self._run_translated(query, params), f"store.{query}")
        else:
            self._run_once(query, params)

    def _run_translated(self, query: str, params: Mapping[str, Any] | None) -> None:
        with ERRORS.wrapped():
            self._run_once(query, params)

    def _run_once(self, query: str, params: Mapping[str, Any] | None) -> None:
        reconnect, self.reconnect = self.reconnect, None
        try:
            self.cursor.execute(self.queries[query], params)
        except psycopg.OperationalError as exc:
            # The server ended this idle session (a restart) before our statement
            # could run: nothing was executed, so it goes once more on a new session.
            # A session that died with its server (a crash, a failover) fails the same
            # way, but a write cannot know whether it ran: only a statement that may run
            # twice goes again (a read, a fold of the counts).
            shut = isinstance(exc, pg_errors.AdminShutdown)
            dropped = self.repeatable and self.cursor.connection.broken
            if reconnect is None or not (shut or dropped):
                raise
            self.cursor = reconnect()
            self.cursor.execute(self.queries[query], params)

    def fetch_one(self, query: str, params: Mapping[str, Any] | None = None) -> Row | None:
        self._run(query, params)
        # `pgresult.nfields`, not `description`: that builds a Column object per column.
        result = self.cursor.pgresult
        return self.cursor.fetchone() if result is not None and result.nfields else None

    def fetch_all(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        self._run(query, params)
        return list(self.cursor.fetchall())

    def execute(self, query: str, params: Mapping[str, Any] | None = None) -> int:
        self._run(query, params)
        return self.cursor.rowcount

    def execute_many(self, query: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self.cursor.executemany(self.queries[query], rows)

    def script(self, sql: str) -> None:
        self.cursor.execute(sql.encode())


class PostgresStore(SqlStore):
    """The writes in one statement each, events and NOTIFY included: fewer round
    trips on the hot path than the portable writes of store/portable.py."""

    dialect = POSTGRESQL.name
    driver_errors = ERRORS
    QUERIES: ClassVar[frozenset[str]] = frozenset(
        {
            "submission_record", "submission_record_many", "submission_claim_ready",
            "submission_claim_in_doubt", "submission_move_one", "submission_move_batch",
            "submission_settle_many", "submission_settle_one",
            "submission_counts_compact", "submission_copy", "submission_record_copied",
            "submission_get_recorded_before", "key_get_recorded_before", "snapshot_holder",
            "submission_remove", "layout_get", "partman_available", "session_durable",
            "session_read_committed",
            "durability_get", "replica_lag",
        }
    )  # fmt: skip
    LAYOUT_QUERIES: ClassVar[frozenset[str]] = frozenset(
        {
            "partition_every", "partition_maintain", "partition_list", "partition_check",
            "partition_freeze", "partition_keys", "partition_drop", "partition_rows",
            "submission_window_floor",
        }
    )  # fmt: skip
    """The queries only the partitioned layout's file defines (sql/postgresql-partitioned.sql)."""

    def __init__(self, conninfo: str, *, max_connections: int = 8) -> None:
        super().__init__()
        self.conninfo = conninfo
        self._pool: ConnectionPool[psycopg.Connection[dict[str, Any]]] | None = None
        self._pool_lock = threading.Lock()
        self.max_connections = max_connections
        self.partitioned: bool | None = None
        """Whether the tables are the partitioned layout's (None: not looked yet)."""
        self._maintained_at = -MAINTENANCE_EVERY

    @classmethod
    def from_url(cls, url: str) -> PostgresStore:
        """libpq reads the URL itself, once `+psycopg` is off its scheme: read here
        first, so that one it cannot read is refused now, its password hidden from
        libpq's reason (which quotes the part it could not read)."""
        conninfo = url.replace("postgresql+psycopg://", "postgresql://", 1)
        try:
            conninfo_to_dict(conninfo)
        except psycopg.Error as exc:
            raise InvalidDatabaseURL(
                f"malformed PostgreSQL URL {shown_url(url)!r}: {masked(str(exc).strip(), url)}"
            ) from exc
        return cls(conninfo)

    @property
    def pool(self) -> ConnectionPool[psycopg.Connection[dict[str, Any]]]:
        """The pool, made by the first caller: threads that arrive together wait for
        that one (a lock, checked again inside it), and see it only once it is open
        and the layout known."""
        pool = self._pool
        if pool is not None:
            return pool
        with self._pool_lock:
            if self._pool is None:
                self._pool = self._open_pool()
            return self._pool

    def _open_pool(self) -> ConnectionPool[psycopg.Connection[dict[str, Any]]]:
        self.check_open()
        self._first_connection()
        pool: ConnectionPool[psycopg.Connection[dict[str, Any]]] = ConnectionPool(
            self.conninfo,
            min_size=1,
            max_size=self.max_connections,
            # BEGIN and COMMIT are ours (see transaction): autocommit otherwise.
            kwargs={"row_factory": dict_row, "autocommit": True},
            connection_class=psycopg.Connection[dict[str, Any]],
            configure=self._durable_session,
            open=False,
        )
        try:
            pool.open(wait=True, timeout=15)
        except Exception as exc:
            # The first connection was made: the server went away, or is full.
            pool.close()
            where, reason = shown_url(self.conninfo), masked(str(exc), self.conninfo)
            raise StoreUnavailable(f"cannot connect to PostgreSQL at {where}: {reason}") from exc
        try:
            if self.partitioned is None:
                with ERRORS.wrapped(), pool.connection() as conn, conn.cursor() as cur:
                    self._look_at_layout(PostgresTx(self, cur))
        except BaseException:
            pool.close()
            raise
        return pool

    def learn_layout(self, tx: Tx) -> None:
        if self.partitioned is None:
            self._look_at_layout(tx)

    def _look_at_layout(self, tx: Tx) -> None:
        """Take the queries of the layout the tables have (none yet: the plain one's,
        until `migrate_partitioned` makes the partitioned one)."""
        row = tx.fetch_one("layout_get")
        self._use_layout(bool(row and row["partitioned"]))

    def _use_layout(self, partitioned: bool) -> None:
        # The queries first: a thread that sees `partitioned` set finds its queries.
        record = POSTGRESQL_PARTITIONED if partitioned else DIALECTS[self.dialect]
        self.queries = load_queries(record.name)
        self.partitioned = partitioned

    @property
    def dialect_record(self) -> Dialect:
        """The partitioned layout's record once the tables are known to be it."""
        return POSTGRESQL_PARTITIONED if self.partitioned else DIALECTS[self.dialect]

    def _durable_session(self, conn: psycopg.Connection[Any]) -> None:
        """Each new connection's commits wait for the disk and the synchronous standbys
        (`session_durable`): the slip must be durable before its call leaves. Its
        transactions run READ COMMITTED (`session_read_committed`), whatever the
        database's default: the claims' SKIP LOCKED and the moves' compare-and-set
        are written for it; under SERIALIZABLE, concurrent settles would abort each
        other."""
        conn.execute(self.queries["session_durable"])
        conn.execute(self.queries["session_read_committed"])

    def replica_lag(self) -> float | None:
        if not self.capabilities.durability_checks:
            return None
        with self.reading() as tx:
            row = tx.fetch_one("replica_lag")
        return None if row is None or row["lag"] is None else float(row["lag"])

    def durability(self) -> Durability | None:
        if not self.capabilities.durability_checks:
            return None
        with self.reading() as tx:
            row = tx.fetch_one("durability_get")
        assert row is not None
        return Durability(
            standbys=int(row["standbys"]),
            synchronous_names=row["synchronous_names"],
            synchronous_commit=row["synchronous_commit"],
            sync_standbys=None if row["sync_standbys"] is None else int(row["sync_standbys"]),
        )

    def _first_connection(self) -> None:
        """One connection before the pool's: a server that refuses (no such database,
        a wrong password) says why at once, where the pool would retry for its whole
        timeout and then report only that it gave up."""
        try:
            psycopg.connect(self.conninfo, connect_timeout=CONNECT_TIMEOUT).close()
        except psycopg.Error as exc:
            raise connect_failure(exc, self.conninfo) from exc

    @contextmanager
    def transaction(self, conn: Any = None) -> Iterator[Tx]:
        if conn is not None:
            if not isinstance(conn, psycopg.Connection):
                raise ConfigurationError(
                    f"this ledger stores in PostgreSQL; conn must be a psycopg.Connection, "
                    f"not {type(conn).__name__}"
                )
            # The caller's transaction: run inside it, never commit it.
            with ERRORS.wrapped(), conn.cursor(row_factory=dict_row) as cursor:
                self.learn_layout(PostgresTx(self, cursor))
                tx = PostgresTx(self, cursor)
                self.check_same_database(tx, conn)
                yield tx
            return
        with ERRORS.wrapped():
            own = self._begin()
            try:
                with own.cursor() as cur:
                    yield PostgresTx(self, cur)
            except Exception:
                with contextlib.suppress(psycopg.Error):
                    if not own.broken:
                        own.execute("ROLLBACK")
                raise
            except BaseException:
                own.close()  # interrupted mid-protocol: never reuse it
                raise
            else:
                own.execute("COMMIT")
            finally:
                self.pool.putconn(own)

    def one_statement(self, conn: Any = None) -> AbstractContextManager[Tx]:
        return self.transaction(conn) if conn is not None else self._autocommit()

    def reading(self) -> AbstractContextManager[Tx]:
        return _Autocommit(self, repeatable=True)

    def _autocommit(self) -> AbstractContextManager[Tx]:
        """Each statement is its own transaction: for work done in one statement
        (a claim, a batch of settles, a record with its events) and for reads."""
        return _Autocommit(self)

    def _checkout(self) -> psycopg.Connection[dict[str, Any]]:
        """A pooled connection the server has not dropped meanwhile (after a restart,
        say). Reading what the server sent while the connection sat idle is a local
        call, not a round trip: a dropped connection shows up there and is replaced."""
        for _ in range(self.max_connections + 1):
            own = self.pool.getconn()
            try:
                own.pgconn.consume_input()
                if own.pgconn.status == pq.ConnStatus.OK and not own.broken:
                    return own
            except psycopg.OperationalError:
                pass
            own.close()
            self.pool.putconn(own)  # the pool replaces a closed connection
        return self.pool.getconn()

    def _begin(self) -> psycopg.Connection[dict[str, Any]]:
        """A pooled connection inside BEGIN. A connection the server dropped (after
        a restart, say) fails at BEGIN, before anything of ours was sent: it is
        discarded and the BEGIN tried once more on a new one. This costs no round
        trip beyond the BEGIN every transaction needs."""
        for attempt in (1, 2):
            own = self._checkout()
            try:
                own.execute("BEGIN")
                return own
            except psycopg.OperationalError:
                self.pool.putconn(own)  # the pool discards a broken connection
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def record_in(
        self, tx: Tx, new: NewSubmission, *, actor: str, lease: float | None, detail: str | None
    ) -> Submission | None:
        params = insert_params(new, actor, lease, self.sealing)
        params.update(actor=actor, detail=detail)
        row = tx.fetch_one("submission_record", params)
        return None if row is None else self.to_submission(row)

    def record_many_in(self, tx: Tx, news: Iterable[NewSubmission], actor: str) -> int:
        """From `COPY_FROM` rows on, by COPY straight into the table (`_copy_many`);
        fewer, by statements of up to `RECORD_CHUNK` rows (`_record_pipelined`). Also
        by statements where a COPY under a savepoint cannot run: on an application's
        asyncio connection, on an autocommit one outside any transaction (each
        statement commits on its own there), and in the caller's pipeline."""
        if not isinstance(tx, PostgresTx):  # an application's asyncio connection
            return sum(
                int(row["created"])
                for chunk in _chunks(news, RECORD_CHUNK)
                if (
                    row := tx.fetch_one(
                        "submission_record_many", _record_many_params(chunk, actor, self.sealing)
                    )
                )
            )
        conn = tx.cursor.connection
        rows = iter(news)
        first = list(itertools.islice(rows, COPY_FROM))
        outside = conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE
        piped = conn.pgconn.pipeline_status != pq.PipelineStatus.OFF
        can_copy = self.capabilities.copy and self.capabilities.savepoints
        if len(first) < COPY_FROM or outside or piped or not can_copy:
            return self._record_pipelined(tx, itertools.chain(first, rows), actor)
        return self._copy_many(tx, itertools.chain(first, rows), actor)

    def _record_pipelined(self, tx: PostgresTx, news: Iterable[NewSubmission], actor: str) -> int:
        """Rows in chunks, one statement each, pipelined: the next chunk is prepared
        while the server writes the one before."""
        conn = tx.cursor.connection
        query = self.queries["submission_record_many"]
        cursors = []
        with ERRORS.wrapped(), conn.pipeline():
            for chunk in _chunks(news, RECORD_CHUNK):
                cursor = conn.cursor(row_factory=dict_row)
                cursor.execute(query, _record_many_params(chunk, actor, self.sealing))
                cursors.append(cursor)
        created = 0
        for cursor in cursors:
            row = cursor.fetchone()
            created += int(row["created"]) if row else 0
            cursor.close()
        return created

    def _copy_many(self, tx: PostgresTx, news: Iterator[NewSubmission], actor: str) -> int:
        """COPY the rows into the table as they are prepared, then write their events
        and wake the workers in one statement (`submission_record_copied` says how
        it finds the rows), under a savepoint.

        COPY has no ON CONFLICT: a key recorded already fails it, at its end. Then
        the savepoint is rolled back with every row of the copy, and the rows go in
        again by `submission_record_many`, which skips such keys: a batch that
        repeats keys (a retried import, say) is written twice. COPY has no WHERE
        either: a remembered key whose row was removed goes in. The statement that
        writes the events finds it first, writes nothing, and the copy is undone and
        written again the same way. A bad item met during the copy rolls the
        savepoint back too, and raises. A crash at any point leaves the transaction
        (the caller's or the ledger's) uncommitted: no row, no event."""
        cursor, written = tx.cursor, []
        with ERRORS.wrapped():
            cursor.execute("SAVEPOINT denpyo_record_many")
            try:
                with cursor.copy(self.queries["submission_copy"]) as copy:
                    for new in news:
                        written.append(new)
                        copy.write_row(
                            (new.channel, new.key, new.idempotency_key, self.sealing.stored(new),
                             new.ordering_key, "requesting", 0, "now", new.traceparent,
                             new.tracestate)
                        )  # fmt: skip
            except pg_errors.UniqueViolation:
                _forget(cursor)
                return self._record_pipelined(tx, itertools.chain(written, news), actor)
            except Exception:  # a bad item, say: the caller's transaction stays usable
                with contextlib.suppress(psycopg.Error):  # (unless the connection broke)
                    _forget(cursor)
                raise
            created = 0
            if written:
                params = {
                    "first": written[0].idempotency_key,
                    "last": written[-1].idempotency_key,
                    "actor": actor,
                }
                row = tx.fetch_one("submission_record_copied", params)
                if row is not None and row["remembered"]:
                    _forget(cursor)
                    return self._record_pipelined(tx, written, actor)
                created = int(row["created"]) if row else 0
            cursor.execute("RELEASE SAVEPOINT denpyo_record_many")
        if created != len(written):  # never: the events would not match the rows
            raise StoreError(f"PostgreSQL: {len(written)} rows copied, {created} found again")
        return created

    def recorded_before(
        self, tx: Tx, news: Sequence[NewSubmission]
    ) -> Iterator[tuple[NewSubmission, Submission]]:
        """Two statements per `RECORD_CHUNK` * 10 items, instead of reads per item: the
        live rows, then the remembered keys no live row holds (their outcomes, as
        `_existing` finds them), in the batch's order."""
        for start in range(0, len(news), RECORD_CHUNK * 10):
            chunk = news[start : start + RECORD_CHUNK * 10]
            params = {
                "channel": [new.channel for new in chunk],
                "key": [new.key for new in chunk],
                "idempotency_key": [new.idempotency_key for new in chunk],
            }
            found = [
                (int(row["ord"]), self.to_submission(row))
                for row in tx.fetch_all("submission_get_recorded_before", params)
            ]
            found += [
                (int(row["ord"]), self.to_kept(row))
                for row in tx.fetch_all("key_get_recorded_before", params)
            ]
            for ordinal, existing in sorted(found, key=lambda pair: pair[0]):
                yield chunk[ordinal - 1], existing

    def remove_in(self, params: dict[str, Any]) -> int:
        """Remember the keys and commit them (a); wait until no other session of this
        database may still hold a snapshot taken before that commit (b); then delete
        the rows whose keys were remembered, with their history, remember them as
        deleted and count them, in one statement (c).

        The wait closes a race. An insert asks denpyo_keys (NOT EXISTS) on its
        statement's snapshot (its transaction's, in REPEATABLE READ), and meets a live
        row through the unique index. Were the row deleted while an insert's snapshot
        predates the key, the NOT EXISTS would miss the key, and ON CONFLICT, having
        waited for the deleting transaction to commit, would find the row dead and
        insert (it takes no new snapshot): the key sent twice. Only a snapshot taken
        after (a) committed is sure to see the key; (b) waits until every live
        snapshot is such, so that an insert either sees the key or meets the row. A
        session whose oldest snapshot's xmin is at or before (a)'s transaction id is
        waited for: every snapshot taken before (a) committed, and those taken after
        while an older transaction still ran: never too early, sometimes longer.

        If such a session stays past `REMOVAL_WAIT` seconds, nothing is deleted this
        time (0) and a warning names it; the keys remembered meanwhile stay, harmless:
        reads prefer the live row, and an insert of the key meets the row either way.
        Only rows whose keys are remembered are deleted in (c): one that became
        removable after (a) waits for the next removal.

        The partitioned layout has every key in denpyo_keys from its insert on:
        there the deletion (c) is all, nothing to wait for."""
        if self._is_partitioned():
            with self._autocommit() as tx:
                row = tx.fetch_one("submission_remove", params)
            return int(row["removed"]) if row else 0
        remembered = self._remember(params)
        # A crash from here until (c) commits leaves keys remembered for rows still
        # live: reads prefer the rows, inserts meet them, a later removal rewrites them.
        if remembered is None or not int(remembered["kept"]):
            return 0
        if not self._wait_for_snapshots_before(str(remembered["xid"])):
            return 0
        with self._autocommit() as tx:  # (c): one statement, so all of it or none
            row = tx.fetch_one("submission_remove", params)
        return int(row["removed"]) if row else 0

    @retried
    def _remember(self, params: dict[str, Any]) -> Row | None:
        """`remove_in`'s (a): the keys remembered, committed; how many, and the
        transaction's id."""
        with self.transaction() as tx:
            return tx.fetch_one("key_remember", params)

    def _wait_for_snapshots_before(self, xid: str) -> bool:
        """Whether, within `REMOVAL_WAIT` seconds, no other session of this database
        holds a snapshot as old as transaction `xid`. Each look is a transaction of
        its own: pg_stat_activity is read afresh in each."""
        deadline = time.monotonic() + REMOVAL_WAIT
        pause = 0.01
        with self._autocommit() as tx:
            while True:
                holder = tx.fetch_one("snapshot_holder", {"xid": xid})
                if holder is None:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning(
                        "removal put off after %.0f s: session pid %s may still read the "
                        "table as it was before the removed keys were remembered (its "
                        "snapshot %s transactions old, its transaction open %s s); nothing "
                        "was deleted, the rows stay for a later removal",
                        REMOVAL_WAIT, holder["pid"], holder["xmin_age"],
                        "?" if holder["seconds"] is None else f"{holder['seconds']:.1f}",
                    )  # fmt: skip
                    return False
                time.sleep(min(pause, left))
                pause = min(pause * 2, 0.1)

    # -- the partitioned layout --------------------------------------------------------

    def migrate_partitioned(self, every: str) -> list[int]:
        """Make the partitioned layout on a database without denpyo tables (pg_partman
        installed in it first, in schema `partman`, where the server has it), then
        apply the later migrations; on a partitioned database, only those."""
        if every not in PARTITION_INTERVALS:
            raise ConfigurationError(
                f"partitions {every!r}: choose one of {', '.join(PARTITION_INTERVALS)}"
            )
        with self.transaction() as tx:
            tx.execute("schema_lock")
            tx.execute("schema_version_create")
            current = self._version(tx)
            layout = tx.fetch_one("layout_get")
            if layout is not None and not layout["partitioned"]:
                raise ConfigurationError(
                    "the denpyo tables here are in the plain layout: `migrate --partitions` "
                    'makes the partitioned one on a database without them (see "Keeping '
                    'the ledger for years" for moving a ledger over)'
                )
            applied: list[int] = []
            if layout is None:
                available = tx.fetch_one("partman_available")
                if available is None or not available["available"]:
                    raise ConfigurationError(
                        "the partitioned layout needs pg_partman, which this PostgreSQL "
                        "server lacks: install it (Debian: postgresql-15-partman)"
                    )
                # The layout's first script makes every table at once (`squashed`).
                first, script = load_migrations(POSTGRESQL_PARTITIONED.name)[0]
                tx.script(script.replace("'@partition@'", f"'{every}'"))
                applied = list(range(current + 1, first + 1))
                for version in applied:
                    tx.execute("schema_version_add", {"version": version})
                current = applied[-1]
            applied += self.apply_migrations(tx, current)
        self._use_layout(True)
        return applied

    def partitions(self) -> list[Partition]:
        if not self._is_partitioned():
            return []
        with self.reading() as tx:
            rows = tx.fetch_all("partition_list")
        return [
            Partition(int(row["from_id"]), int(row["to_id"]), row["from_at"], row["to_at"])
            for row in rows
        ]

    def partition_rows(self, part: Partition, after: int, limit: int) -> list[Submission]:
        params = {"from_id": max(part.from_id, after + 1), "to_id": part.to_id, "limit": limit}
        with self.reading() as tx:
            return [self.to_submission(row) for row in tx.fetch_all("partition_rows", params)]

    def drop_partition(
        self,
        part: Partition,
        retention: Retention,
        *,
        before_drop: Callable[[], None] | None = None,
        archived_to: str | None = None,
    ) -> int:
        """Freeze the partition (its rows can no longer change), check that retention
        lets every row go, run `before_drop`, remember the keys, then detach and drop
        it with its events' twin under a lock held for milliseconds (the migration of
        the layout says each step). A partition that keeps a row, or whose lock cannot
        be had within `PARTITION_LOCK_WAIT` seconds (`PARTITION_LOCK_TRIES` times), is
        thawed and waits: 0."""
        bounds = {"from_id": part.from_id, "to_id": part.to_id}
        check = {**bounds, **retention_params(retention)}
        with self.reading() as tx:
            found = tx.fetch_one("partition_check", check)
        if found is None or int(found["kept"]) or not int(found["n"]):
            return 0  # a row stays; an empty partition goes with the row-by-row removal
        if not self._freeze(bounds, frozen=True):
            return 0
        dropped = False
        try:
            with self.reading() as tx:
                found = tx.fetch_one("partition_check", check)
            if found is None or int(found["kept"]):
                return 0
            started = time.perf_counter()
            if before_drop is not None:
                before_drop()
            written = time.perf_counter()
            with self._autocommit() as tx:
                counts = tx.fetch_all("partition_keys", {**bounds, "archived_to": archived_to})
            kept = time.perf_counter()
            columns = ("day", "channel", "status", "error_kind", "kind", "resolved", "n")
            params: dict[str, Any] = {name: [row[name] for row in counts] for name in columns}
            params.update(bounds, wait=PARTITION_LOCK_WAIT)
            for _ in range(PARTITION_LOCK_TRIES):
                try:
                    started_drop = time.perf_counter()
                    with self._autocommit() as tx:
                        tx.fetch_one("partition_drop", params)
                    dropped = True
                    log.info(
                        "partition %s dropped: %s rows; before the drop %.2f s, keys %.2f s, "
                        "drop %.3f s", part.from_at.date(), found["n"], written - started,
                        kept - written, time.perf_counter() - started_drop,
                    )  # fmt: skip
                    return int(found["n"])
                except StoreError as exc:
                    if not isinstance(exc.__cause__, pg_errors.LockNotAvailable):
                        raise
                    log.info("partition %s not dropped yet: its lock is busy", part.from_at)
            return 0
        finally:
            if not dropped:
                self._freeze(bounds, frozen=False)

    def _freeze(self, bounds: dict[str, int], *, frozen: bool) -> bool:
        try:
            with self._autocommit() as tx:
                tx.fetch_one(
                    "partition_freeze", {**bounds, "frozen": frozen, "wait": PARTITION_LOCK_WAIT}
                )
            return True
        except StoreError as exc:
            if not isinstance(exc.__cause__, pg_errors.LockNotAvailable):
                raise
            log.info(
                "partition [%s, %s) busy: not %s now",
                bounds["from_id"],
                bounds["to_id"],
                "frozen" if frozen else "thawed",
            )
            return False

    def window_floor(self, tx: Tx, before: int, window: int) -> int:
        """The partitioned layout's ids are creation times, far apart: the window is
        the `window` rows below `before`, read from the primary key."""
        if not self.partitioned:
            return super().window_floor(tx, before, window)
        row = tx.fetch_one("submission_window_floor", {"before": before, "window": window})
        return int(row["floor"]) if row else 0

    def maintain_partitions(self) -> None:
        """Have pg_partman make the coming partitions (at most once per
        `MAINTENANCE_EVERY` seconds from `upkeep`; at each `prune` and `archive`)."""
        if self._is_partitioned():
            with self._autocommit() as tx:
                tx.fetch_one("partition_maintain")
            self._maintained_at = time.monotonic()

    def _is_partitioned(self) -> bool:
        return self.pool is not None and bool(self.partitioned)

    def upkeep(self) -> None:
        super().upkeep()
        if time.monotonic() - self._maintained_at >= MAINTENANCE_EVERY:
            try:
                self.maintain_partitions()
            except StoreError as exc:
                log.warning("cannot make the coming partitions now: %s", exc)

    def fold_counts(self) -> None:
        """Fold the running counts (one row per statement that changed them) into one
        row per channel, status and kind, so that reading them stays cheap."""
        if not self.capabilities.count_triggers:
            return
        with _Autocommit(self, repeatable=True) as tx:
            tx.execute("submission_counts_compact")

    def claim_ready(
        self, channel: str, *, holder: str, limit: int, lease: float
    ) -> list[Submission]:
        return self._claim(_claim_statement(channel, holder, limit, lease, in_doubt=False))

    def claim_in_doubt(
        self, channel: str, *, holder: str, limit: int, lease: float
    ) -> list[Submission]:
        return self._claim(_claim_statement(channel, holder, limit, lease, in_doubt=True))

    def _claim(self, statement: tuple[str, dict[str, Any]]) -> list[Submission]:
        """Find, lock and hold the rows (with their events) in one statement."""
        with self._autocommit() as tx:
            return [self.to_submission(row) for row in tx.fetch_all(*statement)]

    def claim_ready_in(
        self, tx: Tx, channel: str, holder: str, limit: int, lease: float
    ) -> list[Submission]:
        statement = _claim_statement(channel, holder, limit, lease, in_doubt=False)
        return [self.to_submission(row) for row in tx.fetch_all(*statement)]

    def move_in(self, tx: Tx, changes: Sequence[Change]) -> list[Submission | None]:
        """One statement per kind of change in each group of distinct rows (usually
        one in all: a worker's commit of settles, a person's move)."""
        if len(changes) == 1:  # an inline submit's settle, a person's move: no grouping
            [change] = changes
            if isinstance(change, Settle):
                query, params = _settle_statement([(0, change)])
            else:
                query, params = _move_statement([(0, change)])
            row = tx.fetch_one(query, params)
            return self.moved([((query, params), [(0, change)])], [[row] if row else []], 1)
        statements = _statements(changes)
        rows = [tx.fetch_all(query, params) for (query, params), _ in statements]
        return self.moved(statements, rows, len(changes))

    def moved(
        self, statements: Sequence[Statement], rows: Sequence[Sequence[Row]], count: int
    ) -> list[Submission | None]:
        """The rows each statement returned, in the order of the `count` changes asked
        for; None for a change that lost its compare-and-set. A settle's statement
        sends back only what it changed; a move's, the row."""
        moved: list[Submission | None] = [None] * count
        for (_, part), found in zip(statements, rows, strict=True):
            by_id = {change.submission_id: (ordinal, change) for ordinal, change in part}
            for row in found:
                ordinal, change = by_id[row["id"]]
                if isinstance(change, Settle):
                    moved[ordinal] = self.settled(row, change)
                else:
                    moved[ordinal] = self.to_submission(row, change.row)
        return moved

    def async_ops(self, db: Executor) -> AsyncStore:
        """psycopg's asyncio connections on the worker's loop, not `db`'s threads: no
        hop to a thread per operation, no contention for the GIL with threads waiting
        on the database."""
        self.check_open()
        return PostgresAsync(self)

    async def listen(self, wake: Callable[[str], None]) -> None:
        """LISTEN on its own connection; reconnect after the server went away."""
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
                async with conn:
                    await conn.execute("LISTEN denpyo")
                    async for note in conn.notifies():
                        wake(note.payload)
            except psycopg.Error as exc:
                reason = masked(str(exc), self.conninfo)
                log.info("LISTEN connection lost (%s); reconnecting in 1s", reason)
                await asyncio.sleep(1.0)

    def close(self) -> None:
        with self._pool_lock:
            self.closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


class PostgresAsync(AsyncStore):
    """The worker's claims and settles through psycopg's asyncio connections, on
    the worker's own loop (a small pool: a claim and a group commit may run at once)."""

    def __init__(self, store: PostgresStore, max_connections: int = 4) -> None:
        self.store = store
        self.max_connections = max_connections
        self.pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]] = (
            AsyncConnectionPool(
                store.conninfo,
                min_size=1,
                max_size=max_connections,
                kwargs={"row_factory": dict_row, "autocommit": True},
                connection_class=psycopg.AsyncConnection[dict[str, Any]],
                configure=self._durable_session,
                open=False,
            )
        )

    async def _durable_session(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """As the store's own sessions (`PostgresStore._durable_session`)."""
        await conn.execute(self.store.queries["session_durable"])
        await conn.execute(self.store.queries["session_read_committed"])

    async def open(self) -> None:
        """The pool, waiting up to 15 s for its first connection (a worker started
        while the server restarts waits for it); if none comes, one connection more
        says why, so that a server out of reach and one that refuses the settings
        are told apart."""
        conninfo = self.store.conninfo
        try:
            await self.pool.open(wait=True, timeout=15)
        except Exception as exc:
            try:
                last = await psycopg.AsyncConnection.connect(
                    conninfo, connect_timeout=CONNECT_TIMEOUT
                )
                await last.close()
            except psycopg.Error as why:
                raise connect_failure(why, conninfo) from why
            where, reason = shown_url(conninfo), masked(str(exc), conninfo)
            raise StoreUnavailable(f"cannot connect to PostgreSQL at {where}: {reason}") from exc
        if self.store.partitioned is None:  # the layout's queries, before the first claim
            with ERRORS.wrapped():
                async with self.pool.connection() as conn:
                    cursor = await conn.execute(self.store.queries["layout_get"])
                    row = await cursor.fetchone()
            self.store._use_layout(bool(row and row["partitioned"]))

    async def close(self) -> None:
        await self.pool.close()

    async def claim(
        self, channel: str, *, holder: str, limit: int, lease: float, in_doubt: bool = False
    ) -> list[Submission]:
        query, params = _claim_statement(channel, holder, limit, lease, in_doubt)
        rows = await self._run([(query, params)])
        return [self.store.to_submission(row) for row in rows[0]]

    async def move(self, changes: Sequence[Change]) -> list[Submission | None]:
        statements = _statements(changes)
        rows = await self._run([statement for statement, _ in statements])
        return self.store.moved(statements, rows, len(changes))

    async def _run(
        self, statements: list[tuple[str, dict[str, Any]]]
    ) -> list[list[dict[str, Any]]]:
        """Run the statements in one transaction (a lone statement is its own). A
        session the server ended (a restart) rolled everything back: they run again
        on another session, until the pool's sessions from before the restart are
        spent. A transaction that lost to a concurrent one (a deadlock; a
        serialization failure where the session could not be pinned to READ
        COMMITTED) runs again too, as the store's own do (store/conflicts.py)."""
        conflicts = Conflicts(f"worker.{statements[0][0]}")
        while True:
            try:
                with ERRORS.wrapped():
                    rows = await self._run_once(statements)
            except StoreConflict as exc:
                await asyncio.sleep(conflicts.pause(exc))
            else:
                conflicts.done()
                return rows

    async def _run_once(
        self, statements: list[tuple[str, dict[str, Any]]]
    ) -> list[list[dict[str, Any]]]:
        queries = self.store.queries
        for attempt in range(1, self.max_connections + 2):
            try:
                async with self.pool.connection() as conn:
                    if len(statements) == 1:
                        query, params = statements[0]
                        return [await (await conn.execute(queries[query], params)).fetchall()]
                    async with conn.transaction():
                        return [
                            await (await conn.execute(queries[query], params)).fetchall()
                            for query, params in statements
                        ]
            except pg_errors.AdminShutdown:
                if attempt > self.max_connections:
                    raise
        raise AssertionError("unreachable")


CONNECT_TIMEOUT = 10
"""Seconds a first connection may take before the store gives up on the server."""

RECORD_CHUNK = 1000
"""Rows per statement in a bulk enqueue by statements (measured: bench/, enqueue)."""

COPY_FROM = 100
"""Rows from which a bulk enqueue goes by COPY (measured: bench/CHANGES.md)."""

PARTITION_INTERVALS = ("daily", "monthly")
"""How the partitioned layout cuts the rows: a partition per day, or per month."""

PARTITION_LOCK_WAIT = 1.0
"""Seconds a partition's freeze or drop waits for its lock. Claims lock every
partition, so while the drop waits they wait behind it: kept short, and tried again."""

PARTITION_LOCK_TRIES = 5

MAINTENANCE_EVERY = 3600.0
"""Seconds between the workers' calls to pg_partman's maintenance."""

REMOVAL_WAIT = 30.0
"""Seconds a removal waits for older snapshots to go before it puts the deletion off
(`PostgresStore.remove_in`)."""


def _chunks(items: Iterable[NewSubmission], size: int) -> Iterator[list[NewSubmission]]:
    chunk: list[NewSubmission] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _forget(cursor: psycopg.Cursor[Any]) -> None:
    """Undo everything since `SAVEPOINT denpyo_record_many`, and end it."""
    cursor.execute("ROLLBACK TO SAVEPOINT denpyo_record_many")
    cursor.execute("RELEASE SAVEPOINT denpyo_record_many")


def _record_many_params(
    news: Sequence[NewSubmission], actor: str, sealing: Sealing
) -> dict[str, Any]:
    return {
        "actor": actor,
        "channel": [new.channel for new in news],
        "key": [new.key for new in news],
        "idempotency_key": [new.idempotency_key for new in news],
        "payload": [sealing.stored(new) for new in news],
        "ordering_key": [new.ordering_key for new in news],
        "traceparent": [new.traceparent for new in news],
        "tracestate": [new.tracestate for new in news],
    }


def _claim_statement(
    channel: str, holder: str, limit: int, lease: float, in_doubt: bool
) -> tuple[str, dict[str, Any]]:
    query = "submission_claim_in_doubt" if in_doubt else "submission_claim_ready"
    return query, {"channel": channel, "holder": holder, "limit": limit, "lease": lease}


Statement = tuple[tuple[str, dict[str, Any]], Group]
"""A statement (query name, parameters) and the changes it applies."""


def _statements(changes: Sequence[Change]) -> list[Statement]:
    """Per group of distinct rows: its settles by `submission_settle_one` (a lone one:
    an inline submit's) or `submission_settle_many` (a worker's group commit), one
    statement per actor; its moves by `submission_move_one` or `submission_move_batch`."""
    statements: list[Statement] = []
    for group in distinct_groups(changes):
        settles: dict[str, list[tuple[int, Settle]]] = {}
        moves: list[tuple[int, Move]] = []
        for ordinal, change in group:
            if isinstance(change, Settle):
                settles.setdefault(change.actor, []).append((ordinal, change))
            else:
                moves.append((ordinal, change))
        for part in settles.values():
            statements.append((_settle_statement(part), list(part)))
        if moves:
            statements.append((_move_statement(moves), list(moves)))
    return statements


def _settle_statement(part: Sequence[tuple[int, Settle]]) -> tuple[str, dict[str, Any]]:
    if len(part) == 1:
        _, settle = part[0]
        return "submission_settle_one", {
            **settle_params(settle), "actor": settle.actor, "duration_ms": settle.duration_ms
        }  # fmt: skip
    return "submission_settle_many", _settle_params([settle for _, settle in part])


def _move_statement(moves: Sequence[tuple[int, Move]]) -> tuple[str, dict[str, Any]]:
    if len(moves) == 1:
        return "submission_move_one", _one_params(*moves[0])
    return "submission_move_batch", _batch_params(moves)


def _settle_params(settles: Sequence[Settle]) -> dict[str, Any]:
    """One typed array per field a settle changes; an array of nothing but NULLs
    (no error on a run of successes, say) goes as one NULL."""
    return {
        "ids": [settle.submission_id for settle in settles],
        "holders": [settle.holder for settle in settles],
        "statuses": [settle.to_status.value for settle in settles],
        "remote_ids": _column([settle.remote_id for settle in settles]),
        "retry_ins": _column([seconds(settle.retry_in) for settle in settles]),
        "error_kinds": _column(
            [kind.value if (kind := settle.error_kind) else None for settle in settles]
        ),
        "last_errors": _column([settle.last_error for settle in settles]),
        "durations": _column([settle.duration_ms for settle in settles]),
        "actor": settles[0].actor,
    }


def _column(values: list[Any]) -> list[Any] | None:
    return None if all(value is None for value in values) else values


def _one_params(ordinal: int, move: Move) -> dict[str, Any]:
    """A move's compare-and-set, the event it records, its place in the batch, and
    whether the mover has the row's payload (then it is not sent back)."""
    values = move_params(move)
    values.update(
        ord=ordinal, event=move.event, actor=move.actor, detail=move.detail,
        duration_ms=move.duration_ms, payload_known=move.row is not None,
    )  # fmt: skip
    return values


def _batch_params(moves: Sequence[tuple[int, Move]]) -> dict[str, Any]:
    """`submission_move_batch`'s parameters: the moves as JSON, and their row ids."""
    params = [_one_params(ordinal, move) for ordinal, move in moves]
    return {"moves": json.dumps(params), "ids": [move.submission_id for _, move in moves]}


class _Autocommit:
    """A pooled connection for statements that each commit on their own. A class,
    not a generator: an inline submit opens two, where a generator's machinery
    costs a good part of what the pool does."""

    __slots__ = ("conn", "repeatable", "store")

    def __init__(self, store: PostgresStore, *, repeatable: bool = False) -> None:
        self.store = store
        self.conn = store._checkout()
        self.repeatable = repeatable

    def reconnect(self) -> psycopg.Cursor[dict[str, Any]]:
        """A new session for a first statement the server refused unrun (a restart)."""
        self.store.pool.putconn(self.conn)  # broken: the pool replaces it
        self.conn = self.store.pool.getconn()
        return self.conn.cursor()

    def __enter__(self) -> Tx:
        try:
            return PostgresTx(
                self.store, self.conn.cursor(), self.reconnect, repeatable=self.repeatable,
                own=True,
            )  # fmt: skip
        except psycopg.Error as exc:  # no `with` body ran: __exit__ will not return it
            self.store.pool.putconn(self.conn)
            raise ERRORS.translated(exc) from exc

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _tb: Any
    ) -> None:
        if kind is not None and not issubclass(kind, Exception):
            self.conn.close()  # interrupted mid-protocol: never reuse it
        self.store.pool.putconn(self.conn)
        if isinstance(exc, psycopg.Error):
            raise ERRORS.translated(exc) from exc
