"""What the fleet shares about each channel (domain/channel_state.py), read for the
CLI and the dashboard; pausing and resuming one are `Ledger.pause` and `Ledger.resume`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from denpyo.domain.channel_state import ChannelEvent, ChannelState, Mode
from denpyo.domain.limits import check_channel_name

if TYPE_CHECKING:
    from denpyo.engine.ledger import Ledger


@dataclass(frozen=True, slots=True)
class ChannelView:
    """A channel as the people on call see it: its state (None: never paused, throttled
    or down: active) and its latest history."""

    channel: str
    state: ChannelState | None
    history: list[ChannelEvent]

    @property
    def mode(self) -> Mode:
        return Mode.ACTIVE if self.state is None else self.state.mode

    def describe(self) -> str:
        return "active" if self.state is None else self.state.describe()


def channel_states(ledger: Ledger) -> dict[str, ChannelState]:
    """Every channel that has a state, by name (the others are active)."""
    return {state.channel: state for state in ledger.store.channel_states()}


def channel_view(ledger: Ledger, channel: str, limit: int = 20) -> ChannelView:
    check_channel_name(channel)
    return ChannelView(
        channel, channel_states(ledger).get(channel), ledger.store.channel_history(channel, limit)
    )
