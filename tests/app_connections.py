"""An asyncio application's own connections to the test databases, each in a
transaction the application commits itself (store/async_conn.py lists every driver
denpyo joins; tests/database_records.py opens each)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

from database_records import MARIADB, database_record


def aiomysql_connection(db_url: str) -> AbstractAsyncContextManager[Any]:
    """aiomysql's connection to the MariaDB database of `db_url`, not autocommitting."""
    return MARIADB.app_connection(db_url)


def app_connection(backend: str, db_url: str) -> AbstractAsyncContextManager[Any]:
    """One connection of the database's asyncio driver (psycopg, aiosqlite, aiomysql)."""
    return database_record(backend).app_connection(db_url)
