"""The fake provider's state and endpoints, free of any HTTP server.

A transport (`_aiohttp`, `_stdlib`) reads a request and hands it to
`ProviderCore.handle`, which answers a `Reply`; the transport writes it, drops
the connection, or answers late, as the reply says. So the provider behaves
the same whichever server carries it, and its logic lives once.

All state lives behind one `threading.Lock`: requests arrive on the server's
threads or event loop, while tests read stats and reconfigure faults from other
threads. The lock is only held for plain dictionary work.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol
from urllib.parse import parse_qsl, unquote, urlsplit

FAULTS = ("fail", "reject", "drop", "slow", "ok")
SHAPED_FAULTS = ("throttle", "error", "unavailable", "decline", "drop", "slow", "ok")
"""The faults of the provider-shaped routes: 429, 500, 503, the provider's refusal
(a declined card, a bad address), the call recorded then the connection dropped,
the call recorded then answered late."""
RATE_OPTIONS = ("fail_rate", "reject_rate", "drop_rate", "slow_rate", "lookup_unknown_rate")

Query = Mapping[str, str]
"""A request's query parameters, and the path's (``{idempotency_key}``) over them."""


class Headers(Protocol):
    """A request's headers, looked up by name in any case (aiohttp's and http.server's are)."""

    def get(self, name: str, /) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Reply:
    """What a transport does with one request: write `status`, the JSON `body` and
    `headers`; then, with ``then="drop"``, close the connection unanswered instead
    (the call took effect: the client is in doubt); with ``then="slow"``, answer
    after ``slow_seconds``, or at once when the server stops."""

    status: int
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)
    then: Literal["drop", "slow"] | None = None

    def encoded(self) -> bytes:
        return json.dumps(self.body).encode()


@dataclass(frozen=True, slots=True)
class ProviderStats:
    """Counters of one fake provider since it started (or was reset).

    `requests` counts every POST /send; `accepted` counts effects (an accepted
    request that did something); `duplicates` counts effects beyond the first
    one per key, so it stays 0 while idempotency is honoured; `replayed`
    counts requests answered with an earlier id; `lookups` counts GET /lookup.
    """

    requests: int = 0
    accepted: int = 0
    distinct_keys: int = 0
    duplicates: int = 0
    rejected: int = 0
    failed: int = 0
    dropped: int = 0
    slow: int = 0
    replayed: int = 0
    lookups: int = 0

    def to_dict(self) -> dict[str, int]:
        """The counters as `GET /stats` answers them."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProviderStats:
        """The counters from `GET /stats`'s answer (names it does not know are left out)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: int(v) for k, v in data.items() if k in names})


