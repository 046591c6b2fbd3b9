"""The test side of each database denpyo stores in, keyed by `Dialect.name`
(store/dialects.py): how the tests make an empty or a migrated database of it and
drop it, where its server is (an environment variable, and its default), how an
application connects to it with its driver (sync and asyncio), and how its plans
are asked for. The fixtures of tests/conftest.py read these records; a name
without one raises, and tests/unit/test_database_records.py fails for a database a URL
opens that has none here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar

import denpyo

POSTGRES_PARTITIONS = os.environ.get("DENPYO_TEST_POSTGRES_PARTITIONS") or None
"""`daily` or `monthly`: the PostgreSQL tests run on the partitioned layout (`make
test` runs the store's and the ledger's tests so once more)."""
POSTGRES_ISOLATION = os.environ.get("DENPYO_TEST_POSTGRES_ISOLATION") or None
"""`serializable` (or `repeatable read`): every PostgreSQL database the tests make
has it as its default isolation (`make test-serializable`)."""

POSTGRES_PROFILE = os.environ.get("DENPYO_TEST_POSTGRES_PROFILE") or None
"""`distributed`: the PostgreSQL tests open their databases under that variant's
profile (`?denpyo_profile=distributed`, `Dialect.profile`: `make test-distributed`)."""

TEMPLATE = f"denpyo_template_{uuid.uuid4().hex[:8]}"
"""The migrated PostgreSQL database every PostgreSQL test copies (one per session)."""


def with_database(url: str, name: str) -> str:
    """`url` with its database name replaced by `name`."""
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


def without_profile(url: str) -> str:
    """A URL a driver reads itself: the profile's option off."""
    return url.partition("?denpyo_profile=")[0]


class MadeAhead:
    """Migrated databases made one test ahead and dropped after it, in a thread, so
    that a test waits for neither (a copy of the PostgreSQL template takes about
    0.2 s, a MariaDB migration 0.1 s, a drop 0.05 s: a minute over the suite). One
    whose making failed (a server restart) is made again on the spot; one whose
    drop failed is dropped again at the end."""

    def __init__(self, make: Callable[[], str], drop: Callable[[str], None]) -> None:
        self.make, self.drop = make, drop
        self.thread = ThreadPoolExecutor(1)
        self.ahead: Future[str] | None = None
        self.undropped: list[str] = []

    @contextlib.contextmanager
    def take(self) -> Iterator[str]:
        made, self.ahead = self.ahead, self.thread.submit(self.make)
        try:
            name = made.result() if made is not None else self.make()
        except Exception:
            name = self.make()
        try:
            yield name
        finally:
            self.thread.submit(self._drop, name)

    def _drop(self, name: str) -> None:
        try:
            self.drop(name)
        except Exception:
            self.undropped.append(name)

    def close(self) -> None:
        if self.ahead is not None:
            with contextlib.suppress(Exception):
                self.undropped.append(self.ahead.result())
        self.thread.shutdown()
        for name in self.undropped:
            with contextlib.suppress(Exception):  # the server may be gone by now
                self.drop(name)


class Database(ABC):
    """One database as the tests use it."""

    name: ClassVar[str]
    """Its `Dialect.name`."""
    explain: ClassVar[str] = "EXPLAIN"
    """What goes before a query to read its plan."""
    plan_settings: ClassVar[tuple[str, ...]] = ()
    """Statements a connection runs before it reads plans, so that an empty table's
    plan shows whether an index can serve the query at all."""
    row_lock_settings: ClassVar[tuple[str, ...]] = ()
    """Statements a connection runs before it locks rows `FOR UPDATE`, so that it
    locks only the rows it names."""
    async_drivers: ClassVar[tuple[str, ...]]
    """The asyncio drivers `app_transaction` opens, the usual one first."""
    pooled: ClassVar[bool] = False
    """Its store keeps a pool of connections (psycopg_pool's)."""
    stop_signal: ClassVar[int] = signal.SIGINT
    """The signal the tests stop a worker with (Ctrl-C's; a service manager's SIGTERM)."""
    profile: ClassVar[str | None] = None
    """The variant's profile its databases are opened under (`Dialect.profile`: the
    URL option `denpyo_profile`), or None: the database itself."""

    def sessions_query(self, name: str) -> str | None:
        """SQL that counts the server's sessions in database `name` (None: no server)."""
        return None

    def other_spelling(self, url: str) -> str:
        """Another URL of the same database (`localhost` for `127.0.0.1`)."""
        return url.replace("127.0.0.1", "localhost")

    @abstractmethod
    def empty(self, tmp_path: Path) -> AbstractContextManager[str]:
        """The URL of a fresh database with no denpyo tables, dropped after."""

    @abstractmethod
    def migrated(
        self, tmp_path: Path, ahead: Callable[[], dict[str, MadeAhead]]
    ) -> AbstractContextManager[str]:
        """The URL of a fresh, migrated database, dropped after (`ahead()`: the
        databases of the servers made one test ahead)."""

    @abstractmethod
    def connect(self, url: str) -> Any:
        """A connection of its driver (DB-API), as an application opens one."""

    @abstractmethod
    def app_connection(self, url: str) -> AbstractAsyncContextManager[Any]:
        """A connection of its asyncio driver, not autocommitting."""

    @contextlib.asynccontextmanager
    async def app_transaction(self, url: str, driver: str | None = None) -> AsyncIterator[Any]:
        """A connection of `driver` (one of `async_drivers`; default: the usual) in a
        transaction, committed when the block ends without an error."""
        if driver not in (None, self.async_drivers[0]):
            raise ValueError(f"{self.name}: no driver {driver} here")
        async with self.app_connection(url) as conn:
            yield conn
            await conn.commit()


