"""MariaDB-specific checks of the MySQL store, each on a fresh real database.

The behaviour every store shares is tested in the other integration suites, on
every backend; here: URL parsing, the schema's constraints and collation,
`FOR UPDATE SKIP LOCKED`, the two-step compare-and-set, the caller's
transaction on a raw PyMySQL connection, the migration lock, and reconnecting
after the server dropped a connection.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pymysql
import pytest

import denpyo
from denpyo.domain.filters import Filter
from denpyo.errors import ConfigurationError, InvalidDatabaseURL, SchemaError, StoreError
from denpyo.store import NewSubmission, open_store
from denpyo.store.mysql import MysqlStore, check_server, connect_args


@pytest.fixture
def backend() -> str:
    """Every fixture of conftest (db_url, empty_url, ledger) on MariaDB only."""
    return "mysql"


@pytest.fixture
def store(db_url: str) -> Iterator[MysqlStore]:
    opened = open_store(db_url)
    assert isinstance(opened, MysqlStore)
    yield opened
    opened.close()


def raw(url: str, **options: Any) -> pymysql.connections.Connection:  # type: ignore[type-arg]
    return pymysql.connect(**connect_args(url), **options)


LOCK = "LEFT(CONCAT('denpyo_migrate:', DATABASE()), 64)"
"""The name of the migration lock of the connection's database, as `lock_schema` takes it."""


def query(url: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = raw(url, autocommit=True)
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql, args or None)
            return list(cursor.fetchall())
    finally:
        conn.close()


def new(key: str, channel: str = "c", idempotency_key: str | None = None) -> NewSubmission:
    return NewSubmission(
        channel=channel,
        key=key,
        idempotency_key=idempotency_key or str(uuid.uuid4()),
        payload_json='{"n": 1}',
    )


# -- URLs ------------------------------------------------------------------------------------


def test_connect_args_from_a_full_url() -> None:
    args = connect_args("mysql://app:p%40ss%2Fword@db.example:3307/ledger?charset=utf8mb4")
    assert args == {
        "host": "db.example",
        "port": 3307,
        "user": "app",
        "password": "p@ss/word",
        "database": "ledger",
        "charset": "utf8mb4",
        "connect_timeout": 10,
    }


@pytest.mark.parametrize("scheme", ["mysql", "mariadb", "mysql+pymysql", "MySQL"])
def test_connect_args_defaults_and_schemes(scheme: str) -> None:
    args = connect_args(f"{scheme}://root@127.0.0.1/test")
    assert args["host"] == "127.0.0.1" and args["port"] == 3306
    assert args["user"] == "root" and "password" not in args
    assert args["database"] == "test" and args["charset"] == "utf8mb4"


def test_connect_args_options() -> None:
    args = connect_args("mariadb://u:@h/d?connect_timeout=2.5&unix_socket=/run/mysqld.sock")
    assert args["password"] == ""
    assert args["connect_timeout"] == 2.5
    assert args["unix_socket"] == "/run/mysqld.sock"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("mysql://root@host:port/db", "(?i)port"),
        ("mysql://root@host:99999/db", "(?i)port"),
        ("mysql://root@host", "one database"),
        ("mysql://root@host/", "one database"),
        ("mysql://root@host/a/b", "one database"),
        ("mysql://root@host/db?sslmode=require", "unknown option"),
        ("mysql://root@host/db?charset=", "no value"),
        ("mysql://root@host/db?connect_timeout=soon", "not a number"),
        ("mysql://root@host/db#x", "fragment"),
        ("postgresql://root@host/db", "not a MySQL URL"),
    ],
)
def test_bad_urls_are_refused(url: str, reason: str) -> None:
    with pytest.raises(InvalidDatabaseURL, match=reason):
        connect_args(url)


def test_a_bad_url_never_shows_its_password() -> None:
    with pytest.raises(InvalidDatabaseURL) as caught:
        connect_args("mysql://app:hunter2@host:port/db")
    assert "hunter2" not in str(caught.value) and "***" in str(caught.value)


def test_ledger_refuses_a_bad_url_before_connecting() -> None:
    with pytest.raises(InvalidDatabaseURL):
        denpyo.Ledger("mysql://root@127.0.0.1:3306/test?bogus=1")


def test_wrong_password_is_a_configuration_error(db_url: str) -> None:
    base, _, name = db_url.rpartition("/")
    bad = open_store(base.replace("root@", "denpyo_nobody:wrong@") + "/" + name)
    try:
        with pytest.raises(ConfigurationError, match="refused") as caught:
            bad.get(1)
        assert isinstance(caught.value.__cause__, pymysql.err.OperationalError)
    finally:
        bad.close()


