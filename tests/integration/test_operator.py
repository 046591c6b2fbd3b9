"""The operator library (what the CLI calls) on every backend: reads, retry, resolve,
reconcile and the worker's clean stop. Every refusal must leave the database as it was."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

import denpyo
from denpyo.domain.actions import ActionKind, RowOutcome, Scope
from denpyo.domain.filters import Filter
from denpyo.domain.moves import Move
from denpyo.engine import operator as op
from denpyo.store import NewSubmission
from denpyo.store.actions import MOVED, NewAction, Resend

Modes = dict[str, str]


def channel(ledger: denpyo.Ledger, name: str = "email", **options: Any) -> Modes:
    """Register a channel whose outcome per key is scripted: ok (default), transient,
    reject or boom (an unclassified exception: ambiguous)."""
    modes: Modes = {}

    def send(sub: denpyo.Submission) -> str:
        mode = modes.get(sub.key, "ok")
        if mode == "transient":
            raise denpyo.Transient("503")
        if mode == "reject":
            raise denpyo.Rejected("422 bad address")
        if mode == "boom":
            raise RuntimeError("connection dropped")
        return f"r-{sub.key}"

    ledger.channel(name, **options)(send)
    return modes


def submit(ledger: denpyo.Ledger, key: str, channel_name: str = "email") -> denpyo.Submission:
    try:
        return ledger.submit(channel_name, key, {"key": key})
    except denpyo.SubmissionError as exc:
        return exc.submission


def in_doubt_requesting(ledger: denpyo.Ledger, key: str, channel_name: str = "email") -> int:
    """A row as a crash leaves it: `requesting`, held to send, lease run out."""
    new = NewSubmission(channel_name, key, f"idem-{key}", json.dumps({"key": key}))
    sub, _ = ledger.store.record(new, actor="w/1", lease=60)
    S = denpyo.Status
    expire = Move(
        sub.id,
        S.REQUESTING,
        S.REQUESTING,
        "w/1",
        holder="w/1",
        new_holder="w/1",
        lease=0,
        retry_in=0,
        keep_error=True,
    )
    [moved] = ledger.store.move([expire])
    assert moved is not None and moved.in_doubt
    return sub.id


def in_flight(ledger: denpyo.Ledger, key: str) -> int:
    new = NewSubmission("email", key, f"idem-{key}", "{}")
    sub, _ = ledger.store.record(new, actor="w/2", lease=600)
    return sub.id


def snapshot(ledger: denpyo.Ledger) -> list[Any]:
    """Every row and event, to show that a refusal wrote nothing."""
    rows = ledger.store.list_submissions(Filter(limit=10_000))
    return [(s, ledger.events(s.id)) for s in rows]


def kinds(ledger: denpyo.Ledger, sub_id: int) -> list[str]:
    return [e.kind for e in ledger.events(sub_id)]


@pytest.fixture
def mixed(ledger: denpyo.Ledger) -> dict[str, int]:
    """One row in each interesting state, on channel `email` (and one on `sms`)."""
    modes = channel(ledger, max_attempts=1)
    channel(ledger, "sms")
    modes.update({"k-failed": "transient", "k-rejected": "reject", "k-ambiguous": "boom"})
    ids = {key: submit(ledger, key).id for key in ("k-ok", "k-failed", "k-rejected", "k-ambiguous")}
    ids["k-sms"] = submit(ledger, "k-sms", "sms").id
    ids["k-doubt"] = in_doubt_requesting(ledger, "k-doubt")
    ids["k-pending"] = ledger.enqueue("email", "k-pending", {"key": "k-pending"}).id
    modes.clear()  # from now on every call succeeds
    return ids


def test_status_counts_by_channel_and_what_needs_attention(
    ledger: denpyo.Ledger, mixed: dict[str, int]
) -> None:
    report = op.status(ledger)
    S = denpyo.Status
    assert report.channels["email"] == {S.REQUESTING: 2, S.SYNCED: 1, S.FAILED: 2, S.REJECTED: 1}
    assert report.channels["sms"][S.SYNCED] == 1
    assert report.totals[S.SYNCED] == 2
    assert report.in_doubt == 2  # the ambiguous failure and the expired lease
    assert report.exhausted == 1  # k-failed: max_attempts=1
    assert report.rejected_open == 1
    assert report.needs_person == 4
    assert report.pending == 2  # k-doubt and k-pending are still requesting
    assert report.oldest_pending is not None and report.oldest_pending_age is not None
    assert report.oldest_pending_age >= 0
    json_report = report.to_json()
    assert json_report["channels"]["email"]["failed"] == 2
    only_sms = op.status(ledger, "sms")
    assert set(only_sms.channels) == {"sms"} and only_sms.needs_person == 0
    with pytest.raises(denpyo.InvalidInput):
        op.status(ledger, "bad channel!")


def test_list_filters(ledger: denpyo.Ledger, mixed: dict[str, int]) -> None:
    def keys(**fields: Any) -> list[str]:
        return [s.key for s in op.list_submissions(ledger, Filter(**fields))]

    S = denpyo.Status
    assert keys(statuses=(S.FAILED,)) == ["k-ambiguous", "k-failed"]  # newest first
    assert set(keys(statuses=(S.FAILED, S.REJECTED))) == {"k-ambiguous", "k-failed", "k-rejected"}
    assert keys(channel="sms") == ["k-sms"]
    assert set(keys(in_doubt=True)) == {"k-ambiguous", "k-doubt"}
    assert "k-doubt" not in keys(in_doubt=False) and "k-pending" in keys(in_doubt=False)
    assert set(keys(needs_person=True)) == {"k-failed", "k-rejected", "k-ambiguous", "k-doubt"}
    assert keys(key_prefix="k-re") == ["k-rejected"]
    assert keys(key_prefix="K-") == []  # case-sensitive on every backend
    assert keys(key_prefix="k-%") == []  # no pattern characters
    assert len(keys(limit=3)) == 3
    now = ledger.store.now()
    assert len(keys(since=now - timedelta(hours=1))) == 7
    assert keys(since=now + timedelta(hours=1)) == []
    assert keys(until=now - timedelta(hours=1)) == []
    made = op.make_filter(ledger, since="1h", channel="sms")
    assert [s.key for s in op.list_submissions(ledger, made)] == ["k-sms"]


def test_find_by_id_or_channel_and_key(ledger: denpyo.Ledger) -> None:
    channel(ledger, "a:b")
    sub = submit(ledger, "order:42", "a:b")
    assert op.find(ledger, str(sub.id)).id == sub.id
    assert op.find(ledger, f"#{sub.id}").id == sub.id
    assert op.find(ledger, "a:b:order:42").id == sub.id
    with pytest.raises(op.SubmissionNotFound, match="no submission with id 999"):
        op.find(ledger, "999")
    with pytest.raises(op.SubmissionNotFound):
        op.find(ledger, "a:b:order:43")
    with pytest.raises(op.SubmissionNotFound):
        op.find(ledger, "9" * 30)
    with pytest.raises(denpyo.InvalidInput, match="neither an id"):
        op.find(ledger, "nonsense")
    shown = op.history(ledger, sub.id)
    assert [e.kind for e in shown.events] == ["created", "attempt", "settle"]
    assert shown.to_json()["submission"]["remote_id"] == "r-order:42"


def test_retry_makes_a_failed_row_due_and_a_worker_sends_it(
    ledger: denpyo.Ledger, mixed: dict[str, int]
) -> None:
    result = op.retry(ledger, refs=[str(mixed["k-failed"])], by="alice", note="provider is back")
    [after] = result.retried
    assert after.status is denpyo.Status.FAILED and after.next_attempt_at is not None
    assert after.next_attempt_at <= ledger.store.now()
    last = ledger.events(after.id)[-1]
    assert (last.kind, last.actor, last.detail) == ("retry", "operator:alice", "provider is back")
    ledger.work(until_idle=True)
    synced = ledger.get_by_id(after.id)
    assert synced is not None and synced.status is denpyo.Status.SYNCED


def test_retry_refusals_write_nothing(ledger: denpyo.Ledger, mixed: dict[str, int]) -> None:
    busy = in_flight(ledger, "k-busy")
    before = snapshot(ledger)
    refused = [
        (["k-ambiguous"], denpyo.InvalidInput, "in doubt"),
        (["k-doubt"], denpyo.InvalidInput, "in doubt"),
        (["k-rejected"], denpyo.TransitionNotAllowed, "rejected"),
        (["k-ok"], denpyo.TransitionNotAllowed, "synced"),
        (["k-pending"], denpyo.InvalidInput, "not been sent yet"),
        ([str(busy)], denpyo.InvalidInput, "being sent right now"),
        (["k-failed", "k-rejected"], denpyo.TransitionNotAllowed, "rejected"),
        (["k-failed", "12345"], op.SubmissionNotFound, "12345"),
    ]
    for refs, error, text in refused:
        ids = [str(mixed[r]) if r in mixed else r for r in refs]
        with pytest.raises(error, match=text):
            op.retry(ledger, refs=ids)
    with pytest.raises(denpyo.InvalidInput, match="note"):
        op.retry(ledger, refs=[str(mixed["k-ambiguous"])], force_in_doubt=True)
    with pytest.raises(denpyo.InvalidInput, match="not both"):
        op.retry(ledger, refs=["1"], flt=Filter())
    assert snapshot(ledger) == before


def test_forced_retry_of_in_doubt_rows(ledger: denpyo.Ledger, mixed: dict[str, int]) -> None:
    note = "checked the provider: not there"
    result = op.retry(
        ledger,
        refs=[str(mixed["k-ambiguous"]), str(mixed["k-doubt"])],
        force_in_doubt=True,
        note=note,
        by="bob",
    )
    failed, released = result.retried
    assert failed.error_kind is denpyo.ErrorKind.TRANSIENT and not failed.in_doubt
    assert released.status is denpyo.Status.REQUESTING
    assert released.locked_until is None and not released.in_doubt
    assert ledger.events(released.id)[-1].detail == f"forced retry of an in-doubt row: {note}"
    ledger.work(until_idle=True)
    # k-ambiguous: its first call and this one; k-doubt: its holder died before any
    # call was known to start, so this is its first
    for sub_id, calls in ((failed.id, 2), (released.id, 1)):
        after = ledger.get_by_id(sub_id)
        assert after is not None and after.status is denpyo.Status.SYNCED
        assert after.attempts == calls


def test_retry_by_filter_and_dry_run(ledger: denpyo.Ledger, mixed: dict[str, int]) -> None:
    before = snapshot(ledger)
    plan = op.retry(ledger, flt=Filter(channel="email"), dry_run=True)
    assert [s.key for s in plan.retried] == ["k-failed"]  # the ambiguous one is not taken
    assert snapshot(ledger) == before
    op.resolve_abandon(ledger, "email:k-failed", note="customer cancelled")
    assert op.retry(ledger, flt=Filter(channel="email")).retried == []
    forced = op.retry(ledger, flt=Filter(), force_in_doubt=True, note="all checked", dry_run=True)
    assert {s.key for s in forced.retried} == {"k-ambiguous", "k-doubt"}
    assert {s.key for s, _ in forced.skipped} == {"k-pending"}
    with pytest.raises(denpyo.InvalidInput, match="not synced"):
        op.retry(ledger, flt=Filter(statuses=(denpyo.Status.SYNCED,)))


def test_abandon(ledger: denpyo.Ledger, mixed: dict[str, int]) -> None:
    rejected = op.resolve_abandon(ledger, "email:k-rejected", note="wrong address", by="carol")
    sub = rejected.submission
    assert sub.status is denpyo.Status.REJECTED
    assert sub.resolution == "abandoned by operator:carol: wrong address"
    last = ledger.events(sub.id)[-1]
    assert (last.kind, last.actor, last.detail) == ("abandon", "operator:carol", "wrong address")
    doubt = op.resolve_abandon(ledger, str(mixed["k-doubt"]), note="will call the customer")
    moved = doubt.submission
    assert moved.status is denpyo.Status.FAILED and moved.error_kind is denpyo.ErrorKind.AMBIGUOUS
    assert moved.next_attempt_at is None and moved.in_doubt
    pending = op.resolve_abandon(ledger, "email:k-pending", note="order cancelled").submission
    assert pending.status is denpyo.Status.FAILED
    assert pending.error_kind is denpyo.ErrorKind.TRANSIENT and pending.last_error == "never sent"
    report = op.status(ledger)
    assert report.needs_person == 2 and report.resolved == 3
    assert ledger.work(until_idle=True).attempted == 0  # abandoned rows are not sent

    before = snapshot(ledger)
    with pytest.raises(denpyo.InvalidInput, match="note"):
        op.resolve_abandon(ledger, "email:k-failed", note="  ")
    with pytest.raises(denpyo.InvalidInput, match="already resolved"):
        op.resolve_abandon(ledger, "email:k-rejected", note="again")
    with pytest.raises(denpyo.TransitionNotAllowed, match="synced"):
        op.resolve_abandon(ledger, "email:k-ok", note="no")
    with pytest.raises(denpyo.InvalidInput, match="limit"):
        op.resolve_abandon(ledger, "email:k-failed", note="x" * 3000)
    assert snapshot(ledger) == before


def test_mark_synced(ledger: denpyo.Ledger, mixed: dict[str, int]) -> None:
    before = snapshot(ledger)
    with pytest.raises(denpyo.TransitionNotAllowed, match="rejected to synced"):
        op.resolve_mark_synced(ledger, "email:k-rejected", remote_id="r-9", note="found it")
    with pytest.raises(denpyo.InvalidInput, match="remote-id"):
        op.resolve_mark_synced(ledger, "email:k-ambiguous", remote_id=" ", note="found it")
    with pytest.raises(denpyo.InvalidInput, match="never sent"):
        op.resolve_mark_synced(ledger, "email:k-pending", remote_id="r-9", note="found it")
    with pytest.raises(denpyo.TransitionNotAllowed, match="already synced"):
        op.resolve_mark_synced(ledger, "email:k-ok", remote_id="r-9", note="found it")
    assert snapshot(ledger) == before
    done = op.resolve_mark_synced(
        ledger, "email:k-ambiguous", remote_id="msg_123", note="seen in the provider's console"
    ).submission
    assert done.status is denpyo.Status.SYNCED and done.remote_id == "msg_123"
    assert done.synced_at is not None and not done.in_doubt
    assert ledger.events(done.id)[-1].kind == "mark_synced"
    doubt = op.resolve_mark_synced(ledger, "email:k-doubt", remote_id="msg_7", note="seen")
    assert doubt.submission.status is denpyo.Status.SYNCED
    # a row in doubt after a crash counts no attempt (none known to have started), yet
    # may have arrived: a person may mark it synced
    assert doubt.submission.attempts == 0
    assert op.status(ledger).resolved == 2  # both, though synced: a person resolved them


def test_a_key_given_without_its_channel_is_found_for_the_person(
    ledger: denpyo.Ledger, mixed: dict[str, int]
) -> None:
    """The form is CHANNEL:KEY, and the error says so, with the channels that hold the
    key (or the channels there are)."""
    with pytest.raises(denpyo.InvalidInput, match=r"CHANNEL:KEY.*did you mean email:k-ok\?"):
        op.find(ledger, "k-ok")
    with pytest.raises(denpyo.SubmissionNotFound) as found:
        op.find(ledger, "order:5")
    text = str(found.value)
    assert "CHANNEL:KEY (read here as channel 'order', key '5')" in text
    assert text.endswith("channels with rows: email, sms")


def test_resend_creates_a_linked_submission(ledger: denpyo.Ledger, mixed: dict[str, int]) -> None:
    result = op.resolve_resend(
        ledger,
        "email:k-rejected",
        note="address fixed",
        payload={"to": "fixed@example.com"},
        by="dan",
    )
    old, new = result.submission, result.created
    assert new is not None
    assert (new.key, new.supersedes, new.payload) == (
        "k-rejected~resend1",
        old.id,
        {"to": "fixed@example.com"},
    )
    assert new.status is denpyo.Status.REQUESTING and new.idempotency_key != old.idempotency_key
    assert old.status is denpyo.Status.REJECTED
    assert old.resolution == f"resent as #{new.id} by operator:dan: address fixed"
    assert kinds(ledger, old.id)[-1] == "resend" and kinds(ledger, new.id) == ["created"]
    assert op.history(ledger, old.id).superseded_by is not None
    ledger.work(until_idle=True)
    sent = ledger.get_by_id(new.id)
    assert sent is not None and sent.status is denpyo.Status.SYNCED

    with pytest.raises(denpyo.InvalidInput, match="already resent"):
        op.resolve_resend(ledger, "email:k-rejected", note="again")
    failed = op.resolve_resend(ledger, "email:k-failed", note="once more").created
    assert failed is not None and failed.payload == {"key": "k-failed"}
    before = snapshot(ledger)
    with pytest.raises(denpyo.InvalidInput, match="in doubt"):
        op.resolve_resend(ledger, "email:k-doubt", note="resend")
    with pytest.raises(denpyo.TransitionNotAllowed):
        op.resolve_resend(ledger, "email:k-ok", note="resend")
    with pytest.raises(denpyo.PayloadNotJSON):
        op.resolve_resend(
            ledger, "email:k-ambiguous", note="x", payload={1, 2}, force_in_doubt=True
        )
    assert snapshot(ledger) == before
    forced = op.resolve_resend(ledger, "email:k-doubt", note="checked", force_in_doubt=True)
    assert forced.submission.status is denpyo.Status.FAILED and forced.created is not None


def test_resend_of_a_resend_counts_from_the_original_key(ledger: denpyo.Ledger) -> None:
    channel(ledger)["k"] = "reject"
    submit(ledger, "k")
    first = op.resolve_resend(ledger, "email:k", note="1").created
    assert first is not None
    op.resolve_abandon(ledger, str(first.id), note="not yet")
    second = op.resolve_resend(ledger, str(first.id), note="2").created
    assert second is not None and second.key == "k~resend2" and second.supersedes == first.id


def test_resend_is_one_transaction(ledger: denpyo.Ledger, mixed: dict[str, int]) -> None:
    new = NewSubmission("email", "k-new", "idem-new", "{}", supersedes=mixed["k-rejected"])

    def stale(created: denpyo.Submission) -> Move:  # the old row is no longer `failed`
        S = denpyo.Status
        return Move(mixed["k-rejected"], S.FAILED, S.FAILED, "operator:x", event="resend")

    entry = NewAction(ActionKind.RESEND, Scope.ROWS, "x", "operator:x", "n")
    action = ledger.store.add_action(entry, ids=[mixed["k-rejected"]], holder="r", lease=60)
    plan = [(mixed["k-rejected"], Resend(new, "operator:x", "d", stale), None)]
    [(_, outcome, reason)] = ledger.store.carry_out(action.id, holder="r", lease=60, plan=plan)
    assert (outcome, reason) == (RowOutcome.SKIPPED, MOVED)
    assert ledger.get("email", "k-new") is None  # the new row went with the old one's move


def test_reconcile_needs_channels_and_settles_in_doubt_rows(db_url: str) -> None:
    with denpyo.Ledger(db_url) as bare, pytest.raises(denpyo.ConfigurationError, match="--app"):
        op.reconcile(bare)
    with denpyo.Ledger(db_url) as ledger:
        ledger.channel("email", verify=lambda sub: denpyo.Delivered(f"found-{sub.key}"))(
            lambda sub: "r"
        )
        for key in ("a", "b", "c"):
            in_doubt_requesting(ledger, key)
        seen: list[tuple[int, int]] = []
        summary = op.reconcile(ledger, lambda done, total: seen.append((done, total)))
        assert (summary.due, summary.checked, summary.synced, summary.in_doubt_after) == (
            3,
            3,
            3,
            0,
        )
        assert seen[-1] == (3, 3)
        row = ledger.get("email", "a")
        assert row is not None and row.remote_id == "found-a"
        assert ledger.events(row.id)[-1].actor.startswith("reconciler:")


def test_serve_stops_cleanly_on_a_signal(ledger: denpyo.Ledger) -> None:
    channel(ledger)
    ids = [ledger.enqueue("email", f"w{i}", {"i": i}).id for i in range(5)]

    def stop_when_done() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            subs = [ledger.get_by_id(i) for i in ids]
            if all(s is not None and s.status is denpyo.Status.SYNCED for s in subs):
                break
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGUSR1)

    stopper = threading.Thread(target=stop_when_done)
    stopper.start()
    report = op.serve(ledger, poll_interval=0.05, signals=(signal.SIGUSR1,))
    stopper.join()
    assert report.outcomes["synced"] == 5
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
