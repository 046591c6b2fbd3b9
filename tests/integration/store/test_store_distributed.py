"""The distributed SQL profile (store/distributed.py) on PostgreSQL run the way
CockroachDB runs: SERIALIZABLE, with the failures it gives its clients injected
(denpyo/testing/faults.py). `make test-distributed` also runs the store's, the
ledger's, the worker's and a chaos suite under the profile."""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from store_helpers import EXHAUSTED, REJECTED, RETRYING, SYNCED, new, settled

import denpyo
from database_records import POSTGRES, with_database, without_profile
from denpyo.domain.moves import Move, Settle
from denpyo.errors import InvalidDatabaseURL, StoreConflict
from denpyo.store import Store, open_store
from denpyo.store.distributed import (
    DistributedStore,
    Outcome,
    again_or_done,
    conninfo_of,
)
from denpyo.store.queries import load_migrations
from denpyo.testing import faults
from denpyo.testing.faults import Faults, record_statements

PROFILE = "?denpyo_profile=distributed"

FORBIDDEN = {
    "NOTIFY or LISTEN": re.compile(r"\b(pg_notify|NOTIFY|LISTEN)\b", re.IGNORECASE),
    "a trigger": re.compile(r"\bTRIGGER\b|plpgsql", re.IGNORECASE),
    "pg_partman": re.compile(r"partman", re.IGNORECASE),
    "an advisory lock": re.compile(r"advisory", re.IGNORECASE),
    "a savepoint": re.compile(r"\bSAVEPOINT\b", re.IGNORECASE),
    "a partition": re.compile(r"PARTITION\s+(BY|OF)\b", re.IGNORECASE),
}
"""What YugabyteDB or CockroachDB lack or do otherwise, as a statement would say it."""

STATEMENTS = os.environ.get("DENPYO_TEST_STATEMENTS") or None
"""The folder where a suite run under the profile left the statements it ran
(conftest.py's `statements_of_the_profile`)."""


def forbidden(sql: str) -> list[str]:
    """What of FORBIDDEN a statement uses, its comments aside."""
    code = re.sub(r"--[^\n]*", "", sql)
    return [what for what, pattern in FORBIDDEN.items() if pattern.search(code)]


def _fresh(serializable: bool) -> Iterator[str]:
    """A fresh database with no denpyo tables, its URL without the profile."""
    name = POSTGRES.create(migrated=False)
    if serializable:
        POSTGRES.default_isolation(name, "serializable")
    try:
        yield with_database(POSTGRES.admin_url, name)
    finally:
        POSTGRES.drop(name)


@pytest.fixture
def distributed_url() -> Iterator[str]:
    """A fresh database, SERIALIZABLE by default, migrated under the profile."""
    for url in _fresh(serializable=True):
        with denpyo.Ledger(url + PROFILE) as ledger:
            ledger.migrate()
        yield url + PROFILE


@pytest.fixture
def plain_url() -> Iterator[str]:
    """A fresh database migrated as plain PostgreSQL."""
    for url in _fresh(serializable=False):
        with denpyo.Ledger(url) as ledger:
            ledger.migrate()
        yield url


@pytest.fixture
def dist(distributed_url: str) -> Iterator[Store]:
    store = open_store(distributed_url)
    yield store
    store.close()


def test_the_url_chooses_the_profile() -> None:
    store = open_store("postgresql://u@h:5432/db?denpyo_profile=distributed&sslmode=disable")
    assert isinstance(store, DistributedStore) and store.dialect == "postgresql-distributed"
    assert store.conninfo == "postgresql://u@h:5432/db?sslmode=disable"
    assert not store.capabilities.notifies
    for scheme in ("yugabytedb", "cockroachdb"):
        engine = open_store(f"{scheme}://root@h1:26257,h2:26257/db")
        assert isinstance(engine, DistributedStore)
        assert engine.conninfo == "postgresql://root@h1:26257,h2:26257/db"
    assert conninfo_of("cockroachdb://root@h/db?denpyo_profile=distributed") == (
        "postgresql://root@h/db"
    )
    with pytest.raises(InvalidDatabaseURL, match="no denpyo_profile 'elsewhere'"):
        open_store("postgresql://u@h/db?denpyo_profile=elsewhere")
    with pytest.raises(InvalidDatabaseURL, match="for MariaDB"):
        open_store("mysql://u@h/db?denpyo_profile=distributed")


def test_the_profile_makes_no_trigger_and_uses_nothing_the_engines_lack(
    distributed_url: str,
) -> None:
    """The overlay migrations and the profile's queries use none of FORBIDDEN, and
    the schema they make has no trigger."""
    for version, script in load_migrations("postgresql-distributed"):
        assert forbidden(script) == [], f"migration {version}"
    with psycopg.connect(without_profile(distributed_url)) as conn:
        found = conn.execute("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal").fetchall()
    assert found == []


