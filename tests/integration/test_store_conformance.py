"""The store's contract under concurrency, the same on SQLite, PostgreSQL and MariaDB:
two claimers take disjoint rows, a locked row is skipped, a compare-and-set loses
when the row moved, an expired lease counts as nobody's, renewal extends only the
holder's leases, a batch mixes winners and losers, a key is recorded once, prune
takes only settled rows, the counts follow the moves (the running counts agree with
counting the table after every kind of write, an upgrade, and folds amid writers); the
dashboard's reads (pages of the list, the search by key, the needs-a-person queue, its
counts, outcomes per minute) find what they should from their indexes. Each test on a
fresh real database."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, cast

import pytest

from conftest import asker, driver_connection
from denpyo import Status
from denpyo.domain.filters import Filter
from denpyo.domain.moves import Move, Settle
from denpyo.domain.policy import AttemptDecision
from denpyo.domain.status import ErrorKind
from denpyo.domain.submission import Submission
from denpyo.store import NewSubmission, Store, dialect_of, open_store
from denpyo.store.sql_store import SqlStore

SQL = Callable[[str], list[tuple[Any, ...]]]


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    opened = open_store(db_url)
    yield opened
    opened.close()


def new(key: str, channel: str = "c") -> NewSubmission:
    return NewSubmission(channel, key, str(uuid.uuid4()), '{"n": 1}')


def test_two_claims_at_once_take_disjoint_rows(store: Store, db_url: str, sql: SQL) -> None:
    for i in range(200):
        store.record(new(f"k{i}"), actor="t")
    other = open_store(db_url)
    claimed: dict[str, list[int]] = {}
    start = threading.Barrier(2)

    def claim(name: str, s: Store) -> None:
        start.wait()
        claimed[name] = [sub.id for sub in s.claim("c", holder=name, limit=150, lease=60)]

    threads = [
        threading.Thread(target=claim, args=("a", store)),
        threading.Thread(target=claim, args=("b", other)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    other.close()
    a, b = set(claimed["a"]), set(claimed["b"])
    assert len(a) == len(claimed["a"]) and len(b) == len(claimed["b"])
    assert not a & b
    assert len(a | b) == 200
    attempts = sql(
        "SELECT COUNT(*) FROM denpyo_events WHERE kind = 'attempt' GROUP BY submission_id"
    )
    assert attempts == [(1,)] * 200


@pytest.mark.parametrize("backend", ["postgresql", "mysql"], indirect=True)
def test_claim_skips_rows_another_transaction_has_locked(
    store: Store, backend: str, db_url: str
) -> None:
    """(SQLite has one writer at a time and no row locks: nothing to skip.) If the
    claim waited for the locked rows, it would never return while they are held."""
    ids = [store.record(new(f"k{i}"), actor="t")[0].id for i in range(10)]
    locker = driver_connection(backend, db_url)
    try:
        cursor = locker.cursor()
        if backend == "mysql":
            # READ COMMITTED and one row at a time: under REPEATABLE READ a scan of this
            # tiny table would keep every row it read locked, not only the five.
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            cursor.execute("BEGIN")
        for row_id in ids[:5]:
            cursor.execute(f"SELECT id FROM denpyo_submissions WHERE id = {row_id} FOR UPDATE")
        claimed = store.claim("c", holder="w", limit=10, lease=60)
        assert sorted(sub.id for sub in claimed) == ids[5:]
    finally:
        locker.rollback()
        locker.close()
    assert sorted(sub.id for sub in store.claim("c", holder="w", limit=10, lease=60)) == ids[:5]


def test_a_move_that_loses_its_compare_and_set_returns_none(store: Store) -> None:
    sub, _ = store.record(new("k"), actor="holder", lease=60)

    def to_synced(expect: str | None) -> Move:
        return Move(sub.id, Status.REQUESTING, Status.SYNCED, "x", holder=expect, event="settle")

    # another holder, or "nobody" while a live lease is held: both lose
    assert store.move([to_synced("thief"), to_synced(None)]) == [None, None]
    # a wrong expected status loses too
    wrong = Move(sub.id, Status.FAILED, Status.SYNCED, "x", holder="holder")
    assert store.move([wrong]) == [None]
    [won] = store.move([to_synced("holder")])
    assert won is not None and won.status is Status.SYNCED and won.locked_by is None
    assert won.synced_at is not None and not won.in_doubt
    assert store.move([to_synced("holder")]) == [None]  # already moved
    assert [e.kind for e in store.events(sub.id)] == ["created", "attempt", "settle"]


def test_an_expired_lease_counts_as_nobody_and_in_doubt(store: Store) -> None:
    sub, _ = store.record(new("k"), actor="holder", lease=60)
    [expired] = store.move([Move.still_in_doubt(sub, "holder", 0, "lease run out")])
    assert expired is not None and expired.in_doubt
    [verifying] = store.claim("c", holder="r", limit=5, lease=30, in_doubt=True)
    assert verifying.id == sub.id and verifying.locked_by == "r" and not verifying.in_doubt
    assert store.claim("c", holder="r2", limit=5, lease=30, in_doubt=True) == []


def test_renewal_extends_only_the_holders_leases(store: Store) -> None:
    sub, _ = store.record(new("k"), actor="holder", lease=1)
    assert store.renew([(sub.id, "holder", 60), (sub.id, "thief", 60)]) == {sub.id}
    assert store.renew([(sub.id, "thief", 60)]) == set()
    renewed = store.get(sub.id)
    assert renewed is not None and renewed.locked_until is not None
    assert renewed.locked_until - store.now() > timedelta(seconds=50)
    assert renewed.status is Status.REQUESTING and renewed.locked_by == "holder"


def test_a_batch_of_moves_mixes_winners_and_losers_in_order(store: Store) -> None:
    """Results come back in the order of the moves, None for each loser; a row named
    twice takes its moves one after the other, each with its event."""
    a, _ = store.record(new("a"), actor="h", lease=60)
    b, _ = store.record(new("b"), actor="h", lease=60)
    moves = [
        Move.release(a.id, "h", "never started"),
        Move.release(b.id, "thief", "not the holder"),
        Move.claim(a.id, Status.REQUESTING, "w2", 60, verify=False),
        Move.release(a.id, "h", "no longer the holder"),
    ]
    released, lost, claimed, late = store.move(moves)
    assert lost is None and late is None
    assert released is not None and released.locked_by is None and released.attempts == 0
    assert claimed is not None and claimed.locked_by == "w2" and claimed.attempts == 1
    assert claimed.payload == {"n": 1}
    assert [e.kind for e in store.events(a.id)] == ["created", "attempt", "released", "attempt"]
    assert [e.kind for e in store.events(b.id)] == ["created", "attempt"]


def test_record_returns_the_row_already_recorded_for_a_key(store: Store) -> None:
    first, created = store.record(new("k"), actor="t")
    again, created_again = store.record(new("k"), actor="t")
    assert created and not created_again and again.id == first.id
    assert again.idempotency_key == first.idempotency_key

    seen: list[str] = []
    recorded = store.record_many(
        [new("k"), new("k2")], actor="t", check=lambda fresh, old: seen.append(old.key)
    )
    assert recorded == 1 and seen == ["k"]
    assert [e.kind for e in store.events(first.id)] == ["created"]


def test_a_batch_records_each_key_once_with_its_history(store: Store, sql: SQL) -> None:
    """Batches large enough that PostgreSQL copies them in (`COPY_FROM` rows and more):
    each new row gets one `created` event, in the batch's order, and counts as
    requesting; a key recorded already (by an earlier batch, or earlier in the same
    one) is recorded once, and shown to `check`."""
    seen: list[str] = []

    def check(fresh: NewSubmission, old: Submission) -> None:
        seen.append(old.key)

    first = [new(f"k{i}") for i in range(250)]
    assert store.record_many(first, actor="a", check=check) == 250 and seen == []
    again = [*(new(f"k{i}") for i in range(125, 375)), new("twice"), new("twice")]
    assert store.record_many(again, actor="b", check=check) == 126
    assert sorted(seen) == sorted([*(f"k{i}" for i in range(125, 250)), "twice"])
    assert store.record_many(first[:120], actor="c", check=lambda n, old: None) == 0

    history = sql(
        "SELECT s.key, e.actor, e.from_status, e.to_status, e.attempt FROM denpyo_events e "
        "JOIN denpyo_submissions s ON s.id = e.submission_id ORDER BY e.id"
    )
    expected = [f"k{i}" for i in range(375)] + ["twice"]
    assert [row[0] for row in history] == expected  # one each, in order
    assert {row[1:] for row in history[:250]} == {("a", None, "requesting", 0)}
    assert {row[1] for row in history[250:]} == {"b"}
    assert sql("SELECT COUNT(*) FROM denpyo_events WHERE kind = 'created'") == [(376,)]
    assert store.count_by_status() == [("c", Status.REQUESTING, 376)]
    stored = store.get_by_key("c", "k300")
    assert stored is not None and stored.payload == {"n": 1} and stored.attempts == 0
    assert stored.idempotency_key == again[300 - 125].idempotency_key
    assert stored.next_attempt_at is not None and stored.locked_by is None


@pytest.mark.parametrize("backend", ["postgresql", "mysql"], indirect=True)
def test_a_row_recorded_elsewhere_during_a_batch_keeps_its_own_history(
    store: Store, backend: str, db_url: str, sql: SQL
) -> None:
    """(SQLite has one writer at a time.) Another session's row, committed while a
    batch is being written, takes an id among the batch's; neither takes the
    other's `created` event."""
    other = open_store(db_url)
    n, middle = 3000, 1500

    def batch() -> Iterator[NewSubmission]:
        for i in range(n):
            if i == middle:
                if backend == "postgresql":  # until the server has copied some rows in
                    _wait_for(lambda: sql(SEQUENCE)[0][0] > 100)
                other.record(new("elsewhere"), actor="other")
            yield new(f"k{i}")

    try:
        assert store.record_many(batch(), actor="batch", check=lambda n, old: None) == n
    finally:
        other.close()
    owners = sql(
        "SELECT e.actor, s.key FROM denpyo_events e "
        "JOIN denpyo_submissions s ON s.id = e.submission_id ORDER BY s.id"
    )
    assert [key for actor, key in owners if actor == "other"] == ["elsewhere"]
    assert [key for actor, key in owners if actor == "batch"] == [f"k{i}" for i in range(n)]
    keys = [row[0] for row in sql("SELECT s.key FROM denpyo_submissions s ORDER BY s.id")]
    assert 0 < keys.index("elsewhere") < n  # its id lies among the batch's


