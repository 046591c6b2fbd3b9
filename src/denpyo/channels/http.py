"""`HttpChannel`: send a submission as a JSON POST and verify it by a lookup URL.

The idempotency key goes where the provider reads it: a header (``key_header``,
``Idempotency-Key`` by default; ``PayPal-Request-Id``, ``X-Idempotency-Key``, …)
and/or a field of the JSON body (``key_field``, a dotted path such as
``custom_args.denpyo_key`` for an API with no keys that keeps custom arguments).

How outcomes are classified (docs/guide/channels.md) — the point is never to call a request
"did not arrive" unless that is certain:

- 2xx: delivered; the id is read from the JSON reply (``id_field``).
- 408, 429, 5xx: `Transient` (the provider answered that it did not act), with
  ``retry_after`` from the ``Retry-After`` header (seconds or an HTTP date).
- other 4xx, and 3xx (redirects are not followed): `Rejected`; resending the
  same request cannot help, a person has to look.
- anything that fails before a connection is handed over to the request (refused,
  DNS, TLS handshake, a timeout while connecting or waiting for a free
  connection, a closed session, an executor shut down under the resolver):
  `Transient`; the request never left.
- a timeout, a dropped connection or a truncated reply *after* the request was
  sent is **not** a signal: it is raised as `TimeoutError` / `ConnectionError`
  (chained from aiohttp's error), which the engine records as *ambiguous*: the
  request may have arrived, so it is verified before any resend.

`verify` never raises for network trouble: it answers `Unknown(why)`.

The last moment: once a connection is ready (new or reused) and before a byte
of the request is written, the channel asks the submission whether this
process's lease on it may have run out (`Submission.check_lease`): a worker
that stalled while waiting for a connection gives the row back unsent, rather
than send a call that another worker may be verifying and resending.

An aiohttp session belongs to one event loop, and a channel may be used from
several (a worker's loop, the ledger's background loop), so there is one session
per loop, made on first use. Each session is closed with its loop: the loop's
`shutdown_asyncgens()` (which `asyncio.run` and `Ledger.close` call) closes it,
so a channel used by a plain function leaves nothing open either. `aclose()`
closes the running loop's session sooner, `close()` every session from
synchronous code.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any
from urllib.parse import quote

from denpyo.extras import missing

try:
    import aiohttp
    from yarl import URL
except ImportError as exc:  # the core install has no HTTP client
    raise missing("http", "denpyo.channels.http", exc) from exc

from denpyo.channels._loops import close_on_their_loops
from denpyo.domain.limits import wire_body
from denpyo.domain.submission import Submission
from denpyo.domain.verdict import Delivered, NotDelivered, Unknown, Verdict
from denpyo.engine import tracing
from denpyo.errors import ConfigurationError, LeaseExpired, Rejected, Transient

_BODY_LIMIT = 500


@dataclass(slots=True)
class _Outgoing:
    """The request the current task is making: its submission, and whether a
    connection was handed over to it (from then on, bytes may have left)."""

    sub: Submission
    handed_over: bool = False


_sending: ContextVar[_Outgoing | None] = ContextVar("denpyo_http_sending", default=None)
"""The request the current task is making (not set for lookups)."""


class _LastMomentConnector(aiohttp.TCPConnector):
    """Hands over a connection only if the request may still leave: the connection is
    ready (new, reused, or after a wait for a free one) and nothing is written yet."""

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        conn = await super().connect(req, traces, timeout)
        outgoing = _sending.get()
        if outgoing is not None:
            try:
                outgoing.sub.check_lease()
            except LeaseExpired:
                conn.close()
                raise
            outgoing.handed_over = True
        return conn


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta-seconds or HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def _checked_url(value: str, what: str) -> str:
    """An absolute http(s) URL with a host and a valid port, else ConfigurationError
    now: a URL the client cannot use would fail every call before a byte leaves."""
    try:
        url = URL(value.replace("{idempotency_key}", "key"))
        valid = url.scheme in ("http", "https") and bool(url.host) and url.port is not None
    except (TypeError, ValueError, AttributeError):
        valid = False
    if not valid:
        raise ConfigurationError(
            f"{what} {value!r} is not an absolute http:// or https:// URL with a host"
        )
    return value


def _not_sent(exc: Exception) -> Transient:
    """A failure before a connection was handed over to the request: nothing left."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return Transient(f"connection refused: {exc}")
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return Transient(f"connection timed out: {exc}")
    return Transient(f"not sent: {type(exc).__name__}: {exc}".rstrip(": "))


