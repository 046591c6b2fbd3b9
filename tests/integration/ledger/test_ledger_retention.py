"""Rows leave, keys and counts stay: a removed row's key is never sent again, the
report is the same before and after a prune, and retention by state never takes a
row that is open, in doubt, or waiting for a person. On every backend."""

from __future__ import annotations

import contextlib
from datetime import date, timedelta

import pytest
from ledger_helpers import NOW, Script, fail, ok

import denpyo
from denpyo import ErrorKind, InvalidInput, Status
from denpyo.engine import operator as op


def _counted(ledger: denpyo.Ledger, name: str = "email", **options: object) -> Script:
    script = Script(ok)
    ledger.channel(name, **options)(script)  # type: ignore[arg-type]
    return script


def test_a_pruned_key_is_never_sent_again(ledger: denpyo.Ledger) -> None:
    """The issue's story: sent, pruned, submitted again. The second submit calls
    nothing and returns the first outcome; so do enqueue, enqueue_many, get, and a
    worker's run."""
    script = _counted(ledger, idempotent=True)
    first = ledger.submit("email", "order:42", {"to": "a@example.com"})
    assert first.status is Status.SYNCED and len(script.calls) == 1

    assert ledger.prune(older_than=0) == 1

    again = ledger.submit("email", "order:42", {"to": "a@example.com"})
    assert len(script.calls) == 1, "a pruned key was sent again"
    assert (again.id, again.status, again.remote_id) == (first.id, Status.SYNCED, first.remote_id)
    assert again.idempotency_key == first.idempotency_key
    assert again.removed_at is not None and again.archived_to is None
    queued = ledger.enqueue("email", "order:42", {"to": "someone else"})
    assert queued.id == first.id and queued.removed_at is not None
    assert ledger.enqueue_many("email", [("order:42", {}), ("order:43", {})]) == 1
    remembered = ledger.get("email", "order:42")
    assert remembered is not None and remembered.removed_at is not None
    assert remembered.status is Status.SYNCED and remembered.payload is None
    by_id = ledger.get_by_id(first.id)
    assert by_id is not None and by_id.key == "order:42" and by_id.removed_at is not None
    assert ledger.events(first.id) == []
    ledger.work(until_idle=True)
    assert [sub.key for sub in script.calls] == ["order:42", "order:43"]


def test_a_removed_resolved_key_answers_as_it_did_live(ledger: denpyo.Ledger) -> None:
    """A rejected row a person abandoned still refuses a submit after it is pruned; one
    a person resent answers with its resend, live or pruned."""
    ledger.channel("sms")(Script(fail(denpyo.Rejected("no such number"))))
    with pytest.raises(denpyo.SubmissionRejected):
        ledger.submit("sms", "abandoned", {})
    with pytest.raises(denpyo.SubmissionRejected):
        ledger.submit("sms", "resent", {})
    op.resolve_abandon(ledger, "sms:abandoned", note="the customer left")
    resolution = op.resolve_resend(ledger, "sms:resent", note="number corrected")
    assert resolution.created is not None
    resend = resolution.created

    assert ledger.prune(rejected=0) == 2

    with pytest.raises(denpyo.SubmissionResolved) as refused:
        ledger.submit("sms", "abandoned", {})
    assert refused.value.submission.removed_at is not None
    assert ledger.submit("sms", "resent", {}).id == resend.id
    old = ledger.get("sms", "resent")
    assert old is not None and old.superseded_by == resend.id


