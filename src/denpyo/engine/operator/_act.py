"""A person's changes: retry, abandon, resend, mark synced. Each is a `Move`.

The table of what each does to which row is in `denpyo.engine.operator`; whether
a row allows it is `denpyo.domain.rules`, which the dashboard and the CLI read too.
Everything is checked before anything is written; each change is one
compare-and-set with its event, so a crash leaves it applied or not at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from denpyo.domain import rules
from denpyo.domain.actions import ActionKind, ActionRecord, Approval, Scope
from denpyo.domain.filters import Filter
from denpyo.domain.limits import encode_payload
from denpyo.domain.moves import Move
from denpyo.domain.redaction import REDACTED, Redaction, still_redacted
from denpyo.domain.rules import Permit, label
from denpyo.domain.status import Status
from denpyo.domain.submission import Submission
from denpyo.engine.acting import check_note, find, operator_actor
from denpyo.engine.keys import new_idempotency_key
from denpyo.engine.operator._actions import Requested, act, kept_entry, request_json
from denpyo.engine.operator._moves import free_resend_key, retry_move
from denpyo.engine.operator._read import list_submissions, submission_json
from denpyo.errors import InvalidInput, LeaseLost, TransitionNotAllowed
from denpyo.store import NewSubmission
from denpyo.store.actions import NewAction

if TYPE_CHECKING:
    from denpyo.engine.ledger import Ledger


class _Same:
    def __repr__(self) -> str:
        return "SAME_PAYLOAD"


SAME_PAYLOAD: Any = _Same()
"""`resolve_resend(payload=SAME_PAYLOAD)` (the default): resend the row's own payload."""


# -- retry ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetryResult:
    """`retried`: the rows as they are after the retry (before it, on a dry run);
    `skipped`: rows a filter found that cannot be retried, with the reason."""

    dry_run: bool
    retried: list[Submission] = field(default_factory=list)
    skipped: list[tuple[Submission, str]] = field(default_factory=list)
    requested: Requested | None = None
    """Set when a two-person rule made the retry a request: nothing was retried."""

    def redacted(self, redaction: Redaction) -> RetryResult:
        """The rows as a person sees them by default (`Redaction.submission`)."""
        return replace(
            self,
            retried=[redaction.submission(sub) for sub in self.retried],
            skipped=[(redaction.submission(sub), why) for sub, why in self.skipped],
        )

    def to_json(self, *, full: bool = True) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "requested": request_json(self.requested),
            "retried": [submission_json(s, full=full) for s in self.retried],
            "skipped": [
                {"submission": submission_json(s, full=full), "reason": r} for s, r in self.skipped
            ],
        }


def retry(
    ledger: Ledger,
    *,
    refs: Sequence[str | int] = (),
    flt: Filter | None = None,
    force_in_doubt: bool = False,
    note: str | None = None,
    by: str | None = None,
    dry_run: bool = False,
    approval: Approval | None = None,
) -> RetryResult:
    """Make `failed` rows due now, named by `refs` or selected by `flt` (not both).

    Named rows are all checked before any is moved: one that cannot be retried
    fails the whole call and nothing is written. Rows a filter finds that cannot
    be retried are skipped and reported. In-doubt rows need `force_in_doubt` and
    a note: they are sent again, which doubles the effect if the first call
    arrived and the provider does not honour idempotency keys.
    """
    if bool(refs) == (flt is not None):
        raise InvalidInput("name the submissions to retry (IDs) or give a filter, not both")
    if force_in_doubt:
        note = check_note(note, "--force-in-doubt")
    elif note is not None:
        note = check_note(note)
    actor = operator_actor(by)
    plan: list[tuple[Submission, Move]] = []
    skipped: list[tuple[Submission, str]] = []
    if refs:
        subs = _unique(find(ledger, ref) for ref in refs)
        plan = [(sub, retry_move(sub, actor, note, force_in_doubt)) for sub in subs]
    else:
        assert flt is not None
        for sub in list_submissions(ledger, _retry_filter(flt, force_in_doubt)):
            try:
                plan.append((sub, retry_move(sub, actor, note, force_in_doubt)))
            except (InvalidInput, TransitionNotAllowed) as exc:
                skipped.append((sub, str(exc)))
    if dry_run or not plan:
        return RetryResult(dry_run, [sub for sub, _ in plan], skipped)
    subs = [sub for sub, _ in plan]
    forced = any(rules.may_retry(sub).permit is Permit.FORCE for sub in subs)
    done = act(
        ledger,
        ActionKind.RETRY,
        [sub.id for sub in subs],
        target=label(subs[0]) if len(subs) == 1 else f"{len(subs)} rows",
        note=note or "retry requested",
        by=by,
        params={"force_in_doubt": True} if force_in_doubt else None,
        forced=forced,
        approval=approval,
    )
    if isinstance(done, Requested):
        return RetryResult(False, [], skipped, requested=done)
    outcomes = _outcomes(ledger, done)
    retried = []
    for sub in subs:
        reason = outcomes.get(sub.id)
        after = ledger.store.get(sub.id) if reason is None else None
        if after is None:
            skipped.append((sub, reason or f"{label(sub)} moved while being retried; look again"))
        else:
            retried.append(after)
    return RetryResult(False, retried, skipped)