SEQUENCE = "SELECT last_value FROM denpyo_submissions_id_seq"


def _wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_prune_deletes_only_settled_rows_and_their_history(store: Store) -> None:
    settled, _ = store.record(new("settled"), actor="h", lease=60)
    [doubt] = store.move([Move.still_in_doubt(settled, "h", 0, "lease run out")])
    assert doubt is not None
    [synced] = store.move([Move.mark_synced(doubt, "op", "r-1", "found", "seen there")])
    assert synced is not None and synced.status is Status.SYNCED
    waiting, _ = store.record(new("waiting"), actor="t")
    held, _ = store.record(new("held"), actor="h", lease=60)
    time.sleep(0.02)  # created strictly before the cutoff, on a millisecond clock
    assert store.prune(older_than=0, batch_size=10) == 1
    assert store.get(settled.id) is None and store.events(settled.id) == []
    assert store.get(waiting.id) is not None and store.get(held.id) is not None
    assert store.prune(older_than=0, batch_size=10) == 0


def test_counts_follow_the_moves(store: Store) -> None:
    doubtful, _ = store.record(new("doubtful"), actor="h", lease=60)
    store.move([Move.still_in_doubt(doubtful, "h", 0, "lease run out")])
    store.record(new("waiting"), actor="t")
    store.record(new("other", channel="d"), actor="t")
    settled, _ = store.record(new("settled"), actor="h", lease=60)
    [doubt] = store.move([Move.still_in_doubt(settled, "h", 0, "lease run out")])
    assert doubt is not None
    store.move([Move.mark_synced(doubt, "op", "r-1", "found", "seen there")])

    assert sorted(store.count_by_status()) == [
        ("c", Status.REQUESTING, 2), ("c", Status.SYNCED, 1), ("d", Status.REQUESTING, 1),
    ]  # fmt: skip
    counts = store.count_attention("c")
    assert (counts["in_doubt"], counts["needs_attention"], counts["pending"]) == (1, 1, 2)
    assert counts["oldest_pending"] is not None and counts["now"] >= counts["oldest_pending"]
    assert store.count_attention("d")["in_doubt"] == 0
    assert store.count_in_doubt_due("c") == 1


