"""Submit: the row is committed before the call and settled after it; a key
is never called twice once settled, a failed row is retried under its idempotency
key, and each way a call can end is classified."""

from __future__ import annotations

import asyncio

import pytest
from ledger_helpers import NOW, Script, fail, ok

import denpyo
from denpyo import Delivered, ErrorKind, NotDelivered, Status, Submission


def test_submit_records_calls_and_settles(ledger: denpyo.Ledger) -> None:
    channel = Script(ok)
    ledger.channel("invoice-email")(channel)
    sub = ledger.submit("invoice-email", "order:42", {"to": "a@example.com"})
    assert sub.status is Status.SYNCED and sub.remote_id == "remote-order:42"
    assert sub.attempts == 1 and sub.synced_at is not None and sub.locked_by is None
    assert channel.calls[0].status is Status.REQUESTING  # recorded before the call
    kinds = [(e.kind, e.from_status, e.to_status) for e in ledger.events(sub.id)]
    assert kinds == [
        ("created", None, Status.REQUESTING),
        ("attempt", Status.REQUESTING, Status.REQUESTING),
        ("settle", Status.REQUESTING, Status.SYNCED),
    ]


def test_the_rows_writes_return_are_the_rows_as_stored(ledger: denpyo.Ledger) -> None:
    """An insert and a settle send back only what their statements computed (the id
    and times; what a settle changed) and build the rest from what was sent: each
    row returned is the row as read back, to the last field."""
    read: list[tuple[Submission, Submission | None]] = []

    def send(sub: Submission) -> str:
        read.append((sub, ledger.store.get(sub.id)))
        return "r-1"

    ledger.channel("c")(send)
    queued = ledger.enqueue("c", "queued", {"n": [1, "二"], "x": None}, ordering_key="o")
    assert queued == ledger.store.get(queued.id)
    sent = ledger.submit("c", "sent", {"n": 2})
    [(held, stored)] = read
    assert held == stored and held.locked_by is not None and held.lease is not None
    assert sent == ledger.store.get(sent.id) and sent.status is Status.SYNCED


def test_row_is_committed_before_the_call(ledger: denpyo.Ledger, db_url: str) -> None:
    seen: list[Submission | None] = []

    def look_from_another_connection(sub: Submission) -> str:
        with denpyo.Ledger(db_url) as other:
            seen.append(other.get("c", sub.key))
        return "r"

    ledger.channel("c")(look_from_another_connection)
    ledger.submit("c", "k", {})
    assert seen[0] is not None and seen[0].status is Status.REQUESTING and seen[0].in_flight


def test_same_key_never_calls_twice_once_synced_or_rejected(ledger: denpyo.Ledger) -> None:
    channel = Script(ok)
    ledger.channel("c")(channel)
    first = ledger.submit("c", "k", {"n": 1})
    again = ledger.submit("c", "k", {"n": 1})
    assert again.id == first.id and len(channel.calls) == 1

    refusing = Script(fail(denpyo.Rejected("unknown customer")))
    ledger.channel("r")(refusing)
    with pytest.raises(denpyo.SubmissionRejected) as refused:
        ledger.submit("r", "k", {})
    assert refused.value.submission.status is Status.REJECTED
    assert refused.value.submission.error_kind is ErrorKind.REJECTED
    assert "unknown customer" in (refused.value.submission.last_error or "")
    with pytest.raises(denpyo.SubmissionRejected):
        ledger.submit("r", "k", {})
    assert len(refusing.calls) == 1


def test_failed_row_is_retried_under_the_same_idempotency_key(ledger: denpyo.Ledger) -> None:
    channel = Script(fail(denpyo.Transient("HTTP 503")), ok)
    ledger.channel("c", backoff=NOW)(channel)
    with pytest.raises(denpyo.SubmissionFailed) as failed:
        ledger.submit("c", "k", {})
    assert failed.value.submission.error_kind is ErrorKind.TRANSIENT
    assert failed.value.submission.next_attempt_at is not None
    sub = ledger.submit("c", "k", {})
    assert sub.status is Status.SYNCED and sub.attempts == 2
    assert channel.calls[0].idempotency_key == channel.calls[1].idempotency_key