class ServerDatabase(Database):
    """A database on a shared server: each test's database is made and dropped there."""

    env: ClassVar[str]
    """The environment variable that holds its server's admin URL."""
    default_url: ClassVar[str]
    """Its server's admin URL when the variable is not set."""

    @property
    def admin_url(self) -> str:
        return os.environ.get(self.env, self.default_url)

    def url(self, name: str) -> str:
        """The URL of database `name` on the server (under `profile`, if one is set)."""
        url = with_database(self.admin_url, name)
        return f"{url}?denpyo_profile={self.profile}" if self.profile else url

    @abstractmethod
    def create(self, *, migrated: bool) -> str:
        """Make a database on the server; its name."""

    @abstractmethod
    def drop(self, name: str) -> None:
        """Drop a database this record made."""

    def made_ahead(self) -> MadeAhead:
        return MadeAhead(lambda: self.create(migrated=True), self.drop)

    @contextlib.contextmanager
    def empty(self, tmp_path: Path) -> Iterator[str]:
        name = self.create(migrated=False)
        try:
            yield self.url(name)
        finally:
            self.drop(name)

    @contextlib.contextmanager
    def migrated(self, tmp_path: Path, ahead: Callable[[], dict[str, MadeAhead]]) -> Iterator[str]:
        with ahead()[self.name].take() as name:
            yield self.url(name)


class Sqlite(Database):
    name = "sqlite"
    explain = "EXPLAIN QUERY PLAN"
    async_drivers = ("aiosqlite",)

    def other_spelling(self, url: str) -> str:
        return f"sqlite:///{Path(url.removeprefix('sqlite:///')).resolve()}"

    @contextlib.contextmanager
    def empty(self, tmp_path: Path) -> Iterator[str]:
        yield f"sqlite:///{tmp_path}/empty.db"

    @contextlib.contextmanager
    def migrated(self, tmp_path: Path, ahead: Callable[[], dict[str, MadeAhead]]) -> Iterator[str]:
        url = f"sqlite:///{tmp_path}/ledger.db"
        with denpyo.Ledger(url) as ledger:
            ledger.migrate()
        yield url

    def connect(self, url: str) -> Any:
        import sqlite3

        return sqlite3.connect(url.removeprefix("sqlite:///"))

    @contextlib.asynccontextmanager
    async def app_connection(self, url: str) -> AsyncIterator[Any]:
        import aiosqlite

        async with aiosqlite.connect(url.removeprefix("sqlite:///"), timeout=30) as lite:
            yield lite


