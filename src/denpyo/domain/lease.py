"""A hold on a row as this process sees it: may its call still start?

The database decides who holds a row (`locked_by`, `locked_until` by the
database clock). A process that stalls (a GC pause, a frozen container, a
database it cannot reach to renew) cannot ask the database in the instant
before a call leaves, so it keeps its own deadline by the monotonic clock,
taken *before* the statement that set the lease was sent: the database's lease
cannot end before it. Past that deadline the row may already belong to
another sender, which verifies it and may resend it; the call must not start.

`begin()` and `revoke()` are exclusive: a call that began is never given back
as unstarted, and a row given back never starts (a sync call waits for a pool
thread, and a worker shutting down gives back what has not begun).
"""

from __future__ import annotations

import threading
import time

from denpyo.errors import LeaseExpired

MARGIN = 0.1
"""The share of a lease kept in reserve: a call never starts in its last tenth."""

_lock = threading.Lock()  # begin() runs in pool threads, revoke() on the loop


class Lease:
    """The local deadline of one hold: until when its call may start."""

    __slots__ = ("deadline", "revoked", "seconds", "started")

    def __init__(self, seconds: float, since: float | None = None) -> None:
        self.seconds = seconds
        self.deadline = 0.0
        self.started = False
        self.revoked = False
        self.renewed(time.monotonic() if since is None else since)

    def renewed(self, since: float) -> None:
        """The database extended the lease by a statement sent at `since` (monotonic)."""
        self.deadline = max(self.deadline, since + self.seconds * (1 - MARGIN))

    def left(self) -> float:
        """Seconds in which the call may still start (0 once revoked or expired)."""
        if self.revoked:
            return 0.0
        return max(0.0, self.deadline - time.monotonic())

    def check(self, what: str = "this row") -> None:
        """Raise `LeaseExpired` if the call may no longer start."""
        if self.left() <= 0:
            raise LeaseExpired(
                f"{what}: the lease may have run out (this process stalled, or could not "
                "renew it); the call was not started"
            )

    def begin(self) -> None:
        """Mark the call as started; raise `LeaseExpired` if it may no longer start."""
        with _lock:
            if self.revoked or time.monotonic() >= self.deadline:  # `check`, inline: per call
                self.check()
            self.started = True

    def revoke(self) -> bool:
        """Forbid the call from starting; False if it has started already."""
        with _lock:
            if self.started:
                return False
            self.revoked = True
            return True
