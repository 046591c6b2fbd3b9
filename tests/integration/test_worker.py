"""The worker under load and at its edges: leases, limits, wake-ups, shutdown, pruning."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

import denpyo
from denpyo import Status, Submission
from denpyo.domain.channel_state import SPACING_MARGIN
from denpyo.domain.status import ErrorKind
from denpyo.engine.pacing import Pacing
from denpyo.engine.worker import Worker


def run_until(make: Callable[[], Worker], ready: Callable[[Worker], bool]) -> denpyo.WorkReport:
    """Run a worker (made on the test's loop) until `ready(worker)`, then stop it as
    SIGTERM would, and return its report."""

    async def main() -> denpyo.WorkReport:
        worker = make()
        task = asyncio.create_task(worker.run())
        while not ready(worker):
            await asyncio.sleep(0.01)
        worker.stop()
        return await task

    return asyncio.run(main())


def test_long_calls_keep_their_lease_and_are_never_sent_twice(
    ledger: denpyo.Ledger, db_url: str
) -> None:
    calls: Counter[str] = Counter()

    async def slow(sub: Submission) -> str:
        calls[sub.key] += 1
        await asyncio.sleep(4.0)  # over twice the lease: only renewal keeps it ours
        return "r"

    # A lease of 1.5 s is renewed every 0.5 s; only a stall of 1.5 s would lose it.
    ledger.channel("c", lease=1.5, verify=lambda sub: denpyo.NotDelivered())(slow)
    ledger.enqueue("c", "k", {})

    async def main() -> None:
        other = denpyo.Ledger(db_url)  # another host's reconciler, eager to resend
        other.channel("c", lease=1.5, verify=lambda sub: denpyo.NotDelivered())(slow)
        worker = Worker(ledger, poll_interval=0.05)  # as in production: runs until stopped
        work = asyncio.create_task(worker.run())
        try:
            for _ in range(300):
                await other.areconcile()
                settled = await asyncio.to_thread(ledger.get, "c", "k")
                if settled is not None and settled.status is Status.SYNCED:
                    break
                await asyncio.sleep(0.1)
        finally:
            worker.stop()
            await work
            await other.aclose_channels()
            other.close()

    asyncio.run(main())
    sub = ledger.get("c", "k")
    assert sub is not None and sub.status is Status.SYNCED and calls == {"k": 1}


def test_until_idle_retries_a_claim_that_failed(
    ledger: denpyo.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim that fails (a deadlock, a restart) is tried again at the next poll;
    `until_idle` neither stops early as if idle nor gives back what it claimed."""
    from denpyo.engine.runners import AsyncRunner

    ledger.channel("c")(lambda sub: "r")
    ledger.enqueue_many("c", [(f"k{i}", {}) for i in range(40)])
    real_claim, failed = AsyncRunner.claim, Counter[bool]()

    async def flaky_claim(driver: AsyncRunner, *args: Any, in_doubt: bool, **kwargs: Any) -> Any:
        if not failed or (in_doubt and not failed[True]):  # the first of each kind fails
            failed[in_doubt] += 1
            raise denpyo.StoreError("deadlock detected")
        return await real_claim(driver, *args, in_doubt=in_doubt, **kwargs)

    monkeypatch.setattr(AsyncRunner, "claim", flaky_claim)
    report = ledger.work(until_idle=True, poll_interval=0.01)
    assert failed[False] == 1 and failed[True] == 1
    assert report.outcomes["synced"] == 40 and report.released == 0

    async def down(driver: AsyncRunner, *args: Any, **kwargs: Any) -> Any:
        raise denpyo.StoreError("down")

    monkeypatch.setattr(AsyncRunner, "claim", down)
    ledger.enqueue("c", "late", {})
    with pytest.raises(denpyo.StoreError, match="down"):
        ledger.work(until_idle=True, poll_interval=0.01)


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


@pytest.mark.parametrize(
    ("decides_itself", "held"),
    [(True, 32), (False, 8)],  # 8 x 4 slots: 4 calls running, 28 ready; or 2 x 4
)
def test_rows_are_claimed_far_ahead_only_where_the_channel_decides_its_doubt(
    ledger: denpyo.Ledger, sql: Any, decides_itself: bool, held: int
) -> None:
    """A channel that can verify holds up to 8 times its slots claimed (at most
    CLAIM_AHEAD), so fast calls never wait on a claim. A crash would leave every held
    row in doubt: a channel with no verify (and not idempotent) would leave each to a
    person, so it holds at most twice its slots. On stop, rows never started are
    given back."""

    async def stuck(sub: Submission) -> str:
        await asyncio.sleep(3600)  # cancelled at stop: these calls had begun
        return "r"

    verify = (lambda sub: denpyo.NotDelivered()) if decides_itself else None
    ledger.channel("c", concurrency=4, verify=verify)(stuck)
    ledger.enqueue_many("c", [(f"k{i}", {}) for i in range(100)])
    seen: list[int] = []

    def claimed(worker: Worker) -> bool:
        if worker.running["c"] < 4:
            return False
        seen.append(worker.running["c"] + len(worker.ready["c"]))
        return True

    report = run_until(lambda: Worker(ledger, concurrency=16, grace=0.1), claimed)
    assert seen == [held]
    assert report.attempted == 4 and report.released == held - 4 and report.cut == 4
    cut = "SELECT COUNT(*) FROM denpyo_submissions WHERE attempts = 1 AND error_kind = 'ambiguous'"
    assert sql(cut) == [(4,)]  # begun, cut at the stop: counted, in doubt


def test_a_freed_slot_sends_its_next_call_before_the_last_outcome_is_settled(
    ledger: denpyo.Ledger,
) -> None:
    """With one slot, the call that takes it when a call returns goes out before that
    call's outcome is committed: the slot never waits on a settle."""
    order: list[str] = []

    async def send(sub: Submission) -> str:
        order.append(f"send {sub.key}")
        return "r"

    ledger.channel("c", concurrency=1, verify=lambda sub: denpyo.NotDelivered())(send)
    ledger.enqueue_many("c", [(f"k{i}", {}) for i in range(3)])

    async def main() -> denpyo.WorkReport:
        worker = Worker(ledger, concurrency=1, poll_interval=0.05)
        commit = worker.batcher.commit

        async def recorded(moves: Any) -> list[Submission | None]:
            order.extend(f"settle {move.submission_id}" for move in moves)
            return await commit(moves)

        worker.batcher.commit = recorded
        return await worker.run(until_idle=True)

    report = asyncio.run(main())
    assert report.outcomes == Counter({"synced": 3})
    ids = {key: sub.id for key in ("k0", "k1", "k2") if (sub := ledger.get("c", key))}
    assert sorted(order) == sorted(
        [*(f"send k{i}" for i in range(3)), *(f"settle {ids[key]}" for key in ids)]
    )
    for before, after in (("k0", "k1"), ("k1", "k2")):
        assert order.index(f"send {after}") < order.index(f"settle {ids[before]}")


def test_pacing_spaces_the_starts_evenly_with_no_burst() -> None:
    """A rate of 5 a second: starts 0.21 s apart (0.2, and 5 % to spare), and time left
    unused is no credit."""
    gap = (1 + SPACING_MARGIN) / 5
    pacing = Pacing(rate=5, fleet_rate=None)
    assert pacing.room(0) == 1 and pacing.room(1) == 0  # a quarter second's worth, or one
    pacing.reserve(3, 100.0)
    assert list(pacing.starts) == pytest.approx([100.0, 100.0 + gap, 100.0 + 2 * gap])
    assert pacing.due(100.0) and not pacing.due(99.9)
    pacing.take()
    pacing.drop(1)  # a row given back unsent
    assert list(pacing.starts) == pytest.approx([100.0 + gap])
    pacing.reserve(1, 200.0)  # a hundred seconds idle: still one start at a time
    pacing.reserve(1, 200.0)
    assert list(pacing.starts)[1:] == pytest.approx([200.0, 200.0 + gap])
    assert pacing.drop_late(200.1) == 1  # 100.21 is long gone: its row gets a new start
    assert pacing.drop_late(200.0 + 0.8 * gap) == 0  # 200.0 is less than 0.9 of a gap old
    assert list(pacing.starts) == pytest.approx([200.0, 200.0 + gap])
    assert pacing.drop_late(200.0 + 0.95 * gap) == 1  # taken now, it would crowd the next


def test_pacing_under_a_fleet_rate_and_a_process_rate_keeps_both() -> None:
    """The fleet's starts 1/50 s apart (and 5 %), this process's own limit 10 a second:
    each start waits for the later of the two."""
    pacing = Pacing(rate=10, fleet_rate=50)
    assert pacing.shared and pacing.room(0) == 2
    assert pacing.fleet_rate == pytest.approx(50 / (1 + SPACING_MARGIN))
    pacing.reserve(3, 10.0)
    gap = (1 + SPACING_MARGIN) / 10
    assert list(pacing.starts) == pytest.approx([10.0, 10.0 + gap, 10.0 + 2 * gap])


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


def test_postgres_workers_fold_the_running_counts(postgres_url: str) -> None:
    """Every statement appends its change to the running counts; the worker's
    heartbeat folds them, so `denpyo status` reads a small table."""
    import psycopg

    def count_rows() -> int:
        with psycopg.connect(postgres_url) as conn:
            row = conn.execute("SELECT COUNT(*) FROM denpyo_status_counts").fetchone()
        return int(row[0]) if row else 0

    ledger = denpyo.Ledger(postgres_url)
    ledger.channel("c", lease=0.3)(lambda sub: "r")  # a heartbeat every 0.1 s
    for i in range(30):
        ledger.enqueue("c", f"k{i}", {})
    assert count_rows() >= 30

    async def main() -> None:
        worker = Worker(ledger, poll_interval=0.05)
        task = asyncio.create_task(worker.run())
        for _ in range(100):
            await asyncio.sleep(0.1)
            if worker.report.outcomes["synced"] == 30 and count_rows() <= 2:
                break
        worker.stop()
        await task

    try:
        asyncio.run(main())
        assert count_rows() <= 2  # one row per (channel, status, kind): requesting, synced
        assert ledger.store.count_by_status() == [("c", Status.SYNCED, 30)]
    finally:
        ledger.close()


def test_stop_releases_calls_not_started_and_leaves_cut_ones_in_doubt(
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

    try:
        report = run_until(
            lambda: Worker(ledger, concurrency=40, poll_interval=0.05, grace=0.3),
            lambda worker: len(begun) >= 32,
        )
    finally:
        gate.set()
    assert report.released == 8 and report.cut == 32
    time.sleep(0.3)  # the pool threads are free now: what was given back never starts
    assert len(begun) == 32
    rows = [ledger.get("c", f"k{i:02}") for i in range(40)]
    released = [r for r in rows if r is not None and r.status is Status.REQUESTING]
    cut = [r for r in rows if r is not None and r.status is Status.FAILED]
    assert len(released) == 8 and {r.attempts for r in released} == {0}
    assert all(r.locked_by is None for r in released)
    assert ledger.events(released[0].id)[-1].kind == "released"
    # Begun and cut at the end of the grace: each counted, in doubt, to be verified.
    assert {r.key for r in cut} == set(begun)
    assert all(r.attempts == 1 and r.error_kind is ErrorKind.AMBIGUOUS for r in cut)
    assert all(r.in_doubt for r in cut)


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
    old = ledger.get("c", "old3")
    assert old is not None and old.removed_at is not None, "its key and outcome stay"
    assert ledger.get("c", "old-pending") is not None and ledger.get("c", "recent") is not None
    orphans = sql(
        "SELECT COUNT(*) FROM denpyo_events e WHERE NOT EXISTS "
        "(SELECT 1 FROM denpyo_submissions s WHERE s.id = e.submission_id)"
    )
    assert orphans == [(0,)]


def test_a_failing_head_holds_back_its_followers(ledger: denpyo.Ledger) -> None:
    sent: list[str] = []
    head_fails = [True]

    def call(sub: Submission) -> str:
        if sub.key == "a0" and head_fails[0]:
            raise denpyo.Transient("HTTP 503")
        sent.append(sub.key)
        return "r"

    ledger.channel("c", backoff=denpyo.Backoff(initial=60, maximum=60))(call)
    for i in range(3):
        ledger.enqueue("c", f"a{i}", {}, ordering_key="customer:a")
    ledger.enqueue("c", "b0", {}, ordering_key="customer:b")
    ledger.work(until_idle=True, poll_interval=0.01)
    assert sent == ["b0"]  # other keys proceed; a1, a2 wait behind the failed head
    head_fails[0] = False
    from denpyo.engine import operator

    operator.retry(ledger, refs=["c:a0"], by="test")
    ledger.work(until_idle=True, poll_interval=0.01)
    assert sent == ["b0", "a0", "a1", "a2"]


def test_claim_plan_is_an_index_scan_among_many_settled_rows(postgres_url: str) -> None:
    """The hot path must not read the settled history: 200,000 synced rows, a few due."""
    import psycopg

    with denpyo.Ledger(postgres_url) as ledger:
        ledger.channel("c")(lambda sub: "r")
        ledger.enqueue_many("c", [(f"due{i}", {}) for i in range(20)])
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO denpyo_submissions (channel, key, idempotency_key, payload, status, "
            "attempts, synced_at, remote_id) SELECT 'c', 'old' || n, 'idem-' || n, '{}', "
            "'synced', 1, now(), 'r' FROM generate_series(1, 200000) AS n"
        )
        conn.execute("ANALYZE denpyo_submissions")
        from denpyo.store.queries import load_queries

        claim = load_queries("postgresql")["claim_submissions_ready"]
        params = {"channel": "c", "holder": "w", "limit": 32, "lease": 60.0}
        plan = "\n".join(
            row[0]
            for row in conn.execute(
                f"EXPLAIN {claim}".replace("%(", "%%(").replace("%%(", "%("), params
            ).fetchall()
        )
    assert "denpyo_submissions_ready" in plan, plan
    assert "Seq Scan on denpyo_submissions" not in plan, plan


def test_stop_gives_rows_being_verified_back_to_doubt_never_to_sending(
    ledger: denpyo.Ledger,
) -> None:
    """A row held only to be verified may have arrived: stopping must not turn it into
    a row that looks never sent (which a worker would send again without verify)."""
    gate = threading.Event()

    def slow_verify(sub: Submission) -> denpyo.Verdict:
        gate.wait(30)
        return denpyo.Unknown("stopped")

    calls: list[str] = []
    ledger.channel("c", verify=slow_verify, lease=30)(lambda sub: calls.append(sub.key))
    ledger.enqueue("c", "k", {})
    [held] = ledger.store.claim("c", holder="crashed", limit=1, lease=30)
    from denpyo.domain.moves import Move

    ledger.store.move(
        [
            Move(
                held.id,
                Status.REQUESTING,
                Status.REQUESTING,
                "crashed",
                holder="crashed",
                new_holder="crashed",
                lease=0,
                retry_in=0,
                keep_error=True,
            )
        ]
    )

    try:
        report = run_until(
            lambda: Worker(ledger, poll_interval=0.05, grace=0.2),
            lambda worker: bool(worker.slots),
        )
    finally:
        gate.set()
    sub = ledger.get("c", "k")
    assert report.released == 1 and calls == []
    assert sub is not None and sub.status is Status.REQUESTING and sub.in_doubt
    assert sub.attempts == 0 and sub.locked_by is None  # no call of it was known to start


def test_a_verify_that_cannot_tell_waits_longer_each_time_with_one_alert_and_one_line(
    ledger: denpyo.Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    """The provider's lookup keeps answering 503: the row stays in doubt, asked again
    after ever longer waits, with one `in_doubt` alert and one history line for the
    state, however often it is asked; the worker's report counts the one call's
    outcome once, and the verifies apart from it."""
    verifies: list[int] = []
    alerts: list[denpyo.Alert] = []
    ledger.on_alert(alerts.append)
    initial = 0.05
    backoff = denpyo.Backoff(initial=initial, maximum=60, jitter=0)

    def timed_out(sub: Submission) -> str:
        raise TimeoutError("read timed out")  # it may have arrived: in doubt

    def lookup(sub: Submission) -> denpyo.Verdict:
        verifies.append(sub.id)
        return denpyo.Unknown("lookup answered 503")

    ledger.channel("c", verify=lookup, backoff=backoff)(timed_out)
    sub = ledger.enqueue("c", "k", {})
    caplog.set_level("INFO", logger="denpyo.worker")
    report = run_until(lambda: Worker(ledger, poll_interval=0.01), lambda w: len(verifies) >= 5)

    row = ledger.get_by_id(sub.id)
    assert row is not None and row.status is Status.FAILED and row.in_doubt
    assert row.attempts == 1  # the one call
    verify_lines = [e for e in ledger.events(sub.id) if e.kind == "verify"]
    assert [e.detail for e in verify_lines] == ["verify: unknown (lookup answered 503)"]
    assert [(a.reason, a.submission.id if a.submission else None) for a in alerts] == [
        ("in_doubt", sub.id)
    ]
    # Each wait is initial + the time the row has been in doubt in this state, and each
    # question came no earlier than the wait before it: after four, at least 16 × initial.
    assert row.next_attempt_at is not None and row.updated_at is not None
    assert (row.next_attempt_at - row.updated_at).total_seconds() >= 16 * initial - 0.01
    assert report.outcomes == Counter(failed=1)  # calls, not verifies
    assert report.reconciled >= 5 and report.verified.total() == report.reconciled
    assert set(report.verified) <= {"failed", "given back"}
    assert "reconcile pass: 1 rows in doubt taken to verify (c 1)" in caplog.text
