"""Shared fixtures: a fresh real database per test, on every backend.

`backend_url` is parametrised over every database denpyo stores in (SQLite,
PostgreSQL, MariaDB: store/dialects.py); each test gets a database of its own,
copied from a migrated template where the server supports it. Server URLs come
from DENPYO_TEST_POSTGRES_URL and DENPYO_TEST_MYSQL_URL.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest

import denpyo
from denpyo.store import Store, open_store
from denpyo.store.dialects import DATABASES
from denpyo.testing import FakeProvider

POSTGRES_URL = os.environ.get(
    "DENPYO_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
MYSQL_URL = os.environ.get("DENPYO_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
POSTGRES_PARTITIONS = os.environ.get("DENPYO_TEST_POSTGRES_PARTITIONS") or None
"""`daily` or `monthly`: the PostgreSQL tests run on the partitioned layout (`make
test` runs the store's and the ledger's tests so once more)."""
POSTGRES_ISOLATION = os.environ.get("DENPYO_TEST_POSTGRES_ISOLATION") or None
"""`serializable` (or `repeatable read`): every PostgreSQL database the tests make
has it as its default isolation (`make test-serializable`)."""
POSTGRES_PROFILE = os.environ.get("DENPYO_TEST_POSTGRES_PROFILE") or None
"""`distributed`: the PostgreSQL tests open their databases under the distributed SQL
profile (`?denpyo_profile=distributed`: `make test-distributed`)."""
STATEMENTS = os.environ.get("DENPYO_TEST_STATEMENTS") or None
"""A folder: under the profile, each test process leaves there, as JSON, every
distinct statement the profile's stores ran (test_store_distributed.py scans them)."""
BACKENDS = list(DATABASES)

_TEMPLATE = f"denpyo_template_{uuid.uuid4().hex[:8]}"  # one per test session


def _with_database(url: str, name: str) -> str:
    """The URL of database `name` on `url`'s server (under the profile, if one is set)."""
    base, _, _ = url.rpartition("/")
    if url == POSTGRES_URL and POSTGRES_PROFILE:
        return f"{base}/{name}?denpyo_profile={POSTGRES_PROFILE}"
    return f"{base}/{name}"


def under_the_profile(backend: str) -> bool:
    """Whether this backend's databases are opened under the distributed profile."""
    return backend == "postgresql" and POSTGRES_PROFILE is not None


def without_profile(url: str) -> str:
    """A URL a driver reads itself: the profile's option off."""
    return url.partition("?denpyo_profile=")[0]


@pytest.fixture(scope="session", autouse=True)
def statements_of_the_profile() -> Iterator[None]:
    """Under the profile, with DENPYO_TEST_STATEMENTS set: the statements of the run,
    kept for the check that none uses what distributed engines lack."""
    if not (POSTGRES_PROFILE and STATEMENTS):
        yield
        return
    from denpyo.testing.faults import record_statements

    with record_statements() as ran:
        yield
    folder = Path(STATEMENTS)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{os.getpid()}.json").write_text(json.dumps(sorted(ran)))


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """A migrated database that every PostgreSQL test copies."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {_TEMPLATE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {_TEMPLATE}")
    if POSTGRES_ISOLATION:
        default_isolation(_TEMPLATE, POSTGRES_ISOLATION)
    with denpyo.Ledger(_with_database(POSTGRES_URL, _TEMPLATE)) as ledger:
        ledger.migrate(partitions=POSTGRES_PARTITIONS)
    yield _TEMPLATE
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {_TEMPLATE} WITH (FORCE)")


def _fresh_postgres() -> Iterator[str]:
    """A fresh PostgreSQL database with no tables."""
    name = _create_postgres(None)
    try:
        yield _with_database(POSTGRES_URL, name)
    finally:
        _drop_postgres(name)


def _create_postgres(template: str | None) -> str:
    name = f"denpyo_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        clause = f" TEMPLATE {template}" if template else ""
        admin.execute(f"CREATE DATABASE {name}{clause}")
    if POSTGRES_ISOLATION:  # a database's settings are not copied from its template
        default_isolation(name, POSTGRES_ISOLATION)
    return name


def default_isolation(name: str, isolation: str) -> None:
    """Make `isolation` the default of every later session of database `name`, as an
    application that wants SERIALIZABLE everywhere does."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} SET default_transaction_isolation = '{isolation}'")


def _drop_postgres(name: str) -> None:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _fresh_mysql(migrated: bool) -> Iterator[str]:
    name = _create_mysql(migrated)
    try:
        yield _with_database(MYSQL_URL, name)
    finally:
        _drop_mysql(name)


def _mysql_admin(statement: str) -> None:
    import pymysql

    from denpyo.store.mysql import connect_args  # type: ignore[import-not-found, unused-ignore]

    admin = pymysql.connect(**connect_args(MYSQL_URL), autocommit=True)
    try:
        admin.cursor().execute(statement)
    finally:
        admin.close()


