"""Actions as the action log keeps them: carried out now, asked of a second person
(a two-person rule), or over every row a filter finds (a bulk action), in batches.

Every row action a person takes goes through `carry_out`: the rows are frozen behind an
entry of the action log, and carried out a batch at a time, each batch one
transaction (store/actions.py). The moves are the operator's own (`_act.py`), so
a bulk retry of ten thousand rows does to each row exactly what a retry of one
does, and refuses what it refuses (the row is then skipped, with the reason).
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from denpyo.domain import rules
from denpyo.domain.actions import (
    BULK_KINDS,
    ROW_KINDS,
    ActionKind,
    ActionRecord,
    ActionRow,
    ActionState,
    Approval,
    Scope,
    history_note,
    person_of,
)
from denpyo.domain.filters import Filter
from denpyo.domain.forgetting import Scrubber
from denpyo.domain.limits import check_key, encode_payload
from denpyo.domain.moves import Move
from denpyo.domain.people import same_name
from denpyo.domain.rules import label
from denpyo.domain.sealed import QUOTED, SealedPayload
from denpyo.domain.submission import Submission
from denpyo.domain.text import visible
from denpyo.engine.acting import BATCH, LEASE, check_note, new_holder, operator_actor
from denpyo.engine.keys import new_idempotency_key
from denpyo.engine.operator._moves import free_resend_key, giving_up, retry_move
from denpyo.errors import InvalidInput, TransitionNotAllowed
from denpyo.store import NewSubmission
from denpyo.store.actions import NO_ROW, NewAction, Resend, Step

if TYPE_CHECKING:
    from denpyo.engine.ledger import Ledger

SAMPLES = 5
"""Rows a dry run shows for each outcome."""
PLAN_LAPSES = 3600.0
"""Seconds a bulk action's dry run waits for its person to confirm it."""
MAX_BULK_ROWS = 1_000_000


@dataclass(frozen=True, slots=True)
class Requested:
    """An action a two-person rule turned into a request: its id, and why."""

    action: ActionRecord
    reason: str


@dataclass(frozen=True, slots=True)
class DryRun:
    """What a bulk action would do to its frozen rows: how many each outcome, with a
    few of each (``will retry``, or the reason a row would be skipped)."""

    action: ActionRecord
    counts: dict[str, int] = field(default_factory=dict)
    samples: dict[str, list[int]] = field(default_factory=dict)

    @property
    def acting(self) -> int:
        """Rows the action would act on (the others would be skipped)."""
        return self.counts.get(will(self.action.kind), 0)

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action.id, "counts": self.counts, "samples": self.samples}


def will(kind: ActionKind) -> str:
    """How a dry run counts the rows an action would act on: ``will retry``."""
    return f"will {kind.value.replace('_', ' ')}"


def request_json(requested: Requested | None) -> dict[str, Any] | None:
    if requested is None:
        return None
    return {"action": requested.action.id, "reason": requested.reason}


# -- carrying an action out --------------------------------------------------------------


