"""Prometheus metrics: what the workers did, and what the ledger holds now.

Two sources, one registry:

- counters and a histogram fed by the engine's hooks (`Ledger.on_call`,
  `Ledger.on_alert`) in the process that makes the calls:
  `denpyo_calls_total{channel,outcome}`, `denpyo_call_duration_seconds{channel}`,
  `denpyo_alerts_total{channel,reason}`;
- gauges read from the store when scraped (cached for a few seconds, so that
  several scrapers cost one read): `denpyo_rows{channel,status}`,
  `denpyo_in_doubt{channel}`, `denpyo_needs_person{channel}`,
  `denpyo_oldest_pending_seconds{channel}`, `denpyo_channel_state{channel,state}`,
  and `denpyo_store_up` (0 when the database could not be read; the other gauges
  are then left out, not zeroed).
  A read that takes long (SQLite and MariaDB count by reading the table) is kept
  ten times as long as it took.

Labels stay few: a channel, a status, an outcome, a reason, a channel's state;
never a key or an id.
`denpyo worker --metrics-port` serves them from each worker; the dashboard at
`/metrics`.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from denpyo.extras import missing

try:
    from prometheus_client import (
        CONTENT_TYPE_LATEST,
        CollectorRegistry,
        Counter,
        Histogram,
        generate_latest,
        make_wsgi_app,
    )
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector
except ImportError as exc:  # the extra is not installed
    raise missing("dashboard", "denpyo.metrics", exc) from exc

from denpyo.domain.channel_state import Mode
from denpyo.domain.limits import IDLE_CONNECTION_SECONDS, MAX_IDLE_CONNECTIONS, SERVE_THREADS
from denpyo.engine import operator as op
from denpyo.engine.alerts import Alert
from denpyo.engine.observers import CallRecord

if TYPE_CHECKING:
    from denpyo.engine.ledger import Ledger

log = logging.getLogger("denpyo.metrics")

CONTENT_TYPE = CONTENT_TYPE_LATEST
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
COUNTS_TTL = 5.0


class Metrics:
    """The metrics of one ledger, in a registry of their own (never the global one,
    so that two ledgers in one process, or tests, do not collide)."""

    def __init__(self, ledger: Ledger, *, counts_ttl: float = COUNTS_TTL) -> None:
        self.ledger = ledger
        self.registry = CollectorRegistry()
        self.calls = Counter(
            "denpyo_calls",
            "Calls made to providers, by how they ended "
            "(synced, failed: transient, ambiguous: may have arrived, rejected).",
            ["channel", "outcome"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "denpyo_call_duration_seconds",
            "How long each call to a provider took.",
            ["channel"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.alerts = Counter(
            "denpyo_alerts",
            "Alerts raised for a person (rejected, exhausted, in_doubt, payload_unreadable, "
            "provider_reported; "
            "renewal_failing, durability_at_risk).",
            ["channel", "reason"],
            registry=self.registry,
        )
        self.counts = StoreCounts(ledger, counts_ttl)
        self.registry.register(self.counts)

    def attach(self) -> Metrics:
        """Count this process's calls and alerts from now on."""
        self.ledger.on_call(self.observe_call)
        self.ledger.on_alert(self.observe_alert)
        return self

    def observe_call(self, record: CallRecord) -> None:
        """Count one call and its duration (`Ledger.on_call`'s callback, set by
        `attach`)."""
        self.calls.labels(record.channel, record.outcome).inc()
        self.duration.labels(record.channel).observe(record.seconds)

    def observe_alert(self, alert: Alert) -> None:
        """Count one alert by channel and reason (`Ledger.on_alert`'s callback)."""
        channel = alert.submission.channel if alert.submission is not None else ""
        self.alerts.labels(channel, alert.reason).inc()

    def render(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)

    def serve(self, port: int, host: str = "127.0.0.1") -> WSGIServer:
        """Serve /metrics on `host:port` from a daemon thread; returns the server
        (call `.shutdown()` to stop it). Every other path is 404: prometheus-client's
        own server answers the metrics on any path, which hides a scrape config's
        mistyped path behind a working scrape."""

        class Server(BoundedWSGIServer):
            address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]

        app = only_at(METRICS_PATH, make_wsgi_app(self.registry))
        server = make_server(host, port, app, Server, handler_class=QuietHandler)
        threading.Thread(target=server.serve_forever, name="denpyo-metrics", daemon=True).start()
        return server


