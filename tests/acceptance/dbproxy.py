"""A TCP proxy for tests that cuts the network between workers and their database.

`python dbproxy.py LISTEN_PORT TARGET_HOST TARGET_PORT` (port 0 picks one) prints
`listening on PORT`, then forwards bytes both ways and obeys commands read from
stdin, one per line, each answered by one line on stdout:

- `cut`: every open connection is dropped at once, both sides reset (RST).
  New connections are forwarded as usual.
- `blackhole SECONDS`: for that long nothing is forwarded. Open connections stay
  open but their bytes are read and thrown away; new connections are accepted
  and treated the same. Neither side hears anything: a client waits, as behind
  a dead router. When the time is up the black-holed connections are reset (what
  they carried is lost) and new connections are forwarded again.

The proxy ends when stdin closes, so it never outlives the process that drives it.
`ProxyProcess` starts and drives one from a test.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

CHUNK = 65536


class _Link:
    """One client connection and, unless it arrived during a black-hole, its upstream."""

    def __init__(self, client: asyncio.StreamWriter, blackholed: bool) -> None:
        self.writers = [client]
        self.blackholed = blackholed

    def reset(self) -> None:
        """Close both sides at once with RST, discarding whatever was buffered."""
        for writer in self.writers:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()

    def close(self) -> None:
        for writer in self.writers:
            writer.close()


class DbProxy:
    """The proxy itself, on an asyncio loop."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.links: set[_Link] = set()
        self.blackholes = 0  # black-holes under way (they may overlap)

    async def start(self, port: int = 0) -> int:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", port)
        return int(self.server.sockets[0].getsockname()[1])

    def cut(self) -> int:
        """Reset every open connection; returns how many there were."""
        links = list(self.links)
        for link in links:
            link.reset()
        return len(links)

    def blackhole(self, seconds: float) -> int:
        """Forward nothing for `seconds`; returns how many connections were open."""
        self.blackholes += 1
        for link in self.links:
            link.blackholed = True
        asyncio.get_running_loop().call_later(seconds, self._blackhole_over)
        return len(self.links)

    def _blackhole_over(self) -> None:
        self.blackholes -= 1
        if self.blackholes:
            return  # a later black-hole runs on
        for link in [link for link in self.links if link.blackholed]:
            link.reset()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(writer, self.blackholes > 0)
        self.links.add(link)
        try:
            if link.blackholed:
                await self._pump(reader, None, link)
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
            except OSError:
                return  # the database is down: the client sees its connection closed
            link.writers.append(up_writer)
            await asyncio.gather(
                self._pump(reader, up_writer, link), self._pump(up_reader, writer, link)
            )
        finally:
            self.links.discard(link)
            link.close()

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter | None, link: _Link
    ) -> None:
        """Copy bytes until either side closes; while black-holed, read and drop them."""
        try:
            while data := await source.read(CHUNK):
                if sink is not None and not link.blackholed:
                    sink.write(data)
                    await sink.drain()
        except OSError:
            pass
        finally:
            link.close()  # one side ended: end the other


async def _serve(listen_port: int, target_host: str, target_port: int) -> None:
    proxy = DbProxy(target_host, target_port)
    port = await proxy.start(listen_port)
    print(f"listening on {port}", flush=True)
    loop = asyncio.get_running_loop()
    commands: asyncio.Queue[str] = asyncio.Queue()

    def read_stdin() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(commands.put_nowait, line.strip())
        loop.call_soon_threadsafe(commands.put_nowait, "")  # stdin closed: stop

    threading.Thread(target=read_stdin, daemon=True).start()
    while command := await commands.get():
        name, _, arg = command.partition(" ")
        if name == "cut":
            print(f"ok cut {proxy.cut()}", flush=True)
        elif name == "blackhole":
            print(f"ok blackhole {proxy.blackhole(float(arg))}", flush=True)
        else:
            print(f"error unknown command {command!r}", flush=True)
    proxy.server.close()
    proxy.cut()
    await asyncio.sleep(0.2)  # the connections' tasks end on the reset, not cancelled


class ProxyProcess:
    """A proxy in a subprocess, driven from a test."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__)), "0", target_host, str(target_port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self._reply()
        assert line.startswith("listening on "), line
        self.port = int(line.removeprefix("listening on "))

    def _reply(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def _ask(self, command: str) -> int:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        reply = self._reply()
        assert reply.startswith("ok "), reply
        return int(reply.rsplit(" ", 1)[1])

    def cut(self) -> int:
        """Drop every open connection; returns how many there were."""
        return self._ask("cut")

    def blackhole(self, seconds: float) -> int:
        """Forward nothing for `seconds` (returns at once); returns the open connections."""
        return self._ask(f"blackhole {seconds}")

    def close(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()  # stdin closed: the proxy stops
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


if __name__ == "__main__":
    listen, host, target = sys.argv[1:4]
    asyncio.run(_serve(int(listen), host, int(target)))