def test_no_statement_run_under_the_profile_uses_what_the_engines_lack(
    distributed_url: str,
) -> None:
    """Every statement the profile's stores run through a ledger's life (migrate,
    enqueue one and in bulk, work, status, report, prune, forget, an action) is
    scanned; then those a suite run left (`make test-distributed`), if any."""
    with record_statements() as ran, denpyo.Ledger(distributed_url) as ledger:
        ledger.migrate()

        @ledger.channel("c")
        async def send(sub: denpyo.Submission) -> str:
            return f"r-{sub.id}"

        for i in range(5):
            ledger.enqueue("c", f"one-{i}", {"i": i})
        ledger.enqueue_many("c", [(f"bulk-{i}", {"i": i}) for i in range(300)])
        ledger.work(until_idle=True, poll_interval=0.05)
        ledger.store.count_attention()
        ledger.store.count_by_status()
        ledger.report()
        ledger.prune(older_than=0)
    assert len(ran) > 20
    found = {sql.splitlines()[0][:90]: forbidden(sql) for sql in ran if forbidden(sql)}
    assert found == {}
    if STATEMENTS:
        for path in Path(STATEMENTS).glob("*.json"):
            left = {
                sql.splitlines()[0][:90]: forbidden(sql)
                for sql in json.loads(path.read_text())
                if forbidden(sql)
            }
            assert left == {}, path


def test_counts_and_report_are_plain_postgresqls(distributed_url: str, plain_url: str) -> None:
    """The same rows through the same moves give the same `count_by_status`,
    `count_attention` and report, counted from the rows or kept by triggers."""
    answers = []
    for url in (distributed_url, plain_url):
        store = open_store(url)
        try:
            for i, outcome in enumerate([SYNCED, REJECTED, EXHAUSTED, RETRYING] * 3):
                settled(store, f"k{i}", outcome, "c" if i % 2 else "d")
            store.record(new("waiting"), actor="t")
            doubtful, _ = store.record(new("doubtful"), actor="h", lease=60)
            store.move([Move.still_in_doubt(doubtful, "h", 0, "lease run out")])
            attention = {
                channel: {
                    k: v
                    for k, v in store.count_attention(channel).items()
                    if k not in ("now", "oldest_pending")
                }
                for channel in (None, "c", "d")
            }
            with denpyo.Ledger(url) as ledger:
                report = [(row.channel, row.status, row.count) for row in ledger.report()]
            answers.append((sorted(store.count_by_status()), attention, report))
        finally:
            store.close()
    assert answers[0] == answers[1]


def test_eight_claimers_take_disjoint_rows_and_all_of_them(dist: Store) -> None:
    """The atomic UPDATE claim under SERIALIZABLE: claimers that collide lose with
    40001 and claim again (a claim that lost every try waits for the next poll, as a
    worker's does); no row is held twice, none is left."""
    dist.record_many([new(f"k{i}") for i in range(400)], actor="t", check=lambda n, e: None)
    held: list[list[int]] = [[] for _ in range(8)]

    def claimer(n: int) -> None:
        while True:
            try:
                rows = dist.claim("c", holder=f"w{n}", limit=10, lease=60)
            except StoreConflict:
                continue
            if not rows:
                return
            held[n].extend(sub.id for sub in rows)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [row for rows in held for row in rows]
    assert len(every) == len(set(every)) == 400


def test_a_claim_waits_for_a_locked_row_and_leaves_it_if_it_moved(
    dist: Store, distributed_url: str
) -> None:
    """No SKIP LOCKED: the claim waits for a row another transaction locked, then
    checks it again: a row that stopped being due meanwhile is left."""
    sub, _ = dist.record(new("k"), actor="t")
    dist.record(new("other"), actor="t")
    locker = psycopg.connect(without_profile(distributed_url))
    locker.execute(
        "UPDATE denpyo_submissions SET locked_by = 'elsewhere', locked_until = now() + "
        "interval '1 minute' WHERE id = %s",
        (sub.id,),
    )
    claimed: list[Any] = []
    claim = threading.Thread(
        target=lambda: claimed.extend(dist.claim("c", holder="w", limit=10, lease=60))
    )
    claim.start()
    claim.join(0.3)
    locker.commit()
    locker.close()
    claim.join()
    assert [row.key for row in claimed] == ["other"]


