"""A submission (one intended call) and an event (one line of its history)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from denpyo.domain.status import ErrorKind, Status


@dataclass(frozen=True, slots=True)
class Submission:
    """One row of `denpyo_submissions`, as read at one instant."""

    id: int
    channel: str
    key: str
    idempotency_key: str
    payload: Any
    status: Status
    attempts: int = 0
    next_attempt_at: datetime | None = None
    locked_by: str | None = None
    locked_until: datetime | None = None
    remote_id: str | None = None
    last_error: str | None = None
    error_kind: ErrorKind | None = None
    ordering_key: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    synced_at: datetime | None = None
    resolution: str | None = None
    supersedes: int | None = None
    in_doubt: bool = False
    """The call may or may not have arrived (SPEC §3), judged by the database
    clock when the row was read: `requesting` with its lease run out, or
    `failed` with an ambiguous error."""

    @property
    def in_flight(self) -> bool:
        """A sender held a live lease on the row when it was read."""
        return (
            self.status is Status.REQUESTING and self.locked_until is not None and not self.in_doubt
        )

    @property
    def is_exhausted(self) -> bool:
        """`failed` with no next attempt: only a person moves it now."""
        return self.status is Status.FAILED and self.next_attempt_at is None


@dataclass(frozen=True, slots=True)
class Event:
    """One row of `denpyo_events`: the creation, an attempt, a settle, a verify, a note."""

    id: int
    submission_id: int
    at: datetime
    kind: str
    from_status: Status | None
    to_status: Status | None
    attempt: int
    actor: str
    detail: str | None = None
    duration_ms: int | None = None
