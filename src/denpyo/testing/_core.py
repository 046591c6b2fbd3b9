"""The fake provider's state and its aiohttp application.

All state lives behind one `threading.Lock`: the handlers run on the server's
event loop, while tests read stats and reconfigure faults from other threads.
The lock is only held for plain dictionary work, never across an `await`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import random
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

FAULTS = ("fail", "reject", "drop", "slow", "ok")
RATE_OPTIONS = ("fail_rate", "reject_rate", "drop_rate", "slow_rate", "lookup_unknown_rate")
_JSON = "application/json"


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
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProviderStats:
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


def _reply(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(body).encode(), content_type=_JSON, headers=headers
    )


class ProviderCore:
    """State, fault draws and HTTP handlers of one fake provider."""

    def __init__(self, options: ProviderOptions, seed: int | None = None) -> None:
        self._lock = threading.Lock()
        self._options = options
        self._seed_rngs(seed)
        self._counts: dict[str, int] = {}
        self._effects: list[dict[str, Any]] = []
        self._ids_by_key: dict[str, list[str]] = {}
        self._key_since: dict[str, float] = {}
        self._stopping: asyncio.Event | None = None
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

    # -- the application ----------------------------------------------------

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/send", self._send)
        app.router.add_get("/lookup/{idempotency_key}", self._lookup)
        app.router.add_get("/list", self._list)
        app.router.add_get("/search", self._search)
        app.router.add_get("/stats", self._stats)
        app.router.add_get("/accepted", self._accepted)
        app.router.add_post("/reset", self._reset)
        app.router.add_post("/configure", self._configure)
        return app

    async def start(self, sock: socket.socket, shutdown_timeout: float = 1.0) -> web.AppRunner:
        """Serve on an already bound socket; the caller must `await runner.cleanup()`."""
        self._stopping = asyncio.Event()
        # handler_cancellation: a client that gives up (timeout) cancels its
        # handler, so a slow reply does not linger; the effect is already recorded.
        runner = web.AppRunner(
            self.make_app(),
            access_log=None,
            handle_signals=False,
            handler_cancellation=True,
            shutdown_timeout=shutdown_timeout,
        )
        await runner.setup()
        await web.SockSite(runner, sock).start()
        return runner

    def begin_shutdown(self) -> None:
        """Wake the slow replies so that a graceful stop need not wait for them."""
        if self._stopping is not None:
            self._stopping.set()

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

    async def _send(self, request: web.Request) -> web.StreamResponse:
        options = self._options
        try:
            payload = json.loads(await request.read())
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
            key = request.headers.get(options.key_header)
        else:
            key = None
        if options.latency > 0:
            await asyncio.sleep(options.latency)
        forced = payload.get("_fault") if isinstance(payload, dict) else None
        with self._lock:
            counts = self._counts
            counts["requests"] += 1
            if takes_keys and not key:
                where = options.key_field or options.key_header
                return _reply(400, {"error": f"the idempotency key ({where}) is required"})
            if bad_body:
                return _reply(400, {"error": "the body is not JSON"})
            if forced is not None and forced not in FAULTS:
                return _reply(400, {"error": f"unknown _fault {forced!r}"})
            if key is not None and self._remembers(key, options, time.time()):
                counts["replayed"] += 1
                return _reply(200, {"id": self._ids_by_key[key][-1], "duplicate": True})
            fault = forced if forced is not None else self._draw(options)
            if fault == "fail":
                counts["failed"] += 1
                return _reply(503, {"error": "try again later"}, {"Retry-After": "1"})
            if fault == "reject":
                counts["rejected"] += 1
                return _reply(422, {"error": "rejected by provider"})
            remote_id = _new_remote_id()
            self._record(key, remote_id, payload, time.time())
            if fault == "drop":
                counts["dropped"] += 1
            elif fault == "slow":
                counts["slow"] += 1
        if fault == "drop":
            # Close without a reply; aiohttp then fails to write the response below
            # and treats it as a premature disconnection (no log, no 500).
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=200)
        if fault == "slow" and self._stopping is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), options.slow_seconds)
        return _reply(200, {"id": remote_id, "duplicate": False})

    async def _lookup(self, request: web.Request) -> web.Response:
        key = request.match_info["idempotency_key"]
        with self._lock:
            self._counts["lookups"] += 1
            rate = self._options.lookup_unknown_rate
            if rate > 0 and self._lookup_rng.random() < rate:
                return _reply(503, {"error": "lookup unavailable"}, {"Retry-After": "1"})
            ids = self._ids_by_key.get(key)
        if not ids:
            return _reply(404, {"error": "not found"})
        return _reply(200, {"id": ids[0]})

    async def _list(self, request: web.Request) -> web.Response:
        """What the provider accepted in [since, until) (epoch seconds), oldest first,
        a page at a time as a list API pages (`limit`, `starting_after` an id):
        ``{"data": [{"id", "idempotency_key", "created", "payload"}], "has_more"}``."""
        query = request.query
        try:
            since = float(query.get("since", "0"))
            until = float(query.get("until", "inf"))
            limit = min(max(int(query.get("limit", "100")), 1), 1000)
        except ValueError:
            return _reply(400, {"error": "since and until are epoch seconds, limit a number"})
        after = query.get("starting_after")
        with self._lock:
            effects = sorted(
                (e for e in self._effects if since <= e["at"] < until),
                key=lambda e: (e["at"], e["id"]),
            )
        if after is not None:
            ids = [e["id"] for e in effects]
            if after not in ids:
                return _reply(400, {"error": f"no record {after!r} in that window"})
            effects = effects[ids.index(after) + 1 :]
        page = [
            {"id": e["id"], "idempotency_key": e["idempotency_key"], "created": e["at"],
             "payload": e["payload"]}
            for e in effects[:limit]
        ]  # fmt: skip
        return _reply(200, {"data": page, "has_more": len(effects) > limit})

    async def _search(self, request: web.Request) -> web.Response:
        """Effects whose payload has each queried field (a dotted path) equal to its
        value, as an email API searches its messages by custom argument:
        ``GET /search?custom_args.order=42`` -> ``{"data": [{"id", "created"}]}``."""
        with self._lock:
            self._counts["lookups"] += 1
            rate = self._options.lookup_unknown_rate
            if rate > 0 and self._lookup_rng.random() < rate:
                return _reply(503, {"error": "search unavailable"}, {"Retry-After": "1"})
            found = [
                {"id": e["id"], "created": e["at"]}
                for e in self._effects
                if request.query
                and all(str(_field(e["payload"], k)) == v for k, v in request.query.items())
            ]
        return _reply(200, {"data": found})

    async def _stats(self, request: web.Request) -> web.Response:
        return _reply(200, self.stats().to_dict())

    async def _accepted(self, request: web.Request) -> web.Response:
        return _reply(200, self.accepted())

    async def _reset(self, request: web.Request) -> web.Response:
        self.reset()
        return _reply(200, {"ok": True})

    async def _configure(self, request: web.Request) -> web.Response:
        try:
            opts = json.loads(await request.read())
            if not isinstance(opts, dict):
                raise ValueError("the body must be a JSON object of options")
            self.configure(**opts)
        except (ValueError, TypeError) as exc:
            return _reply(400, {"error": str(exc)})
        return _reply(200, dataclasses.asdict(self._options))


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port); port 0 picks a free port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=1024)


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