def test_the_report_is_the_same_before_and_after_a_prune(ledger: denpyo.Ledger) -> None:
    """Counts per period, channel and status: the live rows where they stand, the
    removed ones where they stood. A prune moves rows from one to the other."""
    _counted(ledger)
    ledger.channel("sms", max_attempts=1)(Script(fail(denpyo.Transient("503"))))
    ledger.channel("push")(Script(fail(denpyo.Rejected("unknown device"))))
    for n in range(3):
        ledger.submit("email", f"e{n}", {})
    for key in ("s1", "s2"):
        with contextlib.suppress(denpyo.SubmissionFailed):
            ledger.submit("sms", key, {})
    op.resolve_abandon(ledger, "sms:s1", note="gave up")  # s2 stays exhausted, unresolved
    for key in ("p1", "p2"):
        with contextlib.suppress(denpyo.SubmissionRejected):
            ledger.submit("push", key, {})
    op.resolve_abandon(ledger, "push:p1", note="device gone")
    ledger.enqueue("email", "waiting", {})  # open

    before = {by: ledger.report(by=by) for by in ("day", "month")}
    today = ledger.get("email", "e0").created_at.date()  # type: ignore[union-attr]
    assert {(r.channel, r.status, r.count) for r in before["day"]} == {
        ("email", "synced", 3),
        ("email", "requesting", 1),
        ("sms", "failed", 2),
        ("push", "rejected", 2),
    }
    assert {r.period for r in before["month"]} == {f"{today:%Y-%m}"}

    assert ledger.prune(older_than=0) == 5  # 3 synced, the abandoned failed and rejected

    assert {by: ledger.report(by=by) for by in ("day", "month")} == before
    live = {key for key in ("e0", "s1", "s2", "p1", "p2", "waiting")}
    kept = {
        key for key in live if (sub := _any(ledger, key)) is not None and sub.removed_at is None
    }
    assert kept == {"s2", "p2", "waiting"}, "open and unresolved rows stay"
    assert ledger.report(channel="sms", by="day") == [
        row for row in before["day"] if row.channel == "sms"
    ]
    assert ledger.report(since=today + timedelta(days=1)) == []
    assert ledger.report(until=today) == []


def _any(ledger: denpyo.Ledger, key: str) -> denpyo.Submission | None:
    for channel in ("email", "sms", "push"):
        found = ledger.get(channel, key)
        if found is not None:
            return found
    return None


def test_retention_by_state_takes_only_what_it_is_told(ledger: denpyo.Ledger) -> None:
    """Each state after its own age; open, in-doubt and unresolved rows never."""
    _counted(ledger)
    ledger.channel("sms", max_attempts=1, backoff=NOW)(Script(fail(denpyo.Transient("503"))))
    ledger.channel("push")(Script(fail(denpyo.Rejected("unknown device"))))
    ledger.channel("pay")(Script(fail(TimeoutError("read timed out"))))  # in doubt
    ledger.submit("email", "synced", {})
    for channel, key in (("sms", "abandoned"), ("sms", "exhausted"), ("push", "rejected")):
        with contextlib.suppress(denpyo.SubmissionError):
            ledger.submit(channel, key, {})
    op.resolve_abandon(ledger, "sms:abandoned", note="gave up")
    op.resolve_abandon(ledger, "push:rejected", note="device gone")
    with contextlib.suppress(denpyo.SubmissionError):
        ledger.submit("push", "unresolved", {})
    with contextlib.suppress(denpyo.SubmissionError):
        ledger.submit("pay", "in-doubt", {})
    ledger.enqueue("email", "open", {})
    doubtful = ledger.get("pay", "in-doubt")
    assert doubtful is not None and doubtful.in_doubt
    assert doubtful.error_kind is ErrorKind.AMBIGUOUS

    rows = [
        ("email", "synced"),
        ("sms", "abandoned"),
        ("sms", "exhausted"),
        ("push", "rejected"),
        ("push", "unresolved"),
        ("pay", "in-doubt"),
        ("email", "open"),
    ]

    def removed() -> set[str]:
        return {
            key
            for channel, key in rows
            if (sub := ledger.get(channel, key)) is not None and sub.removed_at is not None
        }

    # A dry run counts exactly what the prune then takes, per channel and status.
    assert op.removable_counts(ledger, older_than=0) == [
        ("email", "synced", 1),
        ("push", "rejected", 1),
        ("sms", "failed", 1),
    ]
    assert op.removable_counts(ledger, synced=0) == [("email", "synced", 1)]
    assert op.removable_counts(ledger, synced=3600, rejected=3600, abandoned=3600) == []
    assert removed() == set()  # counting removed nothing
    assert ledger.prune(synced=3600, rejected=3600, abandoned=3600) == 0
    assert ledger.prune(synced=0) == 1 and removed() == {"synced"}
    assert ledger.prune(abandoned=0, rejected=3600) == 1
    assert removed() == {"synced", "abandoned"}
    assert ledger.prune(rejected=0) == 1
    assert removed() == {"synced", "abandoned", "rejected"}
    assert ledger.prune(older_than=0) == 0, "open, in doubt and unresolved rows stay"


