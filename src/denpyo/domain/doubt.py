"""What a reconciler reads of a row in doubt from its history: pure, no I/O.

A verify that cannot tell leaves the row in doubt, to be asked again. Its history
says how long that has lasted and whether it was said already, so that the next
question waits longer (`Backoff.delay_after`) and a row left in doubt in one state
gets one history line and one alert, however often it is asked; and how many holds
may have sent it, which bounds a row whose sender keeps dying before its settle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from denpyo.domain.submission import Event, Submission


@dataclass(frozen=True, slots=True)
class DoubtHistory:
    """A row in doubt as its history tells it, by the database clock (`now`).

    - `tries`: holds taken to send the row and not given back (`attempt` events less
      `released` ones), at least its `attempts`: each may have started its call,
      counted or not (a sender that died before its settle leaves no trace of
      whether it had). What bounds a row whose sender keeps dying: its `attempts`,
      the calls known to have started, would not grow.
    - `first_attempt_at`: when the first of those holds began, the earliest the
      provider may have seen the key (None: never held to be sent).
    - `in_doubt_since`: since when a reconciler has kept the row in doubt in its present
      state, with one `verify` line that kept its status and attempt count and
      nothing after it (None: not yet).
    """

    tries: int
    first_attempt_at: datetime | None
    in_doubt_since: datetime | None
    now: datetime

    @classmethod
    def of(cls, sub: Submission, events: Sequence[Event], now: datetime) -> DoubtHistory:
        """From the row as read and its events, oldest first."""
        holds = [event.at for event in events if event.kind == "attempt"]
        released = sum(1 for event in events if event.kind == "released")
        in_doubt_since = None
        for event in reversed(events):
            kept = event.from_status is sub.status and event.to_status is sub.status
            if event.kind != "verify" or not kept or event.attempt != sub.attempts:
                break
            in_doubt_since = event.at  # the earliest of a run of them (older histories)
        return cls(
            max(len(holds) - released, sub.attempts), min(holds, default=None), in_doubt_since, now
        )

    @property
    def in_doubt_for(self) -> float | None:
        """Seconds the row has been kept in doubt in its present state (None: it has
        not been yet)."""
        if self.in_doubt_since is None:
            return None
        return max((self.now - self.in_doubt_since).total_seconds(), 0.0)
