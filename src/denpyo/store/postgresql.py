"""PostgreSQL: the production store, through psycopg 3 and a connection pool.

Claims use `FOR UPDATE SKIP LOCKED`, so workers on many hosts take disjoint
rows without waiting on each other; `enqueue` sends a NOTIFY that fires when
the caller's transaction commits, so workers wake without polling.

Here: the store and its transactions. Beside it: psycopg's errors
(postgresql_driver.py), the worker's asyncio connections and the claim and move
statements (postgresql_async.py), the partitioned layout (postgresql_partitions.py).
A variant that speaks PostgreSQL's protocol subclasses `PostgresStore`
(store/dialects.py says how).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
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
from psycopg_pool import ConnectionPool

from denpyo.domain.durability import Durability
from denpyo.domain.moves import Change, Settle
from denpyo.domain.submission import Submission
from denpyo.errors import ConfigurationError, InvalidDatabaseURL, StoreError, StoreUnavailable
from denpyo.store import masked, shown_url
from denpyo.store.base import AsyncStore, NewSubmission, Row, Tx
from denpyo.store.conflicts import again_on_conflict, in_retried, retried
from denpyo.store.dialects import DIALECTS, POSTGRESQL, POSTGRESQL_PARTITIONED, Dialect
from denpyo.store.params import insert_params
from denpyo.store.postgresql_async import (
    PostgresAsync,
    Statement,
    _claim_statement,
    _move_statement,
    _settle_statement,
    _statements,
)
from denpyo.store.postgresql_driver import CONNECT_TIMEOUT, ERRORS, connect_failure
from denpyo.store.postgresql_partitions import MAINTENANCE_EVERY, PartitionedLayout
from denpyo.store.queries import load_queries
from denpyo.store.sealing import Sealing

log = logging.getLogger("denpyo.store")


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


class PostgresStore(PartitionedLayout):
    """The writes in one statement each, events and NOTIFY included: fewer round
    trips on the hot path than the portable writes of store/portable.py."""

    dialect = POSTGRESQL.name
    driver_errors = ERRORS
    QUERIES: ClassVar[frozenset[str]] = frozenset(
        {
            "record_submission",
            "record_submissions_many",
            "claim_submissions_ready",
            "claim_submissions_in_doubt",
            "move_submission_one",
            "move_submissions_batch",
            "settle_submissions_many",
            "settle_submission_one",
            "compact_submission_counts",
            "copy_submissions",
            "record_submissions_copied",
            "get_submissions_recorded_before",
            "get_keys_recorded_before",
            "find_snapshot_holder",
            "remove_submissions",
            "get_layout",
            "check_partman_available",
            "make_session_durable",
            "make_session_read_committed",
            "get_durability",
            "get_replica_lag",
        }
    )

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
        row = tx.fetch_one("get_layout")
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
        (`make_session_durable`): the slip must be durable before its call leaves. Its
        transactions run READ COMMITTED (`make_session_read_committed`), whatever the
        database's default: the claims' SKIP LOCKED and the moves' compare-and-set
        are written for it; under SERIALIZABLE, concurrent settles would abort each
        other."""
        conn.execute(self.queries["make_session_durable"])
        conn.execute(self.queries["make_session_read_committed"])

    def replica_lag(self) -> float | None:
        if not self.capabilities.durability_checks:
            return None
        with self.reading() as tx:
            row = tx.fetch_one("get_replica_lag")
        return None if row is None or row["lag"] is None else float(row["lag"])

    def durability(self) -> Durability | None:
        if not self.capabilities.durability_checks:
            return None
        with self.reading() as tx:
            row = tx.fetch_one("get_durability")
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
        row = tx.fetch_one("record_submission", params)
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
                        "record_submissions_many", _record_many_params(chunk, actor, self.sealing)
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
        query = self.queries["record_submissions_many"]
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
        and wake the workers in one statement (`record_submissions_copied` says how
        it finds the rows), under a savepoint.

        COPY has no ON CONFLICT: a key recorded already fails it, at its end. Then
        the savepoint is rolled back with every row of the copy, and the rows go in
        again by `record_submissions_many`, which skips such keys: a batch that
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
                with cursor.copy(self.queries["copy_submissions"]) as copy:
                    for new in news:
                        written.append(new)
                        copy.write_row(
                            (
                                new.channel,
                                new.key,
                                new.idempotency_key,
                                self.sealing.stored(new),
                                new.ordering_key,
                                "requesting",
                                0,
                                "now",
                                new.traceparent,
                                new.tracestate,
                            )
                        )
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
                row = tx.fetch_one("record_submissions_copied", params)
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
                for row in tx.fetch_all("get_submissions_recorded_before", params)
            ]
            found += [
                (int(row["ord"]), self.to_kept(row))
                for row in tx.fetch_all("get_keys_recorded_before", params)
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
                row = tx.fetch_one("remove_submissions", params)
            return int(row["removed"]) if row else 0
        remembered = self._remember(params)
        # A crash from here until (c) commits leaves keys remembered for rows still
        # live: reads prefer the rows, inserts meet them, a later removal rewrites them.
        if remembered is None or not int(remembered["kept"]):
            return 0
        if not self._wait_for_snapshots_before(str(remembered["xid"])):
            return 0
        with self._autocommit() as tx:  # (c): one statement, so all of it or none
            row = tx.fetch_one("remove_submissions", params)
        return int(row["removed"]) if row else 0

    @retried
    def _remember(self, params: dict[str, Any]) -> Row | None:
        """`remove_in`'s (a): the keys remembered, committed; how many, and the
        transaction's id."""
        with self.transaction() as tx:
            return tx.fetch_one("remember_keys", params)

    def _wait_for_snapshots_before(self, xid: str) -> bool:
        """Whether, within `REMOVAL_WAIT` seconds, no other session of this database
        holds a snapshot as old as transaction `xid`. Each look is a transaction of
        its own: pg_stat_activity is read afresh in each."""
        deadline = time.monotonic() + REMOVAL_WAIT
        pause = 0.01
        with self._autocommit() as tx:
            while True:
                holder = tx.fetch_one("find_snapshot_holder", {"xid": xid})
                if holder is None:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning(
                        "removal put off after %.0f s: session pid %s may still read the "
                        "table as it was before the removed keys were remembered (its "
                        "snapshot %s transactions old, its transaction open %s s); nothing "
                        "was deleted, the rows stay for a later removal",
                        REMOVAL_WAIT,
                        holder["pid"],
                        holder["xmin_age"],
                        "?" if holder["seconds"] is None else f"{holder['seconds']:.1f}",
                    )
                    return False
                time.sleep(min(pause, left))
                pause = min(pause * 2, 0.1)

    def _is_partitioned(self) -> bool:
        return self.pool is not None and bool(self.partitioned)

    def fold_counts(self) -> None:
        """Fold the running counts (one row per statement that changed them) into one
        row per channel, status and kind, so that reading them stays cheap."""
        if not self.capabilities.count_triggers:
            return
        with _Autocommit(self, repeatable=True) as tx:
            tx.execute("compact_submission_counts")

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
        """LISTEN on its own connection; reconnect after the server went away. Without
        `notifies` (the distributed SQL profile), nothing: workers poll."""
        if not self.capabilities.notifies:
            return
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


RECORD_CHUNK = 1000
"""Rows per statement in a bulk enqueue by statements (measured: bench/, enqueue)."""

COPY_FROM = 100
"""Rows from which a bulk enqueue goes by COPY (measured: bench/CHANGES.md)."""

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
                self.store,
                self.conn.cursor(),
                self.reconnect,
                repeatable=self.repeatable,
                own=True,
            )
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
