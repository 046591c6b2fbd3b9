"""Group commits: the changes of concurrent flows (their settles, mostly) share one
transaction."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from denpyo.domain.moves import Change
from denpyo.domain.submission import Submission

W = TypeVar("W")
log = logging.getLogger("denpyo.engine")

Commit = Callable[[Sequence[Change]], Awaitable[list[Submission | None]]]
Committed = Callable[[W, Sequence[Change], list[Submission | None] | None, Exception | None], None]


class GroupCommit(Generic[W]):
    """Group the changes of concurrent flows into few transactions.

    A flow adds its changes with a token of its own (the waiter); once they are
    committed, `committed(waiter, changes, results, None)` is called, or
    `committed(waiter, changes, None, error)` if the commit failed (every flow in it
    sees the error, and its row stays held until its lease runs out). No future and
    no task per flow: the worker resumes its flows in the commit's own step.

    Up to `commits` transactions run at once, each taking every move queued when
    it starts; the next ones queue meanwhile. The rows of different flows are
    disjoint, so concurrent commits never wait on each other's locks. Nothing is
    reported applied before the transaction holding it has committed.
    """

    def __init__(self, commit: Commit, committed: Committed[W], commits: int = 1) -> None:
        self.commit = commit
        self.committed = committed
        self.commits = commits
        self.pending: list[tuple[Sequence[Change], W]] = []
        self.flushers: set[asyncio.Task[None]] = set()

    def add(self, changes: Sequence[Change], waiter: W) -> None:
        self.pending.append((changes, waiter))
        if len(self.flushers) < self.commits:
            flusher = asyncio.get_running_loop().create_task(self._flush())
            self.flushers.add(flusher)
            flusher.add_done_callback(self.flushers.discard)

    async def _flush(self) -> None:
        try:
            await self._flush_pending()
        finally:
            # Leave the set in the same step that saw nothing pending (no await in
            # between): a change queued after this point starts a flush of its own.
            self.flushers.discard(asyncio.current_task())  # type: ignore[arg-type, unused-ignore]

    async def _flush_pending(self) -> None:
        while self.pending:
            batch, self.pending = self.pending, []
            changes = [change for group, _ in batch for change in group]
            try:
                results = await self.commit(changes)
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
        changes: Sequence[Change],
        results: list[Submission | None] | None,
        error: Exception | None,
    ) -> None:
        """One flow's `committed`, on its own: a callback that raises (a bug) is
        logged, and neither the other flows of the batch nor the next batches are
        left waiting for ever."""
        try:
            self.committed(waiter, changes, results, error)
        except Exception:
            log.exception("a commit's callback failed; the other flows go on")
