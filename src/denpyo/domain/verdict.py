"""What a channel's `verify` answers about an in-doubt call."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Delivered:
    """The provider has the call: the row becomes `synced` with this id."""

    remote_id: str | None = None


@dataclass(frozen=True, slots=True)
class NotDelivered:
    """The provider never received the call: it may be sent again under the same key."""


@dataclass(frozen=True, slots=True)
class Unknown:
    """The provider cannot tell now: the row stays in doubt, an alert is raised."""

    why: str = "unknown"


Verdict = Delivered | NotDelivered | Unknown
"""What a `verify` returns: one of the three answers above. A verify that raises,
or returns anything else, counts as `Unknown`: a row is never resent on a guess."""
