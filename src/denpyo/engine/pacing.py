"""When a rate-limited channel's next calls may start, in one worker.

A limit of `rate` calls a second means what a provider means by it: in any window
of one second, at most `rate` calls start. Starts are spaced evenly, 1/rate
apart and 5 % more (`SPACING_MARGIN`: a start that arrives a little late still
keeps the window), and time left unused is no credit: there is no burst to spend
later.

`rate_limit` is this process's own: its starts are spaced here. `fleet_rate_limit`
holds for every process sharing the ledger: starts are reserved from the channel's
clock in the database (`Store.reserve_starts`), a few at a time, and each process
starts its calls at the times it was given (and, with both set, no closer than its
own limit allows).

A start taken late (no slot was free, or the channel was throttled) would crowd
the ones after it: a start more than one interval old is dropped instead, and its
row gets a new one. So the starts of any second are at most R, and one more only
where a start lands on each edge of it.
"""

from __future__ import annotations

from collections import deque

from denpyo.domain.channel_state import SPACING_MARGIN, reserve_count


class Pacing:
    """The start times reserved for one channel's claimed rows, earliest first: one per
    row claimed to be sent and not yet started."""

    def __init__(self, rate: float | None, fleet_rate: float | None) -> None:
        widen = 1.0 + SPACING_MARGIN
        self.gap = 0.0 if rate is None else widen / rate
        # The rate the fleet's clock is moved on by: 1/fleet_rate_limit, 5 % wider.
        self.fleet_rate = None if fleet_rate is None else fleet_rate / widen
        self.fleet_gap = 0.0 if self.fleet_rate is None else 1.0 / self.fleet_rate
        self.batch = reserve_count(min(r for r in (rate, fleet_rate) if r is not None))
        self.after = float("-inf")  # this process's next start under its own limit
        self.starts: deque[float] = deque()

    @property
    def shared(self) -> bool:
        """Its starts come from the fleet's clock (a round trip per reservation)."""
        return self.fleet_rate is not None

    def room(self, waiting: int) -> int:
        """Rows worth claiming now, with `waiting` claimed rows not yet started: up to
        a reservation's worth."""
        return max(0, self.batch - waiting)

    def reserve(self, count: int, first: float) -> None:
        """`count` starts from `first` on (monotonic): 1/fleet_rate apart, each at least
        1/rate after this process's last."""
        for i in range(count):
            start = max(first + i * self.fleet_gap, self.after)
            self.starts.append(start)
            self.after = start + self.gap

    def due(self, now: float) -> bool:
        return bool(self.starts) and self.starts[0] <= now

    def drop_late(self, now: float) -> int:
        """Drop the starts too old to take (more than 0.9 of the shortest interval
        ago: taken now, they would crowd the next); how many went."""
        late = now - 0.9 * min(gap for gap in (self.gap, self.fleet_gap) if gap > 0)
        dropped = 0
        while self.starts and self.starts[0] < late:
            self.starts.popleft()
            dropped += 1
        return dropped

    def take(self) -> None:
        self.starts.popleft()

    def next_at(self) -> float | None:
        return self.starts[0] if self.starts else None

    def drop(self, count: int) -> None:
        """Forget the last `count` starts: their rows were given back unsent."""
        for _ in range(min(count, len(self.starts))):
            self.starts.pop()
