"""One connection per event loop, for the broker channels.

A broker client's connection belongs to the event loop that opened it, and a
channel may be used from several (a worker's loop, the ledger's private loop),
so each loop gets its own, opened on first use and opened again after an error
broke it. `close()` closes them all, each on its own loop, from synchronous code
(`Ledger.close()`); `aclose()` closes the running loop's.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from functools import partial
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

T = TypeVar("T")

_CLOSE_WAIT = 10.0


class PerLoop(Generic[T]):
    """`opener()` makes a connection on the running loop; `closer(c)` closes one;
    `usable(c)` says whether an open one can still be used."""

    def __init__(
        self,
        opener: Callable[[], Awaitable[T]],
        closer: Callable[[T], Awaitable[None]],
        usable: Callable[[T], bool],
    ) -> None:
        self._opener = opener
        self._closer = closer
        self._usable = usable
        self._open: dict[asyncio.AbstractEventLoop, T] = {}
        self._locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self._mutex = threading.Lock()
        self._closing: set[asyncio.Task[None]] = set()

    async def get(self) -> T:
        """The running loop's connection, opened now if it has none (or a broken one).
        Calls that arrive while it opens wait for it rather than open their own."""
        loop = asyncio.get_running_loop()
        with self._mutex:
            for dead in [lp for lp in self._open if lp.is_closed()]:
                del self._open[dead]  # its loop is gone: it cannot be closed any more
                self._locks.pop(dead, None)
            lock = self._locks.setdefault(loop, asyncio.Lock())
        async with lock:
            with self._mutex:
                current = self._open.get(loop)
            if current is not None and self._usable(current):
                return current
            if current is not None:
                self.discard(current)
            opened = await self._opener()
            with self._mutex:
                self._open[loop] = opened
            return opened

    def discard(self, value: T) -> None:
        """Forget a connection an error left in doubt, so the next call opens a fresh
        one; it is closed in the background (a broker that stopped answering would
        keep a close waiting, and the call that failed must not wait for it)."""
        loop = asyncio.get_running_loop()
        with self._mutex:
            if self._open.get(loop) is value:
                del self._open[loop]
        task = loop.create_task(self._quietly(value))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Close the running loop's connection (the others stay)."""
        loop = asyncio.get_running_loop()
        with self._mutex:
            value = self._open.pop(loop, None)
        if value is not None:
            await self._closer(value)

    def close(self) -> None:
        """Close every connection, each on its own loop if that loop still runs.

        Called from inside one of those loops, that loop's connection is closed by a
        task (this method cannot block its own loop); prefer `aclose()` there.
        """
        with self._mutex:
            opened = list(self._open.items())
            self._open.clear()
        close_on_their_loops(
            [(loop, partial(self._closer, value)) for loop, value in opened], self._closing
        )

    async def _quietly(self, value: T) -> None:
        await quietly(self._closer(value))


async def quietly(closing: Awaitable[None]) -> None:
    """Closing is best effort: a connection the other side already dropped is closed."""
    with contextlib.suppress(Exception):
        await closing


def close_on_their_loops(
    closers: list[tuple[asyncio.AbstractEventLoop, Callable[[], Awaitable[None]]]],
    closing: set[asyncio.Task[None]],
) -> None:
    """Run each closer on its own loop, from synchronous code: waited for (up to
    10 s) on a loop running in another thread, run to the end on a loop that has
    stopped, and left to a task (kept in `closing` until done) on the loop running
    this call, which cannot block itself. A closed loop's connections cannot be
    closed any more and are skipped."""
    try:
        current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        current = None
    for loop, closer in closers:
        if loop.is_closed():
            continue
        if loop is current:
            task = loop.create_task(quietly(closer()))
            closing.add(task)
            task.add_done_callback(closing.discard)
        elif loop.is_running():
            future = asyncio.run_coroutine_threadsafe(quietly(closer()), loop)
            try:
                future.result(_CLOSE_WAIT)
            except TimeoutError:
                future.cancel()
        elif current is None:
            loop.run_until_complete(quietly(closer()))


class ClosesPerLoop:
    """`aclose()`, `close()` and `async with` for a channel whose connections are a
    `PerLoop` in `self._links`."""

    _links: PerLoop[Any]

    async def aclose(self) -> None:
        """Close the running loop's connection."""
        await self._links.aclose()

    def close(self) -> None:
        """Close every loop's connection (Ledger.close calls it)."""
        self._links.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
