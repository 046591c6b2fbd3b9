"""Group commits: the settles of concurrent calls share one transaction."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from denpyo.domain.moves import Move
from denpyo.domain.submission import Submission

W = TypeVar("W")
log = logging.getLogger("denpyo.engine")

Commit = Callable[[Sequence[Move]], Awaitable[list[Submission | None]]]
Committed = Callable[[W, Sequence[Move], list[Submission | None] | None, Exception | None], None]


class SettleBatcher(Generic[W]):
    """Group the settles of concurrent flows into few transactions.

    A flow adds its moves with a token of its own (the waiter); once they are
    committed, `committed(waiter, moves, results, None)` is called, or
    `committed(waiter, moves, None, error)` if the commit failed (every flow in it
    sees the error, and its row stays held until its lease runs out). No future and
    no task per flow: the worker resumes its flows in the commit's own step.

    Up to `commits` transactions run at once, each taking every move queued when
    it starts; the next ones queue meanwhile. The rows of different flows are
    disjoint, so concurrent commits never wait on each other's locks. Nothing is
    reported settled before the transaction holding it has committed.
    """

    def __init__(self, commit: Commit, committed: Committed[W], commits: int = 1) -> None:
        self.commit = commit
        self.committed = committed
        self.commits = commits
        self.pending: list[tuple[Sequence[Move], W]] = []
        self.flushers: set[asyncio.Task[None]] = set()

    def add(self, moves: Sequence[Move], waiter: W) -> None:
        self.pending.append((moves, waiter))
        if len(self.flushers) < self.commits:
            flusher = asyncio.get_running_loop().create_task(self._flush())
            self.flushers.add(flusher)
            flusher.add_done_callback(self.flushers.discard)

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
                results = await self.commit(moves)
            except Exception as exc:
                for group, waiter in batch:
                    self._tell(waiter, group, None, exc)
                continue
            start = 0
            for group, waiter in batch:
                self._tell(waiter, group, results[start : start + len(group)], None)
                start += len(group)

    def _tell(
        self,
        waiter: W,
        moves: Sequence[Move],
        results: list[Submission | None] | None,
        error: Exception | None,
    ) -> None:
        """One flow's `committed`, on its own: a callback that raises (a bug) is
        logged, and neither the other flows of the batch nor the next batches are
        left waiting for ever."""
        try:
            self.committed(waiter, moves, results, error)
        except Exception:
            log.exception("a settle's callback failed; the other settles go on")
