"""The fake provider on the standard library's `http.server`: the transport that
needs nothing installed, so that `pip install denpyo` runs the demo.

One daemon thread per connection, HTTP/1.1 with keep-alive. `stop` closes the
listening socket, wakes the slow replies and closes every connection once its
reply is written (waiting a second at most), so that nothing is served after it
returns, as with the aiohttp transport.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from denpyo.testing._core import ProviderCore


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: each reply carries Content-Length
    server: _Server

    def answer(self) -> None:
        core = self.server.core
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        delay = core.latency(self.command, self.path)
        if delay > 0:
            time.sleep(delay)
        reply = core.handle(self.command, self.path, self.headers, body)
        if reply.then == "drop":
            self.close_connection = True  # closed with nothing written
            return
        if reply.then == "slow":
            self.server.stopping.wait(core.options.slow_seconds)
        data = reply.encoded()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = answer

    def log_message(self, format: str, *args: Any) -> None:
        """No request log: the tests and the demo print their own."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, core: ProviderCore, sock: socket.socket) -> None:
        super().__init__(sock.getsockname()[:2], _Handler, bind_and_activate=False)
        self.socket.close()
        self.socket = sock  # bound and listening already (see `_core.bind`)
        self.core = core
        self.stopping = threading.Event()
        self._open: set[socket.socket] = set()
        self._closed = threading.Condition()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._closed:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(request)
        with self._closed:
            self._open.discard(request)
            self._closed.notify_all()

    def end_connections(self, timeout: float) -> None:
        """Wake the slow replies, let each connection finish the reply it is writing,
        then close it; past `timeout`, close the rest as they are."""
        with self._closed:
            self.stopping.set()
            for conn in self._open:
                _shutdown(conn, socket.SHUT_RD)  # its next read, of another request, ends
            if not self._closed.wait_for(lambda: not self._open, timeout):
                for conn in self._open:
                    _shutdown(conn, socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the client went away (a timeout, or the server stopping)
        super().handle_error(request, client_address)


def _shutdown(conn: socket.socket, how: int) -> None:
    with contextlib.suppress(OSError):  # closed meanwhile
        conn.shutdown(how)


class StdlibServer:
    """Serves `core` on `sock` from daemon threads. Listening once constructed."""

    def __init__(self, core: ProviderCore, sock: socket.socket) -> None:
        self._server = _Server(core, sock)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},  # how soon `stop` is noticed
            name="denpyo-fake-provider",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()  # returns once no new connection is accepted
        self._server.server_close()
        self._server.end_connections(timeout=1.0)
        self._thread.join()
