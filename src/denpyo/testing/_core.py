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
    """The fault knobs; immutable so a handler works on one consistent snapshot."""

    honour_idempotency: bool = True
    latency: float = 0.0
    fail_rate: float = 0.0
    reject_rate: float = 0.0
    drop_rate: float = 0.0
    slow_rate: float = 0.0
    slow_seconds: float = 30.0
    lookup_unknown_rate: float = 0.0

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

    # -- the application ----------------------------------------------------

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/send", self._send)
        app.router.add_get("/lookup/{idempotency_key}", self._lookup)
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
        key = request.headers.get("Idempotency-Key")
        try:
            payload = json.loads(await request.read())
        except ValueError:
            payload = None
            bad_body = True
        else:
            bad_body = False
        if options.latency > 0:
            await asyncio.sleep(options.latency)
        forced = payload.get("_fault") if isinstance(payload, dict) else None
        with self._lock:
            counts = self._counts
            counts["requests"] += 1
            if not key:
                return _reply(400, {"error": "the Idempotency-Key header is required"})
            if bad_body:
                return _reply(400, {"error": "the body is not JSON"})
            if forced is not None and forced not in FAULTS:
                return _reply(400, {"error": f"unknown _fault {forced!r}"})
            ids = self._ids_by_key.get(key)
            if ids and options.honour_idempotency:
                counts["replayed"] += 1
                return _reply(200, {"id": ids[0], "duplicate": True})
            fault = forced if forced is not None else self._draw(options)
            if fault == "fail":
                counts["failed"] += 1
                return _reply(503, {"error": "try again later"}, {"Retry-After": "1"})
            if fault == "reject":
                counts["rejected"] += 1
                return _reply(422, {"error": "rejected by provider"})
            remote_id = _new_remote_id()
            if ids is None:
                self._ids_by_key[key] = [remote_id]
            else:
                ids.append(remote_id)
                counts["duplicates"] += 1
            counts["accepted"] += 1
            self._effects.append(
                {"id": remote_id, "idempotency_key": key, "payload": payload, "at": time.time()}
            )
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
