"""PostgreSQL: the production store, through psycopg 3 and a connection pool.

Claims use `FOR UPDATE SKIP LOCKED`, so workers on many hosts take disjoint
rows without waiting on each other; `enqueue` sends a NOTIFY that fires when
the caller's transaction commits, so workers wake without polling.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from denpyo.errors import ConfigurationError, SchemaError, StoreError
from denpyo.store.base import Row, Store, Tx

log = logging.getLogger("denpyo.store")


class PostgresTx(Tx):
    def __init__(self, store: PostgresStore, cursor: psycopg.Cursor[dict[str, Any]]) -> None:
        self.queries = store.queries
        self.cursor = cursor

    def fetch_one(self, query: str, params: Mapping[str, Any] | None = None) -> Row | None:
        self.cursor.execute(self.queries[query], params)
        return self.cursor.fetchone() if self.cursor.description else None

    def fetch_all(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        self.cursor.execute(self.queries[query], params)
        return list(self.cursor.fetchall())

    def execute(self, query: str, params: Mapping[str, Any] | None = None) -> None:
        self.cursor.execute(self.queries[query], params)

    def script(self, sql: str) -> None:
        self.cursor.execute(sql.encode())


class PostgresStore(Store):
    dialect = "postgresql"
    notifies = True

    def __init__(self, conninfo: str, *, max_connections: int = 8) -> None:
        super().__init__()
        self.conninfo = conninfo
        self._pool: ConnectionPool[psycopg.Connection[dict[str, Any]]] | None = None
        self.max_connections = max_connections

    @property
    def pool(self) -> ConnectionPool[psycopg.Connection[dict[str, Any]]]:
        if self._pool is None:
            try:
                self._pool = ConnectionPool(
                    self.conninfo,
                    min_size=1,
                    max_size=self.max_connections,
                    kwargs={"row_factory": dict_row},
                    check=ConnectionPool.check_connection,  # drop connections a restart broke
                    connection_class=psycopg.Connection[dict[str, Any]],
                    open=False,
                )
                self._pool.open(wait=True, timeout=15)
            except Exception as exc:
                self._pool = None
                raise ConfigurationError(f"cannot connect to PostgreSQL: {exc}") from exc
        return self._pool

    @contextmanager
    def transaction(self, conn: Any = None) -> Iterator[Tx]:
        if conn is not None:
            if not isinstance(conn, psycopg.Connection):
                raise ConfigurationError(
                    f"this ledger stores in PostgreSQL; conn must be a psycopg.Connection, "
                    f"not {type(conn).__name__}"
                )
            # The caller's transaction: run inside it, never commit it.
            with _wrapped(), conn.cursor(row_factory=dict_row) as cursor:
                yield PostgresTx(self, cursor)
            return
        with _wrapped(), self.pool.connection() as own, own.transaction(), own.cursor() as cur:
            yield PostgresTx(self, cur)

    async def listen(self, wake: Callable[[str], None]) -> None:
        """LISTEN on its own connection; reconnect after the server went away."""
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
                async with conn:
                    await conn.execute("LISTEN denpyo")
                    async for note in conn.notifies():
                        wake(note.payload)
            except psycopg.Error as exc:
                log.info("LISTEN connection lost (%s); reconnecting in 1s", exc)
                await asyncio.sleep(1.0)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


@contextmanager
def _wrapped() -> Iterator[None]:
    """Driver errors leave as StoreError (missing tables as SchemaError), cause kept."""
    try:
        yield
    except pg_errors.UndefinedTable as exc:
        raise SchemaError("the denpyo tables are missing: run `denpyo migrate`") from exc
    except psycopg.Error as exc:
        raise StoreError(f"PostgreSQL: {exc}") from exc