def carry_out(
    ledger: Ledger,
    action_id: int,
    *,
    holder: str | None = None,
    batch: int = BATCH,
    lease: float = LEASE,
    progress: Callable[[ActionRecord], object] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> ActionRecord:
    """Carry out the remaining rows of an action in progress, a batch at a time, and return it
    as it stands. Does nothing when another holder holds it or it is not in progress
    (paused, cancelled, waiting for a second person). `lease`: seconds this holder
    holds the action from one batch to the next; if it dies, another holder takes
    the action over after that long."""
    if not lease > 0 or batch < 1:
        raise InvalidInput(
            "a bulk action needs a lease above 0 seconds and batches of 1 row or more"
        )
    store = ledger.store
    holder = holder or new_holder()
    record = _get(ledger, action_id)
    if record.kind is ActionKind.FORGET:  # its search is not kept: it is run again
        raise InvalidInput(
            f"action #{action_id} is a forget: run it again to carry it on "
            f"(denpyo forget {record.target} --note …)"
        )
    if record.kind not in ROW_KINDS:  # a prune, an archive: run once, by their command
        raise InvalidInput(f"action #{action_id} is a {record.kind}: nothing to carry on")
    if store.take_action(action_id, holder=holder, lease=lease):
        try:
            after = 0
            while True:
                ids, rows = store.pending_batch(action_id, after=after, limit=batch)
                if not ids:
                    store.move_action(action_id, ActionState.DONE, from_=(ActionState.IN_PROGRESS,))
                    break
                plan = [(sid, *_step(ledger, record, rows.get(sid))) for sid in ids]
                if store.carry_out(action_id, holder=holder, lease=lease, plan=plan) is None:
                    break  # paused, cancelled, or another holder took it over
                after = ids[-1]
                if progress is not None:
                    progress(_get(ledger, action_id))
                if should_stop is not None and should_stop():
                    break
        finally:
            store.let_go_action(action_id, holder=holder)
    return _get(ledger, action_id)


def _step(ledger: Ledger, record: ActionRecord, sub: Submission | None) -> tuple[Step | None, str]:
    """What the action does to one row now, or why the row is skipped."""
    if sub is None:
        return None, NO_ROW
    try:
        return _move_for(ledger, record, sub), ""
    except (InvalidInput, TransitionNotAllowed) as exc:
        return None, str(exc)


def _move_for(ledger: Ledger, record: ActionRecord, sub: Submission) -> Step:
    """The operator's own move for this action on this row (refusals raise, as they
    do for a person acting on the row alone)."""

    actor = record.actor
    force = bool(record.params.get("force_in_doubt"))
    bulk = record.scope is Scope.FILTER
    # A bulk action's note was written before its rows were known: each row's history
    # keeps it unquoted of that row's values.
    said = unquoted(ledger, record.note, [sub.payload]) if bulk else record.note
    note = history_note(said, record.id, record.approved_by, bulk=bulk)
    if record.kind is ActionKind.RETRY:
        return retry_move(sub, actor, note, force)
    if record.kind is ActionKind.ABANDON:
        rules.may_abandon(sub).check()
        return giving_up(sub, actor, "abandon", f"abandoned by {actor}: {note}", note)
    if record.kind is ActionKind.MARK_SYNCED:
        rules.may_mark_synced(sub).check()
        remote_id = str(record.params.get("remote_id") or "")
        return Move.mark_synced(sub, actor, remote_id, f"marked synced by {actor}: {note}", note)
    if record.kind is ActionKind.RESEND:
        return _resend(ledger, record, sub, actor, note, force)
    raise InvalidInput(f"a {record.kind} is not an action on rows")


def _resend(
    ledger: Ledger, record: ActionRecord, sub: Submission, actor: str, note: str, force: bool
) -> Resend:

    rules.may_resend(sub, ledger.store.find_superseding(sub.id)).check(force)
    if sub.removed_at is not None:
        raise InvalidInput(f"{label(sub)} was removed from the table: resend it alone")
    body = corrected_payload(ledger, record, sub) if "payload" in record.params else sub.payload
    new = NewSubmission(
        channel=sub.channel,
        key=check_key(free_resend_key(ledger, sub), "the resend's key"),
        idempotency_key=new_idempotency_key(),
        payload_json=encode_payload(body, ledger.max_payload_bytes),
        ordering_key=sub.ordering_key,
        supersedes=sub.id,
        # The resend joins the trace of the request that wrote the row it replaces.
        traceparent=sub.traceparent,
        tracestate=sub.tracestate,
    )

    def replaced(created: Submission) -> Move:
        return giving_up(sub, actor, "resend", f"resent as #{created.id} by {actor}: {note}", note)

    return Resend(new, actor, f"resend of {label(sub)} by {actor}: {note}", replaced)


def corrected_payload(ledger: Ledger, record: ActionRecord, sub: Submission) -> Any:
    """A resend's corrected payload, as the action keeps it for its row (sealed where
    the ledger has keys), opened; InvalidInput when no key configured here opens it."""
    body = ledger.store.sealing.open_value(record.params["payload"], sub.channel, sub.key)
    if isinstance(body, SealedPayload):
        raise InvalidInput(f"the corrected payload of action #{record.id}: {body.why()}")
    return body


def kept_entry(
    ledger: Ledger, subs: Sequence[Submission], note: str, params: dict[str, Any] | None
) -> tuple[str, dict[str, Any] | None]:
    """The note and parameters an action on these rows keeps in the action log. Where
    the ledger encrypts payloads: the note with each value of the rows' payloads, and
    of a resend's corrected payload, that it quotes replaced by `QUOTED` (as a
    provider's error is); the corrected payload sealed for its row."""
    sealing = ledger.store.sealing
    if sealing.codec is None:
        return note, params
    given = dict(params or {})
    payloads = [sub.payload for sub in subs]
    if "payload" in given:
        [sub] = subs  # a corrected payload is the payload of one row
        payloads.append(given["payload"])
        given["payload"] = sealing.sealed(given["payload"], sub.channel, sub.key)
    return unquoted(ledger, note, payloads), given


def unquoted(ledger: Ledger, text: str, payloads: Sequence[Any]) -> str:
    """A person's text (a note, a decision) with each value of these payloads it
    quotes, in any spelling, replaced by `QUOTED`, where the ledger encrypts
    payloads: it is kept and shown in clear."""
    if ledger.store.sealing.codec is None:
        return text
    return Scrubber(payloads, marker=QUOTED)(text)


def _get(ledger: Ledger, action_id: int) -> ActionRecord:
    record = ledger.store.action(action_id)
    if record is None:
        raise InvalidInput(f"no action #{action_id}")
    return record


# -- a person's action: now, or a request -------------------------------------------------


def act(
    ledger: Ledger,
    kind: ActionKind,
    ids: Sequence[int],
    *,
    target: str,
    note: str,
    by: str | None,
    params: dict[str, Any] | None = None,
    forced: bool = False,
    bulk: bool = False,
    approval: Approval | None = None,
) -> ActionRecord | Requested:
    """A person's action on the rows they named (`ids`, checked by the caller, or
    ticked on a page: `bulk`): carried out now, each row that no longer allows it
    skipped with the reason; or, under a two-person rule (`approval`, else the
    ledger's), kept as a request (nothing else written) for a second person."""
    actor = operator_actor(by)
    if ledger.store.sealing.codec is not None:
        rows = [sub for sub in map(ledger.store.get, dict.fromkeys(ids)) if sub is not None]
        note, params = kept_entry(ledger, rows, note, params)
    policy = approval or ledger.approval
    reason = policy.reason(kind, rows=len(ids), forced=forced, bulk=bulk) if policy else None
    if reason is not None and policy is not None:
        entry = NewAction(
            kind,
            Scope.ROWS,
            target,
            actor,
            note,
            ActionState.AWAITING_APPROVAL,
            params=params,
            lapses_in=policy.lapses_after,
        )
        request = ledger.store.add_action(entry, ids=ids)
        counts, samples = _count(ledger, request)  # what the approver would let happen
        plan = {"counts": counts, "samples": samples}
        ledger.store.set_plan(request.id, plan, to=request.state, from_=request.state)
        return Requested(_get(ledger, request.id), reason)
    holder = new_holder()
    entry = NewAction(kind, Scope.ROWS, target, actor, note, params=params)
    record = ledger.store.add_action(entry, ids=ids, holder=holder, lease=LEASE)
    return carry_out(ledger, record.id, holder=holder)


def approve(ledger: Ledger, action_id: int, *, note: str, by: str | None = None) -> ActionRecord:
    """A second person approves a request: it is carried out now, and each row's
    history names both people."""
    decide(ledger, action_id, note=note, by=by, approve=True)
    return carry_out(ledger, action_id)


def decline(ledger: Ledger, action_id: int, *, note: str, by: str | None = None) -> ActionRecord:
    """A second person declines a request, with a note: nothing is done."""
    return decide(ledger, action_id, note=note, by=by, approve=False)


def decide(
    ledger: Ledger, action_id: int, *, note: str, by: str | None, approve: bool
) -> ActionRecord:
    """A second person's decision, written; an approved request is then in progress, for
    `carry_out` (`approve` does both)."""

    text = check_note(note, "an approval" if approve else "a decline")
    approver = operator_actor(by)
    ledger.store.lapse_actions()
    record = _get(ledger, action_id)
    if record.state is not ActionState.AWAITING_APPROVAL:
        raise InvalidInput(f"action #{action_id} is {record.state}, not waiting for a decision")
    if record.scope is Scope.ROWS and ledger.store.sealing.codec is not None:
        _, rows = ledger.store.pending_batch(action_id, after=0, limit=record.total + 1)
        payloads = [sub.payload for sub in rows.values()]
        if "payload" in record.params:
            payloads += [corrected_payload(ledger, record, sub) for sub in rows.values()]
        text = unquoted(ledger, text, payloads)
    if same_name(record.actor, approver):
        raise InvalidInput(
            f"action #{action_id} was asked by {record.person}: a second person decides it"
        )
    if not ledger.store.decide_action(action_id, approver=approver, approve=approve, note=text):
        raise InvalidInput(f"action #{action_id} was decided or lapsed meanwhile: look again")
    return _get(ledger, action_id)


# -- bulk actions over a filter's rows ---------------------------------------------------


def plan_bulk(
    ledger: Ledger,
    kind: ActionKind,
    flt: Filter,
    *,
    note: str,
    by: str | None = None,
    force_in_doubt: bool = False,
    target: str,
    batch: int = BATCH,
) -> DryRun:
    """Freeze every row `flt` finds now behind a planned bulk action, and count what
    the action would do to each (with samples): nothing else is written."""

    if kind not in BULK_KINDS:
        raise InvalidInput(f"a bulk action retries, abandons or resends, not {kind}")
    if flt.is_empty:
        raise InvalidInput(
            f"select the rows to {kind}: a bulk action needs a filter (a status, a channel, "
            "a time range...), never every row of the table"
        )
    text = check_note(note, f"a bulk {kind}")
    entry = NewAction(
        kind,
        Scope.FILTER,
        target,
        operator_actor(by),
        text,
        ActionState.PLANNED,
        params={"force_in_doubt": force_in_doubt} if force_in_doubt else None,
        lapses_in=PLAN_LAPSES,
    )
    record = ledger.store.add_action(entry, flt=flt)
    if record.total > MAX_BULK_ROWS:
        ledger.store.move_action(record.id, ActionState.CANCELLED, from_=(ActionState.PLANNED,))
        raise InvalidInput(
            f"the filter finds {record.total} rows; a bulk action takes at most "
            f"{MAX_BULK_ROWS}: narrow it (a channel, a time range)"
        )
    counts, samples = _count(ledger, record, batch)
    plan = {"counts": counts, "samples": samples}
    ledger.store.set_plan(record.id, plan, to=ActionState.PLANNED, from_=ActionState.PLANNED)
    return DryRun(_get(ledger, record.id), counts, samples)


def _count(
    ledger: Ledger, record: ActionRecord, batch: int = BATCH
) -> tuple[dict[str, int], dict[str, list[int]]]:
    """What the action would do to each of its rows now: how many rows each outcome
    (``will retry``, or a reason to skip), with a few of each."""
    counts: Counter[str] = Counter()
    samples: dict[str, list[int]] = {}
    after = 0
    while True:
        ids, rows = ledger.store.pending_batch(record.id, after=after, limit=batch)
        if not ids:
            return dict(counts), samples
        for sid in ids:
            step, reason = _step(ledger, record, rows.get(sid))
            outcome = will(record.kind) if step is not None else _reason_kind(reason)
            counts[outcome] += 1
            if len(samples.setdefault(outcome, [])) < SAMPLES:
                samples[outcome].append(sid)
        after = ids[-1]


def _reason_kind(reason: str) -> str:
    """A skip reason without the row's own label, so that rows skipped for the same
    reason count together (``#12 (sms:a) is synced: ...`` -> ``is synced: ...``)."""
    head, sep, tail = reason.partition(") ")
    return tail if sep and head.startswith("#") else reason


def confirm_bulk(
    ledger: Ledger, action_id: int, *, by: str | None = None, approval: Approval | None = None
) -> ActionRecord | Requested:
    """Its person confirms a planned bulk action: it runs (the caller carries it out,
    `carry_out`), or, over the two-person rule's size, waits for a second person."""
    record = _get(ledger, action_id)
    if record.state is not ActionState.PLANNED:
        raise InvalidInput(f"action #{action_id} is {record.state}, not a dry run to confirm")
    if not same_name(record.actor, operator_actor(by)):
        raise InvalidInput(f"action #{action_id} is {record.person}'s to confirm")
    if record.lapses_at is not None and record.lapses_at <= ledger.now():
        raise InvalidInput(
            f"the dry run of action #{action_id} is older than {PLAN_LAPSES / 3600:g} h: "
            "make a new one (the rows may have changed since)"
        )
    plan = record.plan or {}
    acting = int(plan.get("counts", {}).get(will(record.kind), 0))
    policy = approval or ledger.approval
    forced = bool(record.params.get("force_in_doubt"))
    reason = policy.reason(record.kind, rows=acting, forced=forced, bulk=True) if policy else None
    to = ActionState.AWAITING_APPROVAL if reason else ActionState.IN_PROGRESS
    expires = policy.lapses_after if (policy and reason) else None
    if not ledger.store.set_plan(
        action_id, plan, to=to, from_=ActionState.PLANNED, lapses_in=expires
    ):
        raise InvalidInput(f"action #{action_id} changed meanwhile: look again")
    after = _get(ledger, action_id)
    return Requested(after, reason) if reason else after


def pause_action(ledger: Ledger, action_id: int) -> bool:
    """Stop a bulk action in progress after its current batch; False if it was not in progress."""
    return ledger.store.move_action(action_id, ActionState.PAUSED, from_=(ActionState.IN_PROGRESS,))


def resume_action(ledger: Ledger, action_id: int) -> bool:
    """Let a paused bulk action go on (`carry_out` carries it on); False if not paused."""
    return ledger.store.move_action(action_id, ActionState.IN_PROGRESS, from_=(ActionState.PAUSED,))


def cancel_action(ledger: Ledger, action_id: int) -> bool:
    """End an action before its remaining rows (a dry run not confirmed, a request
    withdrawn, a bulk action stopped): they stay as they are; False if it ended."""
    return ledger.store.move_action(
        action_id,
        ActionState.CANCELLED,
        from_=(
            ActionState.PLANNED,
            ActionState.AWAITING_APPROVAL,
            ActionState.IN_PROGRESS,
            ActionState.PAUSED,
        ),
    )


# -- the action log ------------------------------------------------------------------------


def action_log(
    ledger: Ledger,
    *,
    by: str | None = None,
    kind: str | None = None,
    state: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    before: int | None = None,
    limit: int = 100,
) -> list[ActionRecord]:
    """Every action by a person, newest first, by person, kind, state and time."""
    ledger.store.lapse_actions()
    return ledger.store.actions(
        actor=operator_actor(by) if by else None,
        kind=_parse(ActionKind, kind, "kind"),
        state=_parse(ActionState, state, "state"),
        since=since,
        until=until,
        before=before,
        limit=limit,
    )


def action_detail(
    ledger: Ledger, action_id: int, *, after: int = 0, outcome: str | None = None, limit: int = 100
) -> tuple[ActionRecord, list[ActionRow]]:
    """An action and the rows behind it, with what happened to each."""
    if outcome not in (None, "done", "skipped", "pending"):
        raise InvalidInput(f"outcome is done, skipped or pending, not {outcome!r}")
    return _get(ledger, action_id), ledger.store.action_rows(
        action_id, after=after, outcome=outcome, limit=limit
    )


E = TypeVar("E", ActionKind, ActionState)


def _parse(enum: type[E], value: str | None, what: str) -> E | None:
    if not value:
        return None
    try:
        return enum(value.strip().lower().replace("-", "_"))
    except ValueError:
        names = ", ".join(e.value for e in enum)
        raise InvalidInput(f"no {what} named {value!r}: choose {names}") from None


# -- the action log as data ----------------------------------------------------------------

CSV_COLUMNS = (
    "id",
    "created_at",
    "by",
    "kind",
    "target",
    "state",
    "note",
    "rows",
    "done",
    "skipped",
    "approver",
    "decided_at",
    "decision_note",
    "finished_at",
)
CORRECTED = "corrected (not shown)"
"""What the action log shows of a resend's corrected payload: that there was one."""
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
"""A CSV cell starting with one of these is a formula to a spreadsheet: written with a
leading apostrophe, so that a note cannot run anything on the auditor's machine."""


def action_json(record: ActionRecord) -> dict[str, Any]:
    """An entry of the action log for scripts (`--json`) and the CSV export; a resend's
    corrected payload shows as `CORRECTED`, never its values."""

    def when(value: datetime | None) -> str | None:
        return value.isoformat() if value is not None else None

    return {
        "id": record.id,
        "kind": record.kind.value,
        "scope": record.scope.value,
        "target": record.target,
        "state": record.state.value,
        "by": record.person,
        "note": record.note,
        "params": {k: CORRECTED if k == "payload" else v for k, v in record.params.items()},
        "plan": record.plan,
        "approver": None if record.approver is None else person_of(record.approver),
        "decision_note": record.decision_note,
        "decided_at": when(record.decided_at),
        "lapses_at": when(record.lapses_at),
        "rows": record.total,
        "done": record.done,
        "skipped": record.skipped,
        "created_at": when(record.created_at),
        "finished_at": when(record.finished_at),
    }


def actions_csv(records: Sequence[ActionRecord]) -> str:
    """The action log as CSV, one line per action, for an auditor's spreadsheet."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for record in records:
        data = action_json(record)
        writer.writerow(_csv_cell(data[column]) for column in CSV_COLUMNS)
    return buffer.getvalue()


def _csv_cell(value: Any) -> str:
    """A cell as the auditor reads it: control characters written out (`visible`: an
    ESC in a note cannot drive the terminal the CSV is printed to), and a formula
    disarmed."""
    text = visible("" if value is None else str(value))
    return "'" + text if text.startswith(FORMULA_START) else text