@dataclass(frozen=True, slots=True)
class ProviderOptions:
    """The fault knobs; immutable so a handler works on one consistent snapshot.

    Where the provider reads the idempotency key: the header `key_header`, or the
    body field `key_field` (a dotted path) when that is set; with neither, the
    provider takes no keys at all (every request is an effect, as with many email
    APIs). `key_ttl`: seconds a key is remembered (Stripe: 24 h); None, for ever.
    """

    honour_idempotency: bool = True
    latency: float = 0.0
    fail_rate: float = 0.0
    reject_rate: float = 0.0
    drop_rate: float = 0.0
    slow_rate: float = 0.0
    slow_seconds: float = 30.0
    retry_after: float = 1.0
    lookup_unknown_rate: float = 0.0
    key_header: str | None = "Idempotency-Key"
    key_field: str | None = None
    key_ttl: float | None = None

    def updated(self, **opts: Any) -> ProviderOptions:
        """A copy with `opts` applied; raises ValueError on an unknown name or bad value."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(opts) - names)
        if unknown:
            raise ValueError(f"unknown fake provider option(s): {', '.join(unknown)}")
        clean: dict[str, Any] = {}
        for name, value in opts.items():
            if name == "honour_idempotency":
                if not isinstance(value, bool):
                    raise ValueError("honour_idempotency must be true or false")
                clean[name] = value
                continue
            if name in ("key_header", "key_field"):
                if value is not None and (not isinstance(value, str) or not value):
                    raise ValueError(f"{name} must be a non-empty string or null")
                clean[name] = value
                continue
            if name == "key_ttl" and value is None:
                clean[name] = None
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name} must be a number, not {value!r}")
            number = float(value)
            if number < 0 or (name in RATE_OPTIONS and number > 1):
                raise ValueError(f"{name} out of range: {number}")
            clean[name] = number
        new = dataclasses.replace(self, **clean)
        if new.fault_total > 1.0 + 1e-9:
            raise ValueError("fail_rate + reject_rate + drop_rate + slow_rate must not exceed 1")
        return new

    @property
    def fault_total(self) -> float:
        return self.fail_rate + self.reject_rate + self.drop_rate + self.slow_rate


def _new_remote_id() -> str:
    return "msg_" + os.urandom(6).hex()


def _field(payload: Any, path: str) -> Any:
    """The value at a dotted path of a JSON object, or None."""
    for name in path.split("."):
        if not isinstance(payload, dict):
            return None
        payload = payload.get(name)
    return payload


class ProviderCore:
    """State, fault draws and endpoints of one fake provider."""

    def __init__(self, options: ProviderOptions, seed: int | None = None) -> None:
        self._lock = threading.Lock()
        self._options = options
        self._seed_rngs(seed)
        self._counts: dict[str, int] = {}
        self._effects: list[dict[str, Any]] = []
        self._ids_by_key: dict[str, list[str]] = {}
        self._key_since: dict[str, float] = {}
        self._queued: list[str] = []
        self.reset()

    def _seed_rngs(self, seed: int | None) -> None:
        # Lookups draw from their own generator so that verify traffic does not
        # shift the sequence of send faults: a seeded run stays reproducible.
        self._rng = random.Random(seed)
        self._lookup_rng = random.Random(None if seed is None else f"lookup-{seed}")

    # -- thread-safe accessors --------------------------------------------

    @property
    def options(self) -> ProviderOptions:
        return self._options

    def configure(self, **opts: Any) -> None:
        seed = opts.pop("seed", None)
        with self._lock:
            self._options = self._options.updated(**opts)
            if seed is not None:
                self._seed_rngs(int(seed))

    def reset(self) -> None:
        with self._lock:
            self._counts = {f.name: 0 for f in dataclasses.fields(ProviderStats)}
            self._effects = []
            self._ids_by_key = {}
            self._key_since = {}
            self._queued = []

    def fail_next(self, *faults: str) -> None:
        """The next requests to a provider-shaped route (Stripe, SendGrid, Twilio)
        fail with these faults, one each, before the rates are drawn again."""
        unknown = sorted(set(faults) - set(SHAPED_FAULTS))
        if unknown:
            raise ValueError(f"unknown fault(s): {', '.join(unknown)}")
        with self._lock:
            self._queued.extend(faults)

    def shaped_fault(self, options: ProviderOptions) -> str:
        """The fault of one request to a provider-shaped route, with the lock held: a
        queued one (`fail_next`), else drawn from the rates (``fail`` answers 503)."""
        if self._queued:
            return self._queued.pop(0)
        fault = self._draw(options)
        return {"fail": "unavailable", "reject": "decline"}.get(fault, fault)

    def after_effect(self, fault: str) -> Literal["drop", "slow"] | None:
        """What the transport does once an effect is recorded under `fault`, counted
        (with the lock held): drop the connection, answer late, or answer (None)."""
        if fault == "drop":
            self._counts["dropped"] += 1
            return "drop"
        if fault == "slow":
            self._counts["slow"] += 1
            return "slow"
        return None

    def lookup_fails(self) -> bool:
        """Count one lookup; True when it must fail (`lookup_unknown_rate`)."""
        with self._lock:
            self._counts["lookups"] += 1
            rate = self._options.lookup_unknown_rate
            return rate > 0 and self._lookup_rng.random() < rate

    def stats(self) -> ProviderStats:
        with self._lock:
            counts = dict(self._counts)
            counts["distinct_keys"] = len(self._ids_by_key)
        return ProviderStats(**counts)

    def accepted_ids_for(self, idempotency_key: str) -> list[str]:
        with self._lock:
            return list(self._ids_by_key.get(idempotency_key, ()))

    def accepted_keys(self) -> dict[str, int]:
        with self._lock:
            return {key: len(ids) for key, ids in self._ids_by_key.items()}

    def accepted(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(effect) for effect in self._effects]

    def plant(
        self,
        idempotency_key: str | None,
        *,
        remote_id: str | None = None,
        payload: Any = None,
        at: float | None = None,
    ) -> str:
        """Record an effect as if a request had been accepted (an audit's test: the
        provider has what the ledger does not); returns its remote id."""
        remote_id = remote_id or _new_remote_id()
        with self._lock:
            self._record(idempotency_key, remote_id, payload, time.time() if at is None else at)
        return remote_id

    def forget(self, idempotency_key: str) -> int:
        """Remove every effect of a key (an audit's test: the ledger has what the
        provider does not); returns how many."""
        with self._lock:
            before = len(self._effects)
            self._effects = [e for e in self._effects if e["idempotency_key"] != idempotency_key]
            self._ids_by_key.pop(idempotency_key, None)
            self._key_since.pop(idempotency_key, None)
            return before - len(self._effects)

    def _record(self, key: str | None, remote_id: str, payload: Any, at: float) -> None:
        """One effect; called with the lock held."""
        if key is not None:
            ids = self._ids_by_key.setdefault(key, [])
            if ids:
                self._counts["duplicates"] += 1
            ids.append(remote_id)
            self._key_since.setdefault(key, at)
        self._counts["accepted"] += 1
        self._effects.append(
            {"id": remote_id, "idempotency_key": key, "payload": payload, "at": at}
        )

    def _remembers(self, key: str, options: ProviderOptions, now: float) -> bool:
        """Is the key still deduplicated? Past `key_ttl` it is forgotten, and a
        request carrying it is a new effect, remembered from then on."""
        if not self._ids_by_key.get(key) or not options.honour_idempotency:
            return False
        if options.key_ttl is not None and now - self._key_since[key] >= options.key_ttl:
            self._key_since[key] = now
            return False
        return True

    # -- the endpoints (transport-free: each transport hands requests to `handle`) --

    def handle(self, method: str, target: str, headers: Headers, body: bytes) -> Reply:
        """Answer one request, whichever transport received it. `target` is the
        request's path and query as sent (percent-encoded): a key in the path may
        hold an encoded ``/``."""
        url = urlsplit(target)
        segments = url.path.split("/")
        known_path = False
        for (endpoint_method, template), handler in _HANDLERS.items():
            params = _match(template, segments)
            if params is None:
                continue
            if endpoint_method == method:
                query = {**dict(parse_qsl(url.query, keep_blank_values=True)), **params}
                return handler(self, query, headers, body)
            known_path = True
        if known_path:
            return Reply(405, {"error": f"{method} not allowed on {url.path}"})
        return Reply(404, {"error": f"no endpoint {url.path}"})

    def latency(self, method: str, target: str) -> float:
        """Seconds the transport waits before handling this request: the `latency`
        option, for each ``POST /send``. The transport sleeps, so that the aiohttp
        one does not hold up its event loop."""
        if (method, urlsplit(target).path) == ("POST", "/send"):
            return self._options.latency
        return 0.0

    def _draw(self, options: ProviderOptions) -> str:
        total = options.fault_total
        if total <= 0.0:
            return "ok"
        u = self._rng.random()
        for fault, rate in (
            ("fail", options.fail_rate),
            ("reject", options.reject_rate),
            ("drop", options.drop_rate),
            ("slow", options.slow_rate),
        ):
            if u < rate:
                return fault
            u -= rate
        return "ok"

    def on_send(self, query: Query, headers: Headers, body: bytes) -> Reply:
        options = self._options
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
            bad_body = True
        else:
            bad_body = False
        takes_keys = options.key_field is not None or options.key_header is not None
        if options.key_field is not None:
            found = _field(payload, options.key_field)
            key = found if isinstance(found, str) and found else None
        elif options.key_header is not None:
            key = headers.get(options.key_header)
        else:
            key = None
        forced = payload.get("_fault") if isinstance(payload, dict) else None
        with self._lock:
            counts = self._counts
            counts["requests"] += 1
            if takes_keys and not key:
                where = options.key_field or options.key_header
                return Reply(400, {"error": f"the idempotency key ({where}) is required"})
            if bad_body:
                return Reply(400, {"error": "the body is not JSON"})
            if forced is not None and forced not in FAULTS:
                return Reply(400, {"error": f"unknown _fault {forced!r}"})
            if key is not None and self._remembers(key, options, time.time()):
                counts["replayed"] += 1
                return Reply(200, {"id": self._ids_by_key[key][-1], "duplicate": True})
            fault = forced if forced is not None else self._draw(options)
            if fault == "fail":
                counts["failed"] += 1
                wait = options.retry_after
                header = {"Retry-After": f"{wait:g}"} if wait > 0 else {}
                return Reply(503, {"error": "try again later"}, header)
            if fault == "reject":
                counts["rejected"] += 1
                return Reply(422, {"error": "rejected by provider"})
            remote_id = _new_remote_id()
            self._record(key, remote_id, payload, time.time())
            if fault == "drop":
                counts["dropped"] += 1
                return Reply(200, {}, then="drop")
            if fault == "slow":
                counts["slow"] += 1
                return Reply(200, {"id": remote_id, "duplicate": False}, then="slow")
        return Reply(200, {"id": remote_id, "duplicate": False})

    def on_lookup(self, query: Query, headers: Headers, body: bytes) -> Reply:
        with self._lock:
            self._counts["lookups"] += 1
            rate = self._options.lookup_unknown_rate
            if rate > 0 and self._lookup_rng.random() < rate:
                return Reply(503, {"error": "lookup unavailable"}, {"Retry-After": "1"})
            ids = self._ids_by_key.get(query["idempotency_key"])
        if not ids:
            return Reply(404, {"error": "not found"})
        return Reply(200, {"id": ids[0]})

    def on_list(self, query: Query, headers: Headers, body: bytes) -> Reply:
        """What the provider accepted in [since, until) (epoch seconds), oldest first,
        a page at a time as a list API pages (`limit`, `starting_after` an id):
        ``{"data": [{"id", "idempotency_key", "created", "payload"}], "has_more"}``."""
        try:
            since = float(query.get("since", "0"))
            until = float(query.get("until", "inf"))
            limit = min(max(int(query.get("limit", "100")), 1), 1000)
        except ValueError:
            return Reply(400, {"error": "since and until are epoch seconds, limit a number"})
        after = query.get("starting_after")
        with self._lock:
            effects = sorted(
                (e for e in self._effects if since <= e["at"] < until),
                key=lambda e: (e["at"], e["id"]),
            )
        if after is not None:
            ids = [e["id"] for e in effects]
            if after not in ids:
                return Reply(400, {"error": f"no record {after!r} in that window"})
            effects = effects[ids.index(after) + 1 :]
        page = [
            {
                "id": e["id"],
                "idempotency_key": e["idempotency_key"],
                "created": e["at"],
                "payload": e["payload"],
            }
            for e in effects[:limit]
        ]
        return Reply(200, {"data": page, "has_more": len(effects) > limit})

    def on_search(self, query: Query, headers: Headers, body: bytes) -> Reply:
        """Effects whose payload has each queried field (a dotted path) equal to its
        value, as an email API searches its messages by custom argument:
        ``GET /search?custom_args.order=42`` -> ``{"data": [{"id", "created"}]}``."""
        with self._lock:
            self._counts["lookups"] += 1
            rate = self._options.lookup_unknown_rate
            if rate > 0 and self._lookup_rng.random() < rate:
                return Reply(503, {"error": "search unavailable"}, {"Retry-After": "1"})
            found = [
                {"id": e["id"], "created": e["at"]}
                for e in self._effects
                if query and all(str(_field(e["payload"], k)) == v for k, v in query.items())
            ]
        return Reply(200, {"data": found})

    def on_stats(self, query: Query, headers: Headers, body: bytes) -> Reply:
        return Reply(200, self.stats().to_dict())

    def on_accepted(self, query: Query, headers: Headers, body: bytes) -> Reply:
        return Reply(200, self.accepted())

    def on_reset(self, query: Query, headers: Headers, body: bytes) -> Reply:
        self.reset()
        return Reply(200, {"ok": True})

    def on_configure(self, query: Query, headers: Headers, body: bytes) -> Reply:
        try:
            opts = json.loads(body)
            if not isinstance(opts, dict):
                raise ValueError("the body must be a JSON object of options")
            self.configure(**opts)
        except (ValueError, TypeError) as exc:
            return Reply(400, {"error": str(exc)})
        return Reply(200, dataclasses.asdict(self._options))


Handler = Callable[["ProviderCore", Query, Headers, bytes], Reply]
"""An endpoint: the provider, the query (and path parameters), the headers, the body."""

_HANDLERS: dict[tuple[str, str], Handler] = {
    ("POST", "/send"): ProviderCore.on_send,
    ("GET", "/lookup/{idempotency_key}"): ProviderCore.on_lookup,
    ("GET", "/list"): ProviderCore.on_list,
    ("GET", "/search"): ProviderCore.on_search,
    ("GET", "/stats"): ProviderCore.on_stats,
    ("GET", "/accepted"): ProviderCore.on_accepted,
    ("POST", "/reset"): ProviderCore.on_reset,
    ("POST", "/configure"): ProviderCore.on_configure,
}
# The routes in a provider's API shape (for its SDK), one module per provider.
from denpyo.testing import _sendgrid, _stripe, _twilio  # noqa: E402

_HANDLERS.update({**_stripe.ROUTES, **_sendgrid.ROUTES, **_twilio.ROUTES})
ENDPOINTS: list[tuple[str, str]] = list(_HANDLERS)
"""(method, path) of every endpoint; ``{name}`` stands for one path segment."""


def _match(template: str, segments: list[str]) -> dict[str, str] | None:
    """The path parameters (decoded) when the path's raw segments fit `template`."""
    names = template.split("/")
    if len(names) != len(segments):
        return None
    params: dict[str, str] = {}
    for name, segment in zip(names, segments, strict=True):
        if name.startswith("{"):
            params[name.strip("{}")] = unquote(segment)
        elif name != segment:
            return None
    return params


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port); port 0 picks a free port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=1024)


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
