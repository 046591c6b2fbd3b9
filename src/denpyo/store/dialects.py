"""The databases denpyo stores in: one `Dialect` record each, all in `DIALECTS` below.

What differs by database and is not SQL is read from its record, never decided
by comparing names: the URL schemes that open it, its store class and the pip
extra that brings its driver, the Django engines that are it, how many database
threads a ledger gives it, the asyncio connections `aenqueue` joins there, how
Django's migrations run its scripts, and the name messages call it by. What
differs in code lives in the database's own module (its connections, how its
driver's errors read, its conversions of times and lists); what differs in
SQL, in its query file and its migrations.

Adding a database is: its module, its SQL file, its migrations, one entry in
`DIALECTS` (store/dialects.py). The module holds a `SqlStore` (store/sqlite.py,
store/postgresql.py and store/mysql.py show how); the SQL file is
`sql/<name>.sql`, the named queries its classes list in `QUERIES`; the
migrations are `migrations/<name>/NNNN_*.sql`, numbered as the others' (the
SQL reference page, docs/reference/sql.md, shows both).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from denpyo.extras import missing
from denpyo.store.async_conn import (
    AiomysqlExecutor,
    AiosqliteExecutor,
    AsyncExecutor,
    AsyncpgExecutor,
    PsycopgExecutor,
)

if TYPE_CHECKING:
    from denpyo.store.base import Store


@dataclass(frozen=True, slots=True)
class Dialect:
    """One database denpyo stores in."""

    name: str
    """`Store.dialect`, the name of its query file and migrations folder, and
    Django's `connection.vendor` for it."""
    title: str
    """The database as messages name it ("MariaDB")."""
    schemes: tuple[str, ...]
    """The URL schemes that open it, in lower case; its name first."""
    store: str
    """Its store class as "module:Class", imported on first use: a missing driver
    then says which extra to install."""
    extra: str | None
    """The pip extra that installs its driver (None: the standard library's)."""
    embedded: bool
    """A file the process opens itself, no server: its URL names a path
    (`scheme:///relative/path`, `scheme:////absolute/path`)."""
    db_threads: int
    """The threads a ledger runs store operations on (SQLite: one writer at a time)."""
    executors: tuple[type[AsyncExecutor], ...]
    """The asyncio connections `aenqueue(conn=...)` joins (store/async_conn.py)."""
    django_engines: tuple[str, ...] = ()
    """The last part of the Django ENGINEs that are this database."""
    django_options: tuple[str, ...] = ()
    """The Django OPTIONS that mean the same as options of its URL."""
    socket_options: tuple[str, ...] = ()
    """The URL options that say where the server's Unix socket is: its path, then
    its port where the port is part of the socket's name (libpq)."""
    whole_scripts: bool = False
    """A migration script runs as one (PostgreSQL's function bodies hold
    semicolons); otherwise one statement at a time (`queries.split_statements`)."""
    session_lock: bool = False
    """`schema_lock` takes a lock of the session, not of the transaction (MariaDB,
    whose DDL commits on its own): it answers whether it got it (`locked`), and
    `schema_unlock` releases it."""
    parent: str | None = None
    """A variant of another database's store (the distributed SQL profile of
    PostgreSQL's): its SQL is the parent's, with an overlay `sql/<parent>-<name>.sql`
    of the statements it changes, and migrations `migrations/<parent>-<name>/` that
    replace the parent's of the same number. Tests and messages list only the
    databases without one."""

    def store_class(self) -> type[Store]:
        """The store class, imported now; ConfigurationError naming the extra to
        install when its driver is missing."""
        module, _, name = self.store.partition(":")
        try:
            found: type[Store] = getattr(importlib.import_module(module), name)
        except ImportError as exc:
            if self.extra is None:
                raise
            raise missing(self.extra, f"a {self.title} URL", exc) from exc
        return found


DIALECTS: dict[str, Dialect] = {dialect.name: dialect for dialect in (
    Dialect(
        name="sqlite", title="SQLite", schemes=("sqlite",),
        store="denpyo.store.sqlite:SqliteStore", extra=None, embedded=True, db_threads=1,
        executors=(AiosqliteExecutor,), django_engines=("sqlite3", "spatialite"),
    ),
    Dialect(
        name="postgresql", title="PostgreSQL",
        schemes=("postgresql", "postgres", "postgresql+psycopg"),
        store="denpyo.store.postgresql:PostgresStore", extra="postgresql", embedded=False,
        db_threads=4, executors=(PsycopgExecutor, AsyncpgExecutor),
        django_engines=("postgresql", "postgresql_psycopg2", "postgis"),
        django_options=("sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout",
                        "options", "target_session_attrs", "service", "passfile"),
        socket_options=("host", "port"), whole_scripts=True,
    ),
    Dialect(
        name="mysql", title="MariaDB", schemes=("mysql", "mariadb", "mysql+pymysql"),
        store="denpyo.store.mysql:MysqlStore", extra="mysql", embedded=False, db_threads=4,
        executors=(AiomysqlExecutor,), django_engines=("mysql",),
        django_options=("connect_timeout", "unix_socket"), socket_options=("unix_socket",),
        session_lock=True,
    ),
    Dialect(
        name="distributed", title="distributed SQL (YugabyteDB, CockroachDB)",
        schemes=("yugabytedb", "cockroachdb"),
        store="denpyo.store.distributed:DistributedStore", extra="postgresql", embedded=False,
        db_threads=4, executors=(), socket_options=("host", "port"), whole_scripts=True,
        parent="postgresql",
    ),
)}  # fmt: skip
"""Every database denpyo stores in, by name, in the order messages list them; the
variants (`parent`) last."""

DATABASES: tuple[str, ...] = tuple(name for name, dialect in DIALECTS.items() if not dialect.parent)
"""The databases themselves, without their variants: what tests run on."""

BY_SCHEME: dict[str, Dialect] = {
    scheme: dialect for dialect in DIALECTS.values() for scheme in dialect.schemes
}
"""The database each URL scheme opens."""
