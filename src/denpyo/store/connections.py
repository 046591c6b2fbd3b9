"""How a SQL store reaches its database: its connection modes, and its driver's errors.

A database's module supplies `transaction()`, on the store's own connection or
inside the caller's open transaction on theirs, and where it has a cheaper way,
`reading()` and `one_statement()`. `_in` picks the store's transaction or the
caller's, an asyncio connection reached from a thread included (store/callers.py).

Whatever the driver raises leaves the store as StoreError, or SchemaError where
it means that denpyo's tables are missing, or StoreUnavailable where the server
could not be reached or dropped the connection, or StoreConflict where the
transaction lost to a concurrent one (a serialization failure, a deadlock), with
the driver's error as `__cause__`. Each database's module says which errors are
its driver's, which of them mean a missing table, a server out of reach or a
conflict, and how one reads (`DriverErrors`); the wrapping is written once, here.
A transaction of the store's own that ends in StoreConflict is run again
(store/conflicts.py).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, ClassVar, Generic, TypeVar

from denpyo.errors import SchemaError, StoreConflict, StoreError, StoreUnavailable
from denpyo.store.async_conn import BridgedConnection
from denpyo.store.base import Store, Tx
from denpyo.store.dialects import DIALECTS, Dialect
from denpyo.store.queries import load_queries

E = TypeVar("E", bound=BaseException)

MISSING_TABLES = "the denpyo tables are missing: run `denpyo migrate`"


class DriverErrors(Generic[E]):
    """How one driver's errors leave a store: `error`, the class of all of them;
    `missing_table(exc)`, whether one means that denpyo's tables are missing;
    `unavailable(exc)`, whether one means the server is out of reach (an outage,
    not a refused statement); `conflict(exc)`, whether the transaction lost to a
    concurrent one and may succeed if run again, and `waited(exc)`, whether it first
    waited out the database's lock timeout; `message(exc)`, its text for the
    StoreError (named after the database)."""

    __slots__ = (
        "conflict",
        "error",
        "message",
        "missing_table",
        "title",
        "unavailable",
        "waited",
    )

    def __init__(
        self,
        dialect: Dialect,
        error: type[E],
        missing_table: Callable[[E], bool],
        message: Callable[[E], str] = str,
        unavailable: Callable[[E], bool] = lambda exc: False,
        conflict: Callable[[E], bool] = lambda exc: False,
        waited: Callable[[E], bool] = lambda exc: False,
    ) -> None:
        self.title = dialect.title
        self.error = error
        self.missing_table = missing_table
        self.message = message
        self.unavailable = unavailable
        self.conflict = conflict
        self.waited = waited

    def translated(self, exc: E) -> StoreError | SchemaError:
        """A driver error as StoreError (missing tables as SchemaError, a server out
        of reach as StoreUnavailable, a conflict as StoreConflict)."""
        if self.missing_table(exc):
            return SchemaError(MISSING_TABLES)
        if self.unavailable(exc):
            return StoreUnavailable(f"{self.title} unavailable: {self.message(exc)}")
        if self.conflict(exc):
            conflict = StoreConflict(f"{self.title}: {self.message(exc)}")
            conflict.waited = self.waited(exc)
            return conflict
        return StoreError(f"{self.title}: {self.message(exc)}")

    @contextmanager
    def wrapped(self) -> Iterator[None]:
        """Driver errors leave as StoreError (missing tables as SchemaError), cause kept."""
        try:
            yield
        except self.error as exc:
            raise self.translated(exc) from exc


class ConnectionModes(Store):
    """The contexts a SQL store's operations run in, each yielding a `Tx`."""

    driver_errors: ClassVar[DriverErrors[Any]]
    """How the database's driver errors read (its module sets it)."""

    def __init__(self) -> None:
        self.queries = load_queries(self.dialect)

    @property
    def dialect_record(self) -> Dialect:
        return DIALECTS[self.dialect]

    @abstractmethod
    def transaction(self, conn: Any = None) -> AbstractContextManager[Tx]:
        """A transaction on the store's own connection (committed at the end), or
        inside the caller's open transaction on `conn` (never committed here)."""

    def one_statement(self, conn: Any = None) -> AbstractContextManager[Tx]:
        """The context of an operation a database may complete in one atomic statement
        (PostgreSQL's), sparing the BEGIN and COMMIT round trips."""
        return self.transaction(conn)

    def reading(self) -> AbstractContextManager[Tx]:
        """A transaction that only reads (SQLite: without taking the write lock)."""
        return self.transaction()

    def errors(self) -> AbstractContextManager[None]:
        """Where the driver's errors become StoreError (and missing tables SchemaError)."""
        return self.driver_errors.wrapped()

    def learn_layout(self, tx: Tx) -> None:
        """Before the first statement on a caller's connection, take the queries of the
        layout the tables have, if the store's own connections have not read it yet
        (PostgreSQL's partitioned layout; one layout elsewhere)."""

    def duplicate(self, exc: BaseException) -> bool:
        """Whether an INSERT's error means its channel and key exist (where the
        database has no ON CONFLICT and says so by an error)."""
        return False

    def _in(self, conn: Any, *, one_statement: bool = False) -> AbstractContextManager[Tx]:
        """The store's transaction, or the caller's (`conn`: a driver connection, or
        an asyncio one reached from a thread). A closed store joins no caller's
        transaction either: it opens nothing for one, so only here does it notice."""
        if self.closed:
            self.check_open()
        if isinstance(conn, BridgedConnection):
            return self._bridged(conn)
        return self.one_statement(conn) if one_statement else self.transaction(conn)

    @abstractmethod
    def _bridged(self, conn: BridgedConnection) -> AbstractContextManager[Tx]:
        """The caller's transaction on an asyncio connection (store/callers.py)."""
