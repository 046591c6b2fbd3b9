"""The dashboard's connections: a silent one is closed, and silent ones are few.

uvicorn keeps a connection that has sent no request for as long as the client
keeps it open (its keep-alive timeout starts only after a first response), so
any number of half-open sockets would stay. Here a connection waiting for a
request (its first, or the next) is closed after `IDLE_CONNECTION_SECONDS`, and
at most `MAX_IDLE_CONNECTIONS` wait at once: one more closes the one that has
waited longest. A request being answered is never cut.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from denpyo.domain.limits import IDLE_CONNECTION_SECONDS, MAX_IDLE_CONNECTIONS


def bounded_protocol(
    idle: float = IDLE_CONNECTION_SECONDS, most: int = MAX_IDLE_CONNECTIONS
) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol (`uvicorn.Config(http=...)`) with those bounds, for
    one server: the waiting connections are counted together."""
    waiting: OrderedDict[BoundedH11, None] = OrderedDict()  # oldest first

    class BoundedH11(H11Protocol):
        _idle_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._wait()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.cycle is not None and not self.cycle.response_complete:
                self._stop_waiting()  # a request came: it is answered, however long
            elif self._idle_timer is not None:  # part of one: the wait starts again
                self._idle_timer.cancel()
                self._idle_timer = self.loop.call_later(idle, self._close_idle)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.cycle.response_complete:
                self._wait()  # (unless a pipelined request is already being answered)

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_waiting()
            super().connection_lost(exc)

        def _wait(self) -> None:
            self._stop_waiting()
            while len(waiting) >= most:
                oldest, _ = waiting.popitem(last=False)
                oldest._close_idle()
            waiting[self] = None
            self._idle_timer = self.loop.call_later(idle, self._close_idle)

        def _stop_waiting(self) -> None:
            waiting.pop(self, None)
            if self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None

        def _close_idle(self) -> None:
            self._stop_waiting()
            if self.cycle is None or self.cycle.response_complete:
                self.transport.close()

    return BoundedH11


def server_options() -> dict[str, Any]:
    """The `uvicorn.Config` options that bound the dashboard's connections."""
    return {"http": bounded_protocol(), "timeout_keep_alive": int(IDLE_CONNECTION_SECONDS)}
