"""An alert: why a person should look, and at which row."""

from __future__ import annotations

from dataclasses import dataclass

from denpyo.domain.submission import Submission
from denpyo.domain.text import visible


@dataclass(frozen=True, slots=True)
class Alert:
    """Why a person should look at a submission now.

    The policy decides an alert without its row (`submission` None); the engine
    attaches the row as it stands after the move is committed (`about`). An alert
    about the worker itself (`renewal_failing`) has no row.
    """

    reason: str  # rejected, exhausted, in_doubt, payload_unreadable, provider_reported;
    # renewal_failing, durability_at_risk: no row
    message: str
    submission: Submission | None = None

    def about(self, sub: Submission) -> Alert:
        """The same alert with its row, as it stands once the move is committed (the
        policy decides the alert without the row)."""
        return Alert(self.reason, self.message, sub)

    def __str__(self) -> str:
        """One line for a log or a pager, control characters escaped: the message may
        quote a provider's error, and the key is the caller's."""
        sub = self.submission
        if sub is None:
            return visible(f"[{self.reason}] {self.message}")
        return visible(f"[{self.reason}] {sub.channel}:{sub.key} (id {sub.id}): {self.message}")
