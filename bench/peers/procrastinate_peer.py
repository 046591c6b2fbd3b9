"""Procrastinate: a PostgreSQL task queue (psycopg 3 connector, async worker).

A job is done when ``procrastinate_jobs.status = 'succeeded'``. The worker runs
with ``wait=False``: it returns once it has caught up with the queue.
"""

from __future__ import annotations

from typing import Any

import procrastinate
import psycopg
from common import Ctx, job_payload, new_session, pg_conninfo, post_job

NAME = "Procrastinate"
DURABLE = True
QUEUE = "bench"
CHUNK = 1_000

_state: dict[str, Any] = {}


def _app(ctx: Ctx) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=ctx.db_url))

    @app.task(name="bench_send", queue=QUEUE)
    async def bench_send(key: str, payload: dict[str, Any]) -> None:
        await post_job(_state["session"], ctx.send_url, key, payload)

    _state["task"] = bench_send
    return app


async def setup(ctx: Ctx) -> None:
    app = _app(ctx)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


async def enqueue(ctx: Ctx, n: int, bulk: bool = False) -> None:
    """`defer_async` once per job, or `batch_defer_async` in chunks of 1,000."""
    start = int(ctx.options.get("start", 0))
    app = _app(ctx)
    task = _state["task"]
    async with app.open_async():
        if bulk:
            for lo in range(start, start + n, CHUNK):
                hi = min(lo + CHUNK, start + n)
                await task.batch_defer_async(
                    *({"key": f"pro:{i}", "payload": job_payload(i)} for i in range(lo, hi))
                )
            return
        for i in range(start, start + n):
            await task.defer_async(key=f"pro:{i}", payload=job_payload(i))


async def dispatch(ctx: Ctx, n: int, concurrency: int) -> dict[str, Any]:
    app = _app(ctx)
    async with new_session() as session, app.open_async():
        _state["session"] = session
        await app.run_worker_async(
            queues=[QUEUE], concurrency=concurrency, wait=False, install_signal_handlers=False
        )
    return {}


async def done(ctx: Ctx) -> int:
    with psycopg.connect(pg_conninfo(ctx.db_url)) as conn:
        row = conn.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
        ).fetchone()
    return int(row[0]) if row else 0
