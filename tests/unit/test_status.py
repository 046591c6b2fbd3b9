import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from denpyo import InvalidInput, Status, Submission, TransitionNotAllowed
from denpyo.domain.lease import Lease
from denpyo.domain.moves import Move
from denpyo.domain.status import ALLOWED_MOVES, ErrorKind, check_move

ALLOWED = [
    ("requesting", "synced"),
    ("requesting", "failed"),
    ("requesting", "rejected"),
    ("requesting", "requesting"),
    ("failed", "requesting"),
    ("failed", "synced"),
]


def test_exactly_the_seed_statuses() -> None:
    assert [s.value for s in Status] == ["requesting", "synced", "failed", "rejected"]


@pytest.mark.parametrize(("current", "target"), ALLOWED)
def test_allowed_moves(current: str, target: str) -> None:
    check_move(current, target)


@pytest.mark.parametrize(
    ("current", "target"),
    [(a.value, b.value) for a in Status for b in Status if (a.value, b.value) not in ALLOWED],
)
def test_every_other_move_raises(current: str, target: str) -> None:
    with pytest.raises(TransitionNotAllowed, match=f"from {current} to {target}"):
        check_move(current, target)


def test_allowed_set_matches_spec_table() -> None:
    assert {(a.value, b.value) for a, b in ALLOWED_MOVES} == set(ALLOWED)


def test_move_refuses_a_forbidden_transition_on_construction() -> None:
    with pytest.raises(TransitionNotAllowed):
        Move(1, Status.SYNCED, Status.FAILED, actor="x")
    with pytest.raises(TransitionNotAllowed):
        Move(1, Status.REJECTED, Status.SYNCED, actor="x")
    with pytest.raises(TransitionNotAllowed):
        Move(1, Status.SYNCED, Status.SYNCED, actor="x")


def test_keeping_failed_or_rejected_is_an_annotation_not_a_move() -> None:
    Move(1, Status.FAILED, Status.FAILED, actor="x", resolution="abandoned")
    Move(1, Status.REJECTED, Status.REJECTED, actor="x", resolution="abandoned")


def test_a_move_refuses_the_row_of_another_submission() -> None:
    """The moved row would take that row's payload."""
    other = Submission(id=2, channel="c", key="k", idempotency_key="i", payload={},
                       status=Status.REQUESTING)  # fmt: skip
    with pytest.raises(InvalidInput, match="submission 1 was given submission 2"):
        Move(1, Status.REQUESTING, Status.SYNCED, actor="x", row=other)
    assert Move(2, Status.REQUESTING, Status.SYNCED, actor="x", row=other).row is other


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
