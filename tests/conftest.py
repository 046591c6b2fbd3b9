"""Shared fixtures: a fresh real database per test, on every backend.

`backend` is parametrised over every database a URL opens (store/dialects.py);
each test gets a database of its own, made as its record in
tests/database_records.py says (copied from a migrated template where the server
supports it). Server URLs come from DENPYO_TEST_POSTGRES_URL and
DENPYO_TEST_MYSQL_URL.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import denpyo
from database_records import (
    MARIADB,
    POSTGRES,
    POSTGRES_PROFILE,
    SERVERS,
    TEMPLATE,
    MadeAhead,
    database_record,
    without_profile,
)
from denpyo.store import Store, open_store
from denpyo.store.dialects import DATABASES
from denpyo.testing import FakeProvider

POSTGRES_URL = POSTGRES.admin_url
MYSQL_URL = MARIADB.admin_url
BACKENDS = [name for name, dialect in DATABASES.items() if dialect.parent is None]
"""Every database a URL opens, each with its record in tests/database_records.py; a
variant a URL opens (the distributed SQL profile) runs as its parent's record says
(`Database.profile`: DENPYO_TEST_POSTGRES_PROFILE)."""
STATEMENTS = os.environ.get("DENPYO_TEST_STATEMENTS") or None
"""A folder: under the profile, each test process leaves there, as JSON, every
distinct statement the profile's stores ran (test_store_distributed.py scans them)."""


def under_the_profile(backend: str) -> bool:
    """Whether this backend's databases are opened under a variant's profile."""
    return database_record(backend).profile is not None


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
    POSTGRES.make_template()
    yield TEMPLATE
    POSTGRES.drop(TEMPLATE)


@pytest.fixture(scope="session")
def made_ahead(postgres_template: str) -> Iterator[dict[str, MadeAhead]]:
    """The migrated databases of `db_url`, by backend, each made one test ahead."""
    makers = {server.name: server.made_ahead() for server in SERVERS}
    yield makers
    for maker in makers.values():
        maker.close()


@pytest.fixture
def postgres_url(made_ahead: dict[str, MadeAhead]) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database, for what only PostgreSQL does."""
    with POSTGRES.migrated(Path(), lambda: made_ahead) as url:
        yield url


@pytest.fixture
def serializable_url(postgres_url: str) -> str:
    """A fresh, migrated PostgreSQL database whose sessions run SERIALIZABLE unless
    they say otherwise."""
    POSTGRES.default_isolation(without_profile(postgres_url).rpartition("/")[2], "serializable")
    return postgres_url


@pytest.fixture
def postgres_empty_url() -> Iterator[str]:
    """A fresh PostgreSQL database with no denpyo tables, for what only PostgreSQL does."""
    with POSTGRES.empty(Path()) as url:
        yield url


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def empty_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """A fresh database with no denpyo tables."""
    with database_record(backend).empty(tmp_path) as url:
        yield url


@pytest.fixture
def db_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, migrated database (a server's made one test ahead: `made_ahead`)."""

    def ahead() -> dict[str, MadeAhead]:
        made: dict[str, MadeAhead] = request.getfixturevalue("made_ahead")
        return made

    with database_record(backend).migrated(tmp_path, ahead) as url:
        yield url


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
    """A connection of the database's driver, as an application opens one."""
    return database_record(backend).connect(db_url)


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
