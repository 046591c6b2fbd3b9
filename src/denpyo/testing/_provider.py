"""`FakeProvider`: the fake HTTP provider served from background threads."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal, Protocol

from denpyo.extras import missing
from denpyo.testing._core import ProviderCore, ProviderOptions, ProviderStats, bind, url_of

Transport = Literal["auto", "aiohttp", "stdlib"]
TRANSPORTS: tuple[Transport, ...] = ("auto", "aiohttp", "stdlib")


class _Server(Protocol):
    def stop(self) -> None: ...


def server_for(transport: Transport) -> Callable[[ProviderCore, socket.socket], _Server]:
    """What serves a provider: aiohttp (fast) or the standard library (nothing to
    install); "auto" takes aiohttp when it can be imported. aiohttp is imported
    here, only when chosen."""
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, not {transport!r}")
    if transport != "stdlib":
        try:
            from denpyo.testing._aiohttp import AiohttpServer
        except ImportError as exc:
            if transport == "aiohttp":
                raise missing("http", "the fake provider's aiohttp transport", exc) from exc
        else:
            return AiohttpServer
    from denpyo.testing._stdlib import StdlibServer

    return StdlibServer


class FakeProvider:
    """An HTTP provider on loopback with faults, for tests, the demo and benchmarks.

    The server runs in daemon threads, so it serves synchronous and asynchronous
    code alike: on aiohttp when it is installed (``transport="auto"``), else on
    the standard library's ``http.server``; ``"aiohttp"`` or ``"stdlib"`` choose
    one. Both answer alike. Faults:

    - ``fail_rate``: 503 with ``Retry-After`` of ``retry_after`` seconds (1; 0 for
      no header); nothing recorded. A worker then holds the whole channel back
      for that long.
    - ``reject_rate``: 422; nothing recorded (counted as rejected).
    - ``drop_rate``: the call is recorded, then the connection is closed unanswered.
    - ``slow_rate``: the call is recorded, then the 200 comes after ``slow_seconds``.
    - ``lookup_unknown_rate``: ``GET /lookup/...`` and ``GET /search`` answer 503.

    A payload's top-level ``"_fault"`` (``fail``, ``reject``, ``drop``, ``slow``,
    ``ok``) forces the outcome of that request.

    How it takes idempotency keys: from the header ``key_header``
    (``Idempotency-Key``; ``PayPal-Request-Id``, …), or from the body field
    ``key_field`` (a dotted path) when set; with ``key_header=None`` and no
    ``key_field`` it takes none (an email API: every request is an effect).
    ``key_ttl`` is how long it remembers a key (Stripe: 86400 s); past it, a
    request with the same key acts again. ``list_url`` pages through what it
    accepted in a window (for `list_remote` and the audit), ``search_url``
    finds effects by a payload field (verify by a custom argument).
    """

    def __init__(
        self,
        *,
        honour_idempotency: bool = True,
        latency: float = 0.0,
        fail_rate: float = 0.0,
        reject_rate: float = 0.0,
        drop_rate: float = 0.0,
        slow_rate: float = 0.0,
        slow_seconds: float = 30.0,
        retry_after: float = 1.0,
        lookup_unknown_rate: float = 0.0,
        key_header: str | None = "Idempotency-Key",
        key_field: str | None = None,
        key_ttl: float | None = None,
        seed: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        transport: Transport = "auto",
    ) -> None:
        options = ProviderOptions().updated(
            honour_idempotency=honour_idempotency,
            latency=latency,
            fail_rate=fail_rate,
            reject_rate=reject_rate,
            drop_rate=drop_rate,
            slow_rate=slow_rate,
            slow_seconds=slow_seconds,
            retry_after=retry_after,
            lookup_unknown_rate=lookup_unknown_rate,
            key_header=key_header,
            key_field=key_field,
            key_ttl=key_ttl,
        )
        self._core = ProviderCore(options, seed)
        self._host = host
        self._port = port
        self._serve = server_for(transport)
        self._url: str | None = None
        self._server: _Server | None = None
        self._state_lock = threading.Lock()

    # -- life cycle -------------------------------------------------------------

    def start(self) -> FakeProvider:
        """Start serving; returns once the port is listening. A no-op when running."""
        with self._state_lock:
            if self._server is not None:
                return self
            sock = bind(self._host, self._port)  # bound here so that errors surface here
            url = url_of(sock)
            try:
                self._server = self._serve(self._core, sock)
            except Exception as exc:
                sock.close()
                raise RuntimeError(f"the fake provider could not start on {url}") from exc
            self._url = url
            return self

    def stop(self) -> None:
        """Stop serving, answering or cancelling requests in flight. Idempotent."""
        with self._state_lock:
            if self._server is not None:
                self._server.stop()
                self._server = None

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self._url or "not started"
        return f"<FakeProvider {where} {self._core.options}>"

    # -- addresses ----------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def url(self) -> str:
        """``http://HOST:PORT``; only known once started."""
        if self._url is None:
            raise RuntimeError("the fake provider is not started: call start() first")
        return self._url

    @property
    def send_url(self) -> str:
        return self.url + "/send"

    @property
    def lookup_url(self) -> str:
        """A template, literally ending in ``{idempotency_key}`` (as HttpChannel takes it)."""
        return self.url + "/lookup/{idempotency_key}"

    @property
    def list_url(self) -> str:
        """``GET ?since=&until=&limit=&starting_after=``: accepted effects, a page at a time."""
        return self.url + "/list"

    @property
    def search_url(self) -> str:
        """``GET ?<payload.field>=<value>``: effects whose payload has that value there."""
        return self.url + "/search"

    # -- state (thread-safe) ------------------------------------------------------------

    @property
    def options(self) -> ProviderOptions:
        return self._core.options

    def configure(self, **opts: Any) -> None:
        """Change faults while running; same names as the constructor (and ``seed``)."""
        self._core.configure(**opts)

    def stats(self) -> ProviderStats:
        """Its counters now: `stats().duplicates == 0` is "nothing was sent twice"."""
        return self._core.stats()

    def accepted_ids_for(self, idempotency_key: str) -> list[str]:
        """Remote ids of the effects for that key; more than one is a double effect."""
        return self._core.accepted_ids_for(idempotency_key)

    def accepted_keys(self) -> dict[str, int]:
        """Idempotency key -> number of effects."""
        return self._core.accepted_keys()

    def accepted(self) -> list[dict[str, Any]]:
        """Every effect, oldest first: ``{"id", "idempotency_key", "payload", "at"}``."""
        return self._core.accepted()

    def plant(
        self,
        idempotency_key: str | None,
        *,
        remote_id: str | None = None,
        payload: Any = None,
        at: float | None = None,
    ) -> str:
        """Record an effect as if a request had been accepted, at `at` (epoch seconds,
        default now); returns its remote id. For tests of the audit."""
        return self._core.plant(idempotency_key, remote_id=remote_id, payload=payload, at=at)

    def fail_next(self, *faults: str) -> None:
        """The next requests to the routes in a provider's API shape (Stripe's
        ``/v1/...``, SendGrid's ``/v3/...``, Twilio's ``/2010-04-01/...``) fail with
        these, one each: ``throttle`` (429), ``error`` (500), ``unavailable`` (503),
        ``decline`` (the provider refuses: a declined card, a bad address), ``drop``
        (recorded, then the connection closed unanswered), ``slow`` (recorded, then
        answered after ``slow_seconds``: a hang), ``ok``."""
        self._core.fail_next(*faults)

    def forget(self, idempotency_key: str) -> int:
        """Remove a key's effects, as if the provider had no record; returns how many."""
        return self._core.forget(idempotency_key)

    def reset(self) -> None:
        """Forget every effect and zero the counters; the options stay."""
        self._core.reset()
