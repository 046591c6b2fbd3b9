"""The proxy the chaos run puts between workers and their database: it forwards,
drops every connection on command, and black-holes traffic for a while."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest
from dbproxy import ProxyProcess


class Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def proxy() -> Iterator[ProxyProcess]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proxy = ProxyProcess("127.0.0.1", server.server_address[1])
    try:
        yield proxy
    finally:
        proxy.close()
        server.shutdown()
        server.server_close()


def connect(proxy: ProxyProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
    sock.settimeout(0.5)
    return sock


def echoes(sock: socket.socket) -> bool:
    sock.sendall(b"ping")
    try:
        return sock.recv(4) == b"ping"
    except TimeoutError:
        return False


def is_reset(sock: socket.socket) -> bool:
    try:
        sock.sendall(b"x")
        return sock.recv(1) == b""
    except ConnectionError:
        return True


def test_forwards_and_cuts_every_connection(proxy: ProxyProcess) -> None:
    with connect(proxy) as one, connect(proxy) as two:
        assert echoes(one) and echoes(two)
        assert proxy.cut() == 2
        assert is_reset(one) and is_reset(two)
    with connect(proxy) as three:
        assert echoes(three), "new connections are forwarded after a cut"


def test_blackhole_swallows_then_resets(proxy: ProxyProcess) -> None:
    with connect(proxy) as old:
        assert echoes(old)
        proxy.blackhole(1.5)
        assert not echoes(old), "an open connection hears nothing"
        with connect(proxy) as new:
            assert not echoes(new), "a new connection is accepted, and hears nothing"
            time.sleep(1.5)
            assert is_reset(old) and is_reset(new)
    with connect(proxy) as after:
        assert echoes(after)
