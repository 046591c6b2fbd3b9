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
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from common import Ctx

from denpyo import Ledger
from denpyo.domain.moves import Settle
from denpyo.domain.status import Status
from denpyo.domain.submission import Submission
from denpyo.engine.worker import Worker
from denpyo.store.base import AsyncStore, InThreads
from peers import denpyo_nocall, denpyo_peer
from peers.denpyo_nocall import CALLS, DURABLE, done, enqueue, setup

NAME = "denpyo's store alone (no engine, no call)"
__all__ = ["CALLS", "DURABLE", "NAME", "dispatch", "done", "enqueue", "setup"]

ACTOR = "bench-store"
R = TypeVar("R")  # a claimed row, as the driver returns it
S = TypeVar("S")  # a finished job's settle


async def dispatch(ctx: Ctx, n: int, concurrency: int) -> dict[str, Any]:
    ledger = denpyo_nocall.ledger_for(ctx)
    native = ledger.store.async_ops(db=None)  # type: ignore[arg-type]
    if isinstance(native, InThreads):
        ledger.close()
        raise NotImplementedError(f"no native async store for {ledger.store.dialect}")
    ahead, batch, lease = worker_shape(ledger, concurrency)
    await native.open()
    try:
        settled = await _drive(native, n, concurrency, ahead, batch, lease)
    finally:
        await native.close()
        ledger.close()
    return {"attempted": settled}


def worker_shape(ledger: Ledger, concurrency: int) -> tuple[int, int, float]:
    """How far ahead, in claims how large and with what lease the worker holds rows
    of the bench channel: the loops here do the same."""
    spec = ledger.channels[denpyo_peer.CHANNEL]
    _, ahead, batch = Worker(ledger, concurrency=concurrency)._shape(spec)
    return ahead, batch, spec.lease


async def _drive(
    native: AsyncStore, n: int, concurrency: int, ahead: int, batch: int, lease: float
) -> int:
    async def claim(limit: int) -> list[Submission]:
        return await native.claim(denpyo_peer.CHANNEL, holder=ACTOR, limit=limit, lease=lease)

    def settle(sub: Submission, remote_id: str) -> Settle:
        return Settle(sub, ACTOR, Status.SYNCED, remote_id=remote_id, duration_ms=0)

    async def commit(settles: list[Settle]) -> int:
        return sum(1 for row in await native.move(settles) if row is not None)

    return await drive(
        Jobs(claim, denpyo_nocall.no_call, settle, commit, n, concurrency, ahead, batch)
    )


@dataclass(frozen=True)
class Jobs(Generic[R, S]):
    """What a loop below drives: `claim(limit)` rows, `call(row)` for each, `settle(row,
    remote_id)` makes a finished job's settle and `commit(settles)` writes a group of
    them, returning how many won; until `n` have, `concurrency` calls at a time, rows
    held up to `ahead`, claimed `batch` or more at once."""

    claim: Callable[[int], Awaitable[list[R]]]
    call: Callable[[R], Awaitable[str]]
    settle: Callable[[R, str], S]
    commit: Callable[[list[S]], Awaitable[int]]
    n: int
    concurrency: int
    ahead: int
    batch: int


async def drive(jobs: Jobs[R, S]) -> int:
    """The smallest loop that keeps claims and settles busy: claim ahead, one task
    per job with a `call` that returns at once, and the settles of the calls that
    finished meanwhile committed together, one commit at a time."""
    claim, call, settle, commit = jobs.claim, jobs.call, jobs.settle, jobs.commit
    n, concurrency, ahead, batch = jobs.n, jobs.concurrency, jobs.ahead, jobs.batch
    loop = asyncio.get_running_loop()
    ready: list[R] = []  # claimed, not started (lowest id last)
    pending: list[tuple[S, asyncio.Future[None]]] = []  # called, not yet committed
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
            state["settled"] += await commit([item for item, _ in group])
            for _, waiter in group:
                waiter.set_result(None)
        state["flushing"] = False
        wake.set()

    async def job(row: R) -> None:
        remote_id = await call(row)
        waiter = loop.create_future()
        pending.append((settle(row, remote_id), waiter))
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
            rows = await claim(room)
            ready.extend(reversed(rows))
            start()
            if rows:
                continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout=0.05)
    return state["settled"]


async def lanes(jobs: Jobs[R, S]) -> int:
    """As `drive`, without a task or a future per job: `concurrency` lanes take
    claimed rows in turn, as fire-and-forget's lanes take jobs; a lane goes on to
    its next row as soon as its call returns, its settle left to the commit loop."""
    claim, call, settle, commit = jobs.claim, jobs.call, jobs.settle, jobs.commit
    n, concurrency, ahead, batch = jobs.n, jobs.concurrency, jobs.ahead, jobs.batch
    ready: deque[R] = deque()
    pending: list[S] = []
    state = {"running": 0, "settled": 0}
    to_claim, to_commit, work, done = (asyncio.Event() for _ in range(4))

    async def lane() -> None:
        while not done.is_set():
            if not ready:
                work.clear()
                await work.wait()
                continue
            row = ready.popleft()
            state["running"] += 1
            remote_id = await call(row)
            state["running"] -= 1
            pending.append(settle(row, remote_id))
            to_commit.set()
            to_claim.set()

    async def commits() -> None:
        while state["settled"] < n:
            if not pending:
                to_commit.clear()
                await to_commit.wait()
                continue
            group = pending[:]
            pending.clear()
            state["settled"] += await commit(group)
        done.set()
        work.set()

    async def claims() -> None:
        while not done.is_set():
            to_claim.clear()
            room = ahead - len(ready) - state["running"]
            if room >= batch:
                rows = await claim(room)
                ready.extend(rows)
                work.set()
                if rows:
                    continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(to_claim.wait(), timeout=0.05)

    workers = [asyncio.create_task(lane()) for _ in range(concurrency)]
    await asyncio.gather(commits(), claims(), *workers)
    return state["settled"]
