"""A registered channel: the code that performs one call, and its policy."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from denpyo.domain.backoff import Backoff
from denpyo.domain.channel_state import DEFAULT_DOWN_AFTER
from denpyo.domain.policy import Outcome, OutcomeKind, RetryPolicy, classify_exception
from denpyo.domain.settings import DEFAULT_BACKOFF, DEFAULT_LEASE, DEFAULT_MAX_ATTEMPTS
from denpyo.domain.submission import Submission
from denpyo.domain.verdict import Delivered, NotDelivered, Unknown, Verdict
from denpyo.errors import require

SendFn = Callable[[Submission], "str | Awaitable[str | None] | None"]
VerifyFn = Callable[[Submission], "Verdict | Awaitable[Verdict]"]
ListRemoteFn = Callable[[datetime, datetime], Any]
"""`fn(since, until)`: the provider's records (`RemoteRecord`) of calls it accepted in
[since, until): an iterable (a generator that pages), an async iterable, or an
awaitable of an iterable."""
Classifier = Callable[[BaseException], "Outcome | None"]


@dataclass(frozen=True)
class ChannelSpec:
    """Everything the engine needs to know about one channel.

    `lease` is the seconds an attempt may run before its row counts as in doubt:
    make it comfortably longer than the call's own timeout. `classify` may map
    an exception to an `Outcome`; returning None falls back to the default
    classification (`classify_exception`). `idempotency_window` is how long the provider
    remembers a key (Stripe: 24 h; a JetStream stream: its duplicate window):
    past it, an idempotent channel's in-doubt row is never resent on the strength
    of its key (policy.resend_in_window). `list_remote` gives the provider's own
    records for the audit (engine/audit.py).

    `concurrency` and `rate_limit` are per worker process; `fleet_concurrency` and
    `fleet_rate_limit` hold for every process on every host that shares the ledger
    (a rate: at most that many calls start in any one second, evenly spaced).
    `down_after`: failed calls in a row after which the provider is taken as down
    for the whole fleet (None: never).
    """

    name: str
    send: SendFn
    verify: VerifyFn | None = None
    idempotent: bool = False
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff: Backoff = DEFAULT_BACKOFF
    lease: float = DEFAULT_LEASE
    concurrency: int | None = None
    rate_limit: float | None = None
    fleet_rate_limit: float | None = None
    fleet_concurrency: int | None = None
    down_after: int | None = DEFAULT_DOWN_AFTER
    classify: Classifier | None = None
    idempotency_window: float | None = None
    list_remote: ListRemoteFn | None = None

    def __post_init__(self) -> None:
        """Every setting is checked here, once, when the channel is registered."""
        where = f"channel {self.name!r}"
        require(callable(self.send), f"{where}: the send function must be callable")
        require(self.verify is None or callable(self.verify), f"{where}: verify must be callable")
        require(
            self.list_remote is None or callable(self.list_remote),
            f"{where}: list_remote must be callable",
        )
        require(self.lease > 0, f"{where}: lease must be positive seconds")
        require(
            self.concurrency is None or self.concurrency >= 1,
            f"{where}: concurrency must be at least 1",
        )
        for name in ("rate_limit", "fleet_rate_limit"):
            value = getattr(self, name)
            require(
                value is None or (_number(value) and value > 0),
                f"{where}: {name} must be positive calls/second, not {value!r}",
            )
        for name in ("fleet_concurrency", "down_after"):
            value = getattr(self, name)
            require(
                value is None or (_number(value) and value == int(value) and value >= 1),
                f"{where}: {name} must be a whole number of at least 1, not {value!r}",
            )
        require(self.max_attempts >= 1, f"{where}: max_attempts must be at least 1")
        require(
            self.idempotency_window is None or self.idempotency_window > 0,
            f"{where}: idempotency_window must be positive seconds",
        )

    @cached_property
    def policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=self.max_attempts,
            backoff=self.backoff,
            can_verify=self.verify is not None,
            idempotent=self.idempotent,
        )

    @cached_property
    def send_is_async(self) -> bool:
        return _is_async(self.send)

    @cached_property
    def verify_is_async(self) -> bool:
        return self.verify is not None and _is_async(self.verify)

    def outcome(self, result: Any = None, error: BaseException | None = None) -> Outcome:
        """Classify what a call returned or raised."""
        if error is None:
            remote_id = None if result is None else str(result)
            return Outcome(OutcomeKind.SYNCED, remote_id=remote_id)
        if self.classify is not None:
            custom = self.classify(error)
            if custom is not None:
                return custom
        return classify_exception(error)


def checked_verdict(value: Any) -> Verdict:
    """A verify that returns something else is a bug; treat it as 'cannot tell'."""
    if isinstance(value, Delivered | NotDelivered | Unknown):
        return value
    return Unknown(f"verify returned {type(value).__name__}, not a Verdict")


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - callable objects with async __call__
    )
