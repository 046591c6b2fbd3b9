"""Exponential back-off with jitter, honouring a provider's Retry-After."""

from __future__ import annotations

import random
from dataclasses import dataclass

from denpyo.errors import require


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before attempt n+1 is `initial * multiplier**(n-1)`, capped at `maximum`.

    `jitter` is the fraction of the delay drawn at random (0.5: between half and
    all of it), so that a burst of failures does not come back as a burst.
    """

    initial: float = 1.0
    maximum: float = 3600.0
    multiplier: float = 2.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        require(0 <= self.initial <= self.maximum, "Backoff needs 0 <= initial <= maximum")
        require(self.multiplier >= 1, "Backoff.multiplier must be at least 1")
        require(0 <= self.jitter <= 1, "Backoff.jitter must be between 0 and 1")

    def delay(
        self,
        attempts: int,
        *,
        retry_after: float | None = None,
        rng: random.Random | None = None,
    ) -> float:
        """Seconds to wait after `attempts` attempts. A provider's Retry-After is a
        floor, never a shortcut: the longer of it and the computed delay, within
        `maximum` (a storm of `429, Retry-After: 0` must not use up every attempt
        in a second)."""
        exponent = max(attempts - 1, 0)
        base = min(self.initial * self.multiplier ** min(exponent, 64), self.maximum)
        draw = (rng or random).random()
        delay = base * (1 - self.jitter * draw)
        if retry_after is not None and retry_after > delay:
            return min(retry_after, self.maximum)
        return delay

    def delay_after(self, elapsed: float, *, rng: random.Random | None = None) -> float:
        """Seconds to wait before asking again about something left unanswered for
        `elapsed` seconds: `initial + (multiplier - 1) * elapsed`, capped at `maximum`,
        jittered as `delay` is. Each wait adds to what has elapsed, so the waits grow
        as `delay`'s do (initial, initial·m, initial·m², … when none is cut by the
        jitter), counted from time rather than tries: nothing is kept per try."""
        base = min(self.initial + (self.multiplier - 1) * max(elapsed, 0.0), self.maximum)
        return base * (1 - self.jitter * (rng or random).random())