METRICS_PATH = "/metrics"

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def only_at(path: str, app: WsgiApp) -> WsgiApp:
    """`app` at `path`, and 404 on every other path."""

    def routed(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == path:
            return app(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [f"not found: the metrics are at {path}\n".encode()]

    return routed


class QuietHandler(WSGIRequestHandler):
    """No line on stderr per scrape; a request that stops coming is given up."""

    timeout = IDLE_CONNECTION_SECONDS

    def log_message(self, format: str, *args: Any) -> None:
        return


class BoundedWSGIServer(WSGIServer):
    """A thread per request, never per connection: a connection waits, on one
    thread's selector, until its request arrives (then one of `SERVE_THREADS`
    answers it), for at most `IDLE_CONNECTION_SECONDS`, and at most
    `MAX_IDLE_CONNECTIONS` of them at once (one more closes the one that waited
    longest). A thread per connection, as `ThreadingWSGIServer` has, lets any
    number of silent sockets make as many threads."""

    request_queue_size = 128  # accepted at once: a burst of connections waits in it

    def server_activate(self) -> None:
        super().server_activate()
        self._arrived: deque[tuple[socket.socket, Any]] = deque()
        self._bell_in, self._bell = socket.socketpair()
        self._bell_in.setblocking(False)
        self._answering = ThreadPoolExecutor(SERVE_THREADS, thread_name_prefix="denpyo-metrics")
        self._stopping = False
        threading.Thread(target=self._wait, name="denpyo-metrics-wait", daemon=True).start()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Called on the accepting thread: the connection joins the waiting ones."""
        self._arrived.append((request, client_address))
        self._ring()

    def _ring(self) -> None:
        with contextlib.suppress(OSError):
            self._bell.send(b"!")

    def _wait(self) -> None:
        """The waiting connections' thread: hand each whose request arrives to an
        answering thread; close the one that waited too long, or longest."""
        selector = selectors.DefaultSelector()
        selector.register(self._bell_in, selectors.EVENT_READ, None)
        waiting: dict[socket.socket, float] = {}  # -> its deadline; oldest first

        def drop(request: socket.socket) -> None:
            selector.unregister(request)
            del waiting[request]
            self.shutdown_request(request)

        try:
            while not self._stopping:
                while self._arrived:
                    request, address = self._arrived.popleft()
                    if len(waiting) >= MAX_IDLE_CONNECTIONS:
                        drop(next(iter(waiting)))
                    waiting[request] = time.monotonic() + IDLE_CONNECTION_SECONDS
                    selector.register(request, selectors.EVENT_READ, address)
                first = next(iter(waiting.values()), None)
                timeout = None if first is None else max(first - time.monotonic(), 0.0)
                for key, _ in selector.select(timeout):
                    if key.data is None:  # the bell: connections arrived, or a stop
                        with contextlib.suppress(OSError):
                            self._bell_in.recv(4096)
                        continue
                    request = waiting_socket(key)
                    selector.unregister(request)
                    del waiting[request]
                    self._answering.submit(self._answer, request, key.data)
                now = time.monotonic()
                for request in [r for r, deadline in waiting.items() if deadline <= now]:
                    drop(request)
        finally:
            for request in list(waiting):
                drop(request)
            selector.close()
            self._bell_in.close()

    def _answer(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        self._stopping = True
        self._ring()
        self._answering.shutdown(wait=False, cancel_futures=True)
        self._bell.close()


def waiting_socket(key: selectors.SelectorKey) -> socket.socket:
    assert isinstance(key.fileobj, socket.socket)
    return key.fileobj


class StoreCounts(Collector):
    """The gauges, read from the store at scrape time (at most once per `ttl`)."""

    def __init__(self, ledger: Ledger, ttl: float) -> None:
        self.ledger = ledger
        self.ttl = ttl
        self.lock = threading.Lock()
        self.cached: tuple[float, list[GaugeMetricFamily]] | None = None  # (fresh until, ...)

    def describe(self) -> Iterable[Any]:
        return []  # read at scrape time only: registering must not touch the database

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self.lock:
            started = time.monotonic()
            if self.cached is None or started >= self.cached[0]:
                families = self._read()
                took = time.monotonic() - started
                # Never read for more than a tenth of the time, however often scraped.
                self.cached = (time.monotonic() + max(self.ttl, 10 * took), families)
            families = self.cached[1]
        yield from families

    def _read(self) -> list[GaugeMetricFamily]:
        up = GaugeMetricFamily("denpyo_store_up", "1 when the ledger's database could be read.")
        try:
            families = self._families()
        except Exception as exc:
            log.warning("metrics: cannot read the ledger's counts: %s", exc)
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1)
        return [up, *families]

    def _families(self) -> list[GaugeMetricFamily]:
        rows = GaugeMetricFamily(
            "denpyo_rows", "Submissions by channel and status.", labels=["channel", "status"]
        )
        in_doubt = GaugeMetricFamily(
            "denpyo_in_doubt",
            "Rows whose call may or may not have arrived (resolved or not).",
            labels=["channel"],
        )
        attention = GaugeMetricFamily(
            "denpyo_needs_person",
            "Unresolved rows that need a person: in doubt, exhausted or rejected.",
            labels=["channel"],
        )
        oldest = GaugeMetricFamily(
            "denpyo_oldest_pending_seconds",
            "Age of the oldest row still to be sent or settled (0: none).",
            labels=["channel"],
        )
        channels = set(self.ledger.channels)
        for channel, status, n in op.status_counts(self.ledger, reading=False):
            rows.add_metric([channel, status.value], n)
            channels.add(channel)
        for channel in sorted(channels):
            counts = op.attention_counts(self.ledger, channel, reading=False)
            in_doubt.add_metric([channel], counts["in_doubt"])
            attention.add_metric([channel], counts["needs_person"])
            pending = counts["oldest_pending"]
            age = (counts["now"] - pending).total_seconds() if pending is not None else 0.0
            oldest.add_metric([channel], max(age, 0.0))
        return [rows, in_doubt, attention, oldest, self._channel_state(channels)]

    def _channel_state(self, channels: set[str]) -> GaugeMetricFamily:
        """1 for each channel's mode now, 0 for the other modes: the channels registered
        or with rows (active unless they have a state), and those with a state."""
        family = GaugeMetricFamily(
            "denpyo_channel_state",
            "1 for the channel's mode now, 0 for the others: active; paused (by a person); "
            "throttled (the provider asked it to wait); down (failing, probed).",
            labels=["channel", "state"],
        )
        modes = {name: state.mode for name, state in op.channel_states(self.ledger).items()}
        for channel in sorted(channels | set(modes)):
            now = modes.get(channel, Mode.ACTIVE)
            for mode in Mode:
                family.add_metric([channel, mode.value], 1 if mode is now else 0)
        return family
