"""Enqueue, alone and in bulk: in the caller's own transaction (a driver's
connection, SQLAlchemy's), all or nothing, and copied in on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from ledger_helpers import SQL, as_prepared, ok

import denpyo
from conftest import driver_connection
from database_records import without_profile
from denpyo.errors import SubmissionNotFound
from denpyo.store.dialects import DIALECTS
from denpyo.store.postgresql import PostgresStore


def test_enqueue_joins_a_driver_transaction(
    ledger: denpyo.Ledger, backend: str, db_url: str
) -> None:
    ledger.channel("c")(ok)
    conn = driver_connection(backend, db_url)
    try:
        ledger.enqueue("c", "rolled-back", {}, conn=conn)
        conn.rollback()
        ledger.enqueue("c", "committed", {}, conn=conn)
        conn.commit()
    finally:
        conn.close()
    assert ledger.get("c", "rolled-back") is None
    assert ledger.get("c", "committed") is not None


def _sqlalchemy_url(backend: str, db_url: str) -> str:
    return {
        "sqlite": db_url,
        "postgresql": without_profile(db_url).replace("postgresql://", "postgresql+psycopg://"),
        "mysql": db_url.replace("mysql://", "mysql+pymysql://"),
    }[backend]


def test_enqueue_joins_a_sqlalchemy_connection_and_session(
    ledger: denpyo.Ledger, backend: str, db_url: str
) -> None:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy.orm import Session

    ledger.channel("c")(ok)
    engine = sqlalchemy.create_engine(_sqlalchemy_url(backend, db_url))
    try:
        with engine.connect() as conn:
            with conn.begin() as tx:
                ledger.enqueue("c", "conn-rolled-back", {}, conn=conn)
                tx.rollback()
            with conn.begin():
                ledger.enqueue("c", "conn-committed", {}, conn=conn)
        with Session(engine) as session:
            ledger.enqueue("c", "session-rolled-back", {}, conn=session)
            session.rollback()
            ledger.enqueue("c", "session-committed", {}, conn=session)
            session.commit()
    finally:
        engine.dispose()
    assert ledger.get("c", "conn-rolled-back") is None
    assert ledger.get("c", "session-rolled-back") is None
    assert ledger.get("c", "conn-committed") is not None
    assert ledger.get("c", "session-committed") is not None


def test_enqueue_refuses_a_supersedes_that_names_no_row_of_its_channel(
    ledger: denpyo.Ledger, backend: str, db_url: str
) -> None:
    """Checked before the insert: a caller's sqlite3 connection enforces no foreign
    key, and on PostgreSQL the violation would abort the caller's own transaction."""
    ledger.channel("c")(ok)
    ledger.channel("other")(ok)
    elsewhere = ledger.enqueue("other", "o", {})
    conn = driver_connection(backend, db_url)
    try:
        with pytest.raises(SubmissionNotFound, match="supersedes=99999"):
            ledger.enqueue("c", "k", {}, conn=conn, supersedes=99999)
        with pytest.raises(denpyo.InvalidInput, match="of channel 'other'"):
            ledger.enqueue("c", "k", {}, conn=conn, supersedes=elsewhere.id)
        after = ledger.enqueue("c", "after", {}, conn=conn)  # the caller's transaction goes on
        # A row the caller's transaction wrote, not yet committed, may be superseded in it.
        assert ledger.enqueue("c", "later", {}, conn=conn, supersedes=after.id).supersedes
        conn.commit()
    finally:
        conn.close()
    assert ledger.get("c", "k") is None and ledger.get("c", "after") is not None
    old = ledger.enqueue("c", "old", {})
    assert ledger.enqueue("c", "new", {}, supersedes=old.id).supersedes == old.id


def test_enqueue_refuses_a_connection_of_another_database(ledger: denpyo.Ledger) -> None:
    ledger.channel("c")(ok)
    with pytest.raises(denpyo.ConfigurationError, match="conn must be"):
        ledger.enqueue("c", "k", {}, conn=object())


def test_enqueue_many(ledger: denpyo.Ledger, sql: SQL) -> None:
    ledger.channel("c")(ok)
    assert ledger.enqueue_many("c", [(f"k{i}", {"i": i}) for i in range(500)]) == 500
    assert ledger.enqueue_many("c", [("k1", {"i": 1}), ("k500", {"i": 500}, "group")]) == 1
    with pytest.raises(denpyo.KeyReused):
        ledger.enqueue_many("c", [("k501", {}), ("k2", {"i": "changed"})])
    assert ledger.get("c", "k501") is None  # all or nothing
    with pytest.raises(denpyo.InvalidKey):
        ledger.enqueue_many("c", [("ok", {}), ("", {})])
    with pytest.raises(denpyo.InvalidInput, match="twice"):
        ledger.enqueue_many("c", [("dup", {}), ("dup", {})])
    assert sql("SELECT COUNT(*) FROM denpyo_submissions") == [(501,)]
    assert sql("SELECT COUNT(*) FROM denpyo_events WHERE kind = 'created'") == [(501,)]
    assert ledger.get("c", "k500").ordering_key == "group"  # type: ignore[union-attr]
    assert ledger.work(until_idle=True, poll_interval=0.01).outcomes["synced"] == 501


