"""The floor with the call: the floor's two statements on bare psycopg, and between
them the same POST every peer makes (see floor.py), under the leanest loop we have
(`denpyo_store.lanes`: `concurrency` lanes take claimed rows in turn, as
fire-and-forget's lanes take jobs; no task or future per job). Measured against
the task-per-job loop of the store-alone row (`drive`), it dispatched 0–30 % more
(bench/CHANGES.md).

Not a peer to compare with: the most a durable worker can do on this machine with
nothing of denpyo's in the way (no engine, no store, no channel), so that a ratio
to fire-and-forget that denpyo misses can be read against what any design reaches.
"""

from typing import Any

from common import Ctx

from peers.floor import dispatch_psycopg, done, enqueue, setup

NAME = "the floor with the call: two statements on bare psycopg and the POST (not a peer)"
DURABLE = True
__all__ = ["DURABLE", "NAME", "dispatch", "done", "enqueue", "setup"]


async def dispatch(ctx: Ctx, n: int, concurrency: int) -> dict[str, Any]:
    return await dispatch_psycopg(ctx, n, concurrency, with_call=True)
