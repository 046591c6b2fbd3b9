"""This process's view of what the fleet shares about each channel (paused, throttled,
down: domain/channel_state.py), and what its own calls tell the fleet.

The states are read at most once per poll interval (`refresh`), never per call;
a process writes them only when something happens: a Retry-After (the whole
channel waits), the `down_after`-th failure in a row (the provider is down), a
success while down (it is up). Such a write is one statement, off the common path.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from datetime import timedelta

from denpyo.domain.channel_state import (
    ChannelState,
    FailureStreak,
    Mode,
    counts_against_row,
    next_probe_wait,
)
from denpyo.domain.policy import Outcome, OutcomeKind
from denpyo.domain.text import visible
from denpyo.engine.alerts import Alerts
from denpyo.engine.channel import ChannelSpec
from denpyo.store import Store

log = logging.getLogger("denpyo.engine")


@dataclass(frozen=True, slots=True)
class Seen:
    """What one call's outcome means for its channel: whether it spends its row's
    attempt, and what, if anything, the fleet must be told (`Gates.tell`)."""

    counted: bool = True
    throttle_for: float | None = None  # the provider asked the channel to wait
    down: bool = False  # this failure makes the run long enough: the provider is down
    up: bool = False  # a call succeeded while the channel was down
    why: str = ""

    @property
    def news(self) -> bool:
        return self.throttle_for is not None or self.down or self.up


NO_NEWS = Seen()


class Gates:
    """The channel states one process works by. `refresh` reads them all (one query);
    between reads, a state this process wrote itself is kept locally at once."""

    def __init__(self, store: Store, alerts: Alerts, actor: str) -> None:
        self.store = store
        self.alerts = alerts
        self.actor = actor
        self.states: dict[str, ChannelState] = {}
        self.read_at = float("-inf")  # monotonic, of the last refresh
        self.local: dict[str, float] = {}  # channel -> monotonic end of a hold seen here
        self.streaks: dict[str, FailureStreak] = {}
        self._db_offset = 0.0  # monotonic = database time (epoch s) + offset
        self._lock = threading.Lock()

    # -- reading ---------------------------------------------------------------------------

    def stale(self, every: float) -> bool:
        return time.monotonic() - self.read_at >= every

    def refresh(self) -> dict[str, ChannelState]:
        """Read every channel's state; the changes since the last read are logged."""
        since = time.monotonic()
        states = {state.channel: state for state in self.store.channel_states()}
        with self._lock:
            for name, state in states.items():
                before = self.states.get(name)
                if (before.mode if before else Mode.ACTIVE) is not state.mode:
                    log.info("channel %s: %s", name, visible(state.describe()))
                    self.streaks.pop(name, None)  # failures before the change are old news
            if states:
                now = next(iter(states.values())).now
                self._db_offset = since - now.timestamp()
            self.states = states
            self.read_at = since
        return states

    def mode(self, channel: str) -> Mode:
        """The channel's mode now, by the last read and what this process saw since."""
        state = self.states.get(channel)
        now = time.monotonic()
        if state is not None:
            if state.paused_at is not None:
                return Mode.PAUSED
            if state.down_since is not None:
                return Mode.DOWN
        if self.throttled_until(channel) > now:
            return Mode.THROTTLED
        return Mode.ACTIVE

    def throttled_until(self, channel: str) -> float:
        """Monotonic time until which the channel is throttled (past: not throttled)."""
        until = self.local.get(channel, float("-inf"))
        state = self.states.get(channel)
        if state is not None and state.throttled_until is not None:
            until = max(until, state.throttled_until.timestamp() + self._db_offset)
        return until

    def left_to_workers(self, spec: ChannelSpec) -> str | None:
        """Why an inline submit may not call now (None: it may)."""
        mode = self.mode(spec.name)
        if mode is not Mode.ACTIVE:
            return f"channel {mode.value}"
        if spec.fleet_rate_limit is not None or spec.fleet_concurrency is not None:
            return "the channel's limits hold for the fleet: workers pace its calls"
        return None

    def probe_due(self, channel: str) -> bool:
        """A down channel's next probe may be due (the database decides: `take_probe`)."""
        state = self.states.get(channel)
        if state is None or state.probe_at is None:
            return True
        return state.probe_at.timestamp() + self._db_offset <= time.monotonic()

    def take_probe(self, channel: str) -> bool:
        """Take the fleet's next probe call of a down channel (True: this process's)."""
        state = self.states.get(channel)
        wait = next_probe_wait(state.probe_every if state is not None else None)
        return self.store.take_probe(channel, next_in=wait)

    # -- what calls tell -----------------------------------------------------------------

    def seen(self, spec: ChannelSpec, outcome: Outcome) -> Seen:
        """What one call's outcome means for its channel (no I/O: `tell` writes it)."""
        state = self.states.get(spec.name)
        down = state is not None and state.down_since is not None  # paused or not
        with self._lock:
            streak = self.streaks.setdefault(spec.name, FailureStreak(spec.down_after))
            run_ends = streak.observe(outcome)
        counted = counts_against_row(outcome, down=down)
        if outcome.kind in (OutcomeKind.SYNCED, OutcomeKind.REJECTED):
            if down:
                return Seen(up=True, why=f"a call was answered ({outcome.kind.value})")
            return NO_NEWS
        if run_ends and not down:
            why = f"{spec.down_after} calls failed in a row; the last: {outcome.error}"
            return Seen(counted, down=True, why=why)
        if outcome.kind is OutcomeKind.TRANSIENT and outcome.retry_after:
            why = f"the provider asked to wait {outcome.retry_after:g} s: {outcome.error}"
            with self._lock:
                self.local[spec.name] = max(
                    self.local.get(spec.name, float("-inf")),
                    time.monotonic() + outcome.retry_after,
                )
            return Seen(counted, throttle_for=outcome.retry_after, why=why)
        return Seen(counted)

    def answered(self, spec: ChannelSpec, what: str) -> Seen:
        """A verify the provider answered (it has the call, or it has not): the
        provider is up, whatever the channel's state said."""
        state = self.states.get(spec.name)
        with self._lock:
            self.streaks.pop(spec.name, None)
        if state is not None and state.down_since is not None:
            return Seen(up=True, why=f"a verify was answered ({what})")
        return NO_NEWS

    def tell(self, channel: str, seen: Seen) -> None:
        """Tell the fleet (one statement) and, for the process that changed the state,
        the people on call (`channel_down`, `channel_up`)."""
        try:
            self._tell(channel, seen)
        except Exception as exc:  # advisory: the row's own outcome is settled regardless
            log.warning("channel %s: could not tell the fleet (%s): %s", channel, seen.why, exc)

    def _tell(self, channel: str, seen: Seen) -> None:
        why = visible(seen.why)
        throttled = seen.throttle_for is not None
        if throttled and self.store.throttle_channel(
            channel, throttle_for=seen.throttle_for or 0, note=why
        ):
            log.warning("channel %s throttled for %.1f s: %s", channel, seen.throttle_for, why)
        if seen.down:
            if self.store.channel_down(
                channel, actor=self.actor, note=why, probe_in=next_probe_wait(None)
            ):
                log.error("channel %s: provider down (%s); one probe call at a time", channel, why)
                self.alerts.raise_alert(
                    "channel_down",
                    f"channel {channel}: the provider looks down ({why}); calls wait, one "
                    "probe at a time, and no row spends an attempt until a call succeeds",
                    None,
                )
            self._mark(channel, down=True)
        if seen.up:
            if self.store.channel_up(channel, actor=self.actor, note=why):
                log.warning("channel %s: provider up again (%s)", channel, why)
                self.alerts.raise_alert(
                    "channel_up", f"channel {channel}: provider up: {why}", None
                )
            self._mark(channel, down=False)

    def _mark(self, channel: str, *, down: bool) -> None:
        """Keep what this process just wrote until the next read says it for all."""
        state = self.states.get(channel) or ChannelState(channel, self.store.now())
        probe_at = state.now + timedelta(seconds=next_probe_wait(None)) if down else None
        with self._lock:
            self.streaks.pop(channel, None)
            self.states[channel] = replace(
                state,
                down_since=state.now if down else None,
                probe_at=probe_at,
                probe_every=None,
            )
