"""DBOS Transact: durable workflows on PostgreSQL. One workflow per job, one step (the call).

Jobs are enqueued from outside the application with ``DBOSClient`` (as a web
process would), onto a queue that the worker registers with
``worker_concurrency`` = the calls in flight and a 50 ms polling interval
(the default is 1 s). A job is done when its workflow's status is ``SUCCESS``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import psycopg
from common import Ctx, job_payload, new_session, pg_conninfo, post_job
from dbos import DBOS, DBOSClient

NAME = "DBOS"
DURABLE = True
QUEUE = "bench"
APP = "denpyo-bench"
POLL = 0.05

_state: dict[str, Any] = {}


@DBOS.step()
async def bench_call(key: str, payload: dict[str, Any]) -> str:
    return await post_job(_state["session"], _state["url"], key, payload)


@DBOS.workflow()
async def bench_job(key: str, payload: dict[str, Any]) -> str:
    return await bench_call(key, payload)


def _config(ctx: Ctx) -> Any:
    return {"name": APP, "system_database_url": ctx.db_url, "log_level": "WARNING"}


async def setup(ctx: Ctx) -> None:
    """Launch once so that DBOS creates its system tables, then stop."""
    DBOS(config=_config(ctx))
    DBOS.launch()
    DBOS.destroy()


async def enqueue(ctx: Ctx, n: int, bulk: bool = False) -> None:
    """`DBOSClient.enqueue` once per job (DBOS has no bulk enqueue)."""
    if bulk:
        raise NotImplementedError("DBOS has no bulk enqueue API")
    start = int(ctx.options.get("start", 0))
    client = DBOSClient(system_database_url=ctx.db_url, application_name=APP)
    try:
        options: Any = {"queue_name": QUEUE, "workflow_name": bench_job.__qualname__}
        for i in range(start, start + n):
            client.enqueue(options, f"dbos:{i}", job_payload(i))
    finally:
        client.destroy()


async def dispatch(ctx: Ctx, n: int, concurrency: int) -> dict[str, Any]:
    logging.getLogger("dbos").setLevel(logging.WARNING)
    async with new_session() as session:
        _state["session"], _state["url"] = session, ctx.send_url
        DBOS(config=_config(ctx))
        DBOS.launch()
        try:
            await DBOS.register_queue_async(
                QUEUE, worker_concurrency=concurrency, polling_interval_sec=POLL
            )
            async with await psycopg.AsyncConnection.connect(
                pg_conninfo(ctx.db_url), autocommit=True
            ) as conn:
                deadline = time.monotonic() + float(ctx.options.get("timeout", 3600))
                while time.monotonic() < deadline:
                    cur = await conn.execute(
                        "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'"
                    )
                    row = await cur.fetchone()
                    if row and row[0] >= n:
                        break
                    await asyncio.sleep(0.1)
        finally:
            DBOS.destroy()
    return {"polling_interval_sec": POLL}


async def done(ctx: Ctx) -> int:
    with psycopg.connect(pg_conninfo(ctx.db_url)) as conn:
        row = conn.execute(
            "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'"
        ).fetchone()
    return int(row[0]) if row else 0
