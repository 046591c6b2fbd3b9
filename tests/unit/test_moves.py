"""The changes a store applies to a row: each `Move` constructor, a `Settle`, and the
checks both make when they are built (no database: what the store does with them is
in tests/integration/store/)."""

from __future__ import annotations

from typing import Any

import pytest

from denpyo import InvalidInput, Status, Submission, TransitionNotAllowed
from denpyo.domain.moves import Move, Settle, event_attempt
from denpyo.domain.policy import AttemptDecision
from denpyo.domain.status import ErrorKind


def row(status: Status = Status.REQUESTING, **fields: Any) -> Submission:
    return Submission(**{"id": 7, "channel": "c", "key": "k", "idempotency_key": "i",
                         "payload": {}, "status": status, **fields})  # fmt: skip


HELD = row(attempts=1, locked_by="w/1")
FAILED = row(Status.FAILED, attempts=2, error_kind=ErrorKind.AMBIGUOUS, last_error="timeout")


def effect(move: Move) -> tuple[Any, ...]:
    """What a move asks of the store, but for its texts."""
    return (move.submission_id, move.from_status, move.to_status, move.holder, move.event,
            move.new_holder, move.lease, move.attempt_delta, move.retry_in,
            move.keep_error)  # fmt: skip


# -- the engine's moves -----------------------------------------------------------------


def test_a_claim_to_send_starts_an_attempt_and_a_claim_to_verify_keeps_the_status() -> None:
    """Neither counts an attempt: a claimed row's call may never start."""
    send = Move.claim(7, Status.FAILED, "w/2", 30.0, verify=False)
    assert effect(send) == (7, Status.FAILED, Status.REQUESTING, None, "attempt",
                            "w/2", 30.0, 0, None, True)  # fmt: skip
    verify = Move.claim(7, Status.FAILED, "w/2", 30.0, verify=True)
    assert effect(verify) == (7, Status.FAILED, Status.FAILED, None, None,
                              "w/2", 30.0, 0, None, True)  # fmt: skip
    assert send.actor == verify.actor == "w/2"


def test_take_to_verify_holds_an_in_doubt_row_without_an_attempt() -> None:
    doubt = row(attempts=1, locked_by="gone/1", in_doubt=True)
    move = Move.take_to_verify(doubt, "app/2", 60.0)
    assert effect(move) == (7, Status.REQUESTING, Status.REQUESTING, None, None,
                            "app/2", 60.0, 0, None, True)  # fmt: skip
    assert move.row is doubt


@pytest.mark.parametrize(("sub", "holder"), [(FAILED, None), (HELD, "w/1")])
def test_start_attempt_holds_the_row_anew_for_its_next_attempt(
    sub: Submission, holder: str | None
) -> None:
    """From a row nobody holds (a failed row resubmitted) or from the holder's own
    (a row held to verify, resent): always a fresh holder; counted once its call
    started, by its settle."""
    move = Move.start_attempt(sub, "app/3", 60.0, "resubmitted", holder)
    assert effect(move) == (7, sub.status, Status.REQUESTING, holder, "attempt",
                            "app/3", 60.0, 0, None, True)  # fmt: skip
    assert (move.actor, move.detail, move.row) == ("app/3", "resubmitted", sub)


def test_verified_delivered_syncs_the_row_and_names_the_remote_id_found() -> None:
    """A `requesting` row's call, cut short before its settle, is counted now that it
    is found to have arrived; a failed row's was counted by its settle."""
    move = Move.verified_delivered(HELD, "app", "r-9", "verify: delivered")
    assert effect(move) == (7, Status.REQUESTING, Status.SYNCED, "w/1", "verify",
                            None, None, 1, None, False)  # fmt: skip
    failed = Move.verified_delivered(row(Status.FAILED, attempts=1, locked_by="w/1"),
                                     "app", "r-9", "verify: delivered")  # fmt: skip
    assert failed.attempt_delta == 0
    assert (move.remote_id, move.detail) == ("r-9", "verify: delivered, remote id r-9")
    unnamed = Move.verified_delivered(HELD, "app", None, "verify: delivered")
    assert (unnamed.remote_id, unnamed.detail) == (None, "verify: delivered")


def test_verified_given_up_fails_the_row_with_no_next_step() -> None:
    move = Move.verified_given_up(HELD, "app", ErrorKind.TRANSIENT, "attempts exhausted")
    assert effect(move) == (7, Status.REQUESTING, Status.FAILED, "w/1", "verify",
                            None, None, 0, None, False)  # fmt: skip
    assert (move.error_kind, move.last_error, move.detail) == (
        ErrorKind.TRANSIENT, "attempts exhausted", "attempts exhausted",
    )  # fmt: skip


