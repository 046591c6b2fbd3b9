"""An asyncio application's own connections to the test databases, each in a
transaction the application commits itself (store/async_conn.py lists every driver
denpyo joins)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from conftest import without_profile


@asynccontextmanager
async def aiomysql_connection(db_url: str) -> AsyncIterator[Any]:
    """aiomysql's connection to the MariaDB database of `db_url`, not autocommitting."""
    import aiomysql

    from denpyo.store.mysql import connect_args

    args = connect_args(db_url)
    conn = await aiomysql.connect(
        host=args["host"], port=args["port"], user=args.get("user", "root"),
        password=args.get("password", ""), db=args["database"], autocommit=False,
    )  # fmt: skip
    try:
        yield conn
    finally:
        conn.close()


@asynccontextmanager
async def app_connection(backend: str, db_url: str) -> AsyncIterator[Any]:
    """One connection of the database's asyncio driver: psycopg, aiosqlite, aiomysql."""
    if backend == "postgresql":
        import psycopg

        pg = await psycopg.AsyncConnection.connect(without_profile(db_url))
        try:
            yield pg
        finally:
            await pg.close()
    elif backend == "sqlite":
        import aiosqlite

        async with aiosqlite.connect(db_url.removeprefix("sqlite:///"), timeout=30) as lite:
            yield lite
    else:
        async with aiomysql_connection(db_url) as maria:
            yield maria
