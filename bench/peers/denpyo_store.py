"""denpyo's store alone: the worker's claims and settles with no engine around them.

Not a peer to compare with. The same rows, channel and PostgreSQL statements as
the `denpyo, no call` row, through the store's own native async API (`claim`,
`move`: their parameters built and their rows read by the store), driven by the
smallest loop that keeps them busy: claims ahead as the worker does, one task per
job with a call that returns at once, and the settles of the calls that finished
meanwhile grouped into one commit, one commit at a time. No flows, policy, leases
renewed, alerts or bookkeeping.

It answers one question: how much of the worker's CPU per job is the store's
protocol itself (psycopg, the statements' parameters and rows) rather than the
engine. The report sets it beside the room a target leaves (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

from common import Ctx

from denpyo.domain.moves import Move
from denpyo.domain.status import Status
from denpyo.domain.submission import Submission
from denpyo.engine.worker import Worker
from denpyo.store.driver import AsyncStore, InThreads
from peers import denpyo_nocall, denpyo_peer
from peers.denpyo_nocall import CALLS, DURABLE, done, enqueue, setup

NAME = "denpyo's store alone (no engine, no call)"
__all__ = ["CALLS", "DURABLE", "NAME", "dispatch", "done", "enqueue", "setup"]

ACTOR = "bench-store"


async def dispatch(ctx: Ctx, n: int, concurrency: int) -> dict[str, Any]:
    ledger = denpyo_nocall.ledger_for(ctx)
    native = ledger.store.async_ops(db=None)  # type: ignore[arg-type]
    if isinstance(native, InThreads):
        ledger.close()
        raise NotImplementedError(f"no native async store for {ledger.store.dialect}")
    spec = ledger.channels[denpyo_peer.CHANNEL]
    # As far ahead, and in claims as large, as the worker holds rows of this channel.
    ahead, batch = Worker(ledger, concurrency=concurrency)._ahead(spec)
    await native.open()
    try:
        settled = await _drive(native, n, concurrency, ahead, batch, spec.lease)
    finally:
        await native.close()
        ledger.close()
    return {"attempted": settled}


async def _drive(
    native: AsyncStore, n: int, concurrency: int, ahead: int, batch: int, lease: float
) -> int:
    loop = asyncio.get_running_loop()
    ready: list[Submission] = []  # claimed, not started (lowest id last)
    pending: list[tuple[Move, asyncio.Future[None]]] = []  # called, not yet committed
    tasks: set[asyncio.Task[None]] = set()
    state = {"running": 0, "settled": 0, "flushing": False}
    wake = asyncio.Event()

    def spawn(coro: Coroutine[Any, Any, None]) -> None:
        task = loop.create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def flush() -> None:
        while pending:
            group = pending[:]
            pending.clear()
            moved = await native.move([move for move, _ in group])
            state["settled"] += sum(1 for row in moved if row is not None)
            for _, waiter in group:
                waiter.set_result(None)
        state["flushing"] = False
        wake.set()

    async def job(sub: Submission) -> None:
        remote_id = await denpyo_nocall.no_call(sub)
        move = Move(
            sub.id, Status.REQUESTING, Status.SYNCED, ACTOR, expect_locked_by=sub.locked_by,
            event="settle", remote_id=remote_id, detail=remote_id, duration_ms=0, row=sub,
        )  # fmt: skip
        waiter = loop.create_future()
        pending.append((move, waiter))
        state["running"] -= 1  # the slot is free while the settle commits, as in the worker
        start()
        if not state["flushing"]:
            state["flushing"] = True  # from here: one commit at a time
            spawn(flush())
        await waiter

    def start() -> None:
        while ready and state["running"] < concurrency:
            state["running"] += 1
            spawn(job(ready.pop()))

    while state["settled"] < n:
        wake.clear()
        room = ahead - len(ready) - state["running"]
        if room >= batch:
            rows = await native.claim(denpyo_peer.CHANNEL, worker=ACTOR, limit=room, lease=lease)
            ready.extend(reversed(rows))
            start()
            if rows:
                continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout=0.05)
    return state["settled"]