def test_still_in_doubt_keeps_a_requesting_row_recognisable_by_an_expired_lease() -> None:
    requesting = Move.still_in_doubt(HELD, "app", 8.0, "verify: unknown", again=False)
    assert effect(requesting) == (7, Status.REQUESTING, Status.REQUESTING, "w/1", "verify",
                                  None, 0, 0, 8.0, True)  # fmt: skip
    failed = Move.still_in_doubt(row(Status.FAILED, locked_by="w/1"), "app", None, "a person",
                                 again=False)  # fmt: skip
    assert (failed.lease, failed.retry_in, failed.to_status) == (None, None, Status.FAILED)


def test_still_in_doubt_again_writes_no_second_history_line() -> None:
    again = Move.still_in_doubt(HELD, "app", 16.0, "verify: unknown", again=True)
    assert effect(again) == (7, Status.REQUESTING, Status.REQUESTING, "w/1", None,
                             None, 0, 0, 16.0, True)  # fmt: skip


def test_release_and_release_to_doubt_count_nothing() -> None:
    """A row given back unsent had no attempt counted: none to undo."""
    release = Move.release(7, "w/1", "not sent: lease run out")
    assert effect(release) == (7, Status.REQUESTING, Status.REQUESTING, "w/1", "released",
                               None, None, 0, 0, True)  # fmt: skip
    assert release.detail == "not sent: lease run out"
    to_doubt = Move.release_to_doubt(7, Status.REQUESTING, "w/1")
    assert effect(to_doubt) == (7, Status.REQUESTING, Status.REQUESTING, "w/1", None,
                                None, 0, 0, 0, True)  # fmt: skip
    assert Move.release_to_doubt(7, Status.FAILED, "w/1").lease is None


# -- a person's moves -------------------------------------------------------------------


def test_retry_makes_a_failed_row_due_now() -> None:
    move = Move.retry(FAILED, "operator:ann", "try again")
    assert effect(move) == (7, Status.FAILED, Status.FAILED, None, "retry",
                            None, None, 0, 0, True)  # fmt: skip


def test_forced_retry_sends_an_in_doubt_row_again_without_verifying_it() -> None:
    """A failed row becomes transient, its error kept as text; a requesting one keeps
    its error and loses its lock."""
    failed = Move.forced_retry(FAILED, "operator:ann", "checked: not there")
    assert effect(failed) == (7, Status.FAILED, Status.FAILED, None, "retry",
                              None, None, 0, 0, False)  # fmt: skip
    assert (failed.error_kind, failed.last_error) == (ErrorKind.TRANSIENT, "timeout")
    requesting = Move.forced_retry(row(in_doubt=True), "operator:ann", "checked: not there")
    assert effect(requesting) == (7, Status.REQUESTING, Status.REQUESTING, None, "retry",
                                  None, None, 0, 0, True)  # fmt: skip


def test_give_up_keeps_the_status_unless_it_ends_a_requesting_row_as_failed() -> None:
    kept = Move.give_up(FAILED, "operator:ann", "abandon", "abandoned: not ours", "note")
    assert effect(kept) == (7, Status.FAILED, Status.FAILED, None, "abandon",
                            None, None, 0, None, True)  # fmt: skip
    assert (kept.resolution, kept.detail) == ("abandoned: not ours", "note")
    ended = Move.give_up(row(in_doubt=True), "operator:ann", "abandon", "abandoned", "note",
                         failure=(ErrorKind.AMBIGUOUS, "never confirmed"))  # fmt: skip
    assert (ended.to_status, ended.error_kind, ended.last_error, ended.keep_error) == (
        Status.FAILED, ErrorKind.AMBIGUOUS, "never confirmed", False,
    )  # fmt: skip


def test_mark_synced_records_the_remote_id_a_person_found() -> None:
    move = Move.mark_synced(FAILED, "operator:ann", "r-1", "found", "seen in their console")
    assert effect(move) == (7, Status.FAILED, Status.SYNCED, None, "mark_synced",
                            None, None, 0, None, False)  # fmt: skip
    assert (move.remote_id, move.resolution) == ("r-1", "found")
    assert move.detail == "remote id r-1: seen in their console"


# -- the checks of a move ---------------------------------------------------------------


