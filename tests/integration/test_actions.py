"""The action log, two-person requests and bulk actions, on every database: each
person's action is one entry with its rows; a request changes nothing until a
second person approves it; a bulk action acts on the rows frozen at its dry run,
in batches that two holders never both carry out."""

from __future__ import annotations

import threading
import time

import pytest

import denpyo
from denpyo.domain.actions import ActionKind, ActionState, Approval, RowOutcome
from denpyo.domain.filters import Filter
from denpyo.engine import operator as op
from denpyo.errors import InvalidInput
from waiting import wait_until

S = denpyo.Status
EMAIL = Filter(channel="email")


def channel(ledger: denpyo.Ledger) -> None:
    """The channel `email`: keys starting with "f" or "late" fail (transient, one
    attempt: exhausted), the others arrive."""
    if "email" in ledger.channels:
        return

    def send(sub: denpyo.Submission) -> str:
        if sub.key.startswith(("f", "late")):
            raise denpyo.Transient("503")
        return f"r-{sub.key}"

    ledger.channel("email", max_attempts=1, down_after=None)(send)


def submit(ledger: denpyo.Ledger, key: str) -> denpyo.Submission:
    try:
        return ledger.submit("email", key, {"key": key})
    except denpyo.SubmissionError as exc:
        return exc.submission


def row_of(ledger: denpyo.Ledger, sid: int) -> denpyo.Submission:
    sub = ledger.store.get(sid)
    assert sub is not None
    return sub


def failed_rows(ledger: denpyo.Ledger, n: int, prefix: str = "f") -> list[int]:
    channel(ledger)
    return [submit(ledger, f"{prefix}{i}").id for i in range(n)]


def test_each_action_is_one_entry_with_its_rows(ledger: denpyo.Ledger) -> None:
    a, b = failed_rows(ledger, 2)
    op.retry(ledger, refs=[a], note="provider back", by="ada")
    op.resolve_abandon(ledger, b, note="customer left", by="bob")
    ledger.pause("email", note="provider incident", by="ada")
    log = op.action_log(ledger)
    assert [(r.kind, r.person, r.state) for r in log] == [
        (ActionKind.PAUSE, "ada", ActionState.DONE),
        (ActionKind.ABANDON, "bob", ActionState.DONE),
        (ActionKind.RETRY, "ada", ActionState.DONE),
    ]
    assert [r.kind for r in op.action_log(ledger, by="ada")] == [ActionKind.PAUSE, ActionKind.RETRY]
    assert [r.kind for r in op.action_log(ledger, kind="abandon")] == [ActionKind.ABANDON]
    retried, rows = op.action_detail(ledger, log[2].id)
    assert (retried.total, retried.done, retried.skipped, retried.note) == (
        1,
        1,
        0,
        "provider back",
    )
    assert [(r.submission_id, r.outcome) for r in rows] == [(a, RowOutcome.DONE)]
    with pytest.raises(InvalidInput, match="no kind named 'retyr'"):
        op.action_log(ledger, kind="retyr")


def test_a_refused_action_writes_no_entry(ledger: denpyo.Ledger) -> None:
    channel(ledger)
    synced = submit(ledger, "ok1")
    with pytest.raises(denpyo.TransitionNotAllowed):
        op.retry(ledger, refs=[synced.id], note="x", by="ada")
    assert op.action_log(ledger) == []


def test_two_person_rule_waits_for_a_second_person(ledger: denpyo.Ledger) -> None:
    [row] = failed_rows(ledger, 1)
    ledger.approval = Approval()
    done = op.resolve_mark_synced(ledger, row, remote_id="r-9", note="found it", by="ada")
    assert done.requested is not None and "second person" in done.requested.reason
    request = done.requested.action
    assert request.state is ActionState.AWAITING_APPROVAL
    assert row_of(ledger, row).status is S.FAILED  # nothing done yet
    with pytest.raises(InvalidInput, match="second person"):
        op.approve(ledger, request.id, note="mine", by="ada")
    with pytest.raises(InvalidInput, match="note"):
        op.approve(ledger, request.id, note="", by="bob")
    after = op.approve(ledger, request.id, note="checked the provider", by="bob")
    assert (after.state, after.approved_by, after.done) == (ActionState.DONE, "bob", 1)
    sub = row_of(ledger, row)
    assert sub.status is S.SYNCED and sub.remote_id == "r-9"
    last = ledger.events(row)[-1]
    assert last.actor == "operator:ada" and "approved by bob" in (last.detail or "")
    with pytest.raises(InvalidInput, match="done, not waiting"):
        op.approve(ledger, request.id, note="again", by="carol")


