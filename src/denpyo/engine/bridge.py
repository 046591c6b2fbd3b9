"""Run coroutines from synchronous code on one private, long-lived event loop.

Async channels keep per-loop state (an HTTP session, a broker connection); a
fresh `asyncio.run` per call would throw it away every time. The loop runs in
a daemon thread started on first use and stopped by `close()`, which first lets
what lives on the loop close itself, as `asyncio.run` does (an HTTP channel's
session is closed by the loop's `shutdown_asyncgens()`). A loop nobody closed
is closed at interpreter exit, while its thread still runs: a daemon thread
simply vanishes, and what it held would be reported unclosed.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from denpyo.errors import ConfigurationError
from denpyo.store.base import CLOSED

T = TypeVar("T")

_SHUTDOWN_WAIT = 10.0
_TICK = 0.1


class LoopThread:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False  # by `close()`: no loop is started again

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                if self._closed:
                    raise ConfigurationError(CLOSED)
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="denpyo-loop", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
                atexit.register(self.close)
            return self._loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the private loop and wait for its result in this thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def wait(
        self,
        coro: Coroutine[Any, Any, T],
        stop: Callable[[], None],
        tick: Callable[[], None] | None = None,
    ) -> T:
        """Run `coro` on the private loop and wait for it in this thread, waking every
        0.1 s for `tick` (progress, and signal handlers, which run in the main thread).
        Ctrl-C calls `stop` on the loop and waits for `coro` to end cleanly."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            while True:
                try:
                    return future.result(timeout=_TICK)
                except concurrent.futures.TimeoutError:
                    if tick is not None:
                        tick()
        except KeyboardInterrupt:
            self.loop.call_soon_threadsafe(stop)
            future.result()
            raise

    @property
    def started(self) -> bool:
        return self._loop is not None

    def close(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
            self._closed = True
        if loop is None or thread is None:
            return
        atexit.unregister(self.close)
        if thread is not threading.current_thread() and loop.is_running():
            shutdown = asyncio.run_coroutine_threadsafe(loop.shutdown_asyncgens(), loop)
            try:
                shutdown.result(_SHUTDOWN_WAIT)
            except (TimeoutError, RuntimeError):
                shutdown.cancel()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