def test_server_down_is_a_store_error() -> None:
    down = open_store("mysql://root@127.0.0.1:1/test?connect_timeout=2")
    try:
        with pytest.raises(StoreError, match="cannot connect") as caught:
            down.get(1)
        assert isinstance(caught.value.__cause__, pymysql.err.OperationalError)
    finally:
        down.close()


# -- schema ------------------------------------------------------------------------------


def test_missing_tables_are_a_schema_error(empty_url: str) -> None:
    bare = open_store(empty_url)
    try:
        with pytest.raises(SchemaError, match="migrate") as caught:
            bare.get(1)
        assert isinstance(caught.value.__cause__, pymysql.err.ProgrammingError)
    finally:
        bare.close()


def test_migrate_twice_and_the_lock_is_released(empty_url: str) -> None:
    with denpyo.Ledger(empty_url) as ledger:
        every = list(range(1, ledger.store.latest_version() + 1))
        assert ledger.migrate() == every and len(every) >= 4
        assert ledger.migrate() == []
        assert ledger.store.schema_version() == every[-1]
        # Another session takes the lock while the ledger is still open.
        taken = query(empty_url, f"SELECT GET_LOCK({LOCK}, 0), RELEASE_LOCK({LOCK})")
        assert taken == [(1, 1)]