CLAIM_INDEXES = {
    "sqlite": {"submission_find_ready": "denpyo_submissions_ready",
               "submission_find_in_doubt": "denpyo_submissions_in_doubt",
               "submission_count_in_doubt_due": "denpyo_submissions_in_doubt"},
    "postgresql": {"submission_claim_ready": "denpyo_submissions_ready",
                   "submission_claim_in_doubt": "denpyo_submissions_in_doubt",
                   "submission_count_in_doubt_due": "denpyo_submissions_in_doubt"},
    "mysql": {"submission_find_ready": "denpyo_submissions_due",
              "submission_find_in_doubt": "denpyo_submissions_due"},
}  # fmt: skip


@contextmanager
def plans(store: Store, backend: str, db_url: str) -> Iterator[Callable[[str, Any], str]]:
    """`plan(name, params)`: the database's plan of a named query, on a connection of its
    own (PostgreSQL with sequential scans off, so that an empty table's plan shows
    whether an index can serve the query at all)."""
    conn = driver_connection(backend, db_url)
    try:
        cursor = conn.cursor()
        if backend == "postgresql":
            cursor.execute("SET enable_seqscan = off")
        explain = "EXPLAIN QUERY PLAN" if backend == "sqlite" else "EXPLAIN"

        def plan(name: str, params: Any) -> str:
            cursor.execute(f"{explain} {store.queries[name]}", params)  # type: ignore[attr-defined]
            return "\n".join(str(row) for row in cursor.fetchall())

        yield plan
    finally:
        conn.rollback()
        conn.close()