def _create_mysql(migrated: bool) -> str:
    name = f"denpyo_t_{uuid.uuid4().hex[:12]}"
    _mysql_admin(f"CREATE DATABASE {name}")
    if migrated:
        with denpyo.Ledger(_with_database(MYSQL_URL, name)) as ledger:
            ledger.migrate()
    return name


def _drop_mysql(name: str) -> None:
    _mysql_admin(f"DROP DATABASE IF EXISTS {name}")


class _MadeAhead:
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


@pytest.fixture(scope="session")
def made_ahead(postgres_template: str) -> Iterator[dict[str, _MadeAhead]]:
    """The migrated databases of `db_url`, by backend, each made one test ahead."""
    makers = {
        "postgresql": _MadeAhead(lambda: _create_postgres(postgres_template), _drop_postgres),
        "mysql": _MadeAhead(lambda: _create_mysql(migrated=True), _drop_mysql),
    }
    yield makers
    for maker in makers.values():
        maker.close()


@pytest.fixture
def postgres_url(made_ahead: dict[str, _MadeAhead]) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database, for what only PostgreSQL does."""
    with made_ahead["postgresql"].take() as name:
        yield _with_database(POSTGRES_URL, name)


@pytest.fixture
def serializable_url(postgres_url: str) -> str:
    """A fresh, migrated PostgreSQL database whose sessions run SERIALIZABLE unless
    they say otherwise."""
    default_isolation(without_profile(postgres_url).rpartition("/")[2], "serializable")
    return postgres_url


@pytest.fixture
def postgres_empty_url() -> Iterator[str]:
    """A fresh PostgreSQL database with no denpyo tables, for what only PostgreSQL does."""
    yield from _fresh_postgres()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def empty_url(backend: str, tmp_path: os.PathLike[str]) -> Iterator[str]:
    """A fresh database with no denpyo tables."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path}/empty.db"
    elif backend == "postgresql":
        yield from _fresh_postgres()
    else:
        yield from _fresh_mysql(migrated=False)


@pytest.fixture
def db_url(
    backend: str, tmp_path: os.PathLike[str], request: pytest.FixtureRequest
) -> Iterator[str]:
    """A fresh, migrated database."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path}/ledger.db"
        with denpyo.Ledger(url) as ledger:
            ledger.migrate()
        yield url
    else:
        ahead: dict[str, _MadeAhead] = request.getfixturevalue("made_ahead")
        url = POSTGRES_URL if backend == "postgresql" else MYSQL_URL
        with ahead[backend].take() as name:
            yield _with_database(url, name)


@pytest.fixture
def ledger(db_url: str) -> Iterator[denpyo.Ledger]:
    with denpyo.Ledger(db_url) as ledger:
        yield ledger


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    """The store of a fresh, migrated database, for the store's own tests."""
    opened = open_store(db_url)
    yield opened
    opened.close()


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    with FakeProvider() as provider:
        yield provider


def driver_connection(backend: str, db_url: str) -> Any:
    if backend == "sqlite":
        import sqlite3

        return sqlite3.connect(db_url.removeprefix("sqlite:///"))
    if backend == "postgresql":
        import psycopg

        return psycopg.connect(without_profile(db_url))
    import pymysql

    from denpyo.store.mysql import connect_args  # type: ignore[import-not-found, unused-ignore]

    return pymysql.connect(**connect_args(db_url))


@pytest.fixture
def sql(backend: str, db_url: str) -> Callable[[str], list[tuple[Any, ...]]]:
    """Ask the database directly, on a connection of its own, as a user would."""
    return asker(backend, db_url)


def asker(backend: str, url: str) -> Callable[[str], list[tuple[Any, ...]]]:
    """`sql`'s questions, for any database: each on a connection of its own, committed."""

    def run(query: str) -> list[tuple[Any, ...]]:
        conn = driver_connection(backend, url)
        try:
            cursor = conn.cursor()
            cursor.execute(query)
            found = [tuple(row) for row in cursor.fetchall()] if cursor.description else []
            conn.commit()
            return found
        finally:
            conn.close()

    return run


def free_ports(count: int = 1) -> int:
    """A port P such that P .. P+count-1 were free a moment ago, for a server a test
    starts (often in another process), taken below the kernel's ephemeral range: a
    port in that range is handed out to any outgoing connection (to the database,
    say) or bind to port 0, and could be taken before the server binds it."""
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(50):
        base = random.randrange(10_000, max(10_001, low - count))
        held: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                held.append(socket.socket())
                held[-1].bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
        return base
    raise AssertionError("no free ports")


def free_port() -> int:
    """One free port (`free_ports`)."""
    return free_ports(1)
