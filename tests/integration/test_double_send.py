"""No call goes out twice: a resolved row submitted again, a worker
that stalled or cannot renew its leases, a finishing flow and a fresh hold on the
same row, a call waiting for a thread past its lease. Every backend."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest

import denpyo
from denpyo import Delivered, Status, Submission
from denpyo.domain.moves import Move
from denpyo.engine import operator as op
from denpyo.engine.worker import Worker
from denpyo.store import NewSubmission
from waiting import wait_until


def exhausted(ledger: denpyo.Ledger, calls: Counter[str], key: str) -> Submission:
    """A row whose single attempt failed: only a person moves it now."""
    with pytest.raises(denpyo.SubmissionFailed) as failed:
        ledger.submit("mail", key, {"n": 1})
    sub = failed.value.submission
    assert sub.is_exhausted and calls[sub.idempotency_key] == 1
    return sub


@pytest.fixture
def mail(ledger: denpyo.Ledger) -> Counter[str]:
    """Calls per idempotency key; the first call of each key fails transiently."""
    calls: Counter[str] = Counter()

    def send(sub: Submission) -> str:
        calls[sub.idempotency_key] += 1
        if sub.key.startswith("order:") and "~" not in sub.key:
            raise denpyo.Transient("503")
        return f"r-{sub.key}"

    ledger.channel("mail", max_attempts=1, verify=lambda sub: denpyo.NotDelivered())(send)
    return calls


def test_a_row_resent_by_a_person_is_never_sent_again(
    ledger: denpyo.Ledger, mail: Counter[str]
) -> None:
    old = exhausted(ledger, mail, "order:42")
    resent = op.resolve_resend(ledger, "mail:order:42", note="customer asked").created
    assert resent is not None
    ledger.work(until_idle=True)
    again = ledger.submit("mail", "order:42", {"n": 1})
    assert (again.id, again.key, again.status) == (resent.id, "order:42~resend1", Status.SYNCED)
    assert mail == {old.idempotency_key: 1, resent.idempotency_key: 1}
    assert ledger.work(until_idle=True).attempted == 0


def test_an_abandoned_row_is_never_sent_again(ledger: denpyo.Ledger, mail: Counter[str]) -> None:
    old = exhausted(ledger, mail, "order:7")
    op.resolve_abandon(ledger, "mail:order:7", note="order cancelled")
    with pytest.raises(denpyo.SubmissionResolved, match="resolved by a person") as resolved:
        ledger.submit("mail", "order:7", {"n": 1})
    assert resolved.value.submission.id == old.id
    assert resolved.value.submission.resolution is not None
    ledger.work(until_idle=True)
    ledger.reconcile()
    assert mail == {old.idempotency_key: 1}


def test_a_move_read_before_a_person_resolved_the_row_loses(
    ledger: denpyo.Ledger, mail: Counter[str]
) -> None:
    """A retry, a claim or a submit that read the row unresolved, applied after a
    person resent it: the compare-and-set refuses each; only a person's own move
    (one that writes a resolution) still applies."""
    stale = exhausted(ledger, mail, "order:5")
    resent = op.resolve_resend(ledger, "mail:order:5", note="new address").created
    assert resent is not None
    moves = [
        Move.retry(stale, "operator:a", "retry"),
        Move.forced_retry(stale, "operator:a", "forced"),
        Move.start_attempt(stale, "app:x", 30.0, "resubmitted", None),
        Move.claim(stale.id, Status.FAILED, "worker:x", 30.0, verify=False),
        Move.take_to_verify(stale, "worker:x", 30.0),
    ]
    assert ledger.store.move(moves) == [None] * len(moves)
    ledger.work(until_idle=True)
    ledger.reconcile()
    assert mail == {stale.idempotency_key: 1, resent.idempotency_key: 1}
    old = ledger.get_by_id(stale.id)
    assert old is not None and old.next_attempt_at is None and old.resolution is not None
    marked = Move.mark_synced(old, "operator:b", "r-found", "found at the provider", "found")
    assert [m.status if m else None for m in ledger.store.move([marked])] == [Status.SYNCED]


def test_a_retry_racing_a_persons_resend_retries_nothing(
    ledger: denpyo.Ledger, mail: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from denpyo.engine.operator import _act

    old = exhausted(ledger, mail, "order:6")
    read = _act.find

    def read_then_another_person_resends(ledger_: denpyo.Ledger, ref: str | int) -> Submission:
        sub = read(ledger_, ref)  # operator A reads the row: failed, unresolved
        monkeypatch.setattr(_act, "find", read)
        op.resolve_resend(ledger_, sub.id, note="operator B resends it")
        return sub

    monkeypatch.setattr(_act, "find", read_then_another_person_resends)
    result = op.retry(ledger, refs=[old.id], note="operator A retries it")
    # The retry is carried out on the row as it is then: resolved by B, so skipped.
    assert result.retried == [] and "was resolved by a person" in result.skipped[0][1]
    ledger.work(until_idle=True)
    assert sorted(mail.values()) == [1, 1] and mail[old.idempotency_key] == 1


def test_a_submit_racing_a_persons_abandon_sends_nothing(
    ledger: denpyo.Ledger, mail: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    old = exhausted(ledger, mail, "order:8")
    record = ledger.store.record

    def record_then_a_person_abandons(*args: Any, **kwargs: Any) -> Any:
        found = record(*args, **kwargs)  # submit reads the row: failed, unresolved
        monkeypatch.setattr(ledger.store, "record", record)
        op.resolve_abandon(ledger, old.id, note="order cancelled")
        return found

    monkeypatch.setattr(ledger.store, "record", record_then_a_person_abandons)
    with pytest.raises(denpyo.SubmissionResolved) as resolved:
        ledger.submit("mail", "order:8", {"n": 1})
    assert resolved.value.submission.resolution is not None
    assert mail == {old.idempotency_key: 1}
    assert [e.kind for e in ledger.events(old.id)][-1] == "abandon"


def test_an_in_doubt_row_a_person_resent_is_not_verified_and_sent(
    ledger: denpyo.Ledger, mail: Counter[str]
) -> None:
    """Its own key never arrived, so verify would say "not delivered": the engine
    must not ask, or the old row goes out beside the person's resend."""
    from test_operator import in_doubt_requesting

    old_id = in_doubt_requesting(ledger, "order:9", "mail")
    resend = op.resolve_resend(ledger, str(old_id), note="checked", force_in_doubt=True)
    assert resend.created is not None
    again = asyncio.run(ledger.asubmit("mail", "order:9", {"key": "order:9"}))
    assert again.id == resend.created.id
    ledger.work(until_idle=True)
    ledger.reconcile()
    old = ledger.get_by_id(old_id)
    assert old is not None and mail[old.idempotency_key] == 0
    assert mail[resend.created.idempotency_key] == 1