def test_concurrent_migrations_apply_once(empty_url: str) -> None:
    stores = [open_store(empty_url) for _ in range(4)]
    results: list[list[int]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(len(stores))

    def run(store: denpyo.store.Store) -> None:
        start.wait()
        try:
            results.append(store.migrate())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for store in stores:
        store.close()
    assert not errors
    every = list(range(1, stores[0].latest_version() + 1))
    assert sorted(results) == [[], [], [], every]


def test_migrate_waits_for_a_migration_in_progress(empty_url: str) -> None:
    holder = raw(empty_url, autocommit=True)
    try:
        with holder.cursor() as cursor:
            cursor.execute(f"SELECT GET_LOCK({LOCK}, 0)")
            assert cursor.fetchone()[0] == 1
        result: list[list[int]] = []
        store = open_store(empty_url)
        thread = threading.Thread(target=lambda: result.append(store.migrate()))
        thread.start()
        time.sleep(0.5)
        assert not result, "migrate must wait while another process holds the lock"
    finally:
        holder.close()  # the session ends: its lock is released
    thread.join(timeout=30)
    store.close()
    assert result == [list(range(1, store.latest_version() + 1))]


def test_a_migration_of_another_database_does_not_hold_this_one(empty_url: str) -> None:
    holder = raw(empty_url, autocommit=True)
    try:
        with holder.cursor() as cursor:  # what `migrate` of a database `other` holds
            cursor.execute("SELECT GET_LOCK('denpyo_migrate:other', 0)")
            assert cursor.fetchone()[0] == 1
        with denpyo.Ledger(empty_url) as ledger:
            assert ledger.migrate() == list(range(1, ledger.store.latest_version() + 1))
    finally:
        holder.close()


def test_status_check_constraint_refuses_a_bad_status(db_url: str) -> None:
    with pytest.raises(pymysql.err.OperationalError, match="status_check"):
        query(
            db_url,
            "INSERT INTO denpyo_submissions (channel, `key`, idempotency_key, payload, status)"
            " VALUES ('c', 'k', 'i', '{}', 'sent')",
        )
    with pytest.raises(pymysql.err.OperationalError, match="payload"):
        query(
            db_url,
            "INSERT INTO denpyo_submissions (channel, `key`, idempotency_key, payload, status)"
            " VALUES ('c', 'k', 'i', 'not json', 'requesting')",
        )
    assert query(db_url, "SELECT COUNT(*) FROM denpyo_submissions") == [(0,)]


def test_keys_compare_byte_for_byte(store: MysqlStore) -> None:
    keys = ["order:1", "ORDER:1", "order:1 ", "ördér:1"]
    created = [store.record(new(key), actor="t")[1] for key in keys]
    assert created == [True] * len(keys)
    for key in keys:
        found = store.get_by_key("c", key)
        assert found is not None and found.key == key


def test_duplicate_key_returns_the_row_but_a_duplicate_idempotency_key_raises(
    store: MysqlStore,
) -> None:
    first, created = store.record(new("k", idempotency_key="idem-1"), actor="t")
    assert created
    again, created = store.record(new("k"), actor="t")
    assert not created and again.id == first.id
    with pytest.raises(StoreError) as caught:
        store.record(new("other", idempotency_key="idem-1"), actor="t")
    assert isinstance(caught.value.__cause__, pymysql.err.IntegrityError)
    assert store.get_by_key("c", "other") is None


def test_times_are_aware_utc_from_the_database_clock(store: MysqlStore) -> None:
    sub, _ = store.record(new("k"), actor="t", lease=30)
    now = store.now()
    assert now.tzinfo is UTC
    assert sub.created_at is not None and sub.locked_until is not None
    assert abs((now - sub.created_at).total_seconds()) < 5
    assert timedelta(seconds=29) < sub.locked_until - sub.created_at <= timedelta(seconds=30)
    assert abs((now - datetime.now(UTC)).total_seconds()) < 60


def test_list_filters_by_time_with_any_utc_offset(store: MysqlStore) -> None:
    sub, _ = store.record(new("k"), actor="t")
    assert sub.created_at is not None
    tokyo = timezone(timedelta(hours=9))
    before = (sub.created_at - timedelta(seconds=1)).astimezone(tokyo)
    after = (sub.created_at + timedelta(seconds=1)).astimezone(tokyo)
    assert [s.id for s in store.list_submissions(Filter(since=before))] == [sub.id]
    assert store.list_submissions(Filter(since=after)) == []
    assert store.list_submissions(Filter(until=before)) == []
    assert [s.id for s in store.list_submissions(Filter(key_prefix="k"))] == [sub.id]


# -- claims and moves -----------------------------------------------------------------------


def test_a_move_that_changes_nothing_still_counts_as_won(store: MysqlStore) -> None:
    """FOUND_ROWS: the row count means rows matched, not rows changed."""
    sub, _ = store.record(new("k"), actor="holder", lease=60)
    conn = store._connection()
    assert conn.client_flag & pymysql.constants.CLIENT.FOUND_ROWS
    with conn.cursor() as cursor:
        cursor.execute("SELECT @@tx_isolation")
        assert cursor.fetchone() == ("READ-COMMITTED",)
        cursor.execute("UPDATE denpyo_submissions SET status = status WHERE id = %s", (sub.id,))
        assert cursor.rowcount == 1
    conn.rollback()


# -- the caller's transaction ---------------------------------------------------------------


def test_enqueue_joins_a_raw_pymysql_transaction(ledger: denpyo.Ledger, db_url: str) -> None:
    ledger.channel("c")(lambda sub: "remote")
    conn = raw(db_url)
    try:
        conn.begin()
        ledger.enqueue("c", "rolled-back", {"n": 1}, conn=conn)
        assert ledger.get("c", "rolled-back") is None  # not visible before commit
        conn.rollback()
        conn.begin()
        ledger.enqueue("c", "committed", {"n": 2}, conn=conn)
        conn.commit()
    finally:
        conn.close()
    assert ledger.get("c", "rolled-back") is None
    sub = ledger.get("c", "committed")
    assert sub is not None and sub.payload == {"n": 2}
    assert [e.kind for e in ledger.events(sub.id)] == ["created"]
    assert query(db_url, "SELECT COUNT(*) FROM denpyo_events") == [(1,)]


def test_enqueue_refuses_another_drivers_connection(ledger: denpyo.Ledger) -> None:
    ledger.channel("c")(lambda sub: "remote")
    other = sqlite3.connect(":memory:")
    try:
        with pytest.raises(ConfigurationError, match="pymysql Connection"):
            ledger.enqueue("c", "k", {}, conn=other)
    finally:
        other.close()


# -- reconnecting ------------------------------------------------------------------------------


def _kill(url: str, connection_id: int) -> None:
    query(url, f"KILL {int(connection_id)}")


def test_reconnects_after_the_server_dropped_an_idle_connection(
    store: MysqlStore, db_url: str
) -> None:
    sub, _ = store.record(new("k"), actor="t")
    first = store._connection()
    _kill(db_url, first.thread_id())
    time.sleep(0.1)
    found = store.get(sub.id)  # no error: the dead connection is replaced before BEGIN
    assert found is not None and found.id == sub.id
    assert store._connection() is not first


def test_a_transaction_cut_short_fails_and_the_next_one_reconnects(
    store: MysqlStore, db_url: str
) -> None:
    sub, _ = store.record(new("k"), actor="t")
    with pytest.raises(StoreError) as caught, store.transaction() as tx:
        tx.fetch_one("get_submission", {"id": sub.id})
        conn = store._connection()
        _kill(db_url, conn.thread_id())
        time.sleep(0.1)
        tx.fetch_one("get_submission", {"id": sub.id})
    assert isinstance(caught.value.__cause__, pymysql.err.MySQLError)
    assert store.get(sub.id) is not None
    assert store.record(new("k2"), actor="t")[1]


def test_each_thread_has_its_own_connection(store: MysqlStore) -> None:
    seen: list[int] = []

    def work() -> None:
        store.now()
        seen.append(store._connection().thread_id())

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(seen)) == 4


