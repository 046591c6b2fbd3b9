"""Pausing and resuming a channel, and reading what the fleet shares about each
channel (domain/channel_state.py), for the CLI, the dashboard and the library."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from denpyo.domain.actions import ActionKind, ActionState, Scope
from denpyo.domain.channel_state import ChannelEvent, ChannelState, Mode
from denpyo.domain.limits import check_channel_name
from denpyo.engine.operator._moves import check_note
from denpyo.engine.operator._read import operator_actor
from denpyo.store.actions import NewAction

if TYPE_CHECKING:
    from denpyo.engine.ledger import Ledger


def pause(ledger: Ledger, channel: str, *, note: str | None, by: str | None = None) -> bool:
    """Pause `channel` (every worker stops starting its calls within one poll interval),
    with who and why in its history; False when it was paused already."""
    check_channel_name(channel)
    text = check_note(note, "a pause")
    actor = operator_actor(by)
    log = _logged(ActionKind.PAUSE, channel, actor, text)
    return ledger.store.pause_channel(channel, actor=actor, note=text, log=log)


def resume(ledger: Ledger, channel: str, *, note: str | None, by: str | None = None) -> bool:
    """Resume `channel`, with who and why in its history; False when it was not paused."""
    check_channel_name(channel)
    text = check_note(note, "a resume")
    actor = operator_actor(by)
    log = _logged(ActionKind.RESUME, channel, actor, text)
    return ledger.store.resume_channel(channel, actor=actor, note=text, log=log)


def _logged(kind: ActionKind, channel: str, actor: str, note: str) -> NewAction:
    """A pause's or a resume's entry in the action log, written with it."""
    return NewAction(kind, Scope.CHANNEL, f"channel {channel}", actor, note, ActionState.DONE)


@dataclass(frozen=True, slots=True)
class ChannelView:
    """A channel as the people on call see it: its state (None: never paused, held or
    down: running) and its latest history."""

    channel: str
    state: ChannelState | None
    history: list[ChannelEvent]

    @property
    def mode(self) -> Mode:
        return Mode.RUNNING if self.state is None else self.state.mode

    def describe(self) -> str:
        return "running" if self.state is None else self.state.describe()


def channel_states(ledger: Ledger) -> dict[str, ChannelState]:
    """Every channel that has a state, by name (the others are running)."""
    return {state.channel: state for state in ledger.store.channel_states()}


def channel_view(ledger: Ledger, channel: str, limit: int = 20) -> ChannelView:
    check_channel_name(channel)
    return ChannelView(
        channel, channel_states(ledger).get(channel), ledger.store.channel_history(channel, limit)
    )