_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def _checked_header(name: str | None) -> str | None:
    """A header name as HTTP allows it (a token), else ConfigurationError now."""
    if name is not None and not _TOKEN.match(name):
        raise ConfigurationError(f"key_header {name!r} is not a valid HTTP header name")
    return name


def _checked_field(path: str | None) -> tuple[str, ...] | None:
    """A dotted path of non-empty names, else ConfigurationError now."""
    if path is None:
        return None
    parts = tuple(path.split("."))
    if not all(parts):
        raise ConfigurationError(f"key_field {path!r} must be names separated by dots")
    return parts


def _with_key(payload: Any, path: tuple[str, ...], key: str) -> Any:
    """A copy of the payload with the key at `path` (objects made where missing).
    A payload that cannot hold it is refused before anything is sent."""
    if not isinstance(payload, dict):
        raise Rejected(
            f"the payload is a JSON {type(payload).__name__}, not an object: "
            f"the idempotency key cannot go in its field {'.'.join(path)!r}; nothing was sent"
        )
    copy = dict(payload)
    head, rest = path[0], path[1:]
    if not rest:
        copy[head] = key
    else:
        inner = copy.get(head, {})
        if not isinstance(inner, dict):
            raise Rejected(
                f"the payload's {head!r} is not an object: the idempotency key cannot go "
                f"in {'.'.join(path)!r}; nothing was sent"
            )
        copy[head] = _with_key(inner, rest, key)
    return copy


def _short(body: bytes) -> str:
    return body[: _BODY_LIMIT * 4].decode("utf-8", "replace").strip()[:_BODY_LIMIT]


def _id_from(body: bytes, id_field: str) -> str | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    value = data.get(id_field)
    return None if value is None else str(value)


async def _closed_with_the_loop(session: aiohttp.ClientSession) -> AsyncGenerator[None, None]:
    """Waits, first advanced on the session's loop, for the loop's
    `shutdown_asyncgens()` (or `aclose()`), and closes the session then."""
    try:
        yield
    finally:
        await session.close()


@dataclass(frozen=True, slots=True)
class _Session:
    session: aiohttp.ClientSession
    keeper: AsyncGenerator[None, None]


