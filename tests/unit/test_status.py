import pytest

from denpyo import Status, TransitionNotAllowed
from denpyo.domain.status import ALLOWED_MOVES, check_move

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
