"""What a row is and what a person may do with it, in one place.

The operator's actions refuse by these rules, and the dashboard and the CLI show
the actions they allow, so no screen offers what the engine would refuse. The
store's SQL says the same in its fragments (`@in_doubt`, `@needs_person` in
store/sql/*.sql) and its running counts' kinds; a conformance test holds the two
together on every database. Pure: a row is judged as it was read (its `in_doubt`
by the database clock at that moment), never by this process's clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from denpyo.domain.actions import ActionKind
from denpyo.domain.sealed import SealedPayload
from denpyo.domain.status import ErrorKind, Status
from denpyo.errors import InvalidInput, TransitionNotAllowed

if TYPE_CHECKING:
    from denpyo.domain.submission import Submission


def label(sub: Submission) -> str:
    """How messages name a row: ``#12 (channel:key)``."""
    return f"#{sub.id} ({sub.channel}:{sub.key})"


# -- what a row is ----------------------------------------------------------------------------


def in_doubt(sub: Submission) -> bool:
    """The call may or may not have arrived: `requesting` with its lease run out, or
    `failed` with an ambiguous error. The database decides it when the row is read
    (`Submission.in_doubt`): a lease runs out by its clock, not by this host's."""
    return sub.in_doubt


def in_flight(sub: Submission) -> bool:
    """A sender held a live lease on the row when it was read: nobody else touches it."""
    return sub.status is Status.REQUESTING and sub.locked_until is not None and not sub.in_doubt


def is_exhausted(sub: Submission) -> bool:
    """`failed` with no next attempt, and not in doubt: attempts used up (or given
    up by a person). An ambiguous failure with no next step is in doubt instead,
    since its call may have arrived."""
    return (
        sub.status is Status.FAILED
        and sub.next_attempt_at is None
        and sub.error_kind is not ErrorKind.AMBIGUOUS
    )


def needs_person(sub: Submission) -> bool:
    """Only a person moves it on: not resolved yet, and in doubt, exhausted or rejected."""
    return sub.resolution is None and (
        sub.in_doubt or is_exhausted(sub) or sub.status is Status.REJECTED
    )


# -- what a person may do -----------------------------------------------------------------------


class Permit(StrEnum):
    """Whether a row allows an action now: yes, only forced, or no."""

    ALLOWED = "allowed"
    FORCE = "force"
    """Only with `force_in_doubt` and a note: the call may have arrived, and doing it
    again could double its effect."""
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class Answer:
    """Whether `action` may be done on a row, and if not (or only forced), why, in the
    words the refusal uses. `forbidden`: refused because no move between statuses
    allows it (`TransitionNotAllowed`), rather than by the row's state now
    (`InvalidInput`: being sent, never sent, resolved, already resent)."""

    action: ActionKind
    permit: Permit
    reason: str = ""
    forbidden: bool = False

    @property
    def offered(self) -> bool:
        """A screen shows the action: allowed, or allowed with force."""
        return self.permit is not Permit.REFUSED

    @property
    def needs_force(self) -> bool:
        return self.permit is Permit.FORCE

    def check(self, force: bool = False) -> None:
        """Raise the refusal, if this is one (a forced action without `force` is)."""
        if self.permit is Permit.REFUSED:
            raise (TransitionNotAllowed if self.forbidden else InvalidInput)(self.reason)
        if self.permit is Permit.FORCE and not force:
            raise InvalidInput(self.reason)


@dataclass(frozen=True, slots=True)
class RowActions:
    """The answer for each action on one row, as `allowed_actions` gives them."""

    retry: Answer
    abandon: Answer
    resend: Answer
    mark_synced: Answer

    def __iter__(self) -> Iterator[Answer]:
        return iter((self.retry, self.abandon, self.resend, self.mark_synced))

    @property
    def offered(self) -> list[Answer]:
        return [answer for answer in self if answer.offered]

    @property
    def reason(self) -> str:
        """Why nothing is offered, when nothing is: the retry's refusal, which names
        the row's state (being sent, synced, resolved, forgotten or removed)."""
        return self.retry.reason


def allowed_actions(sub: Submission, *, superseded_by: Submission | None = None) -> RowActions:
    """Every action's answer for `sub`. `superseded_by`: the resend that replaced it
    (`Store.find_superseding`), without which a resend is judged as if none had."""
    return RowActions(
        may_retry(sub), may_abandon(sub), may_resend(sub, superseded_by), may_mark_synced(sub)
    )


def removed(sub: Submission, action: ActionKind) -> Answer | None:
    """A removed row (pruned, or archived and deleted) takes no move: only a resend,
    as a new row."""
    if sub.removed_at is None or action is ActionKind.RESEND:
        return None
    where = f"archived to {sub.archived_to}" if sub.archived_to else "pruned"
    return _refused(
        action, f"{label(sub)} was removed from the table ({where}): resend it or leave it"
    )


def forgotten(sub: Submission, action: ActionKind) -> Answer | None:
    """A row whose payload a person forgot (`denpyo forget`) is never sent again, nor
    said to have arrived: only abandoning it remains."""
    if sub.forgotten_at is None or action is ActionKind.ABANDON:
        return None
    return _refused(
        action,
        f"{label(sub)}: its payload was forgotten on {sub.forgotten_at:%Y-%m-%d %H:%M} UTC "
        "(`denpyo forget`; `denpyo show` says by whom and why): it is never sent again, "
        "a new call needs a new key",
    )


