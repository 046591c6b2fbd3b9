"""The PostgreSQL worker's claims and settles through psycopg's asyncio connections, and
the statements both they and the store's own run for a claim, a move or a settle."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from denpyo.domain.moves import Change, Move, Settle
from denpyo.domain.submission import Submission
from denpyo.errors import StoreConflict, StoreUnavailable
from denpyo.store import masked, shown_url
from denpyo.store.base import AsyncStore
from denpyo.store.conflicts import Conflicts
from denpyo.store.params import Group, distinct_groups, move_params, seconds, settle_params
from denpyo.store.postgresql_driver import CONNECT_TIMEOUT, ERRORS, connect_failure

if TYPE_CHECKING:
    from denpyo.store.postgresql import PostgresStore


class PostgresAsync(AsyncStore):
    """The worker's claims and settles through psycopg's asyncio connections, on
    the worker's own loop (a small pool: a claim and a group commit may run at once)."""

    def __init__(self, store: PostgresStore, max_connections: int = 4) -> None:
        self.store = store
        self.max_connections = max_connections
        self.pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]] = (
            AsyncConnectionPool(
                store.conninfo,
                min_size=1,
                max_size=max_connections,
                kwargs={"row_factory": dict_row, "autocommit": True},
                connection_class=psycopg.AsyncConnection[dict[str, Any]],
                configure=self._durable_session,
                open=False,
            )
        )

    async def _durable_session(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """As the store's own sessions (`PostgresStore._durable_session`)."""
        await conn.execute(self.store.queries["make_session_durable"])
        await conn.execute(self.store.queries["make_session_read_committed"])

    async def open(self) -> None:
        """The pool, waiting up to 15 s for its first connection (a worker started
        while the server restarts waits for it); if none comes, one connection more
        says why, so that a server out of reach and one that refuses the settings
        are told apart."""
        conninfo = self.store.conninfo
        try:
            await self.pool.open(wait=True, timeout=15)
        except Exception as exc:
            try:
                last = await psycopg.AsyncConnection.connect(
                    conninfo, connect_timeout=CONNECT_TIMEOUT
                )
                await last.close()
            except psycopg.Error as why:
                raise connect_failure(why, conninfo) from why
            where, reason = shown_url(conninfo), masked(str(exc), conninfo)
            raise StoreUnavailable(f"cannot connect to PostgreSQL at {where}: {reason}") from exc
        if self.store.partitioned is None:  # the layout's queries, before the first claim
            with ERRORS.wrapped():
                async with self.pool.connection() as conn:
                    cursor = await conn.execute(self.store.queries["get_layout"])
                    row = await cursor.fetchone()
            self.store._use_layout(bool(row and row["partitioned"]))

    async def close(self) -> None:
        await self.pool.close()

    async def claim(
        self, channel: str, *, holder: str, limit: int, lease: float, in_doubt: bool = False
    ) -> list[Submission]:
        query, params = _claim_statement(channel, holder, limit, lease, in_doubt)
        rows = await self._run([(query, params)])
        return [self.store.to_submission(row) for row in rows[0]]

    async def move(self, changes: Sequence[Change]) -> list[Submission | None]:
        statements = _statements(changes)
        rows = await self._run([statement for statement, _ in statements])
        return self.store.moved(statements, rows, len(changes))

    async def _run(
        self, statements: list[tuple[str, dict[str, Any]]]
    ) -> list[list[dict[str, Any]]]:
        """Run the statements in one transaction (a lone statement is its own). A
        session the server ended (a restart) rolled everything back: they run again
        on another session, until the pool's sessions from before the restart are
        spent. A transaction that lost to a concurrent one (a deadlock; a
        serialization failure where the session could not be pinned to READ
        COMMITTED) runs again too, as the store's own do (store/conflicts.py)."""
        conflicts = Conflicts(f"worker.{statements[0][0]}")
        while True:
            try:
                with ERRORS.wrapped():
                    rows = await self._run_once(statements)
            except StoreConflict as exc:
                await asyncio.sleep(conflicts.pause(exc))
            else:
                conflicts.done()
                return rows

    async def _run_once(
        self, statements: list[tuple[str, dict[str, Any]]]
    ) -> list[list[dict[str, Any]]]:
        queries = self.store.queries
        for attempt in range(1, self.max_connections + 2):
            try:
                async with self.pool.connection() as conn:
                    if len(statements) == 1:
                        query, params = statements[0]
                        return [await (await conn.execute(queries[query], params)).fetchall()]
                    async with conn.transaction():
                        return [
                            await (await conn.execute(queries[query], params)).fetchall()
                            for query, params in statements
                        ]
            except pg_errors.AdminShutdown:
                if attempt > self.max_connections:
                    raise
        raise AssertionError("unreachable")


def _claim_statement(
    channel: str, holder: str, limit: int, lease: float, in_doubt: bool
) -> tuple[str, dict[str, Any]]:
    query = "claim_submissions_in_doubt" if in_doubt else "claim_submissions_ready"
    return query, {"channel": channel, "holder": holder, "limit": limit, "lease": lease}


Statement = tuple[tuple[str, dict[str, Any]], Group]
"""A statement (query name, parameters) and the changes it applies."""


def _statements(changes: Sequence[Change]) -> list[Statement]:
    """Per group of distinct rows: its settles by `settle_submission_one` (a lone one:
    an inline submit's) or `settle_submissions_many` (a worker's group commit), one
    statement per actor; its moves by `move_submission_one` or `move_submissions_batch`."""
    statements: list[Statement] = []
    for group in distinct_groups(changes):
        settles: dict[str, list[tuple[int, Settle]]] = {}
        moves: list[tuple[int, Move]] = []
        for ordinal, change in group:
            if isinstance(change, Settle):
                settles.setdefault(change.actor, []).append((ordinal, change))
            else:
                moves.append((ordinal, change))
        for part in settles.values():
            statements.append((_settle_statement(part), list(part)))
        if moves:
            statements.append((_move_statement(moves), list(moves)))
    return statements


def _settle_statement(part: Sequence[tuple[int, Settle]]) -> tuple[str, dict[str, Any]]:
    if len(part) == 1:
        _, settle = part[0]
        return "settle_submission_one", {
            **settle_params(settle),
            "actor": settle.actor,
            "duration_ms": settle.duration_ms,
        }
    return "settle_submissions_many", _settle_params([settle for _, settle in part])


def _move_statement(moves: Sequence[tuple[int, Move]]) -> tuple[str, dict[str, Any]]:
    if len(moves) == 1:
        return "move_submission_one", _one_params(*moves[0])
    return "move_submissions_batch", _batch_params(moves)


def _settle_params(settles: Sequence[Settle]) -> dict[str, Any]:
    """One typed array per field a settle changes; an array of nothing but NULLs
    (no error on a run of successes, say) goes as one NULL."""
    return {
        "ids": [settle.submission_id for settle in settles],
        "holders": [settle.holder for settle in settles],
        "statuses": [settle.to_status.value for settle in settles],
        "remote_ids": _column([settle.remote_id for settle in settles]),
        "retry_ins": _column([seconds(settle.retry_in) for settle in settles]),
        "error_kinds": _column(
            [kind.value if (kind := settle.error_kind) else None for settle in settles]
        ),
        "last_errors": _column([settle.last_error for settle in settles]),
        "durations": _column([settle.duration_ms for settle in settles]),
        "actor": settles[0].actor,
    }


def _column(values: list[Any]) -> list[Any] | None:
    return None if all(value is None for value in values) else values


def _one_params(ordinal: int, move: Move) -> dict[str, Any]:
    """A move's compare-and-set, the event it records, its place in the batch, and
    whether the mover has the row's payload (then it is not sent back)."""
    values = move_params(move)
    values.update(
        ord=ordinal,
        event=move.event,
        actor=move.actor,
        detail=move.detail,
        duration_ms=move.duration_ms,
        payload_known=move.row is not None,
    )
    return values


def _batch_params(moves: Sequence[tuple[int, Move]]) -> dict[str, Any]:
    """`move_submissions_batch`'s parameters: the moves as JSON, and their row ids."""
    params = [_one_params(ordinal, move) for ordinal, move in moves]
    return {"moves": json.dumps(params), "ids": [move.submission_id for _, move in moves]}