def _outcomes(ledger: Ledger, record: ActionRecord) -> dict[int, str]:
    """The rows an action skipped, with why (rows it did are not in it)."""
    skipped: dict[int, str] = {}
    after = 0
    while True:
        rows = ledger.store.action_rows(record.id, after=after, outcome="skipped", limit=1000)
        if not rows:
            return skipped
        for row in rows:
            skipped[row.submission_id] = row.reason or "skipped"
        after = rows[-1].submission_id


def _only_row(ledger: Ledger, record: ActionRecord, sub: Submission) -> Submission:
    """The row a one-row action acted on, as it is now; a row that moved meanwhile
    was skipped (nothing written to it): `LeaseLost`, as a single move says."""
    reason = _outcomes(ledger, record).get(sub.id)
    after = ledger.store.get(sub.id) if reason is None else None
    if after is None:
        raise LeaseLost(
            f"submission {sub.id} moved while you were deciding; nothing was "
            "written: look again (denpyo show)"
        )
    return after


def _retry_filter(flt: Filter, force_in_doubt: bool) -> Filter:
    """The filter narrowed to rows a retry may take; a condition that could only
    select rows it may not take is refused rather than quietly matching nothing."""
    allowed = (Status.FAILED, Status.REQUESTING) if force_in_doubt else (Status.FAILED,)
    wrong = [s.value for s in flt.statuses if s not in allowed]
    if wrong:
        raise InvalidInput(
            "retry takes failed rows (and requesting rows in doubt, with --force-in-doubt), "
            f"not {', '.join(wrong)}"
        )
    if flt.resolved:
        raise InvalidInput("a row a person resolved is never retried; select unresolved rows")
    if flt.in_doubt and not force_in_doubt:
        raise InvalidInput(
            "rows in doubt may have arrived: retry them only with --force-in-doubt and a note"
        )
    return replace(
        flt,
        statuses=flt.statuses or allowed,
        resolved=False,
        in_doubt=flt.in_doubt if force_in_doubt else False,
    )


# -- resolve ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Resolution:
    """A person's resolution: the row as it is after it, the new row of a resend, and
    the status the row had before (a `requesting` row given up becomes `failed`)."""

    action: str  # "abandon", "resend" or "mark_synced"
    submission: Submission
    created: Submission | None = None
    from_status: Status | None = None
    requested: Requested | None = None
    """Set when a two-person rule made the action a request: the row is unchanged."""

    @property
    def moved(self) -> bool:
        return self.from_status is not None and self.from_status is not self.submission.status

    def redacted(self, redaction: Redaction) -> Resolution:
        """The rows as a person sees them by default (`Redaction.submission`)."""
        created = None if self.created is None else redaction.submission(self.created)
        return replace(self, submission=redaction.submission(self.submission), created=created)

    def to_json(self, *, full: bool = True) -> dict[str, Any]:
        return {
            "action": self.action,
            "from_status": self.from_status.value if self.from_status else None,
            "submission": submission_json(self.submission, full=full),
            "created": submission_json(self.created, full=full) if self.created else None,
            "requested": request_json(self.requested),
        }


def resolve_abandon(
    ledger: Ledger,
    ref: str | int,
    *,
    note: str,
    by: str | None = None,
    dry_run: bool = False,
    approval: Approval | None = None,
) -> Resolution:
    """Give up on a row with a note: it keeps (or takes) `failed`/`rejected`, and is
    never attempted again by the engine. With `dry_run`, every check is made and the
    row is returned as it is, unchanged."""
    note = check_note(note)
    sub = find(ledger, ref)
    rules.may_abandon(sub).check()
    if dry_run:
        return Resolution("abandon", sub, from_status=sub.status)
    done = act(
        ledger,
        ActionKind.ABANDON,
        [sub.id],
        target=label(sub),
        note=note,
        by=by,
        approval=approval,
    )
    return _resolved(ledger, "abandon", sub, done)


