"""The row moves that a person's action on one row and a bulk
action share (`_act.py` and `_actions.py` both build on them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from denpyo.domain import rules
from denpyo.domain.filters import resend_key
from denpyo.domain.limits import check_key
from denpyo.domain.moves import Move
from denpyo.domain.rules import Permit, label, sent_maybe
from denpyo.domain.status import ErrorKind, Status
from denpyo.domain.submission import Submission
from denpyo.errors import InvalidInput

if TYPE_CHECKING:
    from denpyo.engine.ledger import Ledger


def retry_move(sub: Submission, actor: str, note: str | None, force: bool) -> Move:
    answer = rules.may_retry(sub)
    answer.check(force)
    if answer.permit is Permit.FORCE:
        return Move.forced_retry(sub, actor, f"forced retry of an in-doubt row: {note}")
    return Move.retry(sub, actor, note or "retry requested")


def giving_up(sub: Submission, actor: str, event: str, resolution: str, note: str) -> Move:
    """The move that ends all automatic work on a row and records the resolution (on
    a row the rules let the person abandon or resend)."""
    if sub.status is not Status.REQUESTING:
        return Move.give_up(sub, actor, event, resolution, note)
    failure = (
        (ErrorKind.AMBIGUOUS, sub.last_error or "the outcome of the last attempt is unknown")
        if sent_maybe(sub)
        else (ErrorKind.TRANSIENT, sub.last_error or "never sent")
    )
    return Move.give_up(sub, actor, event, resolution, note, failure)


def free_resend_key(ledger: Ledger, sub: Submission) -> str:
    for n in range(1, 1000):
        key = check_key(resend_key(sub.key, n), "the resend's key")
        if ledger.store.get_by_key(sub.channel, key) is None:
            return key
    raise InvalidInput(f"{label(sub)} has been resent too many times")