def test_claims_are_planned_on_their_indexes(store: Store, backend: str, db_url: str) -> None:
    """The claims (and the reconciler's count) read their partial index, not the table:
    the shared "in doubt" predicate must not hide the index's own from the planner.
    PostgreSQL is asked with sequential scans off, so that an empty table's plan shows
    whether the index can serve the query at all."""
    params = {"channel": "c", "limit": 64, "holder": "w", "lease": 30.0}
    with plans(store, backend, db_url) as plan:
        for name, index in CLAIM_INDEXES[backend].items():
            found = plan(name, params)
            assert index in found, (name, found)


# -- the dashboard's reads ---------------------------------------------------------------


def settled(store: Store, key: str, outcome: AttemptDecision, channel: str = "c") -> Submission:
    """A row recorded, sent once, and settled with `outcome`."""
    sub, _ = store.record(new(key, channel), actor="h", lease=60)
    [after] = store.move([Settle.of(sub, "h", outcome, 5)])
    assert after is not None
    return after


SYNCED = AttemptDecision(Status.SYNCED, remote_id="r-1")
REJECTED = AttemptDecision(Status.REJECTED, ErrorKind.REJECTED, "no such address")
EXHAUSTED = AttemptDecision(Status.FAILED, ErrorKind.TRANSIENT, "503", retry_in=None)
RETRYING = AttemptDecision(Status.FAILED, ErrorKind.TRANSIENT, "503", retry_in=60)
AMBIGUOUS = AttemptDecision(Status.FAILED, ErrorKind.AMBIGUOUS, "timeout", retry_in=60)


# -- the running counts ----------------------------------------------------------------


# The running counts' groups, spelled out over the table: what the triggers must agree with.
GROUPS = """
SELECT channel, status,
       CASE WHEN status <> 'failed' THEN ''
            WHEN error_kind = 'ambiguous' AND next_attempt_at IS NOT NULL THEN 'ambiguous_due'
            WHEN error_kind = 'ambiguous' THEN 'ambiguous_held'
            WHEN next_attempt_at IS NULL THEN 'exhausted'
            ELSE 'retrying' END,
       CASE WHEN resolution IS NULL THEN 0 ELSE 1 END, COUNT(*)
FROM denpyo_submissions GROUP BY 1, 2, 3, 4
"""
COUNTED = """
SELECT channel, status, kind, CASE WHEN resolved THEN 1 ELSE 0 END, SUM(n)
FROM denpyo_status_counts GROUP BY 1, 2, 3, 4 HAVING SUM(n) <> 0
"""


def assert_counts_match_the_table(store: Store, sql: SQL) -> None:
    """The running counts, and both count queries, say what counting the rows says."""
    groups = sorted((c, s, k, int(r), int(n)) for c, s, k, r, n in sql(GROUPS))
    assert sorted((c, s, k, int(r), int(n)) for c, s, k, r, n in sql(COUNTED)) == groups
    by_status: dict[tuple[str, str], int] = {}
    for channel, status, _, _, n in groups:
        by_status[(channel, status)] = by_status.get((channel, status), 0) + n
    assert [(c, s.value, n) for c, s, n in store.count_by_status()] == sorted(
        (c, s, n) for (c, s), n in by_status.items()
    )
    rows = store.list_submissions(Filter(limit=1000))
    for channel in (None, "c", "d", "nothing-here"):
        mine = [s for s in rows if channel is None or s.channel == channel]
        expired = [s for s in mine if s.status is Status.REQUESTING and s.in_doubt]
        failed = [s for s in mine if s.status is Status.FAILED]
        open_failed = [
            s for s in failed
            if s.resolution is None
            and (s.error_kind is ErrorKind.AMBIGUOUS or s.next_attempt_at is None)
        ]  # fmt: skip
        pending = [
            s for s in mine
            if s.status is Status.REQUESTING
            or (s.status is Status.FAILED and s.next_attempt_at is not None)
        ]  # fmt: skip
        rejected_open = [s for s in mine if s.status is Status.REJECTED and s.resolution is None]
        counts = store.count_attention(channel)
        assert counts.pop("now") is not None
        assert counts == {
            "in_doubt": sum(s.in_doubt for s in mine),
            "exhausted": sum(
                s.next_attempt_at is None and s.resolution is None
                and s.error_kind is not ErrorKind.AMBIGUOUS
                for s in failed
            ),
            "rejected_open": len(rejected_open),
            "needs_attention": len(open_failed) + len(rejected_open)
            + sum(s.resolution is None for s in expired),
            "pending": len(pending),
            "oldest_pending": min((s.created_at for s in pending), default=None),
            "resolved": sum(
                s.resolution is not None and s.status is not Status.SYNCED for s in mine
            ),
        }, channel  # fmt: skip