def test_enqueue_many_writes_nothing_when_a_late_item_is_bad(
    ledger: denpyo.Ledger, sql: SQL, backend: str
) -> None:
    """Rows are written while later ones are still being checked (PostgreSQL sends
    them in chunks): a bad item after several chunks leaves no row at all, in the
    ledger's transaction, and in the caller's once the caller rolls back."""
    ledger.channel("c")(ok)
    ledger.enqueue("c", "known", {"v": 1})

    n = 3500 if DIALECTS[backend].capabilities.copy else 300  # PostgreSQL: chunks of 1,000

    def items(bad: tuple[str, Any]) -> Iterator[tuple[str, Any]]:
        yield from ((f"k{i}", {"i": i}) for i in range(n))
        yield bad
        yield ("after", {})

    for bad, error in (
        (("", {}), denpyo.InvalidKey),
        (("big", {"x": "y" * 2_000_000}), denpyo.PayloadTooLarge),
        (("known", {"v": 2}), denpyo.KeyReused),
    ):
        with pytest.raises(error):
            ledger.enqueue_many("c", items(bad))
        conn = driver_connection(backend, ledger.url)
        try:
            with pytest.raises(error):
                ledger.enqueue_many("c", items(bad), conn=conn)
            conn.rollback()
        finally:
            conn.close()
        assert sql("SELECT COUNT(*) FROM denpyo_submissions") == [(1,)]
        assert sql("SELECT COUNT(*) FROM denpyo_events") == [(1,)]
    assert ledger.enqueue_many("c", items(("known", {"v": 1}))) == n + 1


def test_a_bulk_enqueue_in_the_callers_transaction_commits_with_it_and_wakes_at_commit(
    postgres_url: str,
) -> None:
    """PostgreSQL copies a batch of `COPY_FROM` rows or more in, under a savepoint of
    the caller's transaction: nothing is seen or heard before the commit, a rollback
    leaves nothing, a row the caller wrote before keeps its history, a bad item
    leaves the caller's transaction usable, and an autocommit connection works too."""
    import psycopg

    from denpyo.store.postgresql import COPY_FROM

    n = 300
    assert n >= COPY_FROM
    batch = [(f"k{i}", {"i": i}) for i in range(n)]
    with (
        denpyo.Ledger(postgres_url) as ledger,
        psycopg.connect(postgres_url, autocommit=True) as listener,
        psycopg.connect(postgres_url) as conn,
    ):
        ledger.channel("c")(ok)
        listener.execute("LISTEN denpyo")
        ledger.enqueue("c", "before", {}, conn=conn)
        assert ledger.enqueue_many("c", batch, conn=conn) == n
        assert ledger.get("c", "k1") is None
        conn.rollback()
        assert ledger.get("c", "before") is None and ledger.get("c", "k1") is None
        assert list(listener.notifies(timeout=0.3)) == []

        ledger.enqueue("c", "before", {}, conn=conn)
        assert ledger.enqueue_many("c", batch, conn=conn) == n
        assert list(listener.notifies(timeout=0.3)) == []
        conn.commit()
        assert [note.payload for note in listener.notifies(timeout=5, stop_after=1)] == ["c"]
        assert ledger.enqueue_many("c", [*batch[n // 2 :], ("new", {})], conn=conn) == 1
        conn.commit()

        def late_bad() -> Iterator[tuple[str, Any]]:
            yield from ((f"late{i}", {}) for i in range(2 * n))
            yield ("", {})

        ledger.enqueue("c", "kept", {}, conn=conn)
        with pytest.raises(denpyo.InvalidKey):
            ledger.enqueue_many("c", late_bad(), conn=conn)
        conn.commit()  # the caller's own write survives; none of the batch's rows
        assert ledger.get("c", "kept") is not None and ledger.get("c", "late0") is None

        with psycopg.connect(postgres_url, autocommit=True) as auto:
            assert ledger.enqueue_many("c", [(f"a{i}", {}) for i in range(n)], conn=auto) == n
        rows = conn.execute(
            "SELECT COUNT(*), COUNT(DISTINCT e.submission_id), MIN(s.attempts),"
            " MAX(s.attempts) FROM denpyo_submissions s"
            " JOIN denpyo_events e ON e.submission_id = s.id AND e.kind = 'created'"
        ).fetchone()
        conn.rollback()
    assert rows == (2 * n + 3, 2 * n + 3, 0, 0)


def test_a_bulk_enqueue_finds_its_copied_rows_by_primary_key(postgres_url: str) -> None:
    """The statement that writes the events of copied rows reads them by a range of
    the primary key, in a custom plan and in a generic one, on a table that has no
    statistics (never analysed)."""
    with denpyo.Ledger(postgres_url) as ledger:
        ledger.channel("c")(ok)
        assert ledger.enqueue_many("c", [(f"k{i}", {"i": i}) for i in range(5000)]) == 5000
        first, last = ledger.get("c", "k0"), ledger.get("c", "k4999")
        assert first is not None and last is not None
        store = ledger.store
        assert isinstance(store, PostgresStore)
        query = store.queries["record_submissions_copied"]
        with store.pool.connection() as conn:
            params = {"first": first.idempotency_key, "last": last.idempotency_key, "actor": "x"}
            custom = "\n".join(
                row["QUERY PLAN"] for row in conn.execute(f"EXPLAIN {query}", params)
            )
            prepared, nulls = as_prepared(query)
            conn.execute("SET plan_cache_mode = force_generic_plan")
            conn.execute(f"PREPARE copied_plan AS {prepared}")
            generic = "\n".join(
                row["QUERY PLAN"]
                for row in conn.execute(f"EXPLAIN EXECUTE copied_plan {nulls}").fetchall()
            )
            conn.execute("DEALLOCATE copied_plan")
            conn.execute("RESET plan_cache_mode")
    for plan in (custom, generic):
        assert "on denpyo_submissions_pkey" in plan and "Seq Scan" not in plan, plan
