"""A row as read, and this process's hold on it."""

import dataclasses
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from denpyo import LeaseExpired, Status, Submission
from denpyo.domain.lease import Lease
from denpyo.domain.status import ErrorKind

LATER = datetime(2026, 1, 1, tzinfo=UTC)


def row(status: Status = Status.REQUESTING, **fields: Any) -> Submission:
    return Submission(
        **{
            "id": 1,
            "channel": "c",
            "key": "k",
            "idempotency_key": "i",
            "payload": {},
            "status": status,
            **fields,
        }
    )


def test_a_held_row_is_the_same_row_with_the_lease() -> None:
    """`Submission.held` builds its copy field by field, in order: a field added or
    moved must not shift another's value."""
    values: dict[str, Any] = {
        spec.name: f"value {number}"  # each field its own value
        for number, spec in enumerate(dataclasses.fields(Submission))
    }
    values.update(status=Status.FAILED, error_kind=ErrorKind.TRANSIENT, in_doubt=True)
    values.update(created_at=datetime(2026, 1, 1, tzinfo=UTC), lease=None)
    sub = Submission(**values)
    lease = Lease(30.0, 0.0)
    held = sub.held(lease)
    for spec in dataclasses.fields(Submission):
        expected = lease if spec.name == "lease" else getattr(sub, spec.name)
        assert getattr(held, spec.name) is expected, spec.name


def test_a_row_is_in_flight_while_a_sender_holds_a_live_lease() -> None:
    assert row(locked_by="w/1", locked_until=LATER).in_flight
    assert not row(locked_by="w/1", locked_until=LATER, in_doubt=True).in_flight  # run out
    assert not row().in_flight  # waiting for a worker
    assert not row(Status.FAILED, locked_until=LATER).in_flight


def test_a_failed_row_with_no_next_attempt_is_exhausted() -> None:
    assert row(Status.FAILED, error_kind=ErrorKind.TRANSIENT).is_exhausted
    assert not row(Status.FAILED, next_attempt_at=LATER).is_exhausted
    assert not row(Status.SYNCED).is_exhausted


def test_a_row_checks_the_lease_of_this_processs_hold_only() -> None:
    """A row read without a hold has nothing to check; a held one raises once its
    call may no longer start."""
    assert row().lease_left() is None
    row().check_lease()
    live = row().held(Lease(60.0))
    assert live.lease_left() is not None and live.lease_left() > 0  # type: ignore[operator]
    live.check_lease()
    ended = row().held(Lease(60.0, since=time.monotonic() - 3600))  # its deadline long past
    assert ended.lease_left() == 0
    with pytest.raises(LeaseExpired, match="c:k: the lease may have run out"):
        ended.check_lease()