def test_a_flow_ending_never_drops_the_fresh_hold_of_its_row(ledger: denpyo.Ledger) -> None:
    """A transient failure due at once is claimed again while the flow that settled it
    is still ending: the new hold keeps its lease renewed and its slot counted."""
    calls: Counter[str] = Counter()
    second_running = threading.Event()
    release = asyncio.Event()

    async def send(sub: Submission) -> str:
        calls[sub.key] += 1
        if calls[sub.key] == 1:
            raise denpyo.Transient("503")
        second_running.set()
        await release.wait()
        return "r"

    ledger.channel(
        "c",
        concurrency=1,
        verify=lambda sub: denpyo.NotDelivered(),
        backoff=denpyo.Backoff(initial=0.001, maximum=0.001),
    )(send)
    sub = ledger.enqueue("c", "k", {})
    seen: dict[str, Any] = {}

    async def main() -> None:
        worker = Worker(ledger, poll_interval=0.02)
        committed = worker.batcher.committed
        slowed = [False]

        def slow_ending(run: Any, moves: Any, results: Any, error: Any) -> None:
            if slowed[0]:
                committed(run, moves, results, error)
                return
            slowed[0] = True  # the first flow lingers after its settle committed
            asyncio.get_running_loop().call_later(0.5, committed, run, moves, results, error)

        worker.batcher.committed = slow_ending
        task = asyncio.create_task(worker.run())
        while not second_running.is_set():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.7)  # the first flow has ended by now
        seen["held"] = sub.id in worker.held
        seen["running"] = worker.running["c"]
        release.set()
        worker.stop()
        await task

    asyncio.run(main())
    assert seen == {"held": True, "running": 1}
    assert calls == {"k": 2}
    done = ledger.get("c", "k")
    assert done is not None and done.status is Status.SYNCED


def test_a_stalled_worker_never_starts_a_call_past_its_lease(ledger: denpyo.Ledger) -> None:
    """The event loop freezes for longer than the lease (as a paused or starved
    process): rows claimed ahead are given back unsent, never sent late."""
    late: list[str] = []
    calls: Counter[str] = Counter()

    async def send(sub: Submission) -> str:
        calls[sub.key] += 1
        held = ledger.get("c", sub.key)  # the lease as the database has it, renewals included
        assert held is not None and held.locked_until is not None
        if ledger.store.now() >= held.locked_until:
            late.append(sub.key)  # the database may have handed the row to another
        if sub.key == "k00":
            time.sleep(2.0)  # the whole process stalls, beyond the 1 s lease
        return "r"

    def verify(sub: Submission) -> denpyo.Verdict:
        # k00's call was on the wire when the process stalled: its lease ran out, and
        # its row may be verified before its outcome is written; the provider has it.
        return denpyo.Delivered("r") if calls[sub.key] else denpyo.NotDelivered()

    ledger.channel("c", lease=1.0, concurrency=1, verify=verify)(send)
    ledger.enqueue_many("c", [(f"k{i:02}", {}) for i in range(10)])
    report = ledger.work(until_idle=True, poll_interval=0.05)
    assert late == []
    assert report.released > 0  # rows claimed before the stall, given back
    assert report.outcomes == Counter(synced=10)  # how the calls ended, one each
    assert calls == Counter({f"k{i:02}": 1 for i in range(10)})
    rows = [ledger.get("c", f"k{i:02}") for i in range(10)]
    assert all(r is not None and r.status is Status.SYNCED for r in rows)
    kinds = [e.kind for r in rows if r is not None for e in ledger.events(r.id)]
    assert "released" in kinds