class Postgres(ServerDatabase):
    name = "postgresql"
    env = "DENPYO_TEST_POSTGRES_URL"
    default_url = "postgresql://postgres@127.0.0.1:5432/postgres"
    plan_settings = ("SET enable_seqscan = off",)
    async_drivers = ("psycopg", "asyncpg")
    pooled = True
    stop_signal = signal.SIGTERM
    profile = POSTGRES_PROFILE

    def sessions_query(self, name: str) -> str:
        return f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{name}'"

    @contextlib.asynccontextmanager
    async def app_transaction(self, url: str, driver: str | None = None) -> AsyncIterator[Any]:
        if driver != "asyncpg":
            async with super().app_transaction(url, driver) as conn:
                yield conn
            return
        import asyncpg

        conn = await asyncpg.connect(without_profile(url))
        try:
            async with conn.transaction():
                yield conn
        finally:
            await conn.close()

    def create(self, *, migrated: bool) -> str:
        """A copy of the migrated template (`make_template`), or an empty database;
        with `POSTGRES_ISOLATION` as its default (not copied from a template)."""
        import psycopg

        name = f"denpyo_t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            clause = f" TEMPLATE {TEMPLATE}" if migrated else ""
            admin.execute(f"CREATE DATABASE {name}{clause}")
        if POSTGRES_ISOLATION:
            self.default_isolation(name, POSTGRES_ISOLATION)
        return name

    def drop(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def make_template(self) -> None:
        """The migrated database every test copies (on `POSTGRES_PARTITIONS`' layout)."""
        import psycopg

        self.drop(TEMPLATE)
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {TEMPLATE}")
        if POSTGRES_ISOLATION:
            self.default_isolation(TEMPLATE, POSTGRES_ISOLATION)
        with denpyo.Ledger(self.url(TEMPLATE)) as ledger:
            ledger.migrate(partitions=POSTGRES_PARTITIONS)

    def default_isolation(self, name: str, isolation: str) -> None:
        """Make `isolation` the default of every later session of database `name`, as
        an application that wants SERIALIZABLE everywhere does."""
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(
                f"ALTER DATABASE {name} SET default_transaction_isolation = '{isolation}'"
            )

    def connect(self, url: str) -> Any:
        import psycopg

        return psycopg.connect(without_profile(url))

    @contextlib.asynccontextmanager
    async def app_connection(self, url: str) -> AsyncIterator[Any]:
        import psycopg

        pg = await psycopg.AsyncConnection.connect(without_profile(url))
        try:
            yield pg
        finally:
            await pg.close()


class Mariadb(ServerDatabase):
    name = "mysql"
    env = "DENPYO_TEST_MYSQL_URL"
    default_url = "mysql://root@127.0.0.1:3306/test"
    # READ COMMITTED and one row at a time: under REPEATABLE READ a scan of a tiny
    # table would keep every row it read locked, not only those named.
    row_lock_settings = ("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", "BEGIN")
    async_drivers = ("aiomysql",)

    def sessions_query(self, name: str) -> str:
        return f"SELECT count(*) FROM information_schema.processlist WHERE db = '{name}'"

    def admin(self, statement: str) -> None:
        """Run one statement on the server, autocommitted."""
        import pymysql

        from denpyo.store.mysql import connect_args

        admin = pymysql.connect(**connect_args(self.admin_url), autocommit=True)
        try:
            admin.cursor().execute(statement)
        finally:
            admin.close()

    def create(self, *, migrated: bool) -> str:
        name = f"denpyo_t_{uuid.uuid4().hex[:12]}"
        self.admin(f"CREATE DATABASE {name}")
        if migrated:
            with denpyo.Ledger(self.url(name)) as ledger:
                ledger.migrate()
        return name

    def drop(self, name: str) -> None:
        self.admin(f"DROP DATABASE IF EXISTS {name}")

    def connect(self, url: str) -> Any:
        import pymysql

        from denpyo.store.mysql import connect_args

        return pymysql.connect(**connect_args(url))

    @contextlib.asynccontextmanager
    async def app_connection(self, url: str) -> AsyncIterator[Any]:
        import aiomysql

        from denpyo.store.mysql import connect_args

        args = connect_args(url)
        conn = await aiomysql.connect(
            host=args["host"],
            port=args["port"],
            user=args.get("user", "root"),
            password=args.get("password", ""),
            db=args["database"],
            autocommit=False,
        )
        try:
            yield conn
        finally:
            conn.close()


POSTGRES = Postgres()
MARIADB = Mariadb()
TEST_DATABASES: dict[str, Database] = {db.name: db for db in (Sqlite(), POSTGRES, MARIADB)}
"""Every database the tests run on, by `Dialect.name`."""
SERVERS: tuple[ServerDatabase, ...] = (POSTGRES, MARIADB)
"""The databases on a shared server (made one test ahead: `MadeAhead`)."""


def database_record(name: str) -> Database:
    """The record of a database by its `Dialect.name`; KeyError naming the file for one
    the tests do not know yet."""
    try:
        return TEST_DATABASES[name]
    except KeyError:
        raise KeyError(f"{name}: no test record in tests/database_records.py") from None
