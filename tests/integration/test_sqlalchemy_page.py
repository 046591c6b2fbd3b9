"""The SQLAlchemy page (docs/how-to/sqlalchemy.md), run as written: its sync and
async blocks are read from the page and executed, with the page's URLs pointed at
a fresh database, once for each driver the page's table names. A transaction that
rolls back leaves neither the order nor the row; one that commits leaves both, and
a worker then sends the email once. An engine on another database is refused."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import denpyo
from conftest import driver_connection
from denpyo import Status, Submission
from denpyo.channels.http import HttpChannel
from denpyo.testing import FakeProvider
from doc_pages import named, read

PAGE = "how-to/sqlalchemy.md"
PAGE_URL = re.compile(r'"(?:postgresql|sqlite|mysql)(\+\w+)?://app@db/shop"')
DIALECTS = {"PostgreSQL": "postgresql", "SQLite": "sqlite", "MariaDB": "mysql"}
ORDERS = "CREATE TABLE orders (id INTEGER PRIMARY KEY)"
SQL = Callable[[str], list[tuple[Any, ...]]]


def _table() -> dict[tuple[str, str], list[str]]:
    """The page's table: (backend, "sync" or "async") -> its drivers."""
    table = {}
    rows = re.findall(r"^\| (\w+) \| (.+) \| (.+) \|$", read(PAGE), re.M)
    for dialect, sync, asynchronous in rows:
        if dialect in DIALECTS:
            table[DIALECTS[dialect], "sync"] = re.findall(r"`([\w+]+)`", sync)
            table[DIALECTS[dialect], "async"] = re.findall(r"`([\w+]+)`", asynchronous)
    assert len(table) == 6, table
    return table


TABLE = _table()
CASES = [(backend, mode, d) for (backend, mode), ds in TABLE.items() for d in ds]


def _page(db_url: str, mail: HttpChannel, *, sync: str, asynchronous: str | None) -> dict[str, Any]:
    """Execute the page's sync block (and its async block when `asynchronous` names a
    driver) with the ledger on `db_url` and each engine on the database of `sync` or
    `asynchronous` (full URLs). Returns the namespace: `ledger`, `checkout`, …"""
    code = named(PAGE, "example")

    def pointed(block: str, engine_url: str) -> str:
        return PAGE_URL.sub(lambda m: repr(engine_url if m.group(1) else db_url), block)

    namespace: dict[str, Any] = {"mail": mail}
    exec(compile(pointed(code["sync"], sync), f"{PAGE}: sync", "exec"), namespace)
    if asynchronous is not None:
        exec(compile(pointed(code["async"], asynchronous), f"{PAGE}: async", "exec"), namespace)
    return namespace


def _as(driver: str, db_url: str) -> str:
    """`db_url` as a SQLAlchemy URL with `driver` (`postgresql+asyncpg`, `sqlite`)."""
    return driver + "://" + db_url.split("://", 1)[1]


class FailsAfterEnqueue:
    """The ledger, but the application raises right after its enqueue, inside the
    transaction (a payment declined, a bug): the block must roll both rows back."""

    def __init__(self, ledger: denpyo.Ledger) -> None:
        self.ledger = ledger

    def enqueue(self, *args: Any, **kwargs: Any) -> None:
        assert isinstance(self.ledger.enqueue(*args, **kwargs), Submission)
        raise RuntimeError("card declined")

    async def aenqueue(self, *args: Any, **kwargs: Any) -> None:
        assert isinstance(await self.ledger.aenqueue(*args, **kwargs), Submission)
        raise RuntimeError("card declined")


@pytest.fixture
def mail(provider: FakeProvider) -> HttpChannel:
    return HttpChannel(url=provider.send_url, lookup_url=provider.lookup_url)


@pytest.fixture
def page_for(db_url: str, mail: HttpChannel) -> Iterator[Callable[..., dict[str, Any]]]:
    """Run the page; closes its ledger and disposes of its engines afterwards."""
    pages: list[dict[str, Any]] = []

    def run(**engines: Any) -> dict[str, Any]:
        pages.append(_page(db_url, mail, **engines))
        return pages[-1]

    yield run
    for page in pages:
        page["engine"].dispose()
        page["ledger"].close()


@pytest.mark.parametrize(("backend", "mode", "driver"), CASES)
def test_the_order_and_its_email_commit_or_roll_back_together(
    backend: str,
    mode: str,
    driver: str,
    db_url: str,
    sql: SQL,
    provider: FakeProvider,
    page_for: Callable[..., dict[str, Any]],
) -> None:
    sql(ORDERS)
    sync_driver = driver if mode == "sync" else TABLE[backend, "sync"][0]
    page = page_for(
        sync=_as(sync_driver, db_url), asynchronous=_as(driver, db_url) if mode == "async" else None
    )
    ledger: denpyo.Ledger = page["ledger"]

    def checkouts() -> None:
        page["ledger"] = FailsAfterEnqueue(ledger)
        with pytest.raises(RuntimeError, match="card declined"):
            page["checkout"](41, "b@example.com")
        page["ledger"] = ledger
        page["checkout"](42, "a@example.com")

    async def acheckouts() -> None:  # on one event loop, as an application's
        try:
            page["ledger"] = FailsAfterEnqueue(ledger)
            with pytest.raises(RuntimeError, match="card declined"):
                await page["acheckout"](41, "b@example.com")
            page["ledger"] = ledger
            await page["acheckout"](42, "a@example.com")
        finally:
            await page["async_engine"].dispose()

    if mode == "sync":
        checkouts()
    else:
        asyncio.run(acheckouts())

    assert sql("SELECT id FROM orders") == [(42,)]
    assert ledger.get("invoice-email", "order:41") is None
    row = ledger.get("invoice-email", "order:42")
    assert row is not None and row.status is Status.REQUESTING
    assert row.payload == {"to": "a@example.com"}
    ledger.work(until_idle=True, poll_interval=0.01)
    row = ledger.get("invoice-email", "order:42")
    assert row is not None and row.status is Status.SYNCED
    assert provider.accepted_keys() == {row.idempotency_key: 1}


def test_an_engine_on_another_database_is_refused(
    backend: str,
    db_url: str,
    empty_url: str,
    sql: SQL,
    page_for: Callable[..., dict[str, Any]],
) -> None:
    """The row would land where no worker looks: nothing is written, on either side."""
    with denpyo.Ledger(empty_url) as other:
        other.migrate()
    conn = driver_connection(backend, empty_url)
    try:
        conn.cursor().execute(ORDERS)
        conn.commit()
    finally:
        conn.close()
    page = page_for(sync=_as(TABLE[backend, "sync"][0], empty_url), asynchronous=None)
    with pytest.raises(denpyo.ConfigurationError, match="nothing was written"):
        page["checkout"](42, "a@example.com")
    conn = driver_connection(backend, empty_url)
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT COUNT(*) FROM orders")
        assert cursor.fetchone()[0] == 0
        cursor.execute("SELECT COUNT(*) FROM denpyo_submissions")
        assert cursor.fetchone()[0] == 0
    finally:
        conn.close()
    assert sql("SELECT COUNT(*) FROM denpyo_submissions") == [(0,)]