def test_a_declined_or_lapsed_request_does_nothing(ledger: denpyo.Ledger) -> None:
    a, b = failed_rows(ledger, 2)
    ledger.approval = Approval()  # the default expiry: no machine is that slow
    first = op.resolve_mark_synced(ledger, a, remote_id="r", note="n", by="ada").requested
    assert first is not None
    declined = op.decline(ledger, first.action.id, note="not at the provider", by="bob")
    assert (declined.state, declined.decision_note) == (ActionState.DECLINED, "not at the provider")
    ledger.approval = Approval(lapses_after=0.2)  # this one expires while we wait
    second = op.resolve_mark_synced(ledger, b, remote_id="r", note="n", by="ada").requested
    assert second is not None and second.action.lapses_at is not None
    lapses_at = second.action.lapses_at
    wait_until(lambda: ledger.store.now() > lapses_at, "the request's expiry, by the database")
    with pytest.raises(InvalidInput, match="lapsed"):
        op.approve(ledger, second.action.id, note="late", by="bob")
    assert [row_of(ledger, i).status for i in (a, b)] == [S.FAILED, S.FAILED]


def test_bulk_acts_on_the_rows_frozen_at_its_dry_run(ledger: denpyo.Ledger) -> None:
    failed = failed_rows(ledger, 12)
    flt = Filter(statuses=(S.FAILED,), channel="email")
    dry = op.plan_bulk(
        ledger, ActionKind.RETRY, flt, note="after the outage", by="ada", target="failed email"
    )
    assert dry.counts == {"will retry": 12} and dry.action.total == 12
    later = failed_rows(ledger, 3, prefix="late")  # not in the frozen set
    started = op.confirm_bulk(ledger, dry.action.id, by="ada")
    assert not isinstance(started, op.Requested) and started.state is ActionState.IN_PROGRESS
    seen: list[int] = []
    done = op.carry_out(ledger, dry.action.id, batch=5, progress=lambda r: seen.append(r.done))
    assert (done.state, done.done, done.skipped) == (ActionState.DONE, 12, 0)
    assert seen == [5, 10, 12]
    assert all(row_of(ledger, i).next_attempt_at is not None for i in failed)
    assert all(row_of(ledger, i).next_attempt_at is None for i in later)
    note = ledger.events(failed[0])[-1].detail or ""
    assert "bulk action #" in note


def test_bulk_skips_what_its_rows_no_longer_allow_and_says_why(ledger: denpyo.Ledger) -> None:
    ids = failed_rows(ledger, 4)
    dry = op.plan_bulk(
        ledger, ActionKind.ABANDON, Filter(channel="email"), note="closing", by="ada", target="x"
    )
    op.resolve_abandon(ledger, ids[0], note="done by hand", by="bob")  # after the dry run
    op.confirm_bulk(ledger, dry.action.id, by="ada")
    done = op.carry_out(ledger, dry.action.id)
    assert (done.done, done.skipped) == (3, 1)
    _, rows = op.action_detail(ledger, dry.action.id, outcome="skipped")
    assert [r.submission_id for r in rows] == [ids[0]]
    assert "already resolved" in (rows[0].reason or "")


def test_bulk_pauses_resumes_and_never_acts_twice(ledger: denpyo.Ledger) -> None:
    ids = failed_rows(ledger, 10)
    dry = op.plan_bulk(
        ledger, ActionKind.RETRY, Filter(channel="email"), note="n", by="ada", target="x"
    )
    op.confirm_bulk(ledger, dry.action.id, by="ada")
    paused = op.carry_out(
        ledger, dry.action.id, batch=3, progress=lambda r: op.pause_action(ledger, r.id)
    )
    assert (paused.state, paused.done) == (ActionState.PAUSED, 3)
    assert op.carry_out(ledger, dry.action.id).done == 3  # paused: nothing runs
    assert op.resume_action(ledger, dry.action.id)
    done = op.carry_out(ledger, dry.action.id, batch=3)
    assert (done.state, done.done, done.skipped) == (ActionState.DONE, 10, 0)
    for sid in ids:
        assert [e.kind for e in ledger.events(sid)].count("retry") == 1