def test_renewal_that_fails_stops_calls_past_the_lease_alerts_once_and_recovers(
    ledger: denpyo.Ledger, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    late: list[str] = []
    calls: Counter[str] = Counter()
    real_renew, outage = ledger.store.renew, [True]
    alerts: list[denpyo.Alert] = []
    ledger.on_alert(alerts.append)

    async def send(sub: Submission) -> str:
        calls[sub.key] += 1
        assert sub.locked_until is not None
        if outage[0] and datetime.now(UTC) >= sub.locked_until:
            late.append(sub.key)  # not renewed since the claim: the lease had run out
        await asyncio.sleep(0.25)
        return "r"

    ledger.channel("c", lease=0.9, concurrency=1, verify=lambda sub: denpyo.NotDelivered())(send)
    ledger.enqueue_many("c", [(f"k{i:02}", {}) for i in range(12)])

    real_upkeep = ledger.store.upkeep

    def renew(holds: Any) -> set[int]:
        if outage[0]:
            raise denpyo.StoreError("the database is unreachable")
        return real_renew(holds)

    def upkeep() -> None:
        if outage[0]:
            raise denpyo.StoreError("the database is unreachable")
        real_upkeep()

    monkeypatch.setattr(ledger.store, "renew", renew)
    monkeypatch.setattr(ledger.store, "upkeep", upkeep)

    async def main() -> denpyo.WorkReport:
        worker = Worker(ledger, poll_interval=0.05)
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(2.0)
        outage[0] = False  # the database is back
        for _ in range(400):  # the work ends, and a round of renewals works again
            if sum(calls.values()) >= 12 and worker.renewal.failing_since is None:
                break
            await asyncio.sleep(0.05)
        recovered = worker.renewal.failing_since is None
        worker.stop()
        report = await task
        assert recovered
        return report

    with caplog.at_level(logging.WARNING, logger="denpyo.worker"):
        asyncio.run(main())
    assert late == []
    assert calls == Counter({f"k{i:02}": 1 for i in range(12)})
    assert [a.reason for a in alerts] == ["renewal_failing"]
    failed = [r for r in caplog.records if r.getMessage().startswith("lease renewal failed")]
    assert len(failed) == 1
    assert any("works again" in r.getMessage() for r in caplog.records)


def past_the_lease(ledger: denpyo.Ledger, key: str, lease: float) -> None:
    """Keep this thread busy until `key`'s row is recorded and its lease has run out
    by this process's clock: a fixed time would not do on a busy machine, where the
    submit's own write may take longer than the lease."""
    wait_until(lambda: ledger.get("c", key) is not None, "the submit's row")
    time.sleep(lease + 0.25)


def test_an_inline_submit_waiting_for_a_thread_past_its_lease_is_not_sent(
    ledger: denpyo.Ledger,
) -> None:
    calls: Counter[str] = Counter()
    ledger.channel("c", lease=0.5)(lambda sub: calls.update([sub.key]) or "r")
    ledger.async_runner()  # makes the pools; the call pool gets one thread, kept busy
    assert ledger._calls is not None
    ledger._calls.shutdown()
    busy = ledger._calls = ThreadPoolExecutor(1)
    busy.submit(past_the_lease, ledger, "k", 0.5)
    sub = asyncio.run(ledger.asubmit("c", "k", {}))
    busy.shutdown()
    ledger._calls = ThreadPoolExecutor(4)
    assert calls == {}
    assert sub.status is Status.REQUESTING and sub.attempts == 0 and sub.locked_by is None
    assert [e.kind for e in ledger.events(sub.id)][-1] == "released"
    ledger.work(until_idle=True)  # due at once: a worker sends it, once
    assert calls == {"k": 1}


def test_an_inline_submit_waiting_for_its_loop_past_its_lease_is_not_sent(
    ledger: denpyo.Ledger,
) -> None:
    """A sync submit on an async channel: the private loop it runs on is busy (a
    worker shares it) until the lease has run out by this process's clock."""
    calls: Counter[str] = Counter()

    async def send(sub: Submission) -> str:
        calls[sub.key] += 1
        return "r"

    ledger.channel("c", lease=0.5)(send)
    ledger.bridge.run(asyncio.sleep(0))  # the loop is running

    async def busy() -> None:
        past_the_lease(ledger, "k", 0.5)  # blocks the loop

    blocked = asyncio.run_coroutine_threadsafe(busy(), ledger.bridge.loop)
    sub = ledger.submit("c", "k", {})
    blocked.result(timeout=10)
    assert calls == {}
    assert sub.status is Status.REQUESTING and sub.attempts == 0 and sub.locked_by is None
    ledger.work(until_idle=True)  # due at once: a worker sends it, once
    assert calls == {"k": 1}


def test_renewal_renews_many_holders_at_once_and_never_waits_for_a_lock(
    ledger: denpyo.Ledger, backend: str, db_url: str
) -> None:
    """Four holders of 128 rows each are renewed in one transaction; a row another
    transaction has locked (a settle in flight) is skipped, not waited for, so a
    renewal cannot deadlock with settles."""
    from conftest import driver_connection

    ledger.channel("c")(lambda sub: "r")
    ledger.enqueue_many("c", [(f"k{i:03}", {}) for i in range(4 * 128 + 1)])
    holds = []
    for n in range(4):
        rows = ledger.store.claim("c", holder=f"w/{n}", limit=128, lease=1)
        holds += [(sub.id, f"w/{n}", 60.0) for sub in rows]
    [other] = ledger.store.claim("c", holder="other", limit=1, lease=1)
    stolen = holds[0][0]
    ledger.store.move([denpyo_move_to(stolen, "thief")])
    locker = None
    if ledger.store.capabilities.skip_locked:  # SQLite has one writer: no row locks to skip
        locker = driver_connection(backend, db_url)
        cursor = locker.cursor()
        cursor.execute(f"SELECT id FROM denpyo_submissions WHERE id = {holds[1][0]} FOR UPDATE")
    try:
        renewed = ledger.store.renew([*holds, (other.id, "w/0", 60.0)])
    finally:
        if locker is not None:
            locker.rollback()
            locker.close()
    skipped = {stolen, holds[1][0]} if locker is not None else {stolen}
    assert renewed == {row_id for row_id, _, _ in holds} - skipped
    now = ledger.store.now()
    for row_id in (holds[2][0], holds[-1][0]):
        sub = ledger.get_by_id(row_id)
        assert sub is not None and sub.locked_until is not None
        assert (sub.locked_until - now).total_seconds() > 50
    assert (ledger.get_by_id(other.id) or other).locked_by == "other"


def denpyo_move_to(row_id: int, holder: str) -> Any:
    """Another sender takes a held row (as after its lease ran out)."""
    from denpyo.domain.moves import Move

    return Move(
        row_id,
        Status.REQUESTING,
        Status.REQUESTING,
        holder,
        holder="w/0",
        new_holder=holder,
        lease=60,
        keep_error=True,
    )


def test_a_worker_whose_renewals_fail_leaves_rows_in_doubt_to_others(
    ledger: denpyo.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While it cannot renew, a row that looks in doubt may be its own call still on
    the wire (its lease ran out because the renewals failed): it must not verify it,
    or resend it. Once renewals work again, it reconciles as before."""
    verified: list[str] = []

    def verify(sub: Submission) -> Delivered:
        verified.append(sub.key)
        return Delivered("r")

    ledger.channel("c", lease=0.6, verify=verify)(lambda sub: "r")
    outage = [True]
    real_upkeep = ledger.store.upkeep

    def upkeep() -> None:
        if outage[0]:
            raise denpyo.StoreError("the database is unreachable")
        real_upkeep()

    monkeypatch.setattr(ledger.store, "upkeep", upkeep)

    async def main() -> list[str]:
        worker = Worker(ledger, poll_interval=0.05)
        task = asyncio.create_task(worker.run())
        for _ in range(2000):  # up to 20 s on a loaded machine
            if worker.renewal.failing_since is not None:
                break
            await asyncio.sleep(0.01)
        assert worker.renewal.failing_since is not None, "the worker saw its renewals fail"
        new = NewSubmission("c", "doubt", "idem-doubt", "{}")
        doubtful, _ = ledger.store.record(new, actor="gone", lease=60)
        ledger.store.move([Move.still_in_doubt(doubtful, "gone", 0, "its worker died")])
        await asyncio.sleep(0.5)  # ten polls with renewals failing
        during = list(verified)
        outage[0] = False
        for _ in range(400):
            if verified:
                break
            await asyncio.sleep(0.05)
        worker.stop()
        await task
        return during

    assert asyncio.run(main()) == []
    assert verified == ["doubt"]
    settled = ledger.get("c", "doubt")
    assert settled is not None and settled.status is Status.SYNCED
