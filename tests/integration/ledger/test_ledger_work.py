"""Work: enqueued rows are sent and due failures retried until the attempts run
out; an in-doubt row is resent only on an idempotent channel; and the count of
synced rows is what the provider accepted."""

from __future__ import annotations

from collections import Counter

from ledger_helpers import NOW, SQL, Script, fail, ok

import denpyo
from denpyo import Delivered, NotDelivered, Status, Submission


def test_work_sends_enqueued_rows_and_retries_due_failures(ledger: denpyo.Ledger) -> None:
    flaky = Script(fail(denpyo.Transient("503")), ok)
    ledger.channel("c", backoff=NOW)(flaky)
    for i in range(5):
        ledger.enqueue("c", f"k{i}", {"i": i})
    report = ledger.work(until_idle=True, poll_interval=0.01)
    assert report.outcomes["synced"] == 5 and report.outcomes["failed"] == 1
    statuses = {ledger.get("c", f"k{i}").status for i in range(5)}  # type: ignore[union-attr]
    assert statuses == {Status.SYNCED}


def test_exhausted_attempts_stay_failed_with_an_alert(ledger: denpyo.Ledger) -> None:
    alerts: list[denpyo.Alert] = []
    ledger.on_alert(alerts.append)
    always = Script(fail(denpyo.Transient("HTTP 503")))
    ledger.channel("c", backoff=NOW, max_attempts=3)(always)
    ledger.enqueue("c", "k", {})
    ledger.work(until_idle=True, poll_interval=0.01)
    sub = ledger.get("c", "k")
    assert sub is not None and sub.status is Status.FAILED and sub.attempts == 3
    assert sub.next_attempt_at is None and sub.is_exhausted
    assert len(always.calls) == 3
    assert [a.reason for a in alerts] == ["exhausted"] and alerts[0].submission.id == sub.id
    assert "c:k" in str(alerts[0])


def test_in_doubt_without_verify_is_never_resent(ledger: denpyo.Ledger) -> None:
    alerts: list[denpyo.Alert] = []
    ledger.on_alert(alerts.append)
    channel = Script(fail(ConnectionResetError("dropped mid-reply")))
    ledger.channel("c", backoff=NOW)(channel)
    ledger.enqueue("c", "k", {})
    for _ in range(3):
        ledger.work(until_idle=True, poll_interval=0.01)
        ledger.reconcile()
    sub = ledger.get("c", "k")
    assert sub is not None and sub.in_doubt and sub.next_attempt_at is None
    assert len(channel.calls) == 1
    assert [a.reason for a in alerts] == ["in_doubt"]


def test_idempotent_channel_resends_in_doubt_rows(ledger: denpyo.Ledger) -> None:
    channel = Script(fail(ConnectionResetError("dropped")), ok)
    ledger.channel("c", idempotent=True, backoff=NOW)(channel)
    ledger.enqueue("c", "k", {})
    ledger.work(until_idle=True, poll_interval=0.01)
    sub = ledger.get("c", "k")
    assert sub is not None and sub.status is Status.SYNCED and len(channel.calls) == 2
    assert channel.calls[0].idempotency_key == channel.calls[1].idempotency_key


def test_honest_counts_after_a_mixed_run(ledger: denpyo.Ledger, sql: SQL) -> None:
    """COUNT(*) WHERE status = 'synced' equals what the provider accepted."""
    accepted: Counter[str] = Counter()

    def provider(sub: Submission) -> str:
        n = int(sub.key.split(":")[1])
        if n % 7 == 0:
            raise denpyo.Rejected("invalid address")
        if n % 3 == 0 and sub.attempts == 1:
            raise denpyo.Transient("HTTP 503")
        if n % 5 == 0 and sub.attempts == 1:
            accepted[sub.idempotency_key] += 1
            raise TimeoutError("accepted, then the reply was lost")
        accepted[sub.idempotency_key] += 1
        return f"r{n}"

    def lookup(sub: Submission) -> denpyo.Verdict:
        return Delivered() if accepted[sub.idempotency_key] else NotDelivered()

    ledger.channel("email", verify=lookup, backoff=NOW)(provider)
    for n in range(1, 101):
        ledger.enqueue("email", f"order:{n}", {"n": n})
    ledger.work(until_idle=True, poll_interval=0.01)
    synced = sql("SELECT COUNT(*) FROM denpyo_submissions WHERE status = 'synced'")
    rejected = sql("SELECT COUNT(*) FROM denpyo_submissions WHERE status = 'rejected'")
    assert synced[0][0] == len(accepted) == 100 - 14
    assert rejected[0][0] == 14
    assert max(accepted.values()) == 1  # no double effect
    pending = sql(
        "SELECT COUNT(*) FROM denpyo_submissions WHERE status IN ('failed', 'requesting')"
    )
    assert pending[0][0] == 0
