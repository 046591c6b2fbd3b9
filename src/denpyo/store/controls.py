"""What the fleet shares about each channel (`denpyo_channels`): a person's pause,
the provider's back-off, the provider-down mode with its probes, the fleet rate
limit's clock, and the fleet's calls in flight (domain/channel_state.py).

None of it is on the path of a channel that sets no fleet limit: workers read the
states once per poll, and write them only when something happens (a pause, a
Retry-After, a run of failures, a probe). A fleet-limited channel's claim and its
reservation of start times each lock the channel's row for one short transaction.
"""

from __future__ import annotations

from abc import abstractmethod
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from denpyo.domain.channel_state import ChannelEvent, ChannelState
from denpyo.domain.submission import Submission
from denpyo.store.base import Row, Tx
from denpyo.store.conflicts import retried
from denpyo.store.connections import ConnectionModes
from denpyo.store.params import Params, seconds
from denpyo.store.rows import Rows

if TYPE_CHECKING:
    from denpyo.store.actions import NewAction


class ChannelControls(ConnectionModes, Rows, Params):
    """The channel states, their history, and the fleet limits' shared counts."""

    QUERIES: ClassVar[frozenset[str]] = frozenset(
        {
            "ensure_channel",
            "list_channels",
            "lock_channel",
            "start_channel_after",
            "count_channel_held",
            "pause_channel",
            "resume_channel",
            "throttle_channel",
            "mark_channel_down",
            "probe_channel",
            "mark_channel_up",
            "add_channel_event",
            "list_channel_events",
        }
    )

    @abstractmethod
    def add_action_in(
        self, tx: Tx, entry: NewAction, *, holder: str | None = None, lease: float = 60.0
    ) -> int:
        """An entry of the action log inside the caller's transaction (store/actions.py)."""

    @abstractmethod
    def claim_ready_in(
        self, tx: Tx, channel: str, holder: str, limit: int, lease: float
    ) -> list[Submission]:
        """`claim_ready` inside the caller's transaction."""

    def channel_states(self) -> list[ChannelState]:
        with self.reading() as tx:
            rows = tx.fetch_all("list_channels")
        return [self._state(row) for row in rows]

    def channel_history(self, channel: str, limit: int = 50) -> list[ChannelEvent]:
        with self.reading() as tx:
            rows = tx.fetch_all("list_channel_events", {"channel": channel, "limit": limit})
        return [
            ChannelEvent(
                int(row["id"]),
                row["channel"],
                row["kind"],
                row["actor"],
                row["note"],
                self._time(row["at"]),
            )
            for row in rows
        ]

    def pause_channel(
        self, channel: str, *, actor: str, note: str, log: NewAction | None = None
    ) -> bool:
        return self._change(channel, "pause_channel", "paused", actor, note, log=log)

    def resume_channel(
        self, channel: str, *, actor: str, note: str, log: NewAction | None = None
    ) -> bool:
        return self._change(channel, "resume_channel", "resumed", actor, note, log=log)

    def channel_down(self, channel: str, *, actor: str, note: str, probe_in: float) -> bool:
        return self._change(channel, "mark_channel_down", "down", actor, note, seconds=probe_in)

    def channel_up(self, channel: str, *, actor: str, note: str) -> bool:
        return self._change(channel, "mark_channel_up", "up", actor, note)

    @retried
    def throttle_channel(self, channel: str, *, throttle_for: float, note: str) -> bool:
        with self.transaction() as tx:
            tx.execute("ensure_channel", {"channel": channel})
            params = {"channel": channel, "seconds": seconds(throttle_for), "note": note}
            return tx.execute("throttle_channel", params) > 0

    @retried
    def take_probe(self, channel: str, *, next_in: float) -> bool:
        with self.transaction() as tx:
            params = {"channel": channel, "seconds": seconds(next_in)}
            return tx.execute("probe_channel", params) > 0

    @retried
    def reserve_starts(self, channel: str, count: int, rate: float) -> float:
        """Move the channel's fleet clock on by `count / rate` seconds from where it
        stood (or from now, if it stood in the past: unused time is no credit, so no
        burst); the seconds from now to the first start reserved."""
        with self.transaction() as tx:
            now, next_start = self._lock_channel(tx, channel)
            first = max(now, next_start or now)
            after = first + timedelta(seconds=count / rate)
            tx.execute("start_channel_after", {"channel": channel, "at": self.time_param(after)})
        return (first - now).total_seconds()

    @retried
    def claim_within(
        self, channel: str, *, holder: str, limit: int, lease: float, fleet_concurrency: int
    ) -> list[Submission]:
        """`claim_ready`, up to `fleet_concurrency` rows of the channel held by the whole
        fleet: under the channel's lock, its held rows are counted (a dead worker's stop
        counting when their leases run out), and the claim takes what is left."""
        with self.transaction() as tx:
            self._lock_channel(tx, channel)
            row = tx.fetch_one("count_channel_held", {"channel": channel})
            room = min(limit, fleet_concurrency - (int(row["n"]) if row else 0))
            if room <= 0:
                return []
            return self.claim_ready_in(tx, channel, holder, room, lease)

    def _lock_channel(self, tx: Tx, channel: str) -> tuple[datetime, datetime | None]:
        """Lock the channel's row (made the first time): the database clock, and the
        fleet rate limit's next start."""
        row = tx.fetch_one("lock_channel", {"channel": channel})
        if row is None:
            tx.execute("ensure_channel", {"channel": channel})
            row = tx.fetch_one("lock_channel", {"channel": channel})
        assert row is not None
        return self._time(row["now"]), self.parse_time(row["next_start"])

    @retried
    def _change(
        self,
        channel: str,
        query: str,
        kind: str,
        actor: str,
        note: str,
        log: NewAction | None = None,
        **params: Any,
    ) -> bool:
        """One change of a channel's state with its line of history, and a person's
        entry in the action log (`log`); False (nothing written) when the channel
        already was in that state."""
        with self.transaction() as tx:
            tx.execute("ensure_channel", {"channel": channel})
            if not tx.execute(query, {"channel": channel, "actor": actor, "note": note, **params}):
                return False
            event = {"channel": channel, "kind": kind, "actor": actor, "note": note}
            tx.execute("add_channel_event", event)
            if log is not None:
                self.add_action_in(tx, log)
            return True

    def _state(self, row: Row) -> ChannelState:
        return ChannelState(
            row["channel"],
            self._time(row["now"]),
            paused_at=self.parse_time(row["paused_at"]),
            paused_by=row["paused_by"],
            paused_note=row["paused_note"],
            throttled_until=self.parse_time(row["throttled_until"]),
            throttled_note=row["throttled_note"],
            down_since=self.parse_time(row["down_since"]),
            down_note=row["down_note"],
            probe_at=self.parse_time(row["probe_at"]),
            probe_every=None if row["probe_every"] is None else float(row["probe_every"]),
        )

    def _time(self, value: Any) -> datetime:
        parsed = self.parse_time(value)
        assert parsed is not None
        return parsed
