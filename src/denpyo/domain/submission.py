"""A submission (one intended call) and an event (one line of its history)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from denpyo.domain import rules
from denpyo.domain.lease import Lease
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
    """The call may or may not have arrived, judged by the database clock when the
    row was read: `requesting` with its lease run out, or `failed` with an
    ambiguous error (`rules.in_doubt`)."""
    lease: Lease | None = field(default=None, compare=False, repr=False)
    """This process's hold on the row while it sends it (None when it holds none)."""
    removed_at: datetime | None = None
    """When the row left the table (pruned, or archived and deleted). Such a
    Submission is what denpyo_keys remembers of it: its id, key, idempotency key,
    status, attempts, error kind, remote id, resolution and times as they were; no
    payload (None), no last error, no history (in the archive, if it was archived)."""
    archived_to: str | None = None
    """Where the row was archived before it was deleted (None: live, or pruned)."""
    superseded_by: int | None = None
    """A removed row's resend, remembered (a live row's is found by its `supersedes`)."""
    traceparent: str | None = None
    """The W3C trace context active when the row was written (None: there was none):
    the worker's spans for the row link to it."""
    tracestate: str | None = None
    forgotten_at: datetime | None = None
    """When a person erased the row's payload (`forget`): the payload is None, the
    slip stays, and the row is never sent again."""

    def held(self, lease: Lease) -> Submission:
        """This row with this process's hold on it. Built field by field in order: on
        the worker's hot path, `dataclasses.replace` (by name) costs twice as much."""
        return Submission(
            self.id,
            self.channel,
            self.key,
            self.idempotency_key,
            self.payload,
            self.status,
            self.attempts,
            self.next_attempt_at,
            self.locked_by,
            self.locked_until,
            self.remote_id,
            self.last_error,
            self.error_kind,
            self.ordering_key,
            self.created_at,
            self.updated_at,
            self.synced_at,
            self.resolution,
            self.supersedes,
            self.in_doubt,
            lease,
            self.removed_at,
            self.archived_to,
            self.superseded_by,
            self.traceparent,
            self.tracestate,
            self.forgotten_at,
        )

    def lease_left(self) -> float | None:
        """Seconds in which this process may still start the row's call, by its own
        monotonic clock (None: it holds no lease on the row). A channel that does slow
        work before its request leaves can check it, or call `check_lease()`."""
        return None if self.lease is None else self.lease.left()

    def check_lease(self) -> None:
        """Raise `LeaseExpired` if the call may no longer start: the row may belong to
        another sender by now. Raised before the request leaves, it is not a failure:
        the row is given back unsent."""
        if self.lease is not None:
            self.lease.check(f"{self.channel}:{self.key}")

    @property
    def in_flight(self) -> bool:
        """A sender held a live lease on the row when it was read (`rules.in_flight`)."""
        return rules.in_flight(self)

    @property
    def is_exhausted(self) -> bool:
        """`failed` with no next attempt and not in doubt (`rules.is_exhausted`)."""
        return rules.is_exhausted(self)

    @property
    def needs_person(self) -> bool:
        """Only a person moves it on (`rules.needs_person`)."""
        return rules.needs_person(self)


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
