"""A caller's connection: the check that it works in the ledger's database, and
the bridge that runs the store's writes in an asyncio application's transaction.

`record(..., conn=c)`, `record_many` and `get` run inside the caller's open
transaction on `c`. A row written through a connection to another database
would land where no worker looks, so each connection is checked first
(`check_same_database`). `arecord` and `arecord_many` take an asyncio
connection (store/async_conn.py): the sync writes run in a thread, and each of
their statements goes back to the event loop to run on that connection.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from denpyo.domain.submission import Submission
from denpyo.errors import ConfigurationError
from denpyo.store.async_conn import AsyncExecutor, BridgedConnection, BridgedTx
from denpyo.store.base import NewSubmission, Row, Tx
from denpyo.store.connections import ConnectionModes
from denpyo.store.dialects import DIALECTS, Dialect

EXECUTORS: dict[tuple[str, str], tuple[Dialect, type[AsyncExecutor]]] = {
    executor.driver: (dialect, executor)
    for dialect in DIALECTS.values()
    for executor in dialect.executors  # a variant's callers use its parent's drivers
}
"""(driver module, connection class) -> its database and the executor that runs on it."""


class CallerConnections(ConnectionModes):
    """The caller's connections: checked once, and bridged from asyncio."""

    def __init__(self) -> None:
        super().__init__()
        self._own_identity: Row | None = None
        self._identity_lock = threading.Lock()
        self._same: weakref.WeakSet[Any] = weakref.WeakSet()  # callers' connections checked

    def check_same_database(self, tx: Tx, conn: Any) -> None:
        """Refuse a caller's connection to another database: a row written there lands
        where no worker looks. Each server says which database the connection works in
        (`get_database_identity`), once per connection where the driver lets it be
        remembered (sqlite3's cannot: there the question is a local call)."""
        remembered = _weakly_referable(conn)
        if remembered and conn in self._same:
            return
        if self._own_identity is None:
            with self._identity_lock:  # asked once, whichever thread's caller comes first
                if self._own_identity is None:
                    self._own_identity = self.own_identity()
        theirs = tx.fetch_one("get_database_identity")
        if theirs is None or not self.same_database(self._own_identity or {}, theirs):
            raise ConfigurationError(
                f"conn works in {_described(theirs)}, but this ledger stores in "
                f"{_described(self._own_identity)}: nothing was written"
            )
        if remembered:
            self._same.add(conn)

    def own_identity(self) -> Row | None:
        """Which database the store's own connections work in (`get_database_identity`)."""
        with self.reading() as own:
            return own.fetch_one("get_database_identity")

    def same_database(self, ours: Row, theirs: Row) -> bool:
        return dict(ours) == dict(theirs)

    @contextmanager
    def _bridged(self, conn: BridgedConnection) -> Iterator[Tx]:
        with self.errors():
            tx = BridgedTx(conn, self.queries, self.duplicate)
            self.check_same_database(tx, conn.executor.conn)
            self.learn_layout(tx)
            yield BridgedTx(conn, self.queries, self.duplicate)  # the layout's queries

    async def arecord(
        self, new: NewSubmission, *, actor: str, conn: Any
    ) -> tuple[Submission, bool]:
        bridged = await self._bridge(conn)
        return await asyncio.to_thread(self.record, new, actor=actor, conn=bridged)

    async def arecord_many(
        self,
        news: Iterable[NewSubmission],
        *,
        actor: str,
        check: Callable[[NewSubmission, Submission], None],
        conn: Any,
    ) -> int:
        bridged = await self._bridge(conn)
        return await asyncio.to_thread(
            self.record_many, news, actor=actor, check=check, conn=bridged
        )

    async def _bridge(self, conn: Any) -> BridgedConnection:
        dialect, executor = await executor_for(conn)
        if dialect.name != self.dialect_record.family:
            raise ConfigurationError(
                f"this ledger stores in {self.dialect}; conn is a {dialect.name} "
                "connection: nothing was written"
            )
        return BridgedConnection(executor, asyncio.get_running_loop())


async def executor_for(conn: Any) -> tuple[Dialect, AsyncExecutor]:
    """The database of an application's asyncio connection and the executor for it;
    SQLAlchemy's are unwrapped to their driver connection, in the session's
    transaction."""
    module = type(conn).__module__
    if module.startswith("sqlalchemy"):
        if hasattr(conn, "get_bind"):  # AsyncSession: its connection, begun if need be
            conn = await conn.connection()
        raw = await conn.get_raw_connection()
        conn = raw.driver_connection
    for klass in type(conn).__mro__:
        found = EXECUTORS.get((klass.__module__.split(".")[0], klass.__name__))
        if found is not None:
            dialect, executor = found
            return dialect, executor(conn)
    raise ConfigurationError(
        f"aenqueue cannot join a {module}.{type(conn).__name__} transaction; conn must be "
        "a psycopg AsyncConnection, an asyncpg Connection, an aiosqlite Connection, an "
        "aiomysql Connection, or a SQLAlchemy AsyncConnection or AsyncSession"
    )


def _weakly_referable(value: Any) -> bool:
    try:
        weakref.ref(value)
    except TypeError:
        return False
    return True


def _described(identity: Row | None) -> str:
    if not identity:
        return "an unknown database"
    return ", ".join(f"{name} {value}" for name, value in identity.items())
