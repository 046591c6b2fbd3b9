"""`aenqueue` and `aenqueue_many` inside an asyncio application's own transaction,
through every async driver denpyo joins, on the database each drives: the order
and its call commit together or not at all, and a worker then sends the call."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import denpyo
from app_connections import aiomysql_connection
from conftest import driver_connection
from denpyo import Status, Submission

AsyncConn = Callable[[], contextlib.AbstractAsyncContextManager[Any]]
STARTED: dict[int, Any] = {}  # asyncpg connection -> its open transaction
ORDERS = "CREATE TABLE IF NOT EXISTS app_orders (id VARCHAR(40) PRIMARY KEY)"


def ok(sub: Submission) -> str:
    return f"remote-{sub.key}"


def _sqlalchemy_url(driver: str, db_url: str) -> str:
    scheme, rest = db_url.split("://", 1)
    return f"{scheme}+{driver}://{rest}"


def _connectors(backend: str, db_url: str) -> dict[str, Any]:
    """Each way an asyncio application holds a transaction on this database:
    name -> (open connection, write the order, commit, roll back)."""

    @contextlib.asynccontextmanager
    async def psycopg_conn() -> AsyncIterator[Any]:
        import psycopg

        conn = await psycopg.AsyncConnection.connect(db_url)
        try:
            yield conn
        finally:
            await conn.close()

    @contextlib.asynccontextmanager
    async def asyncpg_conn() -> AsyncIterator[Any]:
        import asyncpg

        conn = await asyncpg.connect(db_url)
        STARTED[id(conn)] = conn.transaction()  # the application's transaction
        await STARTED[id(conn)].start()
        try:
            yield conn
        finally:
            STARTED.pop(id(conn))
            await conn.close()

    @contextlib.asynccontextmanager
    async def aiosqlite_conn() -> AsyncIterator[Any]:
        import aiosqlite

        async with aiosqlite.connect(db_url.removeprefix("sqlite:///"), timeout=30) as conn:
            yield conn

    def aiomysql_conn() -> contextlib.AbstractAsyncContextManager[Any]:
        return aiomysql_connection(db_url)

    def session(driver: str) -> Any:
        @contextlib.asynccontextmanager
        async def opened() -> AsyncIterator[Any]:
            from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

            engine = create_async_engine(_sqlalchemy_url(driver, db_url))
            try:
                async with AsyncSession(engine) as session:
                    yield session
            finally:
                await engine.dispose()

        return opened

    return {
        "sqlite": {"aiosqlite": aiosqlite_conn, "sqlalchemy+aiosqlite": session("aiosqlite")},
        "postgresql": {
            "psycopg": psycopg_conn,
            "asyncpg": asyncpg_conn,
            "sqlalchemy+asyncpg": session("asyncpg"),
            "sqlalchemy+psycopg": session("psycopg"),
        },
        "mysql": {"aiomysql": aiomysql_conn, "sqlalchemy+aiomysql": session("aiomysql")},
    }[backend]


async def _write_order(conn: Any, order: str) -> None:
    """The application's own write, on the same connection and transaction."""
    module = type(conn).__module__
    if module.startswith("sqlalchemy"):
        from sqlalchemy import text

        await conn.execute(text("INSERT INTO app_orders (id) VALUES (:id)"), {"id": order})
    elif module.startswith("asyncpg"):
        await conn.execute("INSERT INTO app_orders (id) VALUES ($1)", order)
    elif module.startswith("aiosqlite"):
        await conn.execute("INSERT INTO app_orders (id) VALUES (?)", (order,))
    else:
        async with conn.cursor() as cursor:
            await cursor.execute("INSERT INTO app_orders (id) VALUES (%s)", (order,))


async def _end(conn: Any, *, commit: bool) -> None:
    tx = STARTED.get(id(conn))
    if tx is not None:  # asyncpg: the transaction the application started
        await (tx.commit() if commit else tx.rollback())
        STARTED[id(conn)] = conn.transaction()
        await STARTED[id(conn)].start()
        return
    await (conn.commit() if commit else conn.rollback())


def _orders(backend: str, db_url: str) -> set[str]:
    conn = driver_connection(backend, db_url)
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT id FROM app_orders")
        return {row[0] for row in cursor.fetchall()}
    finally:
        conn.close()


@pytest.fixture
def orders_table(backend: str, db_url: str) -> None:
    conn = driver_connection(backend, db_url)
    try:
        conn.cursor().execute(ORDERS)
        conn.commit()
    finally:
        conn.close()


