"""The counts follow the moves: the running counts agree with counting the
table after every kind of write, after an upgrade, and when folded amid writers."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import cast

import pytest
from store_helpers import AMBIGUOUS, EXHAUSTED, REJECTED, RETRYING, SQL, SYNCED, new, settled

from conftest import asker, under_the_profile
from denpyo import Status
from denpyo.domain.filters import Filter
from denpyo.domain.moves import Move, Settle
from denpyo.domain.policy import AttemptDecision
from denpyo.domain.retention import Retention
from denpyo.domain.status import ErrorKind
from denpyo.store import Store, dialect_of, open_store
from denpyo.store.sql_store import SqlStore
from waiting import wait_until


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
        ("c", Status.REQUESTING, 2),
        ("c", Status.SYNCED, 1),
        ("d", Status.REQUESTING, 1),
    ]
    counts = store.count_attention("c")
    assert (counts["in_doubt"], counts["needs_person"], counts["pending"]) == (1, 1, 2)
    assert counts["oldest_pending"] is not None and counts["now"] >= counts["oldest_pending"]
    assert store.count_attention("d")["in_doubt"] == 0
    assert store.count_in_doubt_due("c") == 1


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
    if store.capabilities.count_triggers:  # without (distributed SQL), rows are counted
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
            s
            for s in failed
            if s.resolution is None
            and (s.error_kind is ErrorKind.AMBIGUOUS or s.next_attempt_at is None)
        ]
        pending = [
            s
            for s in mine
            if s.status is Status.REQUESTING
            or (s.status is Status.FAILED and s.next_attempt_at is not None)
        ]
        rejected_open = [s for s in mine if s.status is Status.REJECTED and s.resolution is None]
        counts = store.count_attention(channel)
        assert counts.pop("now") is not None
        assert counts == {
            "in_doubt": sum(s.in_doubt for s in mine),
            "exhausted": sum(
                s.next_attempt_at is None
                and s.resolution is None
                and s.error_kind is not ErrorKind.AMBIGUOUS
                for s in failed
            ),
            "rejected_open": len(rejected_open),
            "needs_person": len(open_failed)
            + len(rejected_open)
            + sum(s.resolution is None for s in expired),
            "pending": len(pending),
            "oldest_pending": min((s.created_at for s in pending), default=None),
            # a row a person marked synced is resolved by a person too
            "resolved": sum(s.resolution is not None for s in mine),
        }, channel


def test_running_counts_follow_every_write(store: Store, backend: str, sql: SQL) -> None:
    """Rows through every status, kind and resolution, by the store's writes (one at a
    time, in batches, in bulk, rolled back) and by an application's own SQL, then
    pruned and deleted: after each step the running counts, `count_by_status` and
    `count_attention` agree with counting the table, before the counts are folded
    and after."""
    settle = {
        "synced": SYNCED,
        "rejected": REJECTED,
        "exhausted": EXHAUSTED,
        "retrying": RETRYING,
        "ambiguous": AMBIGUOUS,
        "held": AttemptDecision(Status.FAILED, ErrorKind.AMBIGUOUS, "timeout", retry_in=None),
    }
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
        [new(f"bulk{i}", "d") for i in range(5)] + [new("waiting")],
        actor="t",
        check=lambda new, existing: None,
    )
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
    everything = Retention.of(older_than=0)
    assert store.remove([sub.id for sub in store.removable(everything)], everything) > 0
    assert_counts_match_the_table(store, sql)
    store.upkeep()
    store.upkeep()  # a fold with nothing to fold
    assert_counts_match_the_table(store, sql)


def test_an_upgrade_counts_the_rows_already_there(
    backend: str, empty_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database with rows of every kind, at schema 7, taken to the latest: the running
    counts start from the rows already there (on SQLite and MariaDB schema 8 recounts)."""
    if under_the_profile(backend):
        pytest.skip("the distributed profile keeps no running counts: it counts the rows")
    import denpyo.store.sql_store as sql_store

    every = sql_store.load_migrations(dialect_of(empty_url))
    store = open_store(empty_url)
    try:
        monkeypatch.setattr(sql_store, "load_migrations", lambda dialect: every[:7])
        assert store.migrate() == list(range(1, 8))
        # This denpyo's inserts ask schema 10's denpyo_keys and write schema 13's trace
        # columns: lend them for the rows below.
        keys = next(script for version, script in every if version == 10)
        with cast(SqlStore, store).transaction() as tx:
            tx.script(keys)
            tx.script(
                "ALTER TABLE denpyo_submissions ADD COLUMN traceparent TEXT;\n"
                "ALTER TABLE denpyo_submissions ADD COLUMN tracestate TEXT;"
            )
        for name, outcome in {"s": SYNCED, "r": REJECTED, "x": EXHAUSTED, "a": AMBIGUOUS}.items():
            for i in range(2):
                settled(store, f"{name}{i}", outcome, "c" if i else "d")
        [resolved] = store.move(
            [Move.give_up(settled(store, "r9", REJECTED), "op", "abandon", "abandoned", "not ours")]
        )
        assert resolved is not None
        store.record(new("waiting"), actor="t")
        with cast(SqlStore, store).transaction() as tx:
            tx.script("DROP TABLE denpyo_keys;\nDROP TABLE denpyo_removed_counts;")
            tx.script(
                "ALTER TABLE denpyo_submissions DROP COLUMN traceparent;\n"
                "ALTER TABLE denpyo_submissions DROP COLUMN tracestate;"
            )
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
    pool = ThreadPoolExecutor(1)
    try:
        with other.transaction() as tx:
            other.record_in(tx, new("open"), actor="t", lease=None, detail=None)
            # A fold that waited for the writer would wait for ever: the writer
            # commits only after it (or rolls back when this wait gives up).
            fold = pool.submit(cast(SqlStore, store).fold_counts)
            wait_until(fold.done, "the fold beside an uncommitted writer")
            fold.result()
            assert store.count_by_status() == []
        assert store.count_by_status() == [("c", Status.REQUESTING, 1)]
    finally:
        pool.shutdown()
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
