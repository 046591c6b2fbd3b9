from datetime import UTC, datetime, timedelta

from denpyo import Backoff, Delivered, ErrorKind, NotDelivered, Rejected, Status, Transient, Unknown
from denpyo.domain.policy import (
    Next,
    Outcome,
    OutcomeKind,
    RetryPolicy,
    classify_exception,
    decide_attempt,
    decide_in_doubt,
    resend_in_window,
    window_closes_at,
)

NO_JITTER = Backoff(initial=2.0, maximum=100.0, jitter=0.0)


def test_classification_of_exceptions() -> None:
    assert classify_exception(Rejected("no such address")).kind is OutcomeKind.REJECTED
    transient = classify_exception(Transient("HTTP 503", retry_after=7))
    assert transient.kind is OutcomeKind.TRANSIENT and transient.retry_after == 7
    for exc in (TimeoutError(), ConnectionResetError("reset"), KeyError("bug")):
        outcome = classify_exception(exc)
        assert outcome.kind is OutcomeKind.AMBIGUOUS
        assert outcome.error  # the text is kept, never empty
    assert classify_exception(TimeoutError()).error == "TimeoutError"


def policy(**kw: object) -> RetryPolicy:
    return RetryPolicy(**{"max_attempts": 3, "backoff": NO_JITTER, **kw})  # type: ignore[arg-type]


def test_settle_synced_and_rejected() -> None:
    done = decide_attempt(1, Outcome(OutcomeKind.SYNCED, remote_id="r"), policy())
    assert (done.status, done.remote_id, done.alert) == (Status.SYNCED, "r", None)
    refused = decide_attempt(1, Outcome(OutcomeKind.REJECTED, error="bad"), policy())
    assert refused.status is Status.REJECTED and refused.error_kind is ErrorKind.REJECTED
    assert refused.alert is not None and refused.alert.reason == "rejected"
    assert refused.retry_in is None


def test_settle_transient_retries_then_exhausts() -> None:
    first = decide_attempt(1, Outcome(OutcomeKind.TRANSIENT, error="503"), policy())
    assert (first.status, first.retry_in, first.alert) == (Status.FAILED, 2.0, None)
    last = decide_attempt(3, Outcome(OutcomeKind.TRANSIENT, error="503"), policy())
    assert last.retry_in is None and last.alert is not None and last.alert.reason == "exhausted"


def test_settle_ambiguous_depends_on_verify_and_idempotency() -> None:
    timeout = Outcome(OutcomeKind.AMBIGUOUS, error="TimeoutError")
    verified = decide_attempt(1, timeout, policy(can_verify=True))
    assert verified.error_kind is ErrorKind.AMBIGUOUS and verified.retry_in == 2.0
    assert verified.alert is None
    # still verified after the last attempt: verify may find it arrived
    assert decide_attempt(3, timeout, policy(can_verify=True)).retry_in == 8.0
    assert decide_attempt(1, timeout, policy(idempotent=True)).retry_in == 2.0
    exhausted = decide_attempt(3, timeout, policy(idempotent=True))
    assert exhausted.retry_in is None and exhausted.alert and exhausted.alert.reason == "exhausted"
    held = decide_attempt(1, timeout, policy())
    assert held.retry_in is None and held.alert and held.alert.reason == "in_doubt"


def test_decide_in_doubt() -> None:
    assert decide_in_doubt(1, Delivered("r"), policy()).next is Next.MARK_SYNCED
    assert decide_in_doubt(1, NotDelivered(), policy()).next is Next.RESEND
    assert decide_in_doubt(3, NotDelivered(), policy()).next is Next.GIVE_UP
    unknown = decide_in_doubt(1, Unknown("503"), policy())
    assert unknown.next is Next.RECHECK and unknown.retry_in and unknown.alert
    assert decide_in_doubt(1, None, policy()).next is Next.ASK_PERSON
    assert decide_in_doubt(1, None, policy(idempotent=True)).next is Next.RESEND
    assert decide_in_doubt(3, None, policy(idempotent=True)).next is Next.GIVE_UP


def test_a_row_kept_in_doubt_again_gets_no_second_alert_and_waits_longer() -> None:
    """The first `Unknown` in a state alerts and asks again after `initial`; the next ones,
    `in_doubt_for` seconds into that state, do neither (`again`) and wait
    initial + (multiplier − 1) × in_doubt_for."""
    first = decide_in_doubt(1, Unknown("503"), policy(backoff=NO_JITTER))
    assert (first.next, first.retry_in, first.again) == (Next.RECHECK, 2.0, False)
    assert first.alert is not None and first.alert.reason == "in_doubt"
    later = decide_in_doubt(1, Unknown("503"), policy(backoff=NO_JITTER), in_doubt_for=14.0)
    assert (later.next, later.retry_in, later.again, later.alert) == (
        Next.RECHECK,
        16.0,
        True,
        None,
    )
    person = decide_in_doubt(1, None, policy(), in_doubt_for=600.0)
    assert (person.next, person.retry_in, person.again, person.alert) == (
        Next.ASK_PERSON,
        None,
        True,
        None,
    )


def test_past_the_idempotency_window_an_in_doubt_row_is_never_resent_blind() -> None:
    idempotent = policy(idempotent=True)
    held = decide_in_doubt(1, None, idempotent, window_closed=True)
    assert (
        held.next is Next.ASK_PERSON and held.alert is not None and held.alert.reason == "in_doubt"
    )
    assert "idempotency window" in held.alert.message
    # a verdict decides as before: the provider was asked, not trusted to deduplicate
    assert decide_in_doubt(1, NotDelivered(), idempotent, window_closed=True).next is Next.RESEND
    assert decide_in_doubt(1, Delivered("r"), idempotent, window_closed=True).next is (
        Next.MARK_SYNCED
    )
    assert decide_in_doubt(3, None, idempotent, window_closed=True).next is Next.GIVE_UP


def test_a_resend_needs_the_window_open_a_whole_lease_from_now() -> None:
    first = datetime(2026, 1, 1, tzinfo=UTC)
    day = 86400.0
    assert window_closes_at(first, day) == first + timedelta(days=1)
    assert window_closes_at(None, day) is None and window_closes_at(first, None) is None
    assert resend_in_window(first, first + timedelta(hours=23), day, lease=60)
    assert not resend_in_window(first, first + timedelta(hours=24), day, lease=60)
    # the resend may arrive up to a lease later: a minute before the end is too late
    assert not resend_in_window(first, first + timedelta(days=1, seconds=-30), day, lease=60)
    assert resend_in_window(first, first + timedelta(days=1, seconds=-60), day, lease=60)
    assert not resend_in_window(None, first, day, lease=60)  # no attempt: cannot tell
    assert resend_in_window(None, first, None, lease=60)  # no window declared
