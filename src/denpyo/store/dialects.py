"""The databases denpyo stores in: one `Dialect` record each, all in `DIALECTS` below.

What differs by database and is not SQL is read from its record, never decided
by comparing names: the URL schemes that open it, its store class and the pip
extra that brings its driver, the Django engines that are it, how many database
threads a ledger gives it, the asyncio connections `aenqueue` joins there, how
Django's migrations run its scripts, the name messages call it by, and what the
database can do (`Capabilities`: the engine and the tests ask those, never the
name). What differs in code lives in the database's own module (its
connections, how its driver's errors read, its conversions of times and lists);
what differs in SQL, in its query file and its migrations.

Adding a database is: its module, its SQL file, its migrations, one entry in
`DIALECTS`. The module holds a `SqlStore` (store/sqlite.py, store/postgresql.py
and store/mysql.py show how); the SQL file is `sql/<name>.sql`, the named
queries its classes list in `QUERIES`; the migrations are
`migrations/<name>/NNNN_*.sql`, numbered as the others' (the SQL reference
page, docs/reference/sql.md, shows both).

A variant of a database (another server that speaks its protocol, or another
layout of its tables) names it as its `parent` and holds only what differs:

- its SQL is the parent's file plus an overlay, `sql/<name>.sql`, holding only
  the queries it changes (same name: replaced) or adds, and fragments of its
  own beside the parent's (`queries.load_queries` walks the chain);
- its migrations are the parent's, `migrations/<name>/NNNN_*.sql` replacing the
  script of the same number and adding its own (`queries.load_migrations`);
  with `squashed`, its first script stands for every parent script up to its
  number (it makes the whole schema on a database without the tables);
- its store is a subclass of the parent's (where its behaviour differs: say,
  no COPY) whose `dialect` is the variant's name, and its `Capabilities` say
  what it lacks, so that the shared code takes the other path.

So adding a PostgreSQL-wire variant is a store module (a `PostgresStore`
subclass), an overlay SQL file (and overlay migrations if its schema differs),
and one `DIALECTS` entry made with `variant(...)`. PostgreSQL's partitioned
layout is such a variant with no URL schemes: the store takes it on once it
reads that its tables are partitioned (store/postgresql_partitions.py). The
distributed SQL profile is one with schemes of its own (`yugabytedb://`,
`cockroachdb://`) and a `profile` that picks it on a PostgreSQL URL
(`?denpyo_profile=distributed`; store/distributed.py).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

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
class Capabilities:
    """What a database can do that not every database can: the code that depends on
    one asks it here (`store.capabilities`), never the database's name."""

    notifies: bool = False
    """LISTEN/NOTIFY: a committed enqueue wakes the workers (`Store.listen`);
    without, workers poll."""
    partitions: bool = False
    """The partitioned layout (pg_partman): `migrate --partitions`, partitions that
    retention drops whole."""
    count_triggers: bool = True
    """The running counts per channel and status are kept by triggers on the
    submissions (folded now and then: `Store.fold_counts`)."""
    copy: bool = False
    """COPY for a bulk enqueue (PostgreSQL's, under a savepoint: needs `savepoints`)."""
    durability_checks: bool = False
    """The server says whether its commits survive its loss (synchronous commit, its
    standbys: `Store.durability`) and how far behind a standby is (`replica_lag`)."""
    advisory_locks: bool = False
    """A named lock no table holds: `lock_schema` serialises migrations by one."""
    savepoints: bool = True
    """SAVEPOINT: part of a transaction undone, the rest kept."""
    skip_locked: bool = False
    """`FOR UPDATE SKIP LOCKED`: workers claim disjoint rows without waiting on each
    other (SQLite has one writer at a time: nothing to skip)."""
    several_hosts: bool = False
    """A URL may name several hosts, tried in turn (libpq's failover)."""


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
    """`lock_schema` takes a lock of the session, not of the transaction (MariaDB,
    whose DDL commits on its own): it answers whether it got it (`locked`), and
    `unlock_schema` releases it."""
    capabilities: Capabilities = Capabilities()
    """What the database can do that not every one can."""
    parent: str | None = None
    """The record this one is a variant of: its SQL and migrations are the parent's
    with its own overlaid (the module docstring says how)."""
    profile: str | None = None
    """The value of the URL option `denpyo_profile` that picks this variant on a URL
    of its parent's (`postgresql://…?denpyo_profile=distributed`)."""
    squashed: bool = False
    """A variant's first migration stands for all of its parent's up to its number."""

    @property
    def lineage(self) -> tuple[Dialect, ...]:
        """This record and its parents, the root first."""
        chain: list[Dialect] = [self]
        while chain[0].parent is not None:
            chain.insert(0, DIALECTS[chain[0].parent])
        return tuple(chain)

    @property
    def family(self) -> str:
        """The root of its lineage: the database whose driver and wire it speaks
        (a caller's connection of that driver is one of its)."""
        return self.lineage[0].name

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


