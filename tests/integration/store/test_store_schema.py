"""The store as a whole: opened from its URL, migrated to the newest schema, its
server's replication as far as it can say, the worker's async operations and
wake-ups, and refused once closed."""

from __future__ import annotations

import asyncio
import contextlib
from concurrent.futures import ThreadPoolExecutor

import pytest
from store_helpers import SYNCED, new

from conftest import under_the_profile
from denpyo.domain.moves import Settle
from denpyo.errors import ConfigurationError, SchemaError
from denpyo.store import Store, open_store
from denpyo.store.dialects import DIALECTS


def test_a_store_opened_from_its_url_finds_the_newest_schema(store: Store, db_url: str) -> None:
    again = type(store).from_url(db_url)
    try:
        assert type(again) is type(store)
        assert again.schema_version() == again.latest_version() == store.latest_version() > 0
        assert again.migrate() == [], "nothing left to apply"
    finally:
        again.close()


def test_an_empty_database_is_migrated_to_the_newest(empty_url: str, backend: str) -> None:
    store = open_store(empty_url)
    try:
        if DIALECTS[backend].embedded:  # no file yet: the migration creates it
            with pytest.raises(SchemaError, match="`denpyo migrate` creates it"):
                store.schema_version()
        else:
            assert store.schema_version() == 0
        applied = store.migrate()
        assert applied == sorted(applied) and applied[-1] == store.latest_version()
        assert store.schema_version() == store.latest_version()
    finally:
        store.close()


def test_the_partitioned_layout_is_postgresqls_only(store: Store, backend: str) -> None:
    if under_the_profile(backend):
        with pytest.raises(ConfigurationError, match="keeps one table"):
            store.migrate_partitioned("daily")
        return
    if store.capabilities.partitions:
        with pytest.raises(ConfigurationError, match="choose one of"):
            store.migrate_partitioned("hourly")
        return
    with pytest.raises(ConfigurationError, match="partitions are PostgreSQL's"):
        store.migrate_partitioned("daily")


def test_replication_is_reported_where_the_server_says(store: Store, backend: str) -> None:
    assert store.replica_lag() is None, "a primary is no standby"
    durability = store.durability()
    if not store.capabilities.durability_checks:
        assert durability is None, "nothing denpyo can read"
        return
    assert durability is not None and durability.standbys == 0
    assert durability.synchronous_commit in ("on", "remote_apply", "remote_write", "local", "off")


def test_a_closed_store_refuses_work(db_url: str) -> None:
    store = open_store(db_url)
    store.check_open()
    store.record(new("k"), actor="t")
    store.close()
    assert store.closed
    with pytest.raises(ConfigurationError, match="closed"):
        store.check_open()
    with pytest.raises(ConfigurationError, match="closed"):
        store.get_by_key("c", "k")


def test_the_workers_async_operations_claim_and_settle(store: Store) -> None:
    store.record(new("a"), actor="t")
    store.record(new("b"), actor="t")

    async def run() -> list[str]:
        with ThreadPoolExecutor(1) as db:
            ops = store.async_ops(db)
            await ops.open()
            try:
                claimed = await ops.claim("c", holder="w", limit=10, lease=60)
                moved = await ops.move([Settle.of(sub, "w", SYNCED, 5) for sub in claimed])
                assert await ops.claim("c", holder="w", limit=10, lease=60, in_doubt=True) == []
            finally:
                await ops.close()
        return [sub.key for sub in moved if sub is not None and sub.status is SYNCED.status]

    assert sorted(asyncio.run(run())) == ["a", "b"]


def test_workers_are_woken_where_the_database_notifies(store: Store, backend: str) -> None:
    woken: list[str] = []

    async def run() -> None:
        listening = asyncio.create_task(store.listen(woken.append))
        if not store.capabilities.notifies:
            await asyncio.wait_for(listening, 30)  # returns at once: workers poll
            return
        try:
            for _ in range(300):  # until the LISTEN is in place and a record wakes it
                await asyncio.to_thread(store.record, new(f"k{len(woken)}-{_}", "sms"), actor="t")
                await asyncio.sleep(0.1)
                if woken:
                    break
        finally:
            listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listening

    asyncio.run(run())
    assert store.capabilities.notifies is DIALECTS[store.dialect].capabilities.notifies
    assert woken[:1] == (["sms"] if store.capabilities.notifies else [])
