"""denpyo: the ledger, through its public API only.

The channel is `denpyo.channels.http.HttpChannel` (aiohttp, one session per
event loop), registered with its lookup as `verify`. Enqueue is
`Ledger.enqueue` (one transaction each; there is no bulk enqueue API yet, so
"bulk" is `Ledger.enqueue_many` where the ledger has it, otherwise a loop of
`enqueue(conn=...)` inside one caller transaction). Dispatch is
`Ledger.awork(until_idle=True, concurrency=C, poll_interval=0.05)`;
a job is done when its row is `synced`.
"""

from __future__ import annotations

from typing import Any

from common import CONNECTION_LIMIT, Ctx, job_payload

import denpyo
from denpyo.channels.http import HttpChannel

NAME = "denpyo"
DURABLE = True
CHANNEL = "bench"


def ledger_for(ctx: Ctx) -> tuple[denpyo.Ledger, HttpChannel]:
    ledger = denpyo.Ledger(ctx.db_url)
    # Its session's connection limit as the other peers' (HttpChannel's default is 100).
    channel = HttpChannel(
        ctx.send_url, lookup_url=ctx.lookup_url, connection_limit=CONNECTION_LIMIT
    )
    ledger.add_channel(CHANNEL, channel.send, verify=channel.verify)
    return ledger, channel


async def setup(ctx: Ctx) -> None:
    with denpyo.Ledger(ctx.db_url) as ledger:
        ledger.migrate()


def _caller_connection(ledger: denpyo.Ledger) -> Any:
    """A connection of the application's own, of the ledger's database."""
    url = ledger.url
    if ledger.store.dialect == "postgresql":
        import psycopg

        return psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://", 1))
    if ledger.store.dialect == "sqlite":
        import sqlite3

        from denpyo.store import sqlite_path  # type: ignore[attr-defined]

        return sqlite3.connect(sqlite_path(url), timeout=30)
    raise NotImplementedError(f"no caller connection for {ledger.store.dialect}")


HANDWRITTEN = """
INSERT INTO denpyo_submissions
    (channel, key, idempotency_key, payload, status, attempts, next_attempt_at)
VALUES (%s, %s, %s, %s, 'requesting', 0, now())
"""


async def enqueue(ctx: Ctx, n: int, bulk: bool = False) -> str:
    """`mode` option: "own" (default: the ledger's own transaction per row),
    "conn" (one caller transaction per row), bulk (see the module doc), or
    "handwritten": not denpyo at all, the baseline of a bulk enqueue, the same
    rows by a hand-written `executemany` INSERT into denpyo's table in one
    transaction (no events: what an application would write by hand)."""
    start = int(ctx.options.get("start", 0))
    mode = ctx.options.get("enqueue_mode", "own")
    if mode == "handwritten":
        return _handwritten(ctx, start, n)
    ledger, _ = ledger_for(ctx)
    try:
        jobs = ((f"job:{i}", job_payload(i)) for i in range(start, start + n))
        many = getattr(ledger, "enqueue_many", None)
        if bulk and many is not None:
            many(CHANNEL, list(jobs))
            return "Ledger.enqueue_many (one transaction)"
        if bulk or mode == "conn":
            conn = _caller_connection(ledger)
            try:
                for key, payload in jobs:
                    ledger.enqueue(CHANNEL, key, payload, conn=conn)
                    if not bulk:
                        conn.commit()
                conn.commit()
            finally:
                conn.close()
            if bulk:
                return "no bulk API: Ledger.enqueue(conn=...) in a loop, one transaction"
            return "Ledger.enqueue(conn=...), one caller transaction each"
        for key, payload in jobs:
            ledger.enqueue(CHANNEL, key, payload)
        return "Ledger.enqueue, its own transaction each"
    finally:
        ledger.close()


def _handwritten(ctx: Ctx, start: int, n: int) -> str:
    import uuid

    import psycopg
    from psycopg.types.json import Jsonb

    rows = (
        (CHANNEL, f"job:{i}", str(uuid.uuid4()), Jsonb(job_payload(i)))
        for i in range(start, start + n)
    )
    with psycopg.connect(ctx.db_url.replace("postgresql+psycopg://", "postgresql://", 1)) as conn:
        with conn.cursor() as cur:
            cur.executemany(HANDWRITTEN, rows)
        conn.commit()
    return "hand-written INSERT into denpyo's table, `executemany` in one transaction"


async def dispatch(ctx: Ctx, n: int, concurrency: int) -> dict[str, Any]:
    ledger, channel = ledger_for(ctx)
    try:
        report = await ledger.awork(until_idle=True, concurrency=concurrency, poll_interval=0.05)
        await channel.aclose()
    finally:
        ledger.close()
    return {
        "attempted": report.attempted,
        "outcomes": dict(report.outcomes),
        "errors": report.errors,
    }


async def done(ctx: Ctx) -> int:
    return _count_synced(ctx)


def _count_synced(ctx: Ctx) -> int:
    sql = "SELECT count(*) AS n FROM denpyo_submissions WHERE status = 'synced'"
    if ctx.db_url.startswith("sqlite"):
        import sqlite3

        from denpyo.store import sqlite_path  # type: ignore[attr-defined]

        with sqlite3.connect(sqlite_path(ctx.db_url)) as conn:
            return int(conn.execute(sql).fetchone()[0])
    if ctx.db_url.startswith(("mysql", "mariadb")):
        import pymysql

        from denpyo.store.mysql import connect_args  # type: ignore[import-not-found]

        conn = pymysql.connect(**connect_args(ctx.db_url))
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return int(cur.fetchone()[0])
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(ctx.db_url.replace("postgresql+psycopg://", "postgresql://", 1)) as conn:
        row = conn.execute(sql).fetchone()
    return int(row[0]) if row else 0