def variant(parent: Dialect, name: str, title: str, **changes: Any) -> Dialect:
    """A variant of `parent`: its record with `changes`, and no Django engines or
    asyncio connections of its own (a caller's connection is the parent's driver's)."""
    defaults: dict[str, Any] = {"django_engines": (), "executors": (), "schemes": ()}
    return replace(parent, name=name, title=title, parent=parent.name, **(defaults | changes))


SQLITE = Dialect(
    name="sqlite",
    title="SQLite",
    schemes=("sqlite",),
    store="denpyo.store.sqlite:SqliteStore",
    extra=None,
    embedded=True,
    db_threads=1,
    executors=(AiosqliteExecutor,),
    django_engines=("sqlite3", "spatialite"),
)
POSTGRESQL = Dialect(
    name="postgresql",
    title="PostgreSQL",
    schemes=("postgresql", "postgres", "postgresql+psycopg"),
    store="denpyo.store.postgresql:PostgresStore",
    extra="postgresql",
    embedded=False,
    db_threads=4,
    executors=(PsycopgExecutor, AsyncpgExecutor),
    django_engines=("postgresql", "postgresql_psycopg2", "postgis"),
    django_options=(
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "connect_timeout",
        "options",
        "target_session_attrs",
        "service",
        "passfile",
    ),
    socket_options=("host", "port"),
    whole_scripts=True,
    capabilities=Capabilities(
        notifies=True,
        partitions=True,
        copy=True,
        durability_checks=True,
        advisory_locks=True,
        skip_locked=True,
        several_hosts=True,
    ),
)
POSTGRESQL_PARTITIONED = variant(
    POSTGRESQL,
    "postgresql-partitioned",
    "PostgreSQL (partitioned)",
    squashed=True,
    capabilities=replace(POSTGRESQL.capabilities, copy=False),
)
"""PostgreSQL's partitioned layout: no URL opens it; a PostgreSQL store whose tables
are partitioned takes it on (its bulk enqueue goes by statements: a COPY cannot
write denpyo_keys first)."""
POSTGRESQL_DISTRIBUTED = variant(
    POSTGRESQL,
    "postgresql-distributed",
    "distributed SQL (YugabyteDB, CockroachDB)",
    schemes=("yugabytedb", "cockroachdb"),
    profile="distributed",
    store="denpyo.store.distributed:DistributedStore",
    capabilities=Capabilities(count_triggers=False, savepoints=False, several_hosts=True),
)
"""The distributed SQL profile: PostgreSQL's store run the way YugabyteDB and
CockroachDB run it (store/distributed.py says what changes): workers poll, counts
are read from the rows, no partitions, no COPY, no advisory locks, no SAVEPOINT,
claims without SKIP LOCKED."""
MYSQL = Dialect(
    name="mysql",
    title="MariaDB",
    schemes=("mysql", "mariadb", "mysql+pymysql"),
    store="denpyo.store.mysql:MysqlStore",
    extra="mysql",
    embedded=False,
    db_threads=4,
    executors=(AiomysqlExecutor,),
    django_engines=("mysql",),
    django_options=("connect_timeout", "unix_socket"),
    socket_options=("unix_socket",),
    session_lock=True,
    capabilities=Capabilities(advisory_locks=True, skip_locked=True),
)

DIALECTS: dict[str, Dialect] = {
    dialect.name: dialect
    for dialect in (
        SQLITE,
        POSTGRESQL,
        POSTGRESQL_PARTITIONED,
        MYSQL,
        POSTGRESQL_DISTRIBUTED,
    )
}
"""Every database and variant denpyo stores in, by name, in the order messages list them."""

DATABASES: dict[str, Dialect] = {
    name: dialect for name, dialect in DIALECTS.items() if dialect.schemes
}
"""The records a URL opens (a layout, such as the partitioned one, has no scheme; the
distributed SQL profile has its own)."""

BY_SCHEME: dict[str, Dialect] = {
    scheme: dialect for dialect in DIALECTS.values() for scheme in dialect.schemes
}
"""The database each URL scheme opens."""