@pytest.mark.usefixtures("orders_table")
def test_the_call_commits_and_rolls_back_with_the_order(
    ledger: denpyo.Ledger, backend: str, db_url: str
) -> None:
    ledger.channel("invoice")(ok)
    connectors = _connectors(backend, db_url)

    async def scenario(name: str, connect: AsyncConn) -> None:
        async with connect() as conn:
            await _write_order(conn, f"{name}-rolled-back")
            await ledger.aenqueue("invoice", f"{name}-rolled-back", {"n": 1}, conn=conn)
            await _end(conn, commit=False)

            await _write_order(conn, f"{name}-one")
            sub = await ledger.aenqueue("invoice", f"{name}-one", {"n": 1}, conn=conn)
            assert sub.status is Status.REQUESTING
            added = await ledger.aenqueue_many(
                "invoice", [(f"{name}-a", {"n": 2}), (f"{name}-b", {"n": 3})], conn=conn
            )
            assert added == 2
            added = await ledger.aenqueue_many(
                "invoice", [(f"{name}-a", {"n": 2}), (f"{name}-c", {"n": 4})], conn=conn
            )
            assert added == 1  # a key recorded already (in this transaction) is not again
            again = await ledger.aenqueue("invoice", f"{name}-one", {"n": 1}, conn=conn)
            assert again.id == sub.id  # a key recorded once, in the same transaction
            await _end(conn, commit=True)

    for name, connect in connectors.items():
        asyncio.run(scenario(name, connect))

    orders = _orders(backend, db_url)
    for name in connectors:
        assert f"{name}-rolled-back" not in orders
        assert ledger.get("invoice", f"{name}-rolled-back") is None
        assert f"{name}-one" in orders
    report = ledger.work(until_idle=True)
    assert report.outcomes["synced"] == 4 * len(connectors)
    for name in connectors:
        for key in ("one", "a", "b", "c"):
            sent = ledger.get("invoice", f"{name}-{key}")
            assert sent is not None and sent.remote_id == f"remote-{name}-{key}"


def test_the_async_reads_answer_as_the_sync_ones(ledger: denpyo.Ledger) -> None:
    ledger.channel("invoice")(ok)
    sub = ledger.submit("invoice", "k", {"n": 1})

    async def read() -> tuple[Submission | None, list[Any]]:
        return await ledger.aget_by_id(sub.id), await ledger.aevents(sub.id)

    found, events = asyncio.run(read())
    assert found == ledger.get_by_id(sub.id) and events == ledger.events(sub.id)


def test_a_connection_of_another_database_or_kind_is_refused(
    ledger: denpyo.Ledger, backend: str, empty_url: str
) -> None:
    """Nothing is written where no worker looks, nor through a driver denpyo does not know."""
    ledger.channel("invoice")(ok)
    with denpyo.Ledger(empty_url) as other:
        other.migrate()
    [(_, connect), *_] = _connectors(backend, empty_url).items()

    async def scenario() -> None:
        async with connect() as conn:
            with pytest.raises(denpyo.ConfigurationError, match="nothing was written"):
                await ledger.aenqueue("invoice", "k", {"n": 1}, conn=conn)
        with pytest.raises(denpyo.ConfigurationError, match="cannot join"):
            await ledger.aenqueue("invoice", "k", {"n": 1}, conn=object())

    asyncio.run(scenario())
    assert ledger.get("invoice", "k") is None


def test_postgresql_wakes_the_workers_when_the_transaction_commits(postgres_url: str) -> None:
    import psycopg

    db_url = postgres_url
    ledger = denpyo.Ledger(db_url)
    ledger.channel("invoice")(ok)

    async def scenario() -> list[str]:
        listener = await psycopg.AsyncConnection.connect(db_url, autocommit=True)
        await listener.execute("LISTEN denpyo")
        woken: list[str] = []
        async with await psycopg.AsyncConnection.connect(db_url) as conn:
            await ledger.aenqueue("invoice", "k", {"n": 1}, conn=conn)
            with contextlib.suppress(TimeoutError):
                async for note in listener.notifies(timeout=0.3):
                    woken.append(note.payload)
            assert woken == []  # not before the commit
            await conn.commit()
        async for note in listener.notifies(timeout=5, stop_after=1):
            woken.append(note.payload)
        await listener.close()
        return woken

    try:
        assert asyncio.run(scenario()) == ["invoice"]
    finally:
        ledger.close()
