"""store/conflicts.py: a transaction of the store's own that lost to a concurrent
one runs again, a bounded number of times, with jittered pauses and one log line;
never the caller's transaction, never an inner call."""

from __future__ import annotations

import ast
import logging
from pathlib import Path
from typing import Any

import pytest

from denpyo.errors import StoreConflict, StoreError
from denpyo.store import conflicts
from denpyo.store.conflicts import CONFLICT_PAUSE_MAX, CONFLICT_TRIES, Conflicts, retried

STORE = Path(conflicts.__file__).parent


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(conflicts.time, "sleep", slept.append)
    return slept


class Flaky:
    """A store method that loses `losses` times, then succeeds."""

    def __init__(self, losses: int) -> None:
        self.losses = losses
        self.calls = 0

    @retried
    def write(self, conn: Any = None) -> str:
        self.calls += 1
        if self.calls <= self.losses:
            raise StoreConflict("PostgreSQL: could not serialize access")
        return "done"

    @retried
    def outer(self) -> str:
        return self.write()


def test_a_conflict_runs_the_transaction_again_with_one_log_line(
    pauses: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="denpyo.store")
    flaky = Flaky(losses=3)
    assert flaky.write() == "done" and flaky.calls == 4
    assert len(pauses) == 3
    assert [r.getMessage() for r in caplog.records] == [
        "store.write: succeeded at try 4, after conflicts with concurrent transactions"
    ]


def test_after_the_last_try_the_conflict_is_raised_with_one_warning(
    pauses: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="denpyo.store")
    flaky = Flaky(losses=100)
    with pytest.raises(StoreConflict, match="could not serialize"):
        flaky.write()
    assert flaky.calls == CONFLICT_TRIES and len(pauses) == CONFLICT_TRIES - 1
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "gave up after 8 tries" in caplog.text


def test_no_log_line_for_a_transaction_that_went_through_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="denpyo.store")
    assert Flaky(losses=0).write() == "done" and caplog.records == []


def test_the_callers_transaction_and_an_inner_call_run_once(pauses: list[float]) -> None:
    flaky = Flaky(losses=1)
    with pytest.raises(StoreConflict):
        flaky.write(conn=object())
    assert flaky.calls == 1
    flaky = Flaky(losses=1)
    assert flaky.outer() == "done" and flaky.calls == 2  # the outer one ran again


def test_other_store_errors_are_not_tried_again(pauses: list[float]) -> None:
    class Broken:
        calls = 0

        @retried
        def write(self) -> None:
            self.calls += 1
            raise StoreError("PostgreSQL: syntax error")

    broken = Broken()
    with pytest.raises(StoreError):
        broken.write()
    assert broken.calls == 1 and pauses == []


def test_pauses_grow_with_full_jitter_up_to_a_cap() -> None:
    for _ in range(200):
        tries = Conflicts("x")
        ceilings = [0.005, 0.01, 0.02, 0.04, 0.08, 0.16, CONFLICT_PAUSE_MAX]
        for ceiling in ceilings:
            assert 0 <= tries.pause(StoreConflict("c")) <= ceiling


def test_a_conflict_that_waited_out_the_lock_timeout_runs_once_more_only() -> None:
    waited = StoreConflict("Lock wait timeout exceeded; try restarting transaction")
    waited.waited = True
    tries = Conflicts("x")
    tries.pause(waited)
    with pytest.raises(StoreConflict):
        tries.pause(waited)


def test_mariadb_says_which_conflict_waited_out_its_lock_timeout() -> None:
    pymysql = pytest.importorskip("pymysql")
    from denpyo.store.mysql import ERRORS

    timeout = ERRORS.translated(pymysql.err.OperationalError(1205, "Lock wait timeout"))
    deadlock = ERRORS.translated(pymysql.err.OperationalError(1213, "Deadlock found"))
    assert isinstance(timeout, StoreConflict) and timeout.waited
    assert isinstance(deadlock, StoreConflict) and not deadlock.waited


EXEMPT = {
    ("connections.py", "one_statement"): "a connection mode itself",
    ("connections.py", "reading"): "a connection mode itself",
    ("connections.py", "_in"): "a connection mode itself",
    ("postgresql.py", "one_statement"): "a connection mode itself",
    ("sqlite.py", "reading"): "a connection mode itself",
    ("sqlite.py", "remove_in"): "SQLite has one writer at a time: no conflicts",
    ("sql_store.py", "migrate"): "DDL: MariaDB commits it as it goes; run `migrate` again",
    ("mysql.py", "migrate"): "DDL: MariaDB commits it as it goes; run `migrate` again",
    ("postgresql_partitions.py", "migrate_partitioned"): "DDL, run by a person: run it again",
}


def test_every_store_method_that_opens_its_own_transaction_is_retried() -> None:
    """So that no new operation forgets it (a method of two transactions is split
    in two retried ones: run again whole, it would repeat the first, committed)."""
    missing = []
    for path in sorted(STORE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            opens = [
                sub
                for sub in ast.walk(node)
                if isinstance(sub, ast.Call)
                and isinstance(sub.func, ast.Attribute)
                and isinstance(sub.func.value, ast.Name)
                and sub.func.value.id == "self"
                and sub.func.attr in ("transaction", "one_statement", "_in")
            ]
            decorated = any(ast.unparse(d) == "retried" for d in node.decorator_list)
            if opens and not decorated and (path.name, node.name) not in EXEMPT:
                missing.append(f"{path.name}:{node.lineno} {node.name}")
            if len(opens) > 1 and decorated and node.name != "move":
                missing.append(f"{path.name}:{node.lineno} {node.name} opens two")
    assert missing == []


def test_an_iterator_is_read_again_from_its_start_when_the_method_runs_again() -> None:
    source = iter(range(5))
    items = conflicts.Replayed(source)
    first = iter(items)
    assert [next(first), next(first)] == [0, 1]  # a conflict here: the method runs again
    assert list(items) == [0, 1, 2, 3, 4] and list(items) == [0, 1, 2, 3, 4]
    assert list(source) == []


def test_the_drivers_conflicts_are_store_conflicts_and_nothing_else() -> None:
    import psycopg
    import pymysql

    from denpyo.store.async_conn import _asyncpg_error
    from denpyo.store.mysql import ERRORS as MARIADB
    from denpyo.store.postgresql import ERRORS as POSTGRESQL

    pg = psycopg.errors
    for exc in (pg.SerializationFailure("s"), pg.DeadlockDetected("d")):
        assert type(POSTGRESQL.translated(exc)) is StoreConflict
    assert type(POSTGRESQL.translated(pg.UniqueViolation("u"))) is StoreError
    for code in (1213, 1205):
        assert type(MARIADB.translated(pymysql.err.OperationalError(code, "m"))) is StoreConflict
    assert type(MARIADB.translated(pymysql.err.IntegrityError(1062, "dup"))) is StoreError

    class SerializationError(Exception):  # as asyncpg names it, in its module
        sqlstate = "40001"

    SerializationError.__module__ = "asyncpg.exceptions"
    assert type(_asyncpg_error(SerializationError("s"))) is StoreConflict
    SerializationError.sqlstate = "23505"
    assert type(_asyncpg_error(SerializationError("u"))) is StoreError