def test_move_refuses_a_forbidden_transition_on_construction() -> None:
    with pytest.raises(TransitionNotAllowed):
        Move(1, Status.SYNCED, Status.FAILED, actor="x")
    with pytest.raises(TransitionNotAllowed):
        Move(1, Status.REJECTED, Status.SYNCED, actor="x")
    with pytest.raises(TransitionNotAllowed):
        Move(1, Status.SYNCED, Status.SYNCED, actor="x")
    with pytest.raises(TransitionNotAllowed, match="from synced to failed"):
        Move.give_up(row(Status.SYNCED), "x", "abandon", "r", "n", (ErrorKind.TRANSIENT, "e"))


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


def test_text_no_database_can_store_is_escaped_and_other_text_kept_as_given() -> None:
    """An exception's message, a remote id or a verdict holding a NUL or a lone
    surrogate must not make the store refuse the move (its outcome would be lost)."""
    move = Move(1, Status.REQUESTING, Status.FAILED, "x", remote_id="r\x00", last_error="e\ud800",
                resolution="\x00\udcff", detail="d\x00")  # fmt: skip
    assert (move.remote_id, move.last_error, move.resolution, move.detail) == (
        "r\\x00", "e\\ud800", "\\x00\\udcff", "d\\x00",
    )  # fmt: skip
    text = "délai dépassé: " + "x" * 10_000  # long, and kept whole: the same object
    assert Move(1, Status.REQUESTING, Status.FAILED, "x", last_error=text).last_error is text


# -- Settle -----------------------------------------------------------------------------


def test_settle_of_records_the_attempt_as_the_policy_decided_it() -> None:
    decided = AttemptDecision(Status.FAILED, ErrorKind.TRANSIENT, "HTTP 503", retry_in=4.0)
    settle = Settle.of(HELD, "app", decided, 12)
    assert settle == Settle(HELD, "app", Status.FAILED, retry_in=4.0,
                            error_kind=ErrorKind.TRANSIENT, last_error="HTTP 503",
                            duration_ms=12)  # fmt: skip
    assert (settle.submission_id, settle.holder, settle.detail) == (7, "w/1", "HTTP 503")
    assert (Settle.event, Settle.from_status) == ("settle", Status.REQUESTING)
    synced = Settle.of(HELD, "app", AttemptDecision(Status.SYNCED, remote_id="r-1"), None)
    assert (synced.detail, synced.remote_id, synced.duration_ms) == ("r-1", "r-1", None)


def test_a_settle_ends_an_attempt_held_by_its_holder() -> None:
    with pytest.raises(InvalidInput, match="an attempt ends synced, failed or rejected"):
        Settle(HELD, "app", Status.REQUESTING)
    with pytest.raises(InvalidInput, match="submission 7: only its holder settles"):
        Settle(row(), "app", Status.SYNCED)
    settle = Settle(HELD, "app", Status.SYNCED, remote_id="msg_\ud800\x00", last_error="ok")
    assert (settle.remote_id, settle.last_error) == ("msg_\\ud800\\x00", "ok")


@pytest.mark.parametrize(
    "decided",
    [
        AttemptDecision(Status.SYNCED, remote_id="r-1"),
        AttemptDecision(Status.FAILED, ErrorKind.TRANSIENT, "HTTP 503", retry_in=30),
        AttemptDecision(Status.REJECTED, ErrorKind.REJECTED, "HTTP 422"),
        AttemptDecision(Status.FAILED, ErrorKind.AMBIGUOUS, "read timed out"),
    ],
    ids=["synced", "transient", "rejected", "ambiguous"],
)
def test_a_settle_is_the_same_change_as_its_general_move(decided: AttemptDecision) -> None:
    """What the store's settle statements are checked against: it counts the call."""
    settle = Settle.of(HELD, "app", decided, 12)
    move = settle.as_move()
    assert move == Move(7, Status.REQUESTING, decided.status, "app", holder="w/1",
                        event="settle", attempt_delta=1, retry_in=decided.retry_in,
                        remote_id=decided.remote_id,
                        error_kind=decided.error_kind, last_error=decided.last_error,
                        detail=decided.last_error or decided.remote_id,
                        duration_ms=12)  # fmt: skip
    assert move.row is HELD and not move.keep_error and move.new_holder is None


def test_an_attempt_event_names_the_attempt_its_call_takes_if_it_starts() -> None:
    """A hold to send (an `attempt` event) counts nothing yet: it names the number its
    call takes; every other event, the row's count after it."""
    assert event_attempt("attempt", 0) == 1
    assert (event_attempt("settle", 1), event_attempt("verify", 2)) == (1, 2)
