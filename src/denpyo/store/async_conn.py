"""An application's own asyncio connection, in its open transaction, for `aenqueue`.

The store's writes are sync code, written once. `aenqueue(conn=...)` runs them
in a thread, and each of their statements goes back to the event loop to run
on the caller's connection (`BridgedTx`): the row commits or rolls back with
the application's own write. Two thread hops per statement are the price;
the statements themselves are the same as `enqueue`'s.

Drivers are recognised by their type's module and name (`AsyncExecutor.driver`),
so none is imported here: psycopg's `AsyncConnection`, asyncpg, aiosqlite,
aiomysql, and SQLAlchemy's `AsyncConnection` and `AsyncSession` over any of them.
Each database's record lists the executors that are its own (store/dialects.py);
store/callers.py finds the one for a caller's connection.
"""

from __future__ import annotations

import asyncio
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from denpyo.errors import StoreConflict, StoreError
from denpyo.store.base import Row, Tx
from denpyo.store.conflicts import CONFLICT_STATES

T = TypeVar("T")


class AsyncExecutor(ABC):
    """Runs statements on one asyncio driver connection."""

    driver: ClassVar[tuple[str, str]]
    """The connection class it takes: (the driver's top module, the class's name)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @abstractmethod
    async def fetch_all(self, sql: str, params: Mapping[str, Any]) -> list[Row]: ...

    @abstractmethod
    async def execute(self, sql: str, params: Mapping[str, Any]) -> int: ...

    async def execute_many(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
        for row in rows:
            await self.execute(sql, row)


class PsycopgExecutor(AsyncExecutor):
    driver = ("psycopg", "AsyncConnection")

    async def fetch_all(self, sql: str, params: Mapping[str, Any]) -> list[Row]:
        from psycopg.rows import dict_row

        async with self.conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(sql, params)
            return list(await cursor.fetchall()) if cursor.description else []

    async def execute(self, sql: str, params: Mapping[str, Any]) -> int:
        async with self.conn.cursor() as cursor:
            await cursor.execute(sql, params)
            return int(cursor.rowcount)


PLACEHOLDER = re.compile(r"%\(([a-z_][a-z0-9_]*)\)[sb]|%%")


def numbered(sql: str) -> tuple[str, list[str]]:
    """psycopg's `%(name)s` placeholders as asyncpg's `$1`, and the names in order."""
    names: list[str] = []

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "%%":
            return "%"
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return PLACEHOLDER.sub(one, sql), names


class AsyncpgExecutor(AsyncExecutor):
    driver = ("asyncpg", "Connection")

    async def fetch_all(self, sql: str, params: Mapping[str, Any]) -> list[Row]:
        text, names = numbered(sql)
        try:
            rows = await self.conn.fetch(text, *[params[name] for name in names])
        except Exception as exc:
            raise _asyncpg_error(exc) from exc
        return [dict(row) for row in rows]

    async def execute(self, sql: str, params: Mapping[str, Any]) -> int:
        text, names = numbered(sql)
        try:
            status = await self.conn.execute(text, *[params[name] for name in names])
        except Exception as exc:
            raise _asyncpg_error(exc) from exc
        count = str(status).rsplit(" ", 1)[-1]  # "INSERT 0 1", "UPDATE 3"
        return int(count) if count.isdigit() else 0


def _asyncpg_error(exc: Exception) -> Exception:
    """asyncpg's errors as psycopg's would leave the store (a conflict: StoreConflict)."""
    if type(exc).__module__.startswith("asyncpg"):
        if getattr(exc, "sqlstate", None) in CONFLICT_STATES:
            return StoreConflict(f"PostgreSQL: {exc}")
        return StoreError(f"PostgreSQL: {exc}")
    return exc


class AiosqliteExecutor(AsyncExecutor):
    driver = ("aiosqlite", "Connection")

    async def fetch_all(self, sql: str, params: Mapping[str, Any]) -> list[Row]:
        async with self.conn.execute(sql, dict(params)) as cursor:
            rows = await cursor.fetchall()
            names = [column[0] for column in cursor.description or ()]
        return [dict(zip(names, row, strict=True)) for row in rows]

    async def execute(self, sql: str, params: Mapping[str, Any]) -> int:
        async with self.conn.execute(sql, dict(params)) as cursor:
            return int(cursor.rowcount)


class AiomysqlExecutor(AsyncExecutor):
    driver = ("aiomysql", "Connection")

    async def fetch_all(self, sql: str, params: Mapping[str, Any]) -> list[Row]:
        async with self.conn.cursor() as cursor:
            await cursor.execute(sql, dict(params))
            rows = await cursor.fetchall()
            names = [column[0] for column in cursor.description or ()]
        return [dict(zip(names, row, strict=True)) for row in rows]

    async def execute(self, sql: str, params: Mapping[str, Any]) -> int:
        async with self.conn.cursor() as cursor:
            await cursor.execute(sql, dict(params))
            return int(cursor.rowcount)


class BridgedConnection:
    """An application's asyncio connection, as the store's sync code sees it from a
    thread: every statement is sent back to the event loop that owns the connection."""

    def __init__(self, executor: AsyncExecutor, loop: asyncio.AbstractEventLoop) -> None:
        self.executor = executor
        self.loop = loop


class BridgedTx(Tx):
    """`duplicate(exc)`: whether an INSERT's error means that its channel and key are
    recorded already (MariaDB, which has no ON CONFLICT)."""

    def __init__(
        self,
        bridged: BridgedConnection,
        queries: Mapping[str, str],
        duplicate: Callable[[BaseException], bool],
    ) -> None:
        self.bridged = bridged
        self.queries = queries
        self.duplicate = duplicate

    def _wait(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.bridged.loop).result()

    def fetch_one(self, query: str, params: Mapping[str, Any] | None = None) -> Row | None:
        rows = self.fetch_all(query, params)
        return rows[0] if rows else None

    def fetch_all(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        return self._wait(self.bridged.executor.fetch_all(self.queries[query], params or {}))

    def execute(self, query: str, params: Mapping[str, Any] | None = None) -> int:
        return self._wait(self.bridged.executor.execute(self.queries[query], params or {}))

    def execute_many(self, query: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self._wait(self.bridged.executor.execute_many(self.queries[query], rows))

    def insert(self, query: str, params: Mapping[str, Any]) -> Row | None:
        try:
            return self.fetch_one(query, params)
        except Exception as exc:
            if self.duplicate(exc):
                return None
            raise

    def script(self, sql: str) -> None:
        raise StoreError("migrations do not run on an application's connection")