def test_an_unknown_outcome_is_decided_by_the_row() -> None:
    """A settle is in the row once the row counts its attempt; a move once the row
    has its target; the row as the change expects it: run again; else lost."""
    from denpyo import Status
    from denpyo.domain.submission import Submission

    def row(status: Status, holder: str | None, attempts: int) -> Submission:
        return Submission(
            id=1,
            channel="c",
            key="k",
            idempotency_key="i",
            payload={},
            status=status,
            attempts=attempts,
            next_attempt_at=None,
            locked_by=holder,
            locked_until=None,
        )

    held = row(Status.REQUESTING, "h", 0)
    settle = Settle.of(held, "h", SYNCED, 5)
    assert again_or_done(settle, row(Status.SYNCED, None, 1)) is Outcome.DONE
    assert again_or_done(settle, held) is Outcome.AGAIN
    assert again_or_done(settle, row(Status.REQUESTING, "other", 0)) is Outcome.LOST
    assert again_or_done(settle, None) is Outcome.LOST
    give_up = Move.still_in_doubt(held, "h", 0, "lease run out")
    assert again_or_done(give_up, held) is Outcome.AGAIN


class _Once(Faults):
    """One fault, of `kind`, at the first statement that commits on its own or at
    the first COMMIT, after it ran: the commit happened, the client cannot know."""

    def __init__(self, kind: str) -> None:
        super().__init__(seed=0, rate=0.0)
        self.kind = kind

    def draw(self, conn: Any, query: Any) -> tuple[str, bool] | None:
        text = str(query if not isinstance(query, bytes) else query.decode()).lstrip()
        writes = (
            text.startswith("COMMIT")
            or "record_submission" in text[:40]
            or ("settle_submission" in text[:40])
        )
        if self.counts or not writes:
            return None
        self.counts[self.kind] += 1
        return self.kind, True


@pytest.mark.parametrize("kind", ["40003", "reset"])
def test_an_enqueue_whose_commit_is_unknown_is_read_again(dist: Store, kind: str) -> None:
    """The insert committed, the client saw 40003 or a dropped connection: the row is
    read again by its key, found with the same idempotency key, and kept: one row."""
    item = new("k")

    once = _Once(kind)
    faults.install(once)
    try:
        sub, created = dist.record(item, actor="t")
    finally:
        faults.uninstall()
    assert once.counts[kind] == 1
    assert created and sub.idempotency_key == item.idempotency_key
    assert [(row[0], row[1].value, row[2]) for row in dist.count_by_status()] == [
        ("c", "requesting", 1)
    ]


@pytest.mark.parametrize("kind", ["40003", "reset"])
def test_a_settle_whose_commit_is_unknown_is_read_again(dist: Store, kind: str) -> None:
    """The settle committed, the client cannot know: the row, read again, counts the
    attempt, so the settle is done, not run again (one settle event) nor lost."""
    sub, _ = dist.record(new("k"), actor="h", lease=60)

    once = _Once(kind)
    faults.install(once)
    try:
        [after] = dist.move([Settle.of(sub, "h", SYNCED, 5)])
    finally:
        faults.uninstall()
    assert once.counts[kind] == 1
    assert after is not None and after.status.value == "synced" and after.attempts == 1
    settles = [event for event in dist.events(sub.id) if event.kind == "settle"]
    assert len(settles) == 1


class _FirstOrderLoses(Faults):
    """The application's first INSERT of an order loses to a concurrent transaction."""

    def __init__(self) -> None:
        super().__init__(seed=0, rate=0.0)

    def draw(self, conn: Any, query: Any) -> tuple[str, bool] | None:
        if self.counts or not str(query).startswith("INSERT INTO orders"):
            return None
        self.counts["40001"] += 1
        return "40001", False


def test_the_pages_app_transaction_runs_again_after_a_conflict(distributed_url: str) -> None:
    """docs/how-to/distributed-sql.md: the application's transaction, run again after
    it lost to a concurrent one, writes its order and its slip once."""
    from doc_pages import named

    app_url = without_profile(distributed_url)
    with psycopg.connect(app_url) as conn:
        conn.execute("CREATE TABLE orders (id text PRIMARY KEY)")
    lost = _FirstOrderLoses()
    faults.install(lost)
    try:
        code = named("how-to/distributed-sql.md", "distributed")["app-transaction"]
        scope: dict[str, Any] = {"DATABASE_URL": distributed_url, "APP_URL": app_url}
        exec(code, scope)
    finally:
        faults.uninstall()
        scope["ledger"].close()
    assert lost.counts["40001"] == 1
    with psycopg.connect(app_url) as conn:
        orders = conn.execute("SELECT id FROM orders").fetchall()
        slips = conn.execute("SELECT key FROM denpyo_submissions").fetchall()
    assert orders == [("A-1001",)] and slips == [("order-A-1001",)]
