"""The row rules without a database: what a row is, and what a person may do with it
(the table of docs/guide/statuses.md), with the refusals the operator raises."""

from __future__ import annotations

import inspect
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from denpyo import (
    ConfigurationError,
    InvalidInput,
    Ledger,
    Status,
    Submission,
    TransitionNotAllowed,
)
from denpyo.domain import rules
from denpyo.domain.actions import ROW_KINDS
from denpyo.domain.policy import RetryPolicy
from denpyo.domain.rules import Permit, allowed_actions
from denpyo.domain.sealed import SealedPayload
from denpyo.domain.settings import (
    DEFAULT_BACKOFF,
    DEFAULT_CONCURRENCY,
    DEFAULT_GRACE,
    DEFAULT_LEASE,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_POLL_INTERVAL,
    WorkerSettings,
)
from denpyo.domain.status import ErrorKind
from denpyo.engine.channel import ChannelSpec
from denpyo.engine.operator import serve
from denpyo.engine.worker import Worker

LATER = datetime(2026, 1, 1, tzinfo=UTC)
F, R = Status.FAILED, Status.REQUESTING
AMBIGUOUS, TRANSIENT = ErrorKind.AMBIGUOUS, ErrorKind.TRANSIENT


def row(status: Status = R, **fields: Any) -> Submission:
    return Submission(
        **{
            "id": 7,
            "channel": "c",
            "key": "k",
            "idempotency_key": "i",
            "payload": {},
            "status": status,
            **fields,
        }
    )


ROWS = {
    "never attempted": row(next_attempt_at=LATER),
    "in flight": row(attempts=1, locked_by="w/1", locked_until=LATER),
    "requesting in doubt": row(attempts=1, locked_until=LATER, in_doubt=True),
    "failed, due": row(F, attempts=1, error_kind=TRANSIENT, next_attempt_at=LATER),
    "failed, exhausted": row(F, attempts=8, error_kind=TRANSIENT),
    "failed, ambiguous": row(
        F, attempts=1, error_kind=AMBIGUOUS, in_doubt=True, next_attempt_at=LATER
    ),
    "failed, ambiguous, no next step": row(F, attempts=1, error_kind=AMBIGUOUS, in_doubt=True),
    "rejected": row(Status.REJECTED, attempts=1, error_kind=ErrorKind.REJECTED),
    "synced": row(Status.SYNCED, attempts=1, remote_id="r-1"),
    "abandoned": row(F, attempts=8, error_kind=TRANSIENT, resolution="abandoned by op"),
    "resent": row(Status.REJECTED, attempts=1, resolution="resent as #8 by op"),
}
# in flight, in doubt, exhausted, needs a person; then retry, abandon, resend, mark synced
# ("force": only with force_in_doubt and a note; "-": refused)
TABLE = {
    "never attempted": ((0, 0, 0, 0), ("-", "yes", "yes", "-")),
    "in flight": ((1, 0, 0, 0), ("-", "-", "-", "-")),
    "requesting in doubt": ((0, 1, 0, 1), ("force", "yes", "force", "yes")),
    "failed, due": ((0, 0, 0, 0), ("yes", "yes", "yes", "yes")),
    "failed, exhausted": ((0, 0, 1, 1), ("yes", "yes", "yes", "yes")),
    "failed, ambiguous": ((0, 1, 0, 1), ("force", "yes", "force", "yes")),
    "failed, ambiguous, no next step": ((0, 1, 0, 1), ("force", "yes", "force", "yes")),
    "rejected": ((0, 0, 0, 1), ("-", "yes", "yes", "-")),
    "synced": ((0, 0, 0, 0), ("-", "-", "-", "-")),
    "abandoned": ((0, 0, 1, 0), ("-", "-", "yes", "yes")),
    "resent": ((0, 0, 0, 0), ("-", "-", "-", "-")),
}
SHOWN = {Permit.ALLOWED: "yes", Permit.FORCE: "force", Permit.REFUSED: "-"}


@pytest.mark.parametrize("name", list(ROWS))
def test_each_row_is_judged_as_the_table_says(name: str) -> None:
    sub = ROWS[name]
    newer = row(id=8, key="k~resend1") if name == "resent" else None
    flags = (rules.in_flight(sub), rules.in_doubt(sub), rules.is_exhausted(sub))
    assert (*flags, rules.needs_person(sub)) == tuple(map(bool, TABLE[name][0]))
    assert (sub.in_flight, sub.is_exhausted) == (flags[0], flags[2])
    answers = allowed_actions(sub, superseded_by=newer)
    assert tuple(SHOWN[a.permit] for a in answers) == TABLE[name][1]
    assert [a.action for a in answers] == list(ROW_KINDS)
    assert [a.action for a in answers.offered] == [a.action for a in answers if a.offered]
    for answer in answers:
        assert (answer.reason == "") is (answer.permit is Permit.ALLOWED), answer


