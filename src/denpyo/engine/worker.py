"""The worker: claim due rows in batches, call many at once, settle in groups.

One asyncio loop. Per channel it claims as many ready rows as it has room for
(`concurrency`, and the channel's own limit), then in-doubt rows for the
reconciler. Calls run as tasks; their settles are grouped into one commit by
`SettleBatcher`, and no flow goes on before its own settle is committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from denpyo.domain.moves import Move
from denpyo.domain.submission import Submission
from denpyo.engine.drivers import AsyncDriver
from denpyo.engine.flows import Flows

if TYPE_CHECKING:
    from denpyo.engine.ledger import Ledger

log = logging.getLogger("denpyo.worker")


class SettleBatcher:
    """Group the settles of concurrent calls into one transaction.

    A flow awaits its own moves; while one commit runs, the next ones queue and
    go together in the following commit. Nothing is reported settled before the
    transaction holding it has committed.
    """

    def __init__(self, driver: AsyncDriver) -> None:
        self.driver = driver
        self.pending: list[tuple[Sequence[Move], asyncio.Future[list[Submission | None]]]] = []
        self.flushing = False

    async def __call__(self, moves: Sequence[Move]) -> list[Submission | None]:
        future: asyncio.Future[list[Submission | None]] = asyncio.get_running_loop().create_future()
        self.pending.append((moves, future))
        if not self.flushing:
            self.flushing = True
            asyncio.get_running_loop().create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        try:
            while self.pending:
                batch, self.pending = self.pending, []
                moves = [move for group, _ in batch for move in group]
                try:
                    results = await self.driver.in_db(self.driver.store.move, moves)
                except Exception as exc:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                start = 0
                for group, future in batch:
                    if not future.done():
                        future.set_result(results[start : start + len(group)])
                    start += len(group)
        finally:
            self.flushing = False


@dataclass
class WorkReport:
    """What one `work()` run did."""

    attempted: int = 0
    reconciled: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    errors: int = 0


class Worker:
    """Runs the ledger's channels until stopped, or until nothing is due."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        concurrency: int = 16,
        poll_interval: float = 1.0,
        actor: str | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.ledger = ledger
        self.concurrency = concurrency
        self.poll_interval = poll_interval
        self.flows = Flows(ledger.store, ledger.alerts, actor or ledger.new_actor("worker"))
        self.driver = ledger.async_driver()
        self.driver.settle_hook = SettleBatcher(self.driver)
        self.running: Counter[str] = Counter()
        self.tasks: set[asyncio.Task[None]] = set()
        self.report = WorkReport()
        self.stopping = asyncio.Event()
        self.wakeup = asyncio.Event()
        self.kinds: tuple[bool, ...] = (False, True)  # claim ready rows, then in-doubt rows

    def stop(self) -> None:
        """Stop claiming; calls in flight finish and settle."""
        self.stopping.set()
        self.wakeup.set()

    async def run(self, *, until_idle: bool = False) -> WorkReport:
        try:
            while not self.stopping.is_set():
                self.wakeup.clear()  # before claiming, so no completion is missed
                try:
                    claimed = await self._claim_round()
                except Exception:
                    if until_idle:
                        raise
                    log.exception("claim failed; retrying in %.1fs", self.poll_interval)
                    claimed = 0
                if claimed and len(self.tasks) < self.concurrency:
                    continue
                # Idle only if no call is running and none finished while we claimed
                # (a settle committed after our claim's snapshot may have made a row due).
                if until_idle and not claimed and not self.tasks and not self.wakeup.is_set():
                    break
                await self._wait()
        finally:
            if self.tasks:
                await asyncio.gather(*self.tasks, return_exceptions=True)
        return self.report

    async def reconcile_pass(self) -> WorkReport:
        """Verify and settle every in-doubt row that is due, then return."""
        self.kinds = (True,)
        return await self.run(until_idle=True)

    async def _claim_round(self) -> int:
        claimed = 0
        for spec in list(self.ledger.channels.values()):
            for in_doubt in self.kinds:
                room = min(
                    self.concurrency - len(self.tasks),
                    (spec.concurrency or self.concurrency) - self.running[spec.name],
                )
                if room <= 0 or self.stopping.is_set():
                    break
                rows = await self.driver.in_db(
                    self.ledger.store.claim,
                    spec.name,
                    worker=self.flows.hold(),
                    limit=room,
                    lease=spec.lease,
                    in_doubt=in_doubt,
                )
                for sub in rows:
                    flow = (
                        self.flows.settle_in_doubt(spec, sub)
                        if in_doubt
                        else self.flows.attempt(spec, sub)
                    )
                    self._spawn(spec.name, flow, in_doubt)
                claimed += len(rows)
        return claimed

    def _spawn(self, channel: str, flow: object, in_doubt: bool) -> None:
        self.running[channel] += 1
        if in_doubt:
            self.report.reconciled += 1
        else:
            self.report.attempted += 1

        async def run() -> None:
            try:
                sub: Submission = await self.driver.run(flow)  # type: ignore[arg-type]
                self.report.outcomes[sub.status.value] += 1
            except Exception:
                self.report.errors += 1
                log.exception("a %s flow failed; its row is recovered when its lease ends", channel)
            finally:
                self.running[channel] -= 1
                self.wakeup.set()

        task = asyncio.get_running_loop().create_task(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _wait(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wakeup.wait(), timeout=self.poll_interval)
