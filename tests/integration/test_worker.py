"""The worker under load and at its edges: leases, limits, wake-ups, shutdown, pruning."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

import pytest

import denpyo
from denpyo import Status, Submission
from denpyo.engine.pacing import TokenBucket
from denpyo.engine.worker import Worker


def test_long_calls_keep_their_lease_and_are_never_sent_twice(
    ledger: denpyo.Ledger, db_url: str
) -> None:
    calls: Counter[str] = Counter()

    async def slow(sub: Submission) -> str:
        calls[sub.key] += 1
        await asyncio.sleep(1.5)  # longer than the lease: only renewal keeps it ours
        return "r"

    ledger.channel("c", lease=0.6, verify=lambda sub: denpyo.NotDelivered())(slow)
    ledger.enqueue("c", "k", {})

    async def main() -> None:
        other = denpyo.Ledger(db_url)  # another host's reconciler, eager to resend
        other.channel("c", lease=0.6, verify=lambda sub: denpyo.NotDelivered())(slow)
        try:
            work = asyncio.create_task(ledger.awork(until_idle=True, poll_interval=0.05))
            while not work.done():
                await other.areconcile()
                await asyncio.sleep(0.1)
            await work
        finally:
            await other.aclose_channels()
            other.close()

    asyncio.run(main())
    sub = ledger.get("c", "k")
    assert sub is not None and sub.status is Status.SYNCED and calls == {"k": 1}


def test_channel_concurrency_limit(ledger: denpyo.Ledger) -> None:
    running, peak = 0, 0

    async def call(sub: Submission) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1
        return "r"

    ledger.channel("c", concurrency=2)(call)
    for i in range(12):
        ledger.enqueue("c", f"k{i}", {})
    report = ledger.work(until_idle=True, concurrency=16, poll_interval=0.01)
    assert report.outcomes["synced"] == 12 and peak == 2


def test_token_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr("denpyo.engine.pacing.time.monotonic", lambda: clock[0])
    bucket = TokenBucket(rate=5)
    assert bucket.available() == 5
    bucket.take(5)
    assert bucket.available() == 0 and bucket.wait_time() == pytest.approx(0.2)
    clock[0] += 0.4
    assert bucket.available() == 2
    clock[0] += 100
    assert bucket.available() == 5  # bursts never exceed one second's worth


def test_rate_limited_channel_still_sends_everything(ledger: denpyo.Ledger) -> None:
    ledger.channel("c", rate_limit=50)(lambda sub: "r")
    for i in range(60):
        ledger.enqueue("c", f"k{i}", {})
    assert ledger.work(until_idle=True, poll_interval=0.01).outcomes["synced"] == 60


def test_postgres_workers_wake_on_notify(postgres_url: str) -> None:
    """LISTEN/NOTIFY is PostgreSQL's; the other stores poll."""
    sent = threading.Event()
    ledger = denpyo.Ledger(postgres_url)

    def call(sub: Submission) -> str:
        sent.set()
        return "r"

    ledger.channel("c")(call)

    async def main() -> bool:
        worker = Worker(ledger, poll_interval=60)  # a poll would come far too late
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0.5)  # the worker has claimed nothing and sleeps on LISTEN
        with denpyo.Ledger(postgres_url) as producer:
            producer.channel("c")(call)
            producer.enqueue("c", "k", {})
        woke = await asyncio.to_thread(sent.wait, 20)
        worker.stop()
        await task
        return woke

    try:
        assert asyncio.run(main())
    finally:
        ledger.close()


def test_stop_releases_calls_not_started_and_leaves_started_ones_to_verify(
    ledger: denpyo.Ledger,
) -> None:
    gate = threading.Event()
    begun: list[str] = []

    def blocked(sub: Submission) -> str:
        begun.append(sub.key)
        gate.wait(30)
        return "r"

    ledger.channel("c", lease=30)(blocked)
    for i in range(40):  # more than the 32 call threads: 8 cannot start
        ledger.enqueue("c", f"k{i:02}", {})

    async def main() -> denpyo.WorkReport:
        worker = Worker(ledger, concurrency=40, poll_interval=0.05, grace=0.3)
        task = asyncio.create_task(worker.run())
        while len(begun) < 32:
            await asyncio.sleep(0.02)
        worker.stop()
        return await task

    try:
        report = asyncio.run(main())
    finally:
        gate.set()
    assert report.released == 8
    rows = [ledger.get("c", f"k{i:02}") for i in range(40)]
    released = [r for r in rows if r is not None and r.locked_by is None]
    held = [r for r in rows if r is not None and r.locked_by is not None]
    assert len(released) == 8 and {r.attempts for r in released} == {0}
    assert {r.key for r in held} == set(begun) and all(r.status is Status.REQUESTING for r in held)
    assert ledger.events(released[0].id)[-1].kind == "released"


def test_prune_deletes_old_settled_rows_in_batches(ledger: denpyo.Ledger, sql: Any) -> None:
    ledger.channel("c")(lambda sub: "r")
    for i in range(25):
        ledger.submit("c", f"old{i}", {})
    ledger.enqueue("c", "old-pending", {})
    sql(
        "UPDATE denpyo_submissions SET created_at = created_at - INTERVAL '100' DAY"
        if ledger.store.dialect != "sqlite"
        else "UPDATE denpyo_submissions SET created_at = '2000-01-01 00:00:00.000'"
    )
    ledger.submit("c", "recent", {})
    assert ledger.prune(older_than=90 * 86400, batch_size=10) == 25
    assert ledger.get("c", "old3") is None
    assert ledger.get("c", "old-pending") is not None and ledger.get("c", "recent") is not None
    orphans = sql(
        "SELECT COUNT(*) FROM denpyo_events e WHERE NOT EXISTS "
        "(SELECT 1 FROM denpyo_submissions s WHERE s.id = e.submission_id)"
    )
    assert orphans == [(0,)]