def test_a_prune_in_small_batches_takes_them_all(ledger: denpyo.Ledger) -> None:
    script = _counted(ledger)
    for n in range(7):
        ledger.submit("email", f"k{n}", {})
    assert ledger.prune(older_than=0, batch_size=2) == 7
    for n in range(7):
        ledger.submit("email", f"k{n}", {})
    assert len(script.calls) == 7


def test_keys_are_forgotten_after_keys_kept_for(db_url: str) -> None:
    """`keys_kept_for` bounds the memory: past it, a key is as if never seen."""
    with denpyo.Ledger(db_url, keys_kept_for=0) as ledger:
        script = _counted(ledger)
        ledger.submit("email", "k", {})
        assert ledger.prune(older_than=0) == 1
        assert ledger.get("email", "k") is None
        ledger.submit("email", "k", {})
        assert len(script.calls) == 2


@pytest.mark.parametrize(
    "call",
    [
        lambda led: led.prune(),
        lambda led: led.prune(older_than=-1),
        lambda led: led.prune(synced=float("nan")),
        lambda led: led.prune(older_than=0, batch_size=0),
        lambda led: led.report(by="week"),
        lambda led: led.report(since=date(2026, 1, 2), until=date(2026, 1, 1)),
    ],
)
def test_bad_input_is_refused_and_removes_nothing(ledger: denpyo.Ledger, call: object) -> None:
    _counted(ledger)
    ledger.submit("email", "k", {})
    with pytest.raises(InvalidInput):
        call(ledger)  # type: ignore[operator]
    sub = ledger.get("email", "k")
    assert sub is not None and sub.removed_at is None


def test_keys_kept_for_must_be_seconds(db_url: str) -> None:
    with pytest.raises(InvalidInput):
        denpyo.Ledger(db_url, keys_kept_for=-1)


def test_a_person_resends_a_pruned_row_with_its_payload_given(ledger: denpyo.Ledger) -> None:
    """Its payload is not kept: the resend needs one; the memory then names the new
    row, and a submit of the old key answers with it."""
    ledger.channel("sms")(Script(fail(denpyo.Rejected("no such number"))))
    with pytest.raises(denpyo.SubmissionRejected):
        ledger.submit("sms", "k", {"to": "+100"})
    op.resolve_abandon(ledger, "sms:k", note="wrong number")
    assert ledger.prune(rejected=0) == 1
    with pytest.raises(InvalidInput, match="payload is not kept"):
        op.resolve_resend(ledger, "sms:k", note="number found")
    done = op.resolve_resend(ledger, "sms:k", note="number found", payload={"to": "+200"})
    assert done.created is not None and done.created.payload == {"to": "+200"}
    assert done.created.supersedes is None  # the row it replaces is gone
    assert done.submission.superseded_by == done.created.id
    assert done.submission.resolution is not None
    assert done.submission.resolution.startswith(f"resent as #{done.created.id}")
    [logged, _] = op.action_log(ledger)  # the resend, then the abandon
    assert (logged.kind.value, logged.state.value, logged.done, logged.total) == (
        "resend",
        "done",
        1,
        1,
    )
    with pytest.raises(InvalidInput, match="already resent"):
        op.resolve_resend(ledger, "sms:k", note="again", payload={"to": "+300"})
    for action in (
        lambda: op.resolve_abandon(ledger, "sms:k", note="x"),
        lambda: op.retry(ledger, refs=["sms:k"]),
        lambda: op.resolve_mark_synced(ledger, "sms:k", remote_id="r", note="x"),
    ):
        with pytest.raises(InvalidInput, match="removed from the table"):
            action()
