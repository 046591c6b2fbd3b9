"""What a reconciler reads of a row in doubt from its history (domain/doubt.py)."""

from datetime import UTC, datetime, timedelta

from denpyo import Status, Submission
from denpyo.domain.doubt import DoubtHistory
from denpyo.domain.submission import Event

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
REQ, FAILED = Status.REQUESTING, Status.FAILED


def row(status: Status = REQ, attempts: int = 0) -> Submission:
    return Submission(1, "c", "k", "i", {}, status, attempts)


def event(
    kind: str, ago: float, moves: tuple[Status | None, Status] = (REQ, REQ), attempt: int = 0
) -> Event:
    return Event(0, 1, NOW - timedelta(seconds=ago), kind, moves[0], moves[1], attempt, "w/1")


def test_holds_not_given_back_are_the_tries_and_the_first_starts_the_window() -> None:
    events = [
        event("created", 500, (None, REQ)),
        event("attempt", 400, attempt=1),
        event("released", 390),  # given back unsent: not a try
        event("attempt", 300, attempt=1),  # its sender died: a try, not an attempt
        event("attempt", 200, attempt=1),
    ]
    history = DoubtHistory.of(row(), events, NOW)
    assert (history.tries, history.first_attempt_at) == (2, NOW - timedelta(seconds=400))
    assert (history.in_doubt_since, history.in_doubt_for) == (None, None)
    # never fewer than the attempts counted (a history written before them)
    assert DoubtHistory.of(row(attempts=3), events, NOW).tries == 3
    assert DoubtHistory.of(row(), [], NOW).first_attempt_at is None


def test_kept_in_doubt_since_the_verify_line_that_ends_its_history() -> None:
    settled = event("settle", 300, (REQ, FAILED), attempt=1)
    kept = event("verify", 100, (FAILED, FAILED), attempt=1)
    history = DoubtHistory.of(row(FAILED, 1), [settled, kept], NOW)
    assert (history.in_doubt_since, history.in_doubt_for) == (kept.at, 100.0)
    # several such lines (written before one per state): since the first of the run
    older = event("verify", 250, (FAILED, FAILED), attempt=1)
    assert DoubtHistory.of(row(FAILED, 1), [settled, older, kept], NOW).in_doubt_for == 250.0
    # anything after it, or a line of another state, is a new state
    for after in (event("retry", 50, (FAILED, FAILED), attempt=1),):
        assert DoubtHistory.of(row(FAILED, 1), [settled, kept, after], NOW).in_doubt_since is None
    assert DoubtHistory.of(row(FAILED, 2), [settled, kept], NOW).in_doubt_since is None
    assert DoubtHistory.of(row(REQ, 1), [settled, kept], NOW).in_doubt_since is None
