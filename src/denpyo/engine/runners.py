"""Runners: perform a flow's effects, blocking (sync) or awaiting (async).

The runners differ only in how they wait; the decisions live in `flows.py`, and
every runner (these two and the worker) advances a flow by the one `step()`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Executor
from typing import Any, TypeVar

from denpyo.domain.moves import Change
from denpyo.domain.policy import describe
from denpyo.domain.submission import Submission
from denpyo.domain.verdict import Unknown, Verdict
from denpyo.engine.bridge import LoopThread
from denpyo.engine.channel import ChannelSpec, checked_verdict
from denpyo.engine.flows import Apply, Call, CallResult, Check, Done, Effect, StoreOp, step
from denpyo.engine.tracing import RowSpan
from denpyo.store import Store
from denpyo.store.base import AsyncStore, InThreads

T = TypeVar("T")


def _elapsed_ms(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)


def _begin(sub: Submission) -> None:
    """The last check before a call starts: raises `LeaseExpired` if this process's
    hold on the row may have run out (then the flow gives the row back unsent)."""
    if sub.lease is not None:
        sub.lease.begin()


async def _send_on_loop(spec: ChannelSpec, sub: Submission, span: RowSpan) -> Any:
    """An async channel of a sync submit, on the private loop: it begins only once
    the loop runs it, which may be late (the loop is busy), so the lease is checked there."""
    _begin(sub)
    with span.current():
        return await spec.send(sub)  # type: ignore[misc]


async def _verify_on_loop(spec: ChannelSpec, sub: Submission, span: RowSpan) -> Any:
    """An async verify of a sync flow, on the private loop, its span current there."""
    assert spec.verify is not None
    with span.current():
        return await spec.verify(sub)  # type: ignore[misc]


def _in_span(span: RowSpan, fn: Callable[[Submission], T], sub: Submission) -> T:
    """A sync channel's send or verify with the row's span current (in the thread
    that runs it: a pool thread does not inherit the caller's context)."""
    with span.current():
        return fn(sub)


class SyncRunner:
    """Runs flows in the calling thread. Async channels run on the private loop."""

    def __init__(self, store: Store, bridge: LoopThread) -> None:
        self.store = store
        self.bridge = bridge

    def run(self, flow: Generator[Effect, Any, T]) -> T:
        value: Any = None
        error: BaseException | None = None
        while True:
            effect = step(flow, value, error)
            if isinstance(effect, Done):
                return effect.value  # type: ignore[no-any-return]
            value, error = None, None
            try:
                value = self.perform(effect)
            except Exception as exc:
                error = exc

    def perform(self, effect: Effect) -> Any:
        if isinstance(effect, StoreOp):
            return effect.fn(*effect.args, **effect.kwargs)
        if isinstance(effect, Apply):
            return self.store.move(effect.changes)
        spec, sub, span = effect.spec, effect.submission, effect.span
        started = time.perf_counter()
        if isinstance(effect, Call):
            try:
                if spec.send_is_async:
                    value: Any = self.bridge.run(_send_on_loop(spec, sub, span))
                else:
                    _begin(sub)
                    value = _in_span(span, spec.send, sub)
            except Exception as exc:
                return CallResult(error=exc, duration_ms=_elapsed_ms(started))
            return CallResult(value=value, duration_ms=_elapsed_ms(started))
        assert isinstance(effect, Check) and spec.verify is not None
        try:
            if spec.verify_is_async:
                return checked_verdict(self.bridge.run(_verify_on_loop(spec, sub, span)))
            return checked_verdict(_in_span(span, spec.verify, sub))
        except Exception as exc:
            return Unknown(f"verify raised {describe(exc)}")


class AsyncRunner:
    """Runs flows on the running event loop. Store operations run on `db`
    (threads that hold the store's connections); sync channels on `calls`; claims
    and changes by `ops` (a running worker's: the store's own asyncio operations,
    `Store.async_ops`), by default in the `db` threads."""

    def __init__(
        self,
        store: Store,
        db: Executor,
        calls: Executor | None = None,
        ops: AsyncStore | None = None,
    ) -> None:
        self.store = store
        self.db = db
        self.calls = calls
        self.ops: AsyncStore = ops or InThreads(store, db)

    async def run(self, flow: Generator[Effect, Any, T]) -> T:
        value: Any = None
        error: BaseException | None = None
        while True:
            effect = step(flow, value, error)
            if isinstance(effect, Done):
                return effect.value  # type: ignore[no-any-return]
            value, error = None, None
            try:
                value = await self.perform(effect)
            except Exception as exc:
                error = exc

    async def in_db(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.db, lambda: fn(*args, **kwargs))

    async def claim(
        self, channel: str, *, holder: str, limit: int, lease: float, in_doubt: bool
    ) -> list[Submission]:
        return await self.ops.claim(
            channel, holder=holder, limit=limit, lease=lease, in_doubt=in_doubt
        )

    async def move(self, changes: Sequence[Change]) -> list[Submission | None]:
        return await self.ops.move(changes)

    @staticmethod
    def _sync_call(spec: ChannelSpec, sub: Submission, span: RowSpan) -> Any:
        """A sync channel in a pool thread: it begins only once a thread runs it, which
        may be late (the pool is busy), so the lease is checked there."""
        _begin(sub)
        return _in_span(span, spec.send, sub)

    async def perform(self, effect: Effect) -> Any:
        if isinstance(effect, StoreOp):
            return await self.in_db(effect.fn, *effect.args, **effect.kwargs)
        if isinstance(effect, Apply):
            return await self.move(effect.changes)
        return await self.outside(effect)

    async def outside(self, effect: Call | Check) -> Any:
        """Perform a call or a verify: the provider's side of the flow. Never raises
        (but for cancellation): a failed call is a `CallResult` with its error, a
        failed verify an `Unknown` verdict."""
        spec, sub, span = effect.spec, effect.submission, effect.span
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        if isinstance(effect, Call):
            try:
                if spec.send_is_async:
                    _begin(sub)
                    with span.current():  # attached and detached in this task
                        value: Any = await spec.send(sub)  # type: ignore[misc]
                else:
                    value = await loop.run_in_executor(self.calls, self._sync_call, spec, sub, span)
            except Exception as exc:
                return CallResult(error=exc, duration_ms=_elapsed_ms(started))
            return CallResult(value=value, duration_ms=_elapsed_ms(started))
        assert isinstance(effect, Check) and spec.verify is not None
        verdict: Verdict
        try:
            if spec.verify_is_async:
                with span.current():
                    verdict = checked_verdict(await spec.verify(sub))  # type: ignore[misc]
            else:
                verdict = checked_verdict(
                    await loop.run_in_executor(self.calls, _in_span, span, spec.verify, sub)
                )
        except Exception as exc:
            verdict = Unknown(f"verify raised {describe(exc)}")
        return verdict
