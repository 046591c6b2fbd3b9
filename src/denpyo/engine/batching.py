"""Group commits: the settles of concurrent calls share one transaction."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from denpyo.domain.moves import Move
from denpyo.domain.submission import Submission
from denpyo.engine.drivers import AsyncDriver


class SettleBatcher:
    """Group the settles of concurrent calls into few transactions.

    A flow awaits its own moves. Up to `commits` transactions run at once, each
    taking every move queued when it starts; the next ones queue meanwhile. The
    rows of different flows are disjoint, so concurrent commits never wait on
    each other's locks, and the database flushes their WAL together. Nothing is
    reported settled before the transaction holding it has committed; if that
    commit fails, every flow in it sees the error and its row stays held until
    its lease runs out.
    """

    def __init__(self, driver: AsyncDriver, commits: int = 2) -> None:
        self.driver = driver
        self.commits = commits
        self.pending: list[tuple[Sequence[Move], asyncio.Future[list[Submission | None]]]] = []
        self.flushers: set[asyncio.Task[None]] = set()

    async def __call__(self, moves: Sequence[Move]) -> list[Submission | None]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Submission | None]] = loop.create_future()
        self.pending.append((moves, future))
        if len(self.flushers) < self.commits:
            flusher = loop.create_task(self._flush())
            self.flushers.add(flusher)
            flusher.add_done_callback(self.flushers.discard)
        return await future

    async def _flush(self) -> None:
        try:
            await self._flush_pending()
        finally:
            # Leave the set in the same step that saw nothing pending (no await in
            # between): a settle queued after this point starts a flush of its own.
            self.flushers.discard(asyncio.current_task())  # type: ignore[arg-type, unused-ignore]

    async def _flush_pending(self) -> None:
        while self.pending:
            batch, self.pending = self.pending, []
            moves = [move for group, _ in batch for move in group]
            try:
                results = await self.driver.move(moves)
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