class HttpChannel:
    """A JSON-over-HTTP provider with an idempotency key and an optional lookup.

    `key_header` names the header that carries the key (None: no header);
    `key_field` a field of the JSON body that carries it, as a dotted path (the
    payload must then be an object; the field is set in a copy, the row's payload
    stays as recorded).

    `connection_limit` caps the connections open per event loop; by default there
    is no cap of its own, so the calls in flight are what the worker's
    `--concurrency` (or the channel's `concurrency`) allows. A cap below that
    would make the calls over it wait for a connection, silently.
    """

    def __init__(
        self,
        url: str,
        *,
        lookup_url: str | None = None,
        timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
        id_field: str = "id",
        connection_limit: int | None = None,
        key_header: str | None = "Idempotency-Key",
        key_field: str | None = None,
    ) -> None:
        if lookup_url is not None and "{idempotency_key}" not in lookup_url:
            raise ConfigurationError("lookup_url must contain the placeholder {idempotency_key}")
        if lookup_url is not None:
            _checked_url(lookup_url, "lookup_url")
        self.url = _checked_url(url, "url")
        self.lookup_url = lookup_url
        self.timeout = timeout
        self.headers: dict[str, str] = dict(headers or {})
        self.id_field = id_field
        if connection_limit is not None and (
            isinstance(connection_limit, bool)
            or not isinstance(connection_limit, int)
            or connection_limit < 1
        ):
            raise ConfigurationError(
                f"connection_limit must be a whole number of connections, 1 or more, or None "
                f"(no cap): {connection_limit!r}"
            )
        self.connection_limit = connection_limit
        self.key_header = _checked_header(key_header)
        self.key_field = key_field
        self._key_path = _checked_field(key_field)
        self._sessions: dict[asyncio.AbstractEventLoop, _Session] = {}
        self._lock = threading.Lock()
        self._closing: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return f"<HttpChannel {self.url}>"

    # -- sessions ---------------------------------------------------------------

    async def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        held = self._sessions.get(loop)  # every call: no lock while the session is there
        if held is not None and not held.session.closed:
            return held.session
        with self._lock:
            held = self._sessions.get(loop)
            if held is not None and not held.session.closed:
                return held.session
            # Forget sessions whose loop is gone; they cannot be closed any more.
            for dead in [lp for lp in self._sessions if lp.is_closed()]:
                del self._sessions[dead]
            session = aiohttp.ClientSession(
                connector=_LastMomentConnector(limit=self.connection_limit or 0),  # 0: none
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                headers=self.headers,
            )
            held = _Session(session, _closed_with_the_loop(session))
            self._sessions[loop] = held
        await anext(held.keeper)  # the loop now knows it: its shutdown closes the session
        return session

    async def aclose(self) -> None:
        """Close the session of the running event loop (the others stay)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            held = self._sessions.pop(loop, None)
        if held is not None:
            await held.keeper.aclose()

    def close(self) -> None:
        """Close every session, each on its own loop if that loop still runs.

        Called from inside one of those loops, that loop's session is closed by a
        task (this method cannot block its own loop); prefer `aclose()` there.
        """
        with self._lock:
            sessions = list(self._sessions.items())
            self._sessions.clear()
        close_on_their_loops(
            [(loop, held.keeper.aclose) for loop, held in sessions if not held.session.closed],
            self._closing,
        )

    async def __aenter__(self) -> HttpChannel:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- the calls -----------------------------------------------------------------

    async def send(self, sub: Submission) -> str | None:
        """POST the payload with the key; return the provider's id, or raise per the
        module docstring."""
        payload = sub.payload
        if self._key_path is not None:
            payload = _with_key(payload, self._key_path, sub.idempotency_key)
        headers = {"Content-Type": "application/json"}
        if self.key_header is not None:
            headers[self.key_header] = sub.idempotency_key
        tracing.inject(headers)  # the attempt's span: the provider's spans join its trace
        outgoing = _Outgoing(sub)
        sending = _sending.set(outgoing)
        try:
            session = await self._session()
            body = wire_body(payload)
            async with session.post(
                self.url, data=body, headers=headers, allow_redirects=False
            ) as response:
                status = response.status
                retry_after = response.headers.get("Retry-After")
                raw = await response.read()
        except LeaseExpired:
            raise
        except Exception as exc:
            if not outgoing.handed_over:
                raise _not_sent(exc) from exc
            failure = self._after_handover(exc)
            if failure is exc:
                raise
            raise failure from exc
        finally:
            _sending.reset(sending)
        if 200 <= status < 300:
            return _id_from(raw, self.id_field)
        if status in (408, 429) or status >= 500:
            raise Transient(
                f"HTTP {status}: {_short(raw)}",
                retry_after=parse_retry_after(retry_after),
                throttled=status == 429,
            )
        raise Rejected(f"HTTP {status}: {_short(raw)}")

    def _after_handover(self, exc: Exception) -> Exception:
        """A failure once the request may have left: never a signal, so the engine
        records it as ambiguous and verifies before any resend."""
        if isinstance(exc, TimeoutError):
            return TimeoutError(
                f"no complete reply from {self.url} within {self.timeout:g} s;"
                " the request may have arrived"
            )
        if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
            return ConnectionError(
                f"the connection to {self.url} was lost before a complete reply ({exc!r});"
                " the request may have arrived"
            )
        if isinstance(exc, aiohttp.ClientOSError):
            return ConnectionError(
                f"network error talking to {self.url} ({exc!r}); the request may have arrived"
            )
        return exc

    @property
    def verifier(self) -> Callable[[Submission], Awaitable[Verdict]] | None:
        """`verify` when a lookup URL is configured, else None (pass it as ``verify=``)."""
        return self.verify if self.lookup_url is not None else None

    async def verify(self, sub: Submission) -> Verdict:
        """Ask the lookup URL: 2xx → Delivered, 404 → NotDelivered, anything else → Unknown."""
        if self.lookup_url is None:
            raise ConfigurationError(f"{self!r} has no lookup_url, so it cannot verify")
        key = quote(sub.idempotency_key, safe="")
        url = URL(self.lookup_url.replace("{idempotency_key}", key), encoded=True)
        headers = {"Accept": "application/json"}
        tracing.inject(headers)  # the verify's span
        try:
            session = await self._session()
            async with session.get(url, headers=headers, allow_redirects=False) as response:
                status = response.status
                raw = await response.read()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return Unknown(f"lookup failed: {type(exc).__name__}: {exc}".rstrip(": "))
        if 200 <= status < 300:
            return Delivered(_id_from(raw, self.id_field))
        if status == 404:
            return NotDelivered()
        return Unknown(f"lookup answered HTTP {status}: {_short(raw)}")