def test_refusals_raise_what_the_operator_raises() -> None:
    synced, never = ROWS["synced"], ROWS["never attempted"]
    with pytest.raises(TransitionNotAllowed, match=r"#7 \(c:k\) is synced: final"):
        rules.may_retry(synced).check()
    with pytest.raises(InvalidInput, match="has not been sent yet; a worker will send it"):
        rules.may_retry(never).check(force=True)
    doubt = rules.may_resend(ROWS["failed, ambiguous"])
    with pytest.raises(InvalidInput, match=r"could double it.*resend with --force-in-doubt"):
        doubt.check()
    doubt.check(force=True)
    busy = rules.may_abandon(ROWS["in flight"])
    assert busy.reason == (
        "#7 (c:k) is being sent right now by w/1 (lease until 2026-01-01 00:00:00 UTC); "
        "wait for it to settle"
    )
    assert not busy.forbidden and rules.may_mark_synced(ROWS["rejected"]).forbidden


def test_a_payload_no_key_here_opens_is_not_resent() -> None:
    """The rule says it, so `denpyo show` and the dashboard offer no resend: it would
    send the placeholder. Abandoning and marking synced stay open."""
    sealed = SealedPayload("k1", "v1.k1.abc")
    for name in ("rejected", "failed, exhausted"):
        actions = allowed_actions(replace(ROWS[name], payload=sealed))
        assert actions.resend.permit is Permit.REFUSED
        assert "cannot send this payload again" in actions.resend.reason
        assert "key k1, which is not configured here" in actions.resend.reason
        assert actions.abandon.offered
        with pytest.raises(InvalidInput, match="cannot send this payload again"):
            actions.resend.check(force=True)


def test_when_nothing_is_offered_the_rule_says_why() -> None:
    """The dashboard shows `RowActions.reason`, never words of its own."""
    assert allowed_actions(ROWS["in flight"]).reason.endswith("wait for it to settle")
    assert "is synced: final" in allowed_actions(ROWS["synced"]).reason
    assert "resolved by a person" in allowed_actions(ROWS["abandoned"]).reason


def test_exhausted_is_never_in_doubt() -> None:
    """One meaning everywhere: the SQL counts an ambiguous failure with no next step
    in doubt, not exhausted, and so does `Submission.is_exhausted`."""
    held = ROWS["failed, ambiguous, no next step"]
    assert held.next_attempt_at is None and not held.is_exhausted and rules.needs_person(held)


def test_worker_settings_are_checked_once_with_their_defaults() -> None:
    assert WorkerSettings() == WorkerSettings(
        DEFAULT_CONCURRENCY, DEFAULT_POLL_INTERVAL, DEFAULT_GRACE
    )
    for wrong, said in (
        ({"concurrency": 0}, "concurrency must be at least 1"),
        ({"poll_interval": 0.0}, "poll_interval must be positive seconds"),
        ({"poll_interval": float("nan")}, "poll_interval must be positive seconds"),
        ({"grace": -1.0}, "grace must not be negative"),
    ):
        with pytest.raises(ConfigurationError, match=said):
            WorkerSettings(**wrong)
    for fn in (Worker.__init__, serve):
        defaults = {p.name: p.default for p in inspect.signature(fn).parameters.values()}
        assert (defaults["concurrency"], defaults["poll_interval"], defaults["grace"]) == (
            DEFAULT_CONCURRENCY,
            DEFAULT_POLL_INTERVAL,
            DEFAULT_GRACE,
        ), fn


def test_channel_defaults_are_written_once() -> None:
    spec = ChannelSpec("c", send=lambda sub: None)
    registered = inspect.signature(Ledger.channel).parameters
    assert spec.max_attempts == RetryPolicy().max_attempts == DEFAULT_MAX_ATTEMPTS
    assert registered["max_attempts"].default == DEFAULT_MAX_ATTEMPTS
    assert spec.lease == registered["lease"].default == DEFAULT_LEASE
    assert spec.backoff is RetryPolicy().backoff is DEFAULT_BACKOFF