# -- end to end ---------------------------------------------------------------------------------


def test_end_to_end_on_mariadb(ledger: denpyo.Ledger) -> None:
    @ledger.channel("email")
    def send(sub: denpyo.Submission) -> str:
        return f"remote-{sub.key}"

    done = ledger.submit("email", "order:1", {"to": "a@example.com", "text": "伝票"})
    assert done.status is denpyo.Status.SYNCED and done.remote_id == "remote-order:1"
    assert done.payload == {"to": "a@example.com", "text": "伝票"}
    again = ledger.submit("email", "order:1", {"to": "a@example.com", "text": "伝票"})
    assert again.id == done.id and again.attempts == 1
    for i in range(2, 6):
        ledger.enqueue("email", f"order:{i}", {"i": i}, ordering_key="customer:7")
    report = ledger.work(until_idle=True, poll_interval=0.05)
    assert report.outcomes["synced"] == 4 and report.errors == 0
    for i in range(1, 6):
        sub = ledger.get("email", f"order:{i}")
        assert sub is not None and sub.status is denpyo.Status.SYNCED
        kinds = [e.kind for e in ledger.events(sub.id)]
        assert kinds == ["created", "attempt", "settle"]


def test_enqueue_in_an_older_repeatable_read_snapshot_finds_the_existing_row(
    ledger: denpyo.Ledger, db_url: str
) -> None:
    """MySQL's default isolation: the caller's snapshot predates the row that another
    process committed since; the duplicate must still be found, not missed."""
    ledger.channel("c")(lambda sub: "remote")
    conn = raw(db_url)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT @@tx_isolation")
            assert cursor.fetchone() == ("REPEATABLE-READ",)
            conn.begin()
            cursor.execute("SELECT COUNT(*) FROM denpyo_submissions")  # the snapshot
        first = ledger.enqueue("c", "k", {"n": 1})
        again = ledger.enqueue("c", "k", {"n": 1}, conn=conn)
        conn.commit()
    finally:
        conn.close()
    assert again.id == first.id
    assert query(db_url, "SELECT COUNT(*) FROM denpyo_submissions") == [(1,)]


@pytest.mark.parametrize(
    "info",
    ["10.6.0-MariaDB", "10.11.19-MariaDB-0+deb12u1", "5.5.5-10.11.6-MariaDB-log", "11.4.2-MariaDB"],
)
def test_supported_servers(info: str) -> None:
    check_server(info)


@pytest.mark.parametrize(
    "info", ["8.0.36", "8.4.0-commercial", "10.5.23-MariaDB", "5.5.5-10.4.1-MariaDB"]
)
def test_unsupported_servers_are_refused_clearly(info: str) -> None:
    with pytest.raises(ConfigurationError, match=r"needs MariaDB 10\.6"):
        check_server(info)


def test_a_fold_never_waits_for_a_writer_holding_its_counts(store: MysqlStore, db_url: str) -> None:
    """A writer's transaction left open (a worker paused mid-settle) holds the row of
    running counts its trigger appended. A fold passes over it: it takes rows with
    SKIP LOCKED and deletes them by primary key, a few hundred at a time (with
    thousands in one IN list, MariaDB scanned the table instead and waited for the
    held row, until a lock wait timeout; two folds deadlocked the same way)."""
    query(  # 25,000 rows, each with the row of running counts its trigger appends
        db_url,
        "INSERT INTO denpyo_submissions (channel, `key`, idempotency_key, payload, status,"
        " attempts, next_attempt_at) SELECT 'c', CONCAT('k', seq), UUID(), '{}', 'requesting',"
        " 0, NOW(6) FROM seq_1_to_25000",
    )
    held = raw(db_url, autocommit=False)
    try:
        with held.cursor() as cursor:  # a writer's trigger row, left uncommitted
            cursor.execute(
                "INSERT INTO denpyo_submissions (channel, `key`, idempotency_key, payload,"
                " status, attempts, next_attempt_at) VALUES ('c', 'held', %s, '{}',"
                " 'requesting', 0, NOW(6))",
                (str(uuid.uuid4()),),
            )
        outcome: list[Any] = []

        def fold() -> None:
            try:
                outcome.append(store.fold_counts_batch())
            except Exception as exc:
                outcome.append(exc)

        folding = threading.Thread(target=fold, daemon=True)
        folding.start()
        folding.join(30)  # a fold that waited would wait for the 50 s lock timeout
        assert not folding.is_alive(), "the fold waited for the writer's lock"
        assert outcome and not isinstance(outcome[0], Exception), outcome
    finally:
        held.rollback()
        held.close()
    by_status = {(ch, st.value): n for ch, st, n in store.count_by_status()}
    assert by_status == {("c", "requesting"): 25_000}
