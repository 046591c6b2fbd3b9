"""The database under the ledger: its URL, the schema (migrated once, even by
processes migrating at once, or built from the printed DDL), its CHECK on the
status, and a pooled connection that fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ledger_helpers import SQL, ok

import denpyo
from conftest import driver_connection
from denpyo import Status
from denpyo.store.dialects import DIALECTS
from denpyo.store.postgresql import PostgresStore


def test_an_empty_url_is_refused_not_taken_for_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DENPYO_DATABASE_URL", raising=False)
    for url in ("", "  "):
        with pytest.raises(denpyo.InvalidDatabaseURL, match="the database URL is empty"):
            denpyo.Ledger(url)
    assert list(tmp_path.iterdir()) == []  # no ./denpyo.db


def test_migrate_twice_is_harmless(empty_url: str) -> None:
    with denpyo.Ledger(empty_url) as ledger:
        every = list(range(1, ledger.store.latest_version() + 1))
        assert ledger.migrate() == every and len(every) >= 4
        assert ledger.migrate() == []
        assert ledger.store.schema_version() == every[-1]


def test_operations_before_migrate_say_so(empty_url: str) -> None:
    with denpyo.Ledger(empty_url) as ledger:
        ledger.channel("c")(ok)
        with pytest.raises(denpyo.SchemaError, match="denpyo migrate"):
            ledger.submit("c", "k", {})


def test_status_check_constraint(ledger: denpyo.Ledger, sql: SQL) -> None:
    ledger.channel("c")(ok)
    sub = ledger.enqueue("c", "k", {})
    with pytest.raises(Exception, match=r"(?i)check|constraint"):
        sql(f"UPDATE denpyo_submissions SET status = 'sent' WHERE id = {sub.id}")
    assert ledger.get("c", "k").status is Status.REQUESTING  # type: ignore[union-attr]


def test_two_processes_migrating_at_once(empty_url: str) -> None:
    import subprocess
    import sys

    script = "import sys, denpyo; print(denpyo.Ledger(sys.argv[1]).migrate())"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", script, empty_url], stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    outputs = sorted(child.communicate(timeout=120)[0].strip() for child in children)
    assert [child.returncode for child in children] == [0, 0, 0]
    with denpyo.Ledger(empty_url) as ledger:
        every = list(range(1, ledger.store.latest_version() + 1))
        assert outputs == [str(every), "[]", "[]"]  # exactly one applied it
        assert ledger.store.schema_version() == every[-1]


def test_printed_ddl_builds_the_same_schema(empty_url: str, backend: str) -> None:
    """Users who run their own migrations apply `denpyo sql`; migrate then has nothing to do."""
    from denpyo.store.queries import ddl, split_statements

    conn = driver_connection(backend, empty_url)
    try:
        cursor = conn.cursor()
        script = ddl(backend)
        # PostgreSQL takes the script whole (it has function bodies); the others by statement.
        whole = DIALECTS[backend].whole_scripts
        for statement in [script] if whole else split_statements(script):
            cursor.execute(statement)
        conn.commit()
    finally:
        conn.close()
    with denpyo.Ledger(empty_url) as ledger:
        assert ledger.migrate() == []
        ledger.channel("c")(ok)
        assert ledger.submit("c", "k", {}).status is Status.SYNCED


def test_a_connection_that_fails_at_the_first_step_goes_back_to_the_pool(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout whose cursor cannot even be made (the connection closed under it)
    leaves as StoreError, and the pool gets the connection back to replace it:
    nothing is lost from the pool, the next statement works."""
    with denpyo.Ledger(postgres_url) as ledger:
        store = ledger.store
        assert isinstance(store, PostgresStore)
        store.now()  # the pool is open, one connection in it
        checkout = store._checkout

        def closed_one() -> Any:
            conn = checkout()
            conn.close()
            return conn

        monkeypatch.setattr(store, "_checkout", closed_one)
        with pytest.raises(denpyo.StoreError, match="closed"):
            store.now()
        monkeypatch.undo()
        assert store.pool.get_stats()["pool_size"] >= 1
        assert store.now() is not None