def test_running_counts_follow_every_write(store: Store, backend: str, sql: SQL) -> None:
    """Rows through every status, kind and resolution, by the store's writes (one at a
    time, in batches, in bulk, rolled back) and by an application's own SQL, then
    pruned and deleted: after each step the running counts, `count_by_status` and
    `count_attention` agree with counting the table, before the counts are folded
    and after."""
    settle = {
        "synced": SYNCED, "rejected": REJECTED, "exhausted": EXHAUSTED,
        "retrying": RETRYING, "ambiguous": AMBIGUOUS,
        "held": AttemptDecision(Status.FAILED, ErrorKind.AMBIGUOUS, "timeout", retry_in=None),
    }  # fmt: skip
    rows = {
        f"{name}{i}": settled(store, f"{name}{i}", outcome, "c" if i % 2 else "d")
        for name, outcome in settle.items()
        for i in range(3)
    }
    store.record(new("waiting"), actor="t")
    store.record(new("in-flight", "d"), actor="h", lease=60)
    doubtful, _ = store.record(new("doubtful"), actor="h", lease=60)
    [doubtful] = store.move([Move.still_in_doubt(doubtful, "h", 0, "lease run out")])
    held, _ = store.record(new("held-requesting"), actor="h", lease=60)
    [held] = store.move([Move.still_in_doubt(held, "h", None, "ask a person")])
    assert doubtful is not None and held is not None and held.next_attempt_at is None
    store.record_many(
        [new(f"bulk{i}", "d") for i in range(5)] + [new("waiting")], actor="t",
        check=lambda new, existing: None,
    )  # fmt: skip
    assert_counts_match_the_table(store, sql)

    # A person's moves, several in one batch, one losing its compare-and-set.
    moves = [
        Move.give_up(rows["rejected0"], "op", "abandon", "abandoned", "not ours"),
        Move.give_up(rows["exhausted1"], "op", "abandon", "abandoned", "gave up"),
        Move.give_up(rows["held2"], "op", "abandon", "abandoned", "gave up"),
        Move.retry(rows["exhausted2"], "op", "try again"),
        Move.forced_retry(rows["ambiguous0"], "op", "checked: not there"),
        Move.mark_synced(doubtful, "op", "r-9", "found", "seen there"),
        Move.retry(rows["synced0"], "op", "loses: the row is synced"),
    ]
    assert [m is not None for m in store.move(moves)] == [True] * 6 + [False]
    [verified] = store.move([Move.still_in_doubt(rows["ambiguous1"], "v", None, "ask")])
    assert verified is not None and verified.next_attempt_at is None
    claimed = store.claim("c", holder="w", limit=10, lease=60)
    store.renew([(sub.id, "w", 60.0) for sub in claimed])
    store.move([Move.release(claimed[0].id, "w", "not started")])
    own = cast(SqlStore, store)
    with pytest.raises(RuntimeError), own.transaction() as tx:
        own.record_in(tx, new("rolled-back"), actor="t", lease=None, detail=None)
        raise RuntimeError("the caller's transaction fails")
    assert_counts_match_the_table(store, sql)
    store.upkeep()
    assert_counts_match_the_table(store, sql)

    # The application's own SQL: a note on a row, and a row deleted with its history.
    gone = rows["retrying1"].id
    sql(f"UPDATE denpyo_submissions SET resolution = 'by hand' WHERE id = {rows['rejected1'].id}")
    sql(f"DELETE FROM denpyo_events WHERE submission_id = {gone}")
    sql(f"DELETE FROM denpyo_submissions WHERE id = {gone}")
    time.sleep(0.02)  # created strictly before the cutoff, on a millisecond clock
    assert store.prune(older_than=0) > 0
    assert_counts_match_the_table(store, sql)
    store.upkeep()
    store.upkeep()  # a fold with nothing to fold
    assert_counts_match_the_table(store, sql)


