"""The action log: an entry freezes its rows when it is made; one holder at a time
carries them out, a batch per transaction under its lease; a request waits for a
second person, who is never the one who asked, until it expires."""

from __future__ import annotations

import time

from store_helpers import EXHAUSTED, GONE, SYNCED, new, settled

from denpyo.domain.actions import ActionKind, ActionState, RowOutcome, Scope
from denpyo.domain.filters import Filter
from denpyo.domain.moves import Move
from denpyo.domain.status import Status
from denpyo.store import Store
from denpyo.store.actions import NewAction, Resend


def entry(kind: ActionKind = ActionKind.RETRY, **kwargs: object) -> NewAction:
    values: dict[str, object] = {
        "kind": kind,
        "scope": Scope.ROWS,
        "target": "rows",
        "actor": "operator:ada",
        "note": "provider back",
    }
    values.update(kwargs)
    return NewAction(**values)  # type: ignore[arg-type]


def test_an_entry_freezes_its_rows_and_the_log_reads_newest_first(store: Store) -> None:
    a = settled(store, "a", EXHAUSTED)
    b = settled(store, "b", EXHAUSTED)
    settled(store, "s", SYNCED)
    named = store.add_action(entry(), ids=[b.id, a.id, a.id])
    assert (named.total, named.done, named.state) == (2, 0, ActionState.IN_PROGRESS)
    assert [r.submission_id for r in store.action_rows(named.id)] == [a.id, b.id]
    assert all(r.outcome is None for r in store.action_rows(named.id))

    flt = Filter(statuses=(Status.FAILED,))
    found = store.add_action(
        entry(scope=Scope.FILTER, target="failed", actor="operator:bob"), flt=flt
    )
    assert found.total == 2, "every row the filter finds now, not the synced one"
    late = settled(store, "late", EXHAUSTED)
    assert late.id not in [r.submission_id for r in store.action_rows(found.id)]

    paused = store.add_action(entry(ActionKind.PAUSE, scope=Scope.CHANNEL, target="c"))
    assert paused.total == 0
    assert store.action(named.id) == named and store.action(10**9) is None
    assert [r.id for r in store.actions()] == [paused.id, found.id, named.id]
    assert [r.id for r in store.actions(actor="operator:bob")] == [found.id]
    assert [r.id for r in store.actions(kind=ActionKind.PAUSE)] == [paused.id]
    assert [r.id for r in store.actions(before=paused.id, limit=1)] == [found.id]
    assert store.actions(state=ActionState.DONE) == []
    since = store.now()
    assert store.actions(since=since) == [] and len(store.actions(until=since)) == 3


def test_one_holder_carries_out_a_batch_under_its_lease(store: Store) -> None:
    a = settled(store, "a", EXHAUSTED)
    b = settled(store, "b", EXHAUSTED)
    c = settled(store, "c", EXHAUSTED)
    gone = GONE
    record = store.add_action(entry(), ids=[a.id, b.id, c.id, gone])
    assert store.take_action(record.id, holder="h1", lease=60)
    assert not store.take_action(record.id, holder="h2", lease=60), "h1 holds it"

    ids, rows = store.pending_batch(record.id, after=0, limit=2)
    assert ids == [a.id, b.id] and set(rows) == {a.id, b.id}
    assert not store.carry_out(
        record.id, holder="h2", lease=60, plan=[(a.id, Move.retry(a, "operator:ada", "n"), None)]
    )
    assert store.get(a.id) == a, "a holder without the action writes nothing"
    results = store.carry_out(
        record.id,
        holder="h1",
        lease=60,
        plan=[(a.id, Move.retry(a, "operator:ada", "n"), None), (b.id, None, "not failed")],
    )
    assert results == [(a.id, RowOutcome.DONE, None), (b.id, RowOutcome.SKIPPED, "not failed")]
    moved = store.get(a.id)
    assert moved is not None and moved.next_attempt_at is not None
    assert store.events(a.id)[-1].kind == "retry"
    assert [(r.submission_id, r.outcome) for r in store.action_rows(record.id, outcome="done")] == [
        (a.id, RowOutcome.DONE)
    ]
    assert store.pending_batch(record.id, after=b.id, limit=10) == ([c.id, gone], {c.id: c})

    store.let_go_action(record.id, holder="h2")
    assert not store.take_action(record.id, holder="h2", lease=60), "only h1 lets it go"
    store.let_go_action(record.id, holder="h1")
    assert store.take_action(record.id, holder="h2", lease=60)

    assert store.move([Move.mark_synced(c, "operator:bob", "r-9", "found", "n")]) != [None]
    results = store.carry_out(
        record.id,
        holder="h2",
        lease=60,
        plan=[(c.id, Move.retry(c, "operator:ada", "n"), None), (gone, None, None)],
    )
    assert results == [
        (c.id, RowOutcome.SKIPPED, "moved meanwhile: look again"),  # its compare-and-set lost
        (gone, RowOutcome.SKIPPED, "no longer in the ledger"),
    ]
    after = store.action(record.id)
    assert after is not None and (after.done, after.skipped, after.pending) == (1, 3, 0)
    assert store.pending_batch(record.id, after=0, limit=10) == ([], {})
    assert after.state is ActionState.DONE and after.finished_at is not None, "no row left"
    assert not store.take_action(record.id, holder="h1", lease=60), "a done one is not taken"


