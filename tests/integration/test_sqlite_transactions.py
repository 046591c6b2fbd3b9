"""The store's own SQLite transactions: whatever ends one (a commit, an error in
its body, a COMMIT the database refuses), the thread's connection comes out of it
with no transaction open, and the driver's error as StoreError."""

from __future__ import annotations

from pathlib import Path

import pytest

import denpyo
from denpyo.store.sqlite import SqliteStore


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    ledger = denpyo.Ledger(f"sqlite:///{tmp_path}/ledger.db")
    ledger.migrate()
    assert isinstance(ledger.store, SqliteStore)
    return ledger.store


def test_an_error_in_the_body_rolls_back_and_leaves_as_store_error(store: SqliteStore) -> None:
    conn = store._connection()
    with pytest.raises(denpyo.StoreError, match="no such column"), store.transaction() as tx:
        tx.script("INSERT INTO denpyo_outcome_minutes VALUES ('m', 'c', 'synced', 1)")
        tx.script("SELECT no_such_column FROM denpyo_submissions")
    assert not conn.in_transaction
    assert conn.execute("SELECT COUNT(*) FROM denpyo_outcome_minutes").fetchone()[0] == 0


def test_an_application_error_rolls_back_and_passes_through(store: SqliteStore) -> None:
    conn = store._connection()
    with pytest.raises(KeyError), store.transaction() as tx:
        tx.script("INSERT INTO denpyo_outcome_minutes VALUES ('m', 'c', 'synced', 1)")
        raise KeyError("the caller's own")
    assert not conn.in_transaction
    assert conn.execute("SELECT COUNT(*) FROM denpyo_outcome_minutes").fetchone()[0] == 0


def test_a_refused_commit_rolls_back_and_the_connection_works_on(store: SqliteStore) -> None:
    # A deferred foreign key is checked at COMMIT: the COMMIT fails and SQLite
    # leaves the transaction open, for its owner to roll back.
    conn = store._connection()
    with pytest.raises(denpyo.StoreError, match="FOREIGN KEY"), store.transaction() as tx:
        tx.script("PRAGMA defer_foreign_keys = ON")
        tx.script(
            "INSERT INTO denpyo_events (submission_id, kind, actor) VALUES (424242, 'note', 'x')"
        )
    assert not conn.in_transaction
    with store.transaction() as tx:  # the next transaction begins as any other
        tx.script("INSERT INTO denpyo_outcome_minutes VALUES ('m', 'c', 'synced', 1)")
    assert conn.execute("SELECT COUNT(*) FROM denpyo_events").fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM denpyo_outcome_minutes").fetchone()[0] == 1