def may_retry(sub: Submission) -> Answer:
    """A `failed` row due now under its key; in doubt (a `requesting` one too), forced."""
    if gone := forgotten(sub, ActionKind.RETRY) or removed(sub, ActionKind.RETRY):
        return gone
    if sub.resolution is not None:
        return _refused(
            ActionKind.RETRY,
            f"{label(sub)} was resolved by a person ({sub.resolution}); not retried",
        )
    if sub.status is Status.FAILED:
        return (
            _forced(sub, ActionKind.RETRY)
            if sub.in_doubt
            else Answer(ActionKind.RETRY, Permit.ALLOWED)
        )
    if sub.status is Status.REQUESTING:
        if in_flight(sub):
            return _busy(sub, ActionKind.RETRY)
        if not sub.in_doubt:
            return _refused(
                ActionKind.RETRY, f"{label(sub)} has not been sent yet; a worker will send it"
            )
        return _forced(sub, ActionKind.RETRY)
    if sub.status is Status.REJECTED:
        return _forbidden(
            ActionKind.RETRY,
            f"{label(sub)} was rejected by the provider; sending it unchanged cannot help: "
            "resend it as a new submission (resolve --resend) or abandon it",
        )
    return _forbidden(ActionKind.RETRY, f"{label(sub)} is synced: final, nothing to retry")


def may_abandon(sub: Submission) -> Answer:
    """Give up on an unresolved row that is not synced and not being sent."""
    if gone := removed(sub, ActionKind.ABANDON):
        return gone
    if sub.resolution is not None:
        return _refused(ActionKind.ABANDON, f"{label(sub)} is already resolved: {sub.resolution}")
    if sub.status is Status.SYNCED:
        return _forbidden(ActionKind.ABANDON, f"{label(sub)} is synced: final, nothing to abandon")
    if in_flight(sub):
        return _busy(sub, ActionKind.ABANDON)
    return Answer(ActionKind.ABANDON, Permit.ALLOWED)


def may_resend(sub: Submission, superseded_by: Submission | None = None) -> Answer:
    """Replace a row not synced and not being sent by a new one, once; forced when
    its call may have arrived (in doubt, or `requesting` after an attempt); never a
    row whose payload no key here opens (it would send that placeholder)."""
    if gone := forgotten(sub, ActionKind.RESEND):
        return gone
    if sub.status is Status.SYNCED:
        return _forbidden(
            ActionKind.RESEND,
            f"{label(sub)} is synced: it arrived; a new call needs a new key (submit it)",
        )
    if in_flight(sub):
        return _busy(sub, ActionKind.RESEND)
    if superseded_by is not None:
        return _refused(
            ActionKind.RESEND, f"{label(sub)} was already resent as {label(superseded_by)}"
        )
    if isinstance(sub.payload, SealedPayload):
        return _refused(
            ActionKind.RESEND, f"{label(sub)}: cannot send this payload again: {sub.payload.why()}"
        )
    if sub.in_doubt or (sub.status is Status.REQUESTING and sent_maybe(sub)):
        return _forced(sub, ActionKind.RESEND)
    return Answer(ActionKind.RESEND, Permit.ALLOWED)


def sent_maybe(sub: Submission) -> bool:
    """Whether the row's call may have left: a call was counted, or a sender's lease ran
    out (it may have been sending when it was cut short: counted only once found)."""
    return sub.attempts > 0 or sub.in_doubt


def may_mark_synced(sub: Submission) -> Answer:
    """Record that a person found the call at the provider: from `failed`, or from a
    `requesting` row attempted and not being sent; never from `rejected`."""
    if gone := forgotten(sub, ActionKind.MARK_SYNCED) or removed(sub, ActionKind.MARK_SYNCED):
        return gone
    if sub.status is Status.SYNCED:
        return _forbidden(
            ActionKind.MARK_SYNCED, f"{label(sub)} is already synced (remote id {sub.remote_id})"
        )
    if sub.status is Status.REJECTED:
        return _forbidden(
            ActionKind.MARK_SYNCED,
            f"{label(sub)} was rejected by the provider: a submission cannot move from "
            "rejected to synced; abandon it, or resend it as a new submission",
        )
    if sub.status is Status.REQUESTING:
        if in_flight(sub):
            return _busy(sub, ActionKind.MARK_SYNCED)
        if not sent_maybe(sub):
            return _refused(
                ActionKind.MARK_SYNCED, f"{label(sub)} was never sent, so it cannot have arrived"
            )
    return Answer(ActionKind.MARK_SYNCED, Permit.ALLOWED)


def _refused(action: ActionKind, reason: str) -> Answer:
    return Answer(action, Permit.REFUSED, reason)


def _forbidden(action: ActionKind, reason: str) -> Answer:
    return Answer(action, Permit.REFUSED, reason, forbidden=True)


def _busy(sub: Submission, action: ActionKind) -> Answer:
    return _refused(
        action,
        f"{label(sub)} is being sent right now by {sub.locked_by} (lease until "
        f"{_utc(sub.locked_until)}); wait for it to settle",
    )


def _forced(sub: Submission, action: ActionKind) -> Answer:
    verb = action.value
    return Answer(
        action,
        Permit.FORCE,
        f"{label(sub)} is in doubt: the call may have arrived, and a {verb} could "
        "double it; check the provider, then mark it synced (resolve --mark-synced), or "
        f"{verb} with --force-in-doubt and a note",
    )


def _utc(value: datetime | None) -> str:
    """A time as a person reads it in a message: to the second, in UTC."""
    if value is None:
        return "unknown"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
