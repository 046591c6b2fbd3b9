"""The defaults and checks of what a person sets: a channel's attempts, lease and
back-off, and a worker's concurrency, poll interval and grace. Written once here,
so that `Ledger.channel`, `ChannelSpec`, `RetryPolicy`, the `Worker`, `serve` and
the CLI's `worker` cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass

from denpyo.domain.backoff import Backoff
from denpyo.errors import require

DEFAULT_MAX_ATTEMPTS = 8
"""Attempts of a row before it is exhausted (failed, an alert, a person's turn)."""

DEFAULT_LEASE = 60.0
"""Seconds an attempt may run before its row counts as in doubt."""

DEFAULT_BACKOFF = Backoff()
"""1 s, doubling up to an hour, half of it drawn at random (frozen: one is enough)."""

DEFAULT_CONCURRENCY = 16
DEFAULT_POLL_INTERVAL = 1.0
DEFAULT_GRACE = 30.0


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """A worker's settings, checked when made: `concurrency` calls in flight at once,
    `poll_interval` seconds between looks for due rows when idle, and `grace` seconds
    the calls in flight get to finish once it is told to stop."""

    concurrency: int = DEFAULT_CONCURRENCY
    poll_interval: float = DEFAULT_POLL_INTERVAL
    grace: float = DEFAULT_GRACE

    def __post_init__(self) -> None:
        require(self.concurrency >= 1, "the worker's concurrency must be at least 1")
        require(self.poll_interval > 0, "the worker's poll_interval must be positive seconds")
        require(self.grace >= 0, "the worker's grace must not be negative")
