"""Per-channel rate limits for a worker: a token bucket.

A limit is per worker process: with N workers sharing a channel, each sends at
most `rate_limit` calls per second, so set it to the provider's limit divided
by N. (A shared limit would need a shared counter on every call, the hot path
this design keeps free of extra round trips.)
"""

from __future__ import annotations

import time


class TokenBucket:
    """`rate` calls per second on average, bursts of at most `burst` calls."""

    def __init__(self, rate: float, burst: float | None = None) -> None:
        self.rate = rate
        self.burst = max(burst if burst is not None else rate, 1.0)
        self.tokens = self.burst
        self.stamp = time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def available(self) -> int:
        """Whole calls that may start now."""
        self._refill()
        return int(self.tokens)

    def take(self, count: int) -> None:
        self._refill()
        self.tokens -= count

    def wait_time(self) -> float:
        """Seconds until the next call may start."""
        self._refill()
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate
