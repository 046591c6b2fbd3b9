"""What to do after an attempt or a verdict: pure decisions, no I/O.

The engine performs the call and asks this module how to record it; the store
records it. Keeping the decisions here lets the tests check every branch
without a database, and keeps the worker, the inline `submit` and the
reconciler from each growing their own idea of what "retry" means.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum

from denpyo.domain.alert import Alert
from denpyo.domain.backoff import Backoff
from denpyo.domain.settings import DEFAULT_BACKOFF, DEFAULT_MAX_ATTEMPTS
from denpyo.domain.status import ErrorKind, Status
from denpyo.domain.verdict import Delivered, NotDelivered, Verdict
from denpyo.errors import Rejected, Transient, require


class OutcomeKind(Enum):
    """How a call ended, which decides the row's next status: `synced`; `transient`
    (nothing happened: `failed`, retried after back-off); `ambiguous` (it may have
    arrived: `failed`, in doubt, verified before any resend); `rejected` (refused on
    business grounds: a person decides)."""

    SYNCED = "synced"
    TRANSIENT = "transient"
    AMBIGUOUS = "ambiguous"
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one call ended, as the channel (or its classifier) told it.

    A channel's `classify=` returns one for an exception it recognizes (None: the
    default reading, `Rejected`, `Transient`, anything else ambiguous):
    `Outcome(OutcomeKind.TRANSIENT, error="quota", retry_after=60)`. `remote_id` is
    kept for a synced call, `error` as the row's `last_error`, and `retry_after`
    (seconds) is a floor under the back-off. `throttled`: the provider refused
    for its rate limit, so it is up (domain/channel_state.py)."""

    kind: OutcomeKind
    remote_id: str | None = None
    error: str | None = None
    retry_after: float | None = None
    throttled: bool = False


def describe(exc: BaseException) -> str:
    """The error text kept in `last_error`: type and message, never empty."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def classify_exception(exc: BaseException) -> Outcome:
    """Rejected → rejected; Transient → failed; anything else is ambiguous,
    because the request may have left (a timeout, a dropped connection, a bug
    after the provider answered)."""
    if isinstance(exc, Rejected):
        return Outcome(OutcomeKind.REJECTED, error=describe(exc))
    if isinstance(exc, Transient):
        return Outcome(
            OutcomeKind.TRANSIENT,
            error=describe(exc),
            retry_after=exc.retry_after,
            throttled=exc.throttled,
        )
    return Outcome(OutcomeKind.AMBIGUOUS, error=describe(exc))


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A channel's rules for what happens after a failure."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff: Backoff = DEFAULT_BACKOFF
    can_verify: bool = False
    idempotent: bool = False

    def __post_init__(self) -> None:
        require(self.max_attempts >= 1, "max_attempts must be at least 1")

    @property
    def decides_doubt(self) -> bool:
        """A row in doubt is decided without a person: verified, or resent under its
        key (see `decide_in_doubt`)."""
        return self.can_verify or self.idempotent


@dataclass(frozen=True, slots=True)
class AttemptDecision:
    """How to record an attempt's outcome on a `requesting` row."""

    status: Status
    error_kind: ErrorKind | None = None
    last_error: str | None = None
    remote_id: str | None = None
    retry_in: float | None = None  # seconds to the next automatic step; None: none
    alert: Alert | None = None  # why a person should look, if they should


def decide_attempt(
    attempts: int, outcome: Outcome, policy: RetryPolicy, rng: random.Random | None = None
) -> AttemptDecision:
    """Record `outcome` of attempt number `attempts`."""
    if outcome.kind is OutcomeKind.SYNCED:
        return AttemptDecision(Status.SYNCED, remote_id=outcome.remote_id)
    if outcome.kind is OutcomeKind.REJECTED:
        return AttemptDecision(
            Status.REJECTED,
            ErrorKind.REJECTED,
            outcome.error,
            alert=Alert("rejected", f"rejected by the provider: {outcome.error}"),
        )
    exhausted = attempts >= policy.max_attempts
    delay = policy.backoff.delay(attempts, retry_after=outcome.retry_after, rng=rng)
    if outcome.kind is OutcomeKind.TRANSIENT:
        if exhausted:
            return AttemptDecision(
                Status.FAILED,
                ErrorKind.TRANSIENT,
                outcome.error,
                alert=Alert(
                    "exhausted",
                    f"attempts exhausted ({attempts}/{policy.max_attempts}): {outcome.error}",
                ),
            )
        return AttemptDecision(Status.FAILED, ErrorKind.TRANSIENT, outcome.error, retry_in=delay)
    # Ambiguous: the call may have arrived.
    if policy.can_verify:
        # Verified later even when attempts are exhausted: verify may still find it arrived.
        return AttemptDecision(Status.FAILED, ErrorKind.AMBIGUOUS, outcome.error, retry_in=delay)
    if policy.idempotent and not exhausted:
        return AttemptDecision(Status.FAILED, ErrorKind.AMBIGUOUS, outcome.error, retry_in=delay)
    alert = (
        Alert(
            "exhausted", f"attempts exhausted ({attempts}/{policy.max_attempts}): {outcome.error}"
        )
        if policy.idempotent
        else Alert(
            "in_doubt",
            f"in doubt: the channel has no verify and is not idempotent: {outcome.error}",
        )
    )
    return AttemptDecision(Status.FAILED, ErrorKind.AMBIGUOUS, outcome.error, alert=alert)


class Next(Enum):
    """What the reconciler does with an in-doubt row."""

    MARK_SYNCED = "mark_synced"  # the provider has it
    RESEND = "resend"  # never arrived (or idempotent): send again under the same key
    GIVE_UP = "give_up"  # never arrived, but no attempts left: failed, exhausted
    RECHECK = "recheck"  # the provider cannot tell: ask again later
    ASK_PERSON = "ask_person"  # nothing can decide it: wait for a person


@dataclass(frozen=True, slots=True)
class DoubtDecision:
    """What to do with a row in doubt. `again`: it stays in doubt as it was already
    kept, whose history line and alert stand: neither is written again."""

    next: Next
    remote_id: str | None = None
    retry_in: float | None = None
    alert: Alert | None = None
    note: str = ""
    again: bool = False


def window_closes_at(first_attempt: datetime | None, window: float | None) -> datetime | None:
    """When the provider forgets the row's idempotency key: its memory of a key runs
    from the first request that carried it, which began no earlier than the row's
    first attempt (None: no window declared, or never attempted)."""
    if window is None or first_attempt is None:
        return None
    return first_attempt + timedelta(seconds=window)


def resend_in_window(
    first_attempt: datetime | None, now: datetime, window: float | None, lease: float
) -> bool:
    """May a resend rely on the provider still knowing the key? Only if the window is
    still open a whole lease from now: a resend may start, and arrive, up to a lease
    after it is decided. Never attempted, with a window declared: no (nothing tells
    when the provider first saw the key)."""
    if window is None:
        return True
    closes = window_closes_at(first_attempt, window)
    return closes is not None and now + timedelta(seconds=lease) <= closes


def decide_in_doubt(
    tries: int,
    verdict: Verdict | None,
    policy: RetryPolicy,
    rng: random.Random | None = None,
    *,
    window_closed: bool = False,
    in_doubt_for: float | None = None,
) -> DoubtDecision:
    """Decide an in-doubt row from `verify`'s verdict (None: the channel has no verify).

    `tries`: the holds that may have sent it (`DoubtHistory.tries`), against
    `max_attempts`. `window_closed`: the provider may have forgotten the row's
    idempotency key (the channel's `idempotency_window` has run out), so a resend on
    the strength of the key could act twice: without a verdict, a person decides.
    `in_doubt_for`: seconds since a reconciler kept the row in doubt in this state (None:
    never): kept again, it gets no second history line nor alert, and a verify that
    still cannot tell is asked again after a longer wait (`Backoff.delay_after`).
    """
    exhausted = tries >= policy.max_attempts
    again = in_doubt_for is not None

    def leave_in_doubt(why: str, note: str, retry_in: float | None = None) -> DoubtDecision:
        """Left in doubt: an alert the first time in this state only."""
        kind = Next.RECHECK if retry_in is not None else Next.ASK_PERSON
        alert = None if again else Alert("in_doubt", f"in doubt: {why}")
        return DoubtDecision(kind, retry_in=retry_in, alert=alert, note=note, again=again)

    if verdict is None:
        if policy.idempotent and window_closed and not exhausted:
            return leave_in_doubt(
                "the provider's idempotency window has closed, so a resend under the same "
                "key could act twice; a person must check the provider",
                "idempotency window closed: left for a person",
            )
        if not policy.idempotent:
            return leave_in_doubt(
                "the channel has no verify and is not idempotent; a person must check the provider",
                "no verify, not idempotent: left for a person",
            )
        if exhausted:
            return DoubtDecision(
                Next.GIVE_UP,
                alert=Alert("exhausted", f"attempts exhausted ({tries}/{policy.max_attempts})"),
                note="idempotent channel, attempts exhausted",
            )
        return DoubtDecision(Next.RESEND, note="idempotent channel: resent under the same key")
    if isinstance(verdict, Delivered):
        return DoubtDecision(
            Next.MARK_SYNCED, remote_id=verdict.remote_id, note="verify: delivered"
        )
    if isinstance(verdict, NotDelivered):
        if exhausted:
            return DoubtDecision(
                Next.GIVE_UP,
                alert=Alert(
                    "exhausted",
                    f"verified not delivered; attempts exhausted ({tries}/{policy.max_attempts})",
                ),
                note="verify: not delivered; attempts exhausted",
            )
        return DoubtDecision(Next.RESEND, note="verify: not delivered; resent under the same key")
    return leave_in_doubt(
        f"verify could not tell ({verdict.why})",
        f"verify: unknown ({verdict.why})",
        retry_in=policy.backoff.delay_after(in_doubt_for or 0.0, rng=rng),
    )