def _resolved(
    ledger: Ledger, action: str, sub: Submission, done: ActionRecord | Requested
) -> Resolution:
    if isinstance(done, Requested):
        return Resolution(action, sub, from_status=sub.status, requested=done)
    return Resolution(action, _only_row(ledger, done, sub), from_status=sub.status)


def resolve_mark_synced(
    ledger: Ledger,
    ref: str | int,
    *,
    remote_id: str,
    note: str,
    by: str | None = None,
    approval: Approval | None = None,
) -> Resolution:
    """Record that a person found the call at the provider, under `remote_id`."""
    note = check_note(note)
    remote_id = (remote_id or "").strip()
    if not remote_id:
        raise InvalidInput("the provider's id (--remote-id) is required to mark a row synced")
    sub = find(ledger, ref)
    rules.may_mark_synced(sub).check()
    done = act(
        ledger,
        ActionKind.MARK_SYNCED,
        [sub.id],
        target=label(sub),
        note=note,
        by=by,
        params={"remote_id": remote_id},
        approval=approval,
    )
    return _resolved(ledger, "mark_synced", sub, done)


def resolve_resend(
    ledger: Ledger,
    ref: str | int,
    *,
    note: str,
    payload: Any = SAME_PAYLOAD,
    force_in_doubt: bool = False,
    by: str | None = None,
    approval: Approval | None = None,
) -> Resolution:
    """Replace a row by a new submission (optionally with a corrected payload) that a
    worker sends; the old row is resolved "resent as #id". Both in one transaction.

    Works without the channel registered on this ledger: the row waits for a
    worker of the application that registers it.
    """
    note = check_note(note)
    if payload is not SAME_PAYLOAD:
        left = still_redacted(payload)
        if left:
            raise InvalidInput(
                f"the corrected payload still holds {REDACTED!r} at {', '.join(left[:5])}: "
                "a hidden value cannot be renamed or moved (its value is not known there); "
                "type the value itself, or keep the field as it was shown"
            )
    sub = find(ledger, ref)
    rules.may_resend(sub, ledger.store.find_superseding(sub.id)).check(force_in_doubt)
    body = _payload_of(ledger, sub) if payload is SAME_PAYLOAD else payload
    new = NewSubmission(
        channel=sub.channel,
        key=free_resend_key(ledger, sub),
        idempotency_key=new_idempotency_key(),
        payload_json=encode_payload(body, ledger.max_payload_bytes),
        ordering_key=sub.ordering_key,
        supersedes=None if sub.removed_at else sub.id,
        # The resend joins the trace of the request that wrote the row it replaces.
        traceparent=sub.traceparent,
        tracestate=sub.tracestate,
    )
    actor = operator_actor(by)
    params: dict[str, Any] = {"force_in_doubt": True} if force_in_doubt else {}
    if payload is not SAME_PAYLOAD:
        params["payload"] = body
    if sub.removed_at is not None:
        note, kept = kept_entry(ledger, [sub], note, params)
        created, old = ledger.store.record_resend_of_removed(
            new,
            actor=actor,
            detail=f"resend of {label(sub)} by {actor}: {note}",
            old_id=sub.id,
            resolution=lambda new_id: f"resent as #{new_id} by {actor}: {note}",
            log=NewAction(ActionKind.RESEND, Scope.ROWS, label(sub), actor, note, params=kept),
        )
        return Resolution("resend", old, created, from_status=sub.status)

    forced = rules.may_resend(sub).permit is Permit.FORCE
    done = act(
        ledger,
        ActionKind.RESEND,
        [sub.id],
        target=label(sub),
        note=note,
        by=by,
        params=params,
        forced=forced,
        approval=approval,
    )
    if isinstance(done, Requested):
        return Resolution("resend", sub, from_status=sub.status, requested=done)
    old = _only_row(ledger, done, sub)
    resent = ledger.store.find_superseding(sub.id)
    assert resent is not None
    return Resolution("resend", old, resent, from_status=sub.status)


def _payload_of(ledger: Ledger, sub: Submission) -> Any:
    """The payload to resend unchanged: the row's own; an archived row's, read back
    from the archive (and opened with the ledger's keys); a pruned row's is not kept."""
    if sub.removed_at is None:
        return sub.payload
    if sub.archived_to is not None:
        from denpyo.archive import Archive

        return Archive(sub.archived_to).payload_of(sub, ledger.store.sealing)
    raise InvalidInput(
        f"{label(sub)} was pruned: its payload is not kept; give the payload to resend "
        "(resolve --resend --payload JSON)"
    )


def _unique(subs: Iterable[Submission]) -> list[Submission]:
    seen: dict[int, Submission] = {}
    for sub in subs:
        seen.setdefault(sub.id, sub)
    return list(seen.values())
