"""PgQueuer: a PostgreSQL job queue (SKIP LOCKED, LISTEN/NOTIFY, batched acks).

A job is done when PgQueuer has removed it from ``pgqueuer`` and logged it as
``successful`` in ``pgqueuer_log`` (its buffered acknowledgement, flushed before
a drain-mode worker returns).

The driver is asyncpg (PgQueuer's primary driver). Its psycopg driver shares
one connection between LISTEN and the queries and ran at ~6 jobs/s here
(``BENCH_PGQUEUER_DRIVER=psycopg`` to see it).
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

import psycopg
from common import Ctx, job_payload, new_session, pg_conninfo, post_job
from pgqueuer import Job, PsycopgDriver, Queries, QueueManager
from pgqueuer.domain.types import QueueExecutionMode

NAME = "PgQueuer"
DURABLE = True
ENTRYPOINT = "bench_send"
CHUNK = 5_000


def _job(i: int) -> bytes:
    return json.dumps({"key": f"pgq:{i}", "payload": job_payload(i)}).encode()


DRIVER = os.environ.get("BENCH_PGQUEUER_DRIVER", "asyncpg")


async def _connect(ctx: Ctx) -> Any:
    if DRIVER == "psycopg":
        return await psycopg.AsyncConnection.connect(pg_conninfo(ctx.db_url), autocommit=True)
    import asyncpg

    return await asyncpg.connect(pg_conninfo(ctx.db_url))


def _driver(conn: Any) -> Any:
    if DRIVER == "psycopg":
        return PsycopgDriver(conn)
    from pgqueuer import AsyncpgDriver

    return AsyncpgDriver(conn)


async def setup(ctx: Ctx) -> None:
    conn = await _connect(ctx)
    try:
        await Queries(_driver(conn)).install()
    finally:
        await conn.close()


async def enqueue(ctx: Ctx, n: int, bulk: bool = False) -> None:
    """`Queries.enqueue` once per job (autocommit: one transaction each), or its
    list form in chunks of 5,000 (one statement, one transaction per chunk)."""
    start = int(ctx.options.get("start", 0))
    conn = await _connect(ctx)
    try:
        queries = Queries(_driver(conn))
        if bulk:
            for lo in range(start, start + n, CHUNK):
                hi = min(lo + CHUNK, start + n)
                count = hi - lo
                await queries.enqueue(
                    [ENTRYPOINT] * count, [_job(i) for i in range(lo, hi)], [0] * count
                )
            return
        for i in range(start, start + n):
            await queries.enqueue(ENTRYPOINT, _job(i))
    finally:
        await conn.close()


async def dispatch(ctx: Ctx, n: int, concurrency: int) -> dict[str, Any]:
    """A drain-mode QueueManager: `max_concurrent_tasks` = the calls in flight,
    `batch_size` = half of it (PgQueuer requires max ≥ 2 × batch)."""
    conn = await _connect(ctx)
    try:
        async with new_session() as session:
            qm = QueueManager(Queries(_driver(conn)))

            @qm.entrypoint(ENTRYPOINT)
            async def send(job: Job) -> None:
                data = json.loads(job.payload or b"{}")
                await post_job(session, ctx.send_url, data["key"], data["payload"])

            await qm.run(
                dequeue_timeout=timedelta(seconds=1),
                batch_size=max(1, concurrency // 2),
                mode=QueueExecutionMode.drain,
                max_concurrent_tasks=concurrency,
            )
    finally:
        await conn.close()
    return {"batch_size": max(1, concurrency // 2), "driver": DRIVER}


async def done(ctx: Ctx) -> int:
    with psycopg.connect(pg_conninfo(ctx.db_url)) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
        ).fetchone()
    return int(row[0]) if row else 0
