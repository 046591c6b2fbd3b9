"""Partitions of the submissions, PostgreSQL's partitioned layout (kept by
pg_partman): listed oldest first, read a partition at a time, the coming ones made
ahead, and a day dropped whole once retention lets every row of it go. One table
(SQLite, MariaDB, PostgreSQL's plain layout) has none, and the methods say so."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from store_helpers import SYNCED, settled

from database_records import POSTGRES_PARTITIONS, POSTGRES_PROFILE
from denpyo.domain.retention import Retention
from denpyo.store import Store, open_store
from denpyo.store.base import Partition
from partitioned import age


def days_in_a_row(parts: list[Partition]) -> bool:
    return all(a.to_id == b.from_id and a.to_at == b.from_at for a, b in pairwise(parts))


def test_one_table_has_no_partitions(store: Store, backend: str) -> None:
    settled(store, "a", SYNCED)
    parts = store.partitions()
    store.maintain_partitions()
    if store.capabilities.partitions and POSTGRES_PARTITIONS:  # `make test-partitions`
        assert parts and days_in_a_row(parts) and store.partitions()[0] == parts[0]
        return
    assert parts == [] and store.partitions() == []
    if store.capabilities.partitions:
        return  # the plain layout: the worker's upkeep makes none, the prune goes row by row
    whole = Partition(0, 2**62, datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC))
    assert store.partition_rows(whole, 0, 10) == []
    assert store.drop_partition(whole, Retention.of(older_than=0)) == 0
    assert store.get_by_key("c", "a") is not None


@pytest.fixture
def partitioned(postgres_empty_url: str) -> Iterator[tuple[Store, str]]:
    if POSTGRES_PROFILE:
        pytest.skip("the distributed profile keeps one table (no pg_partman)")
    store = open_store(postgres_empty_url)
    applied = store.migrate_partitioned("daily")
    assert applied == list(range(1, store.latest_version() + 1))
    assert store.migrate_partitioned("daily") == [] and store.migrate() == []
    yield store, postgres_empty_url
    store.close()


def test_postgresql_partitions_are_read_and_dropped_a_day_at_a_time(
    partitioned: tuple[Store, str],
) -> None:
    store, url = partitioned
    for i in range(3):
        settled(store, f"old:{i}", SYNCED)
    settled(store, "new", SYNCED)
    age(url, "old:", 3)
    parts = store.partitions()
    assert len(parts) >= 8 and days_in_a_row(parts), "four days back, today, four ahead"
    assert all(p.to_at - p.from_at == timedelta(days=1) for p in parts)
    store.maintain_partitions()
    assert store.partitions()[-1].to_at > store.now() + timedelta(days=1), "days ahead made"

    old = [store.get_by_key("c", f"old:{i}") for i in range(3)]
    ids = sorted(sub.id for sub in old if sub is not None)
    [day] = [p for p in parts if p.from_id <= ids[0] < p.to_id]
    first = store.partition_rows(day, 0, 2)
    assert [sub.id for sub in first] == ids[:2]
    assert [sub.id for sub in store.partition_rows(day, ids[1], 10)] == ids[2:]
    [today] = [p for p in parts if p.from_at <= store.now() < p.to_at]
    assert [sub.key for sub in store.partition_rows(today, 0, 10)] == ["new"]

    archived: list[int] = []
    assert store.drop_partition(day, Retention.of(older_than=365 * 86_400)) == 0, "too young"
    assert (
        store.drop_partition(
            day,
            Retention.of(older_than=86_400),
            before_drop=lambda: archived.append(1),
            archived_to="file:///archive/day.jsonl",
        )
        == 3
    )
    assert archived == [1] and day not in store.partitions()
    kept = store.get(ids[0])
    assert kept is not None and kept.removed_at is not None
    assert kept.archived_to == "file:///archive/day.jsonl"
    assert store.partition_rows(today, 0, 10)[0].key == "new", "the other days stay"
