"""The fake provider served by aiohttp: the fast transport, for the tests and benchmarks.

Imported only when aiohttp is chosen, so that the standard library transport
works where aiohttp is not installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading

from aiohttp import web

from denpyo.testing._core import ProviderCore


def make_app(core: ProviderCore, stopping: asyncio.Event) -> web.Application:
    """An application that hands every request to `core`; setting `stopping` wakes
    the slow replies, so that a graceful stop need not wait for them."""

    async def handle(request: web.Request) -> web.StreamResponse:
        method, target = request.method, request.raw_path
        body = await request.read()
        delay = core.latency(method, target)
        if delay > 0:
            await asyncio.sleep(delay)
        reply = core.handle(method, target, request.headers, body)
        if reply.then == "drop":
            # Close without a reply; aiohttp then fails to write the response below
            # and treats it as a premature disconnection (no log, no 500).
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=200)
        if reply.then == "slow":
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), core.options.slow_seconds)
        return web.Response(
            status=reply.status,
            body=reply.encoded(),
            content_type="application/json",
            headers=reply.headers,
        )

    app = web.Application()
    app.router.add_route("*", "/{path:.*}", handle)
    return app


class AiohttpServer:
    """Serves `core` on `sock` from a daemon thread with its own event loop, so it
    serves synchronous and asynchronous code alike. Returns once listening."""

    def __init__(self, core: ProviderCore, sock: socket.socket) -> None:
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._run,
            args=(core, sock, ready, failure),
            name="denpyo-fake-provider",
            daemon=True,
        )
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            raise failure[0]

    def stop(self) -> None:
        """Answer the slow replies, finish or cancel the requests in flight, close."""
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join()

    def _run(
        self,
        core: ProviderCore,
        sock: socket.socket,
        ready: threading.Event,
        failure: list[BaseException],
    ) -> None:
        loop = self._loop
        try:
            loop.run_until_complete(self._serve(core, sock, ready))
        except BaseException as exc:  # reported to __init__ when it happens before ready
            if not ready.is_set():
                failure.append(exc)
                ready.set()
            else:
                raise
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    async def _serve(self, core: ProviderCore, sock: socket.socket, ready: threading.Event) -> None:
        stopping = asyncio.Event()
        # handler_cancellation: a client that gives up (timeout) cancels its
        # handler, so a slow reply does not linger; the effect is already recorded.
        runner = web.AppRunner(
            make_app(core, stopping),
            access_log=None,
            handle_signals=False,
            handler_cancellation=True,
            shutdown_timeout=1.0,
        )
        await runner.setup()
        await web.SockSite(runner, sock).start()
        ready.set()
        try:
            await self._stop.wait()
        finally:
            stopping.set()
            await runner.cleanup()