def test_a_runner_that_lost_its_lease_writes_nothing(ledger: denpyo.Ledger) -> None:
    [row] = failed_rows(ledger, 1)
    dry = op.plan_bulk(
        ledger, ActionKind.RETRY, Filter(channel="email"), note="n", by="ada", target="x"
    )
    op.confirm_bulk(ledger, dry.action.id, by="ada")
    store = ledger.store
    assert store.take_action(dry.action.id, holder="a", lease=1.5)
    assert not store.take_action(dry.action.id, holder="b", lease=60)  # a holds it
    wait_until(  # a's lease runs out
        lambda: store.take_action(dry.action.id, holder="b", lease=60), "a's lease to run out"
    )
    sub = row_of(ledger, row)
    from denpyo.engine.operator._moves import retry_move

    plan = [(row, retry_move(sub, "operator:ada", "n", False), None)]
    assert store.carry_out(dry.action.id, holder="a", lease=60, plan=plan) is None
    assert row_of(ledger, row).next_attempt_at is None  # a's batch rolled back
    assert store.carry_out(dry.action.id, holder="b", lease=60, plan=plan) is not None
    assert store.action(dry.action.id).state is ActionState.DONE  # type: ignore[union-attr]


def test_two_runners_at_once_act_on_each_row_once(ledger: denpyo.Ledger) -> None:
    ids = failed_rows(ledger, 30)
    dry = op.plan_bulk(
        ledger, ActionKind.RETRY, Filter(channel="email"), note="n", by="ada", target="x"
    )
    op.confirm_bulk(ledger, dry.action.id, by="ada")
    threads = [
        threading.Thread(target=op.carry_out, args=(ledger, dry.action.id), kwargs={"batch": 4})
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = op.carry_out(ledger, dry.action.id)  # whatever one left, finished
    assert (final.state, final.done) == (ActionState.DONE, 30)
    for sid in ids:
        assert [e.kind for e in ledger.events(sid)].count("retry") == 1


def test_a_large_bulk_over_the_rule_waits_for_approval(ledger: denpyo.Ledger) -> None:
    failed_rows(ledger, 3)
    ledger.approval = Approval(bulk_over=2)
    dry = op.plan_bulk(
        ledger, ActionKind.RETRY, Filter(channel="email"), note="n", by="ada", target="x"
    )
    asked = op.confirm_bulk(ledger, dry.action.id, by="ada")
    assert isinstance(asked, op.Requested) and "over 2 rows" in asked.reason
    assert op.carry_out(ledger, dry.action.id).done == 0  # waits
    done = op.approve(ledger, dry.action.id, note="ok", by="bob")
    assert (done.state, done.done, done.approved_by) == (ActionState.DONE, 3, "bob")


def test_bad_input_is_refused(ledger: denpyo.Ledger) -> None:
    channel(ledger)
    with pytest.raises(InvalidInput, match="note"):
        op.plan_bulk(ledger, ActionKind.RETRY, EMAIL, note=" ", by="ada", target="x")
    with pytest.raises(InvalidInput, match="not mark_synced"):
        op.plan_bulk(ledger, ActionKind.MARK_SYNCED, Filter(), note="n", by="ada", target="x")
    with pytest.raises(InvalidInput, match="no action #999"):
        op.approve(ledger, 999, note="n", by="bob")
    dry = op.plan_bulk(ledger, ActionKind.RETRY, EMAIL, note="n", by="ada", target="x")
    with pytest.raises(InvalidInput, match="ada's to confirm"):
        op.confirm_bulk(ledger, dry.action.id, by="bob")


def test_a_bulk_action_needs_a_filter(ledger: denpyo.Ledger) -> None:
    """Every row of the table is never one click away: the CLI and the dashboard
    both plan through `plan_bulk`, which refuses a filter without a condition."""
    failed_rows(ledger, 2)
    with pytest.raises(InvalidInput, match="needs a filter"):
        op.plan_bulk(ledger, ActionKind.ABANDON, Filter(), note="all", by="ada", target="x")
    assert op.action_log(ledger) == []


def test_people_are_one_person_whatever_the_case_of_their_names(ledger: denpyo.Ledger) -> None:
    """`bob` asks and `BOB` may not approve: the same person, as the sign-in compares
    them; `ADA` confirms `ada`'s dry run."""
    [row] = failed_rows(ledger, 1)
    ledger.approval = Approval()
    asked = op.resolve_mark_synced(ledger, row, remote_id="r", note="seen", by="bob").requested
    assert asked is not None
    for same in ("BOB", " Bob "):
        with pytest.raises(InvalidInput, match="second person"):
            op.approve(ledger, asked.action.id, note="ok", by=same)
    assert row_of(ledger, row).status is S.FAILED
    dry = op.plan_bulk(ledger, ActionKind.RETRY, EMAIL, note="n", by="ada", target="x")
    started = op.confirm_bulk(ledger, dry.action.id, by="ADA")
    assert isinstance(started, op.Requested) or started.state is ActionState.IN_PROGRESS
    assert [r.person for r in op.action_log(ledger, by="Bob")] == ["bob"]


def test_a_name_given_on_the_command_line_is_cleaned_as_the_dashboards(
    ledger: denpyo.Ledger,
) -> None:
    [row] = failed_rows(ledger, 1)
    op.resolve_abandon(ledger, row, note="gone", by="\x1b]0;pwned\x07mallory\n")
    [entry] = op.action_log(ledger)
    assert entry.person == "]0;pwnedmallory"
    assert ledger.events(row)[-1].actor == "operator:]0;pwnedmallory"


def test_the_csv_of_the_action_log_holds_no_control_character(ledger: denpyo.Ledger) -> None:
    [row] = failed_rows(ledger, 1)
    op.resolve_abandon(ledger, row, note="\x1b[2Jcleared\x07 then\nsecond line", by="ada")
    text = op.actions_csv(op.action_log(ledger))
    assert not any(ch in text for ch in "\x1b\x07")
    assert "\\x1b[2Jcleared\\x07 then\\nsecond line" in text
    assert len(text.splitlines()) == 2  # the heading and one action


def test_a_filter_by_error_text_and_key_prefix(ledger: denpyo.Ledger) -> None:
    failed_rows(ledger, 3)

    def busy(sub: denpyo.Submission) -> str:
        raise denpyo.Transient("429 Too Many Requests (try later)")

    ledger.channel("sms", max_attempts=1, down_after=None)(busy)
    for i in range(2):
        with pytest.raises(denpyo.SubmissionError):
            ledger.submit("sms", f"s{i}", {"i": i})
    found = ledger.store.list_submissions(Filter(error_text="Too Many"))
    assert sorted(s.key for s in found) == ["s0", "s1"]
    assert ledger.store.list_submissions(Filter(error_text="too many")) == []  # case-sensitive
    assert len(ledger.store.list_submissions(Filter(error_text="503", key_prefix="f"))) == 3
    assert ledger.store.list_submissions(Filter(error_text="%")) == []  # no wildcard
    dry = op.plan_bulk(
        ledger, ActionKind.RETRY, Filter(error_text="(try later)"), note="n", by="ada", target="x"
    )
    assert dry.counts == {"will retry": 2}
    with pytest.raises(InvalidInput, match="error text"):
        Filter(error_text="x" * 201)


def test_an_old_dry_run_is_not_confirmed(
    ledger: denpyo.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed_rows(ledger, 1)
    from denpyo.engine.operator import _actions

    monkeypatch.setattr(_actions, "PLAN_LAPSES", 0.1)
    dry = op.plan_bulk(ledger, ActionKind.RETRY, EMAIL, note="n", by="ada", target="x")
    time.sleep(0.3)
    with pytest.raises(InvalidInput, match="make a new one"):
        op.confirm_bulk(ledger, dry.action.id, by="ada")
