"""What the fleet shares about a channel, and the rules that read it: pure, no I/O.

A channel is *active*, *paused* (a person stopped it), *throttled* (the provider
asked the whole channel to wait: a 429 or 503 with Retry-After), or *down*
(the provider failed `down_after` calls in a row: one probe call at a time, at a
growing interval, until one succeeds). Only an active channel starts calls; a
paused one waits for a person, a throttled one for its time, a down one for a probe.
Every worker reads the states once per poll (`denpyo_channels`), so a change
reaches the fleet within one poll interval.

A call that fails while its channel is down is not the row's fault: it spends no
attempt (`counts_against_row`). Neither do the rows that wait: they make no call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from denpyo.domain.policy import Outcome, OutcomeKind

DEFAULT_DOWN_AFTER = 10
"""Failed calls in a row (transient, or ambiguous: no answer) that one process sees
on a channel before it declares the provider down for the fleet."""

PROBE_FIRST = 2.0
PROBE_GROWTH = 1.5
PROBE_LONGEST = 60.0
"""Seconds between probe calls while a channel is down: 2 s, then 1.5 times longer
after each probe that fails, up to a minute."""

SPACING_MARGIN = 0.05
"""Starts under a rate limit are spaced 5 % wider than 1/R: R + 1 starts then span
1.05 s, so a provider that allows R in any second still sees at most R when a
start arrives up to 50 ms late (a busy machine, the network), at 95 % of R."""

FLEET_HORIZON = 0.25
"""Seconds of a fleet rate limit's starts a worker reserves at once (at least one):
fewer round trips, and rows held no longer than the fleet's next seconds of calls."""


class Mode(Enum):
    """What a channel's calls may do now; `denpyo_channel_state` reports it."""

    ACTIVE = "active"
    PAUSED = "paused"
    THROTTLED = "throttled"
    DOWN = "down"


@dataclass(frozen=True, slots=True)
class ChannelState:
    """A channel's row in `denpyo_channels`, as read at `now` (the database clock).
    No row: active."""

    channel: str
    now: datetime
    paused_at: datetime | None = None
    paused_by: str | None = None
    paused_note: str | None = None
    throttled_until: datetime | None = None
    throttled_note: str | None = None
    down_since: datetime | None = None
    down_note: str | None = None
    probe_at: datetime | None = None
    probe_every: float | None = None  # seconds from the last probe to the next

    @property
    def mode(self) -> Mode:
        """Pause first (a person's word outlasts the provider's), then down, then throttled."""
        if self.paused_at is not None:
            return Mode.PAUSED
        if self.down_since is not None:
            return Mode.DOWN
        if self.throttled_until is not None and self.throttled_until > self.now:
            return Mode.THROTTLED
        return Mode.ACTIVE

    def describe(self) -> str:
        """One line for a person: the mode, since when, by whom and why."""
        mode = self.mode
        if mode is Mode.PAUSED:
            return f"paused by {self.paused_by} at {_at(self.paused_at)}: {self.paused_note}"
        if mode is Mode.DOWN:
            probe = f", next probe at {_at(self.probe_at)}" if self.probe_at else ""
            return f"provider down since {_at(self.down_since)}{probe}: {self.down_note}"
        if mode is Mode.THROTTLED:
            return f"throttled until {_at(self.throttled_until)}: {self.throttled_note}"
        return "active"


def _at(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True, slots=True)
class ChannelEvent:
    """One line of a channel's history: paused, resumed, down, up."""

    id: int
    channel: str
    kind: str
    actor: str
    note: str | None
    at: datetime


def next_probe_wait(every: float | None) -> float:
    """The wait before the probe after this one: PROBE_FIRST after the channel went
    down, then PROBE_GROWTH times longer each time, at most PROBE_LONGEST."""
    if every is None or every <= 0:
        return PROBE_FIRST
    return min(every * PROBE_GROWTH, PROBE_LONGEST)


def counts_against_row(outcome: Outcome, *, down: bool) -> bool:
    """Whether a call's outcome spends one of its row's attempts: not a failure while
    the channel's provider is down (its fault, not the row's)."""
    failed = outcome.kind in (OutcomeKind.TRANSIENT, OutcomeKind.AMBIGUOUS)
    return not (failed and down)


def reserve_count(rate: float, horizon: float = FLEET_HORIZON) -> int:
    """How many starts a worker reserves at once under a rate of `rate` calls a second."""
    return max(1, math.floor(rate * horizon))


@dataclass(slots=True)
class FailureStreak:
    """Failed calls in a row that this process saw on one channel; an answer from the
    provider (synced; rejected, or throttled: it was up to refuse) ends the streak."""

    down_after: int | None
    count: int = 0

    def observe(self, outcome: Outcome) -> bool:
        """Count one call's outcome; True exactly when this one makes the streak long
        enough to call the provider down."""
        if outcome.kind in (OutcomeKind.SYNCED, OutcomeKind.REJECTED) or outcome.throttled:
            self.count = 0
            return False
        self.count += 1
        return self.down_after is not None and self.count == self.down_after
