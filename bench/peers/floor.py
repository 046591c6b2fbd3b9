"""The floor under denpyo's store: the fewest statements a durable claim and settle need.

Not a peer to compare with. The same rows and table as `denpyo's store alone`,
driven by the same loop (`denpyo_store.drive`), but through two hand-written
statements on the bare driver, with nothing of denpyo's in between:

- claim: lock up to N due rows with `FOR UPDATE SKIP LOCKED`, hold them, write
  each one's `attempt` event, and return the whole row with its JSON payload
  (a worker needs the payload to make the call);
- settle: `UPDATE … FROM unnest(ids, remote_ids)` guarded by the holder, write
  each one's `settle` event, return the ids that won.

The events are in: the history is part of what the spec asks a ledger to keep,
so a floor without them would be a floor for something else. What it answers is
how far denpyo's statements, and their parameters and rows in Python, are from
what the driver and the database cost with nothing of ours in the way. Two
drivers: psycopg 3 (binary, prepared, dict rows, as denpyo uses it) and asyncpg.
"""

from __future__ import annotations

import json
from typing import Any

from common import Ctx, new_session, pg_conninfo, post_job

from peers import denpyo_nocall, denpyo_peer
from peers.denpyo_store import Jobs, drive, lanes, worker_shape

ACTOR = "bench-floor"
CLAIM = """
WITH due AS (
    SELECT id FROM denpyo_submissions
    WHERE channel = $1 AND next_attempt_at <= now()
      AND status = 'requesting' AND locked_until IS NULL
    ORDER BY next_attempt_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE denpyo_submissions s SET
        attempts = s.attempts + 1, locked_by = $3,
        locked_until = now() + make_interval(secs => $4),
        next_attempt_at = now() + make_interval(secs => $4), updated_at = now()
    FROM due WHERE s.id = due.id
    RETURNING s.*
), events AS (
    INSERT INTO denpyo_events (submission_id, kind, from_status, to_status, attempt, actor)
    SELECT id, 'attempt', 'requesting', 'requesting', attempts, $3 FROM claimed
)
SELECT * FROM claimed
"""
SETTLE = """
WITH settled AS (
    UPDATE denpyo_submissions s SET
        status = 'synced', remote_id = u.remote_id, locked_by = NULL, locked_until = NULL,
        next_attempt_at = NULL, synced_at = now(), updated_at = now()
    FROM unnest($1::bigint[], $2::text[]) AS u(id, remote_id)
    WHERE s.id = u.id AND s.status = 'requesting' AND s.locked_by = $3
    RETURNING s.id, s.attempts, u.remote_id
), events AS (
    INSERT INTO denpyo_events (submission_id, kind, from_status, to_status, attempt, actor, detail)
    SELECT id, 'settle', 'requesting', 'synced', attempts, $3, remote_id FROM settled
)
SELECT id FROM settled
"""

setup = denpyo_nocall.setup
enqueue = denpyo_nocall.enqueue
done = denpyo_nocall.done


async def call(row: Any) -> str:
    return f"local-{row['id']}"


def settle(row: Any, remote_id: str) -> tuple[int, str]:
    return row["id"], remote_id


def shape(ctx: Ctx, concurrency: int) -> tuple[int, int, float]:
    ledger = denpyo_nocall.ledger_for(ctx)
    try:
        return worker_shape(ledger, concurrency)
    finally:
        ledger.close()


async def dispatch_psycopg(
    ctx: Ctx, n: int, concurrency: int, with_call: bool = False
) -> dict[str, Any]:
    """With `with_call`, each job makes the same POST as every peer that calls
    (`common.post_job`, its row's idempotency key and payload) instead of `call`,
    under `lanes` (no task or future per job) rather than `drive`."""
    import psycopg
    from psycopg.rows import dict_row

    ahead, batch, lease = shape(ctx, concurrency)
    claim_sql, settle_sql = _named(CLAIM, 4), _named(SETTLE, 3)
    claims = await psycopg.AsyncConnection.connect(
        pg_conninfo(ctx.db_url), autocommit=True, row_factory=dict_row
    )
    settles = await psycopg.AsyncConnection.connect(pg_conninfo(ctx.db_url), autocommit=True)

    async def claim(limit: int) -> list[dict[str, Any]]:
        params = {"p1": denpyo_peer.CHANNEL, "p2": limit, "p3": ACTOR, "p4": lease}
        cursor = await claims.execute(claim_sql, params, prepare=True, binary=True)
        return await cursor.fetchall()

    async def commit(items: list[tuple[int, str]]) -> int:
        ids, remote_ids = [i for i, _ in items], [r for _, r in items]
        params = {"p1": ids, "p2": remote_ids, "p3": ACTOR}
        cursor = await settles.execute(settle_sql, params, prepare=True, binary=True)
        return len(await cursor.fetchall())

    try:
        async with new_session() as session:

            async def provider_call(row: dict[str, Any]) -> str:
                return await post_job(session, ctx.send_url, row["idempotency_key"], row["payload"])

            job = provider_call if with_call else call
            # With the call, the faster of the two loops (lanes): the most any design reaches.
            loop = lanes if with_call else drive
            settled = await loop(Jobs(claim, job, settle, commit, n, concurrency, ahead, batch))
    finally:
        await claims.close()
        await settles.close()
    return {"attempted": settled}


async def dispatch_asyncpg(ctx: Ctx, n: int, concurrency: int) -> dict[str, Any]:
    import asyncpg

    ahead, batch, lease = shape(ctx, concurrency)
    claims = await asyncpg.connect(pg_conninfo(ctx.db_url))
    settles = await asyncpg.connect(pg_conninfo(ctx.db_url))
    # jsonb arrives as text unless told: decode it as psycopg does, for the same work.
    await claims.set_type_codec(
        "jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
    )
    claim_stmt = await claims.prepare(CLAIM)
    settle_stmt = await settles.prepare(SETTLE)

    async def claim(limit: int) -> list[Any]:
        return list(await claim_stmt.fetch(denpyo_peer.CHANNEL, limit, ACTOR, lease))

    async def commit(items: list[tuple[int, str]]) -> int:
        ids, remote_ids = [i for i, _ in items], [r for _, r in items]
        return len(await settle_stmt.fetch(ids, remote_ids, ACTOR))

    try:
        settled = await drive(Jobs(claim, call, settle, commit, n, concurrency, ahead, batch))
    finally:
        await claims.close()
        await settles.close()
    return {"attempted": settled}


def _named(sql: str, count: int) -> str:
    """asyncpg's $1…$n as psycopg's named placeholders: the same statement."""
    for i in range(count, 0, -1):
        sql = sql.replace(f"${i}", f"%(p{i})s")
    return sql