def test_an_upgrade_counts_the_rows_already_there(
    backend: str, empty_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database with rows of every kind, at schema 7, taken to the latest: the running
    counts start from the rows already there (on SQLite and MariaDB schema 8 recounts)."""
    import denpyo.store.sql_store as sql_store

    every = sql_store.load_migrations(dialect_of(empty_url))
    store = open_store(empty_url)
    try:
        monkeypatch.setattr(sql_store, "load_migrations", lambda dialect: every[:7])
        assert store.migrate() == list(range(1, 8))
        for name, outcome in {"s": SYNCED, "r": REJECTED, "x": EXHAUSTED, "a": AMBIGUOUS}.items():
            for i in range(2):
                settled(store, f"{name}{i}", outcome, "c" if i else "d")
        [resolved] = store.move([Move.give_up(settled(store, "r9", REJECTED), "op", "abandon",
                                              "abandoned", "not ours")])  # fmt: skip
        assert resolved is not None
        store.record(new("waiting"), actor="t")
        monkeypatch.undo()
        assert store.migrate() == [version for version, _ in every[7:]]
        assert_counts_match_the_table(store, asker(backend, empty_url))
    finally:
        store.close()


def test_counts_fold_while_others_write(store: Store, db_url: str, sql: SQL) -> None:
    """Folding the running counts never waits for a writer that has not committed (its
    counts are left for a later fold) and never loses a change of writers that commit
    meanwhile."""
    other = cast(SqlStore, open_store(db_url))
    try:
        with other.transaction() as tx:
            other.record_in(tx, new("open"), actor="t", lease=None, detail=None)
            started = time.monotonic()
            cast(SqlStore, store).fold_counts()
            assert time.monotonic() - started < 5
            assert store.count_by_status() == []
        assert store.count_by_status() == [("c", Status.REQUESTING, 1)]
    finally:
        other.close()

    def write(name: str) -> None:
        writer = open_store(db_url)
        try:
            for i in range(15):
                sub, _ = writer.record(new(f"{name}{i}"), actor=name, lease=60)
                writer.move([Settle.of(sub, name, SYNCED if i % 3 else EXHAUSTED, 5)])
        finally:
            writer.close()

    def fold(writers: list[threading.Thread]) -> None:  # two folders, as two workers
        folder = open_store(db_url)
        try:
            while any(thread.is_alive() for thread in writers):
                folder.upkeep()
        finally:
            folder.close()

    writers = [threading.Thread(target=write, args=(f"w{n}-",)) for n in range(3)]
    folders = [threading.Thread(target=fold, args=(writers,)) for _ in range(2)]
    for thread in writers + folders:
        thread.start()
    for thread in writers + folders:
        thread.join()
    assert_counts_match_the_table(store, sql)
    store.upkeep()
    assert_counts_match_the_table(store, sql)


def test_list_pages_walk_every_match_once_in_bounded_windows(store: Store) -> None:
    ids = [store.record(new(f"k{i:02}", "c" if i % 3 else "d"), actor="t")[0].id for i in range(30)]
    first = store.list_page(Filter(limit=10))
    assert [s.id for s in first.rows] == ids[::-1][:10] and first.older == ids[20]

    # A filter over windows of 4 ids: pages may be short, and together hold every match.
    seen: list[int] = []
    before: int | None = None
    pages = 0
    while True:
        page = store.list_page(Filter(channel="d", limit=3), before=before, window=4)
        assert len(page.rows) <= 3 and all(s.channel == "d" for s in page.rows)
        seen += [s.id for s in page.rows]
        pages += 1
        if page.older is None:
            break
        assert isinstance(page.older, int) and page.older < (before or ids[-1] + 1)
        before = page.older
    assert seen == [i for n, i in enumerate(ids) if n % 3 == 0][::-1]
    assert pages >= 30 // 4
    assert store.list_page(Filter(statuses=(Status.SYNCED,))).rows == []


def test_search_finds_keys_by_prefix_in_key_order(store: Store) -> None:
    for key in ["order:2", "order:10", "order:1", "order:1~resend1", "orders", "other:1"]:
        store.record(new(key), actor="t")
    store.record(new("order:1", channel="d"), actor="t")
    found = store.search_keys("c", "order:1")
    assert [s.key for s in found.rows] == ["order:1", "order:10", "order:1~resend1"]
    assert found.older is None and all(s.channel == "c" for s in found.rows)
    first = store.search_keys("c", "order:", limit=2)
    assert [s.key for s in first.rows] == ["order:1", "order:10"] and first.older == "order:10"
    rest = store.search_keys("c", "order:", after="order:10", limit=2)
    assert [s.key for s in rest.rows] == ["order:1~resend1", "order:2"]
    assert store.search_keys("c", "nothing").rows == []
    assert store.channels() == ["c", "d"]


def test_the_attention_queue_holds_exactly_what_needs_a_person(store: Store) -> None:
    rejected = settled(store, "rejected", REJECTED)
    exhausted = settled(store, "exhausted", EXHAUSTED)
    ambiguous = settled(store, "ambiguous", AMBIGUOUS)
    expired, _ = store.record(new("expired"), actor="h", lease=60)
    [expired_now] = store.move([Move.still_in_doubt(expired, "h", 0, "lease run out")])
    settled(store, "synced", SYNCED)
    settled(store, "retrying", RETRYING)
    store.record(new("waiting"), actor="t")
    store.record(new("in-flight"), actor="h", lease=60)
    resolved = settled(store, "resolved", REJECTED)
    store.move([Move.give_up(resolved, "op", "abandon", "abandoned", "nobody wants it")])

    queue = store.attention_page()
    wanted = [expired.id, ambiguous.id, exhausted.id, rejected.id]
    assert [s.id for s in queue.rows] == wanted and queue.older is None
    assert [s.in_doubt for s in queue.rows] == [True, True, False, False]
    assert expired_now is not None and expired_now.in_doubt
    first = store.attention_page(limit=3)
    assert [s.id for s in first.rows] == wanted[:3] and first.older == wanted[2]
    rest = store.attention_page(before=wanted[2], limit=3)
    assert [s.id for s in rest.rows] == wanted[3:] and rest.older is None
    assert store.count_attention()["needs_attention"] == len(wanted)


def test_outcomes_are_folded_once_per_minute(store: Store) -> None:
    for i in range(3):
        settled(store, f"s{i}", SYNCED)
    settled(store, "f", RETRYING)
    settled(store, "r", REJECTED, channel="d")
    assert store.fold_outcomes(lag=0) > 0
    assert store.fold_outcomes(lag=0) == 0  # nothing new: nothing counted twice

    def totals(channel: str | None = None) -> dict[str, int]:
        found: dict[str, int] = {}
        for minute, outcome, n in store.outcomes_per_minute(channel=channel):
            assert minute.second == 0 and minute.tzinfo is not None
            found[outcome] = found.get(outcome, 0) + n
        return found

    assert totals() == {"sent": 5, "synced": 3, "failed": 1, "rejected": 1}
    assert totals("d") == {"sent": 1, "rejected": 1}
    settled(store, "later", SYNCED)
    assert store.fold_outcomes(lag=3600) == 0  # younger than the lag: left for later
    store.upkeep()  # the workers' heartbeat folds with the default lag of 10 s
    assert totals()["synced"] == 3
    store.fold_outcomes(lag=0)
    assert totals()["synced"] == 4


DASHBOARD_INDEXES = {
    "sqlite": {"submission_attention_page": ["denpyo_submissions_attention",
                                             "denpyo_submissions_in_doubt"],
               "submission_count_attention": ["denpyo_submissions_ready",
                                              "denpyo_submissions_in_doubt"],
               "submission_search": ["sqlite_autoindex_denpyo_submissions_1"],
               "submission_next_channel": ["sqlite_autoindex_denpyo_submissions_1"]},
    "postgresql": {"submission_attention_page": ["denpyo_submissions_attention",
                                                 "denpyo_submissions_in_doubt"],
                   "submission_count_attention": ["denpyo_submissions_ready",
                                                  "denpyo_submissions_in_doubt"],
                   "submission_search": ["denpyo_submissions_channel_key"],
                   "submission_next_channel": ["denpyo_submissions_channel_key"],
                   "submission_page": ["denpyo_submissions_pkey"]},
    "mysql": {"submission_attention_page": ["denpyo_submissions_attention",
                                            "denpyo_submissions_status_created"],
              "submission_count_attention": ["denpyo_submissions_status_created",
                                             "denpyo_submissions_due"],
              "submission_search": ["denpyo_submissions_channel_key"],
              "submission_next_channel": ["denpyo_submissions_channel_key"],
              "submission_page": ["PRIMARY"]},
}  # fmt: skip


def test_the_dashboards_reads_are_planned_on_their_indexes(
    store: Store, backend: str, db_url: str
) -> None:
    """The queue reads only its two small indexes, the counts of what needs a person
    (besides the running counts) the indexes of the rows waiting or in flight, the search
    the unique index on (channel, key), a page of the list a range of the primary key."""
    from denpyo.store.sql_store import filter_params

    params = {
        **filter_params(Filter(channel="c", statuses=(Status.FAILED,))),
        "before": 1000, "floor": 0, "channel": "c", "prefix": "order:", "after": None,
        "scan": 150, "limit": 51, "channels": ["c", "d"],
    }  # fmt: skip
    with plans(store, backend, db_url) as plan:
        for name, indexes in DASHBOARD_INDEXES[backend].items():
            given = {**params, "after": ""} if name == "submission_next_channel" else params
            found = plan(name, given)
            for index in indexes:
                assert index in found, (name, index, found)


def _synced(store: Store, keys: list[str], channel: str = "c") -> list[Any]:
    """Rows recorded, sent and settled `synced` together (one statement: on PostgreSQL
    they share one synced_at, which the audit's paging must step through)."""
    held = [store.record(new(k, channel), actor="h", lease=60)[0] for k in keys]
    moves = [
        Move(sub.id, Status.REQUESTING, Status.SYNCED, "h", holder="h",
             event="settle", remote_id=f"r-{sub.key}")
        for sub in held
    ]  # fmt: skip
    return [row for row in store.move(moves) if row is not None]


def test_synced_rows_of_a_window_come_page_by_page_in_order(store: Store) -> None:
    early = _synced(store, ["e1", "e2"])
    time.sleep(0.02)
    since = store.now()
    time.sleep(0.02)
    inside = _synced(store, [f"k{i}" for i in range(5)]) + _synced(store, ["k5", "k6"])
    _synced(store, ["other"], channel="d")
    store.record(new("waiting"), actor="t")
    until = store.now() + timedelta(seconds=1)

    pages: list[list[int]] = []
    after = None
    while True:
        page = store.list_synced("c", since, until, after=after, limit=2)
        if not page:
            break
        pages.append([sub.id for sub in page])
        last = page[-1]
        assert last.synced_at is not None
        after = (last.synced_at, last.id)
    assert [len(page) for page in pages] == [2, 2, 2, 1]
    ordered = sorted(inside, key=lambda sub: (sub.synced_at, sub.id))
    assert [i for page in pages for i in page] == [sub.id for sub in ordered]
    assert all(sub.status is Status.SYNCED for sub in store.list_synced("c", since, until))
    whole = store.list_synced("c", early[0].synced_at, until, limit=100)
    assert len(whole) == 9
    assert store.list_synced("c", since, since) == []


def test_rows_are_found_by_their_idempotency_keys(store: Store) -> None:
    a, _ = store.record(new("a"), actor="t")
    b, _ = store.record(new("b"), actor="t")
    store.record(new("c"), actor="t")
    found = store.get_by_idempotency_keys([a.idempotency_key, b.idempotency_key, "unknown"])
    assert sorted(sub.key for sub in found) == ["a", "b"]
    assert store.get_by_idempotency_keys([]) == []


def test_the_first_attempt_is_read_from_the_history(store: Store) -> None:
    sub, _ = store.record(new("k"), actor="t")
    first, now = store.first_attempt_at(sub.id)
    assert first is None and now is not None
    [claimed] = store.claim("c", holder="w", limit=1, lease=60)
    store.move([Move.release(claimed.id, "w", "given back")])
    time.sleep(0.02)
    [again] = store.claim("c", holder="w2", limit=1, lease=60)
    assert again.attempts == 1
    attempts = [e.at for e in store.events(sub.id) if e.kind == "attempt"]
    assert len(attempts) == 2
    first, now = store.first_attempt_at(sub.id)
    assert first == attempts[0] and now >= attempts[1]


AUDIT_INDEXES = {
    "sqlite": ("denpyo_submissions_synced", "sqlite_autoindex_denpyo_submissions_2",
               "denpyo_events_submission"),
    "postgresql": ("denpyo_submissions_synced", "denpyo_submissions_idempotency_key",
                   "denpyo_events_submission"),
    "mysql": ("denpyo_submissions_synced", "denpyo_submissions_idempotency_key",
              "denpyo_events_submission"),
}  # fmt: skip


def test_the_audits_reads_are_planned_on_indexes(store: Store, backend: str, db_url: str) -> None:
    """The audit's page of synced rows, its lookup by idempotency key, and the first
    attempt of a row (the idempotency window) each read an index, not the table."""
    now = store.now()
    params: dict[str, Any] = {
        "channel": "c",
        "after_at": store.time_param(now - timedelta(hours=1)),  # type: ignore[attr-defined]
        "after_id": 0,
        "until": store.time_param(now),  # type: ignore[attr-defined]
        "limit": 500,
        "keys": store.text_list(["a", "b"]),  # type: ignore[attr-defined]
        "submission_id": 1,
    }
    names = ("submission_list_synced", "submission_get_by_idempotency_keys", "event_first_attempt")
    with plans(store, backend, db_url) as plan:
        for name, index in zip(names, AUDIT_INDEXES[backend], strict=True):
            found = plan(name, params)
            assert index in found, (name, found)