def test_idempotency_keys_are_unique_and_header_safe(ledger: denpyo.Ledger) -> None:
    ledger.channel("c")(ok)
    keys = {ledger.enqueue("c", f"k{i}", {}).idempotency_key for i in range(50)}
    assert len(keys) == 50
    assert all(k.isascii() and k.replace("-", "").isalnum() for k in keys)


def test_same_key_with_another_payload_is_refused(ledger: denpyo.Ledger) -> None:
    ledger.channel("c")(ok)
    ledger.submit("c", "k", {"amount": 10})
    with pytest.raises(denpyo.KeyReused):
        ledger.submit("c", "k", {"amount": 11})
    with pytest.raises(denpyo.KeyReused):
        ledger.enqueue("c", "k", {"amount": 11})


def test_classification(ledger: denpyo.Ledger) -> None:
    ledger.channel("timeout")(Script(fail(TimeoutError("read timed out"))))
    with pytest.raises(denpyo.SubmissionInDoubt) as doubt:
        ledger.submit("timeout", "k", {})
    sub = doubt.value.submission
    assert (sub.status, sub.error_kind, sub.in_doubt) == (Status.FAILED, ErrorKind.AMBIGUOUS, True)
    assert "read timed out" in (sub.last_error or "")

    def classify(exc: BaseException) -> denpyo.Outcome | None:
        if isinstance(exc, TimeoutError):
            return denpyo.Outcome(denpyo.OutcomeKind.TRANSIENT, error="connect timeout")
        return None

    ledger.channel("custom", classify=classify)(Script(fail(TimeoutError())))
    with pytest.raises(denpyo.SubmissionFailed) as failed:
        ledger.submit("custom", "k", {})
    assert failed.value.submission.error_kind is ErrorKind.TRANSIENT
    assert failed.value.submission.last_error == "connect timeout"


def test_a_sync_call_that_could_not_start_is_transient_not_in_doubt(
    ledger: denpyo.Ledger,
) -> None:
    """The call threads are shut down (the ledger is closing) before a sync channel
    could start: nothing left, so the row is known not sent, not in doubt."""
    calls = Script(ok)
    ledger.channel("c")(calls)

    async def main() -> None:
        ledger.async_runner()
        assert ledger._calls is not None
        ledger._calls.shutdown()
        with pytest.raises(denpyo.SubmissionFailed) as caught:
            await ledger.asubmit("c", "k", {})
        row = caught.value.submission
        assert (row.status, row.error_kind, row.in_doubt) == (
            Status.FAILED,
            ErrorKind.TRANSIENT,
            False,
        )
        assert "cannot schedule new futures after shutdown" in (row.last_error or "")

    asyncio.run(main())
    assert calls.calls == []


def test_timeout_after_acceptance_is_verified_not_resent(ledger: denpyo.Ledger) -> None:
    delivered: dict[str, str] = {}

    def accepts_then_times_out(sub: Submission) -> str:
        delivered[sub.idempotency_key] = "remote-1"
        raise TimeoutError("no reply within 10s")

    def lookup(sub: Submission) -> denpyo.Verdict:
        found = delivered.get(sub.idempotency_key)
        return Delivered(found) if found else NotDelivered()

    channel = Script(accepts_then_times_out)
    ledger.channel("c", verify=lookup, backoff=NOW)(channel)
    with pytest.raises(denpyo.SubmissionInDoubt):
        ledger.submit("c", "k", {})
    ledger.work(until_idle=True, poll_interval=0.01)
    sub = ledger.get("c", "k")
    assert sub is not None and sub.status is Status.SYNCED and sub.remote_id == "remote-1"
    assert len(channel.calls) == 1
    assert [e.kind for e in ledger.events(sub.id)][-1] == "verify"


def test_async_channels_from_sync_and_sync_channels_from_async(ledger: denpyo.Ledger) -> None:
    async def async_send(sub: Submission) -> str:
        await asyncio.sleep(0)
        return "a"

    ledger.channel("async")(async_send)
    ledger.channel("sync")(ok)
    assert ledger.submit("async", "k", {}).remote_id == "a"

    async def main() -> tuple[Submission, Submission]:
        return (
            await ledger.asubmit("sync", "k", {}),
            await ledger.asubmit("async", "k2", {}),
        )

    from_sync, from_async = asyncio.run(main())
    assert from_sync.remote_id == "remote-k" and from_async.remote_id == "a"
