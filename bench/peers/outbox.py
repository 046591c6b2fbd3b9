"""A hand-written transactional outbox: what a careful engineer writes in an afternoon.

A table, a partial index on pending rows, a claim with ``FOR UPDATE SKIP
LOCKED`` that marks rows ``sending``, the call, and one UPDATE per job to
``sent`` with the provider's id. Async psycopg and aiohttp, the same shape of
worker as denpyo's (claim as many as there is room for, call, settle).
It has no retries, no lease recovery, no history: the floor for a durable record.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psycopg
from common import Ctx, job_payload, new_session, pg_conninfo, post_job
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

NAME = "hand-written outbox"
DURABLE = True

SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id           bigserial PRIMARY KEY,
    key          text NOT NULL UNIQUE,
    payload      jsonb NOT NULL,
    status       text NOT NULL DEFAULT 'pending',
    attempts     integer NOT NULL DEFAULT 0,
    locked_until timestamptz,
    remote_id    text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    done_at      timestamptz
);
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (id) WHERE status = 'pending';
"""

INSERT = "INSERT INTO outbox (key, payload) VALUES (%s, %s)"

CLAIM = """
UPDATE outbox SET status = 'sending', attempts = attempts + 1,
       locked_until = now() + interval '60 seconds'
WHERE id IN (SELECT id FROM outbox WHERE status = 'pending' ORDER BY id
             LIMIT %s FOR UPDATE SKIP LOCKED)
RETURNING id, key, payload
"""

DONE = """
UPDATE outbox SET status = 'sent', remote_id = %s, done_at = now(), locked_until = NULL
WHERE id = %s AND status = 'sending'
"""


async def setup(ctx: Ctx) -> None:
    with psycopg.connect(pg_conninfo(ctx.db_url), autocommit=True) as conn:
        conn.execute(SCHEMA)


async def enqueue(ctx: Ctx, n: int, bulk: bool = False) -> None:
    """Synchronous psycopg, like an application's request handler: one INSERT per
    transaction, or all rows in one transaction with `executemany` (pipelined)."""
    start = int(ctx.options.get("start", 0))
    rows = ((f"outbox:{i}", Jsonb(job_payload(i))) for i in range(start, start + n))
    with psycopg.connect(pg_conninfo(ctx.db_url)) as conn:
        if bulk:
            with conn.cursor() as cur:
                cur.executemany(INSERT, rows)
            conn.commit()
            return
        for row in rows:
            conn.execute(INSERT, row)
            conn.commit()


async def dispatch(ctx: Ctx, n: int, concurrency: int) -> dict[str, Any]:
    conninfo = pg_conninfo(ctx.db_url)
    pool = AsyncConnectionPool(
        conninfo, min_size=4, max_size=4, kwargs={"autocommit": True}, open=False
    )
    await pool.open(wait=True)
    claimer = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
    wake = asyncio.Event()
    tasks: set[asyncio.Task[None]] = set()
    state = {"done": 0, "errors": 0, "claims": 0}
    try:
        async with new_session() as session:

            async def job(row: tuple[int, str, Any]) -> None:
                try:
                    remote_id = await post_job(session, ctx.send_url, row[1], row[2])
                    async with pool.connection() as conn:
                        await conn.execute(DONE, (remote_id, row[0]))
                    state["done"] += 1
                except Exception:
                    state["errors"] += 1
                    raise
                finally:
                    wake.set()

            while state["done"] + state["errors"] < n:
                wake.clear()
                room = concurrency - len(tasks)
                rows: list[Any] = []
                if room > 0:
                    cur = await claimer.execute(CLAIM, (room,))
                    rows = await cur.fetchall()
                    state["claims"] += 1
                    for row in rows:
                        task = asyncio.create_task(job(row))
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
                if rows and len(tasks) < concurrency:
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), 0.05)
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await claimer.close()
        await pool.close()
    if state["errors"]:
        raise RuntimeError(f"{state['errors']} outbox jobs failed")
    return {"claims": state["claims"]}


async def done(ctx: Ctx) -> int:
    with psycopg.connect(pg_conninfo(ctx.db_url)) as conn:
        row = conn.execute("SELECT count(*) FROM outbox WHERE status = 'sent'").fetchone()
    return int(row[0]) if row else 0
