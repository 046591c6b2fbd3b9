"""The distributed SQL profile on a real engine: set DENPYO_TEST_YUGABYTEDB_URL
(`yugabytedb://yugabyte@127.0.0.1:5433/yugabyte`) or DENPYO_TEST_COCKROACHDB_URL
(`cockroachdb://root@127.0.0.1:26257/defaultdb?sslmode=disable`); skipped when
neither is set. Each test makes a database of its own on the engine, migrates it
under the profile, and drops it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest

import denpyo
from denpyo.store.distributed import conninfo_of

ENGINES = {
    "yugabytedb": os.environ.get("DENPYO_TEST_YUGABYTEDB_URL"),
    "cockroachdb": os.environ.get("DENPYO_TEST_COCKROACHDB_URL"),
}


@pytest.fixture(
    params=[
        pytest.param(url, id=name, marks=pytest.mark.skipif(not url, reason=f"no {name} URL"))
        for name, url in ENGINES.items()
    ]
)
def engine_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh database on the engine, migrated under the profile."""
    url: str = request.param
    name = f"denpyo_t_{uuid.uuid4().hex[:12]}"
    admin = conninfo_of(url)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    base, _, rest = url.partition("://")
    authority, _, query = rest.partition("?")
    fresh = f"{base}://{authority.rpartition('/')[0]}/{name}" + (f"?{query}" if query else "")
    try:
        with denpyo.Ledger(fresh) as ledger:
            ledger.migrate()
        yield fresh
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name}")


def test_a_ledgers_life_on_the_engine(engine_url: str) -> None:
    """Enqueue in the application's transaction and in bulk, work until idle, count,
    report and prune: every row synced once."""
    sent: list[str] = []
    with denpyo.Ledger(engine_url) as ledger:

        @ledger.channel("c")
        async def send(sub: denpyo.Submission) -> str:
            sent.append(sub.key)
            return f"r-{sub.id}"

        def in_app() -> None:
            with psycopg.connect(conninfo_of(engine_url)) as conn:
                ledger.enqueue("c", "in-app", {"n": 0}, conn=conn)

        denpyo.run_again_on_conflict(in_app)
        ledger.enqueue_many("c", [(f"k{i}", {"n": i}) for i in range(200)])
        ledger.work(until_idle=True, poll_interval=0.1)
        counts = ledger.store.count_by_status("c")
        assert [(status.value, n) for _, status, n in counts] == [("synced", 201)]
        assert sum(row.count for row in ledger.report()) == 201
        ledger.prune(older_than=0)
    assert sorted(sent) == sorted(["in-app", *(f"k{i}" for i in range(200))])