def test_a_resend_in_a_batch_records_the_new_row_with_the_old_ones_move(store: Store) -> None:
    old = settled(store, "a", EXHAUSTED)
    record = store.add_action(entry(ActionKind.RESEND), ids=[old.id], holder="h", lease=60)
    assert record.locked_by == "h"
    resend = Resend(
        new("a-2"),
        "operator:ada",
        "resend of #1",
        lambda created: Move.give_up(
            old, "operator:ada", "resend", f"resent as #{created.id}", "n"
        ),
    )
    [(sid, outcome, reason)] = store.carry_out(
        record.id, holder="h", lease=60, plan=[(old.id, resend, None)]
    ) or [(0, None, "")]
    created = store.get_by_key("c", "a-2")
    assert created is not None and (sid, outcome, reason) == (
        old.id,
        RowOutcome.DONE,
        f"resent as #{created.id}",
    )
    gave_up = store.get(old.id)
    assert gave_up is not None and gave_up.resolution == f"resent as #{created.id}"


def test_people_steer_and_decide_actions(store: Store) -> None:
    planned = store.add_action(entry(state=ActionState.PLANNED))
    plan = {"count": 3, "sample": [1, 2]}
    assert not store.set_plan(
        planned.id, plan, to=ActionState.IN_PROGRESS, from_=ActionState.PAUSED
    )
    assert store.set_plan(
        planned.id,
        plan,
        to=ActionState.AWAITING_APPROVAL,
        from_=ActionState.PLANNED,
        lapses_in=3600,
    )
    requested = store.action(planned.id)
    assert requested is not None and requested.plan == plan
    assert requested.state is ActionState.AWAITING_APPROVAL and requested.lapses_at is not None

    assert not store.decide_action(planned.id, approver="operator:ada", approve=True, note="me")
    assert store.decide_action(planned.id, approver="operator:bob", approve=True, note="ok")
    approved = store.action(planned.id)
    assert approved is not None and approved.state is ActionState.IN_PROGRESS
    assert (approved.approved_by, approved.decision_note) == ("bob", "ok")
    assert not store.decide_action(planned.id, approver="operator:cy", approve=False, note="no")

    assert store.move_action(planned.id, ActionState.PAUSED, from_=[ActionState.IN_PROGRESS])
    assert not store.move_action(planned.id, ActionState.PAUSED, from_=[ActionState.IN_PROGRESS])
    assert not store.take_action(planned.id, holder="h", lease=60), "a paused one waits"
    assert store.move_action(
        planned.id, ActionState.CANCELLED, from_=[ActionState.IN_PROGRESS, ActionState.PAUSED]
    )
    cancelled = store.action(planned.id)
    assert cancelled is not None and cancelled.finished_at is not None

    rejected = store.add_action(entry(state=ActionState.AWAITING_APPROVAL, lapses_in=3600))
    assert store.decide_action(rejected.id, approver="operator:bob", approve=False, note="no")
    again = store.action(rejected.id)
    assert again is not None and again.state is ActionState.DECLINED


def test_requests_nobody_decided_in_time_expire(store: Store) -> None:
    soon = store.add_action(entry(state=ActionState.AWAITING_APPROVAL, lapses_in=0.05))
    later = store.add_action(entry(state=ActionState.AWAITING_APPROVAL, lapses_in=3600))
    time.sleep(0.2)  # past the first one's expiry, by the database clock
    assert store.lapse_actions() == 1
    assert store.lapse_actions() == 0
    expired, waiting = store.action(soon.id), store.action(later.id)
    assert expired is not None and expired.state is ActionState.LAPSED
    assert waiting is not None and waiting.state is ActionState.AWAITING_APPROVAL
    assert not store.decide_action(soon.id, approver="operator:bob", approve=True, note="late")


def test_a_prune_is_counted_when_done(store: Store) -> None:
    record = store.add_action(entry(ActionKind.PRUNE, scope=Scope.TABLE, target="retention"))
    counted = store.counted(record.id, 7)
    assert (counted.total, counted.done, counted.skipped) == (7, 7, 0)
    assert store.action(record.id) == counted
