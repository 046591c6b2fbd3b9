"""Calls told to whoever watches them (metrics, say): one hook, not a dependency.

The engine tells each finished call's channel, outcome and duration to the
callbacks registered with `Ledger.on_call`. A callback that raises is logged and
skipped: watching must never change what the engine records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from denpyo.domain.policy import OutcomeKind

log = logging.getLogger("denpyo.engine")

OUTCOMES = {
    OutcomeKind.SYNCED: "synced",
    OutcomeKind.TRANSIENT: "failed",
    OutcomeKind.AMBIGUOUS: "ambiguous",
    OutcomeKind.REJECTED: "rejected",
}
"""How a call ended, as the metrics name it: `failed` is a transient failure (the
provider did not act), `ambiguous` one that may have arrived."""


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One call the engine made: its channel, how it ended, and how long it took."""

    channel: str
    outcome: str  # synced, failed, ambiguous, rejected
    seconds: float


CallHandler = Callable[[CallRecord], None]


class CallObservers:
    """The callbacks told of every call this process makes."""

    def __init__(self) -> None:
        self.handlers: list[CallHandler] = []

    def add(self, handler: CallHandler) -> CallHandler:
        self.handlers.append(handler)
        return handler

    def called(self, channel: str, outcome: OutcomeKind, duration_ms: int) -> None:
        if not self.handlers:
            return
        record = CallRecord(channel, OUTCOMES[outcome], duration_ms / 1000)
        for handler in self.handlers:
            try:
                handler(record)
            except Exception:
                log.exception("call observer %r failed", handler)
