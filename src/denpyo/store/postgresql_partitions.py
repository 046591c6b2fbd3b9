"""PostgreSQL's partitioned layout: the store's operations on partitions kept by pg_partman.

The layout is the variant `postgresql-partitioned` (store/dialects.py): its
queries are sql/postgresql-partitioned.sql over PostgreSQL's, its first migration
makes every table at once. A PostgreSQL store takes it on when it reads that its
tables are partitioned (`PostgresStore._use_layout`); until then, and on the plain
layout, these operations answer as one table does.
"""

from __future__ import annotations

import logging
import time
from abc import abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, ClassVar

from psycopg import errors as pg_errors

from denpyo.domain.retention import Retention
from denpyo.domain.submission import Submission
from denpyo.errors import ConfigurationError, StoreError
from denpyo.store.base import Partition, Tx
from denpyo.store.dialects import POSTGRESQL_PARTITIONED
from denpyo.store.queries import load_migrations
from denpyo.store.removal import retention_params
from denpyo.store.sql_store import SqlStore

log = logging.getLogger("denpyo.store")

PARTITION_INTERVALS = ("daily", "monthly")
"""How the partitioned layout cuts the rows: a partition per day, or per month."""

PARTITION_LOCK_WAIT = 1.0
"""Seconds a partition's freeze or drop waits for its lock. Claims lock every
partition, so while the drop waits they wait behind it: kept short, and tried again."""

PARTITION_LOCK_TRIES = 5

MAINTENANCE_EVERY = 3600.0
"""Seconds between the workers' calls to pg_partman's maintenance."""


class PartitionedLayout(SqlStore):
    """The partitions of PostgreSQL's partitioned layout: made, listed, read, frozen,
    dropped, and the coming ones made by pg_partman."""

    LAYOUT_QUERIES: ClassVar[frozenset[str]] = frozenset(
        {
            "get_partition_every",
            "maintain_partitions",
            "list_partitions",
            "check_partitions",
            "freeze_partition",
            "remember_partition_keys",
            "drop_partition",
            "list_partition_rows",
            "find_submission_window_floor",
        }
    )
    """The queries only the partitioned layout's file defines (sql/postgresql-partitioned.sql)."""

    partitioned: bool | None
    """Whether the tables are the partitioned layout's (None: not looked yet)."""
    _maintained_at: float
    """When pg_partman's maintenance last ran (time.monotonic)."""

    @abstractmethod
    def _autocommit(self) -> AbstractContextManager[Tx]:
        """Each statement its own transaction."""

    @abstractmethod
    def _use_layout(self, partitioned: bool) -> None:
        """Take the queries of the layout the tables have."""

    @abstractmethod
    def _is_partitioned(self) -> bool:
        """Whether the tables are partitioned (connecting to find out)."""

    def migrate_partitioned(self, every: str) -> list[int]:
        """Make the partitioned layout on a database without denpyo tables (pg_partman
        installed in it first, in schema `partman`, where the server has it), then
        apply the later migrations; on a partitioned database, only those."""
        if not self.capabilities.partitions:
            return super().migrate_partitioned(every)
        if every not in PARTITION_INTERVALS:
            raise ConfigurationError(
                f"partitions {every!r}: choose one of {', '.join(PARTITION_INTERVALS)}"
            )
        with self.transaction() as tx:
            tx.execute("lock_schema")
            tx.execute("create_schema_version")
            current = self._version(tx)
            layout = tx.fetch_one("get_layout")
            if layout is not None and not layout["partitioned"]:
                raise ConfigurationError(
                    "the denpyo tables here are in the plain layout: `migrate --partitions` "
                    'makes the partitioned one on a database without them (see "Keeping '
                    'the ledger for years" for moving a ledger over)'
                )
            applied: list[int] = []
            if layout is None:
                available = tx.fetch_one("check_partman_available")
                if available is None or not available["available"]:
                    raise ConfigurationError(
                        "the partitioned layout needs pg_partman, which this PostgreSQL "
                        "server lacks: install it (Debian: postgresql-15-partman)"
                    )
                # The layout's first script makes every table at once (`squashed`).
                first, script = load_migrations(POSTGRESQL_PARTITIONED.name)[0]
                tx.script(script.replace("'@partition@'", f"'{every}'"))
                applied = list(range(current + 1, first + 1))
                for version in applied:
                    tx.execute("add_schema_version", {"version": version})
                current = applied[-1]
            applied += self.apply_migrations(tx, current)
        self._use_layout(True)
        return applied

    def partitions(self) -> list[Partition]:
        if not self._is_partitioned():
            return []
        with self.reading() as tx:
            rows = tx.fetch_all("list_partitions")
        return [
            Partition(int(row["from_id"]), int(row["to_id"]), row["from_at"], row["to_at"])
            for row in rows
        ]

    def partition_rows(self, part: Partition, after: int, limit: int) -> list[Submission]:
        if not self._is_partitioned():  # one table (the distributed SQL profile's too)
            return super().partition_rows(part, after, limit)
        params = {"from_id": max(part.from_id, after + 1), "to_id": part.to_id, "limit": limit}
        with self.reading() as tx:
            return [self.to_submission(row) for row in tx.fetch_all("list_partition_rows", params)]

    def drop_partition(
        self,
        part: Partition,
        retention: Retention,
        *,
        before_drop: Callable[[], None] | None = None,
        archived_to: str | None = None,
    ) -> int:
        """Freeze the partition (its rows can no longer change), check that retention
        lets every row go, run `before_drop`, remember the keys, then detach and drop
        it with its events' twin under a lock held for milliseconds (the migration of
        the layout says each step). A partition that keeps a row, or whose lock cannot
        be had within `PARTITION_LOCK_WAIT` seconds (`PARTITION_LOCK_TRIES` times), is
        thawed and waits: 0."""
        if not self._is_partitioned():  # one table: nothing to drop
            return 0
        bounds = {"from_id": part.from_id, "to_id": part.to_id}
        check = {**bounds, **retention_params(retention)}
        with self.reading() as tx:
            found = tx.fetch_one("check_partitions", check)
        if found is None or int(found["kept"]) or not int(found["n"]):
            return 0  # a row stays; an empty partition goes with the row-by-row removal
        if not self._freeze(bounds, frozen=True):
            return 0
        dropped = False
        try:
            with self.reading() as tx:
                found = tx.fetch_one("check_partitions", check)
            if found is None or int(found["kept"]):
                return 0
            started = time.perf_counter()
            if before_drop is not None:
                before_drop()
            written = time.perf_counter()
            with self._autocommit() as tx:
                counts = tx.fetch_all(
                    "remember_partition_keys", {**bounds, "archived_to": archived_to}
                )
            kept = time.perf_counter()
            columns = ("day", "channel", "status", "error_kind", "kind", "resolved", "n")
            params: dict[str, Any] = {name: [row[name] for row in counts] for name in columns}
            params.update(bounds, wait=PARTITION_LOCK_WAIT)
            for _ in range(PARTITION_LOCK_TRIES):
                try:
                    started_drop = time.perf_counter()
                    with self._autocommit() as tx:
                        tx.fetch_one("drop_partition", params)
                    dropped = True
                    log.info(
                        "partition %s dropped: %s rows; before the drop %.2f s, keys %.2f s, "
                        "drop %.3f s",
                        part.from_at.date(),
                        found["n"],
                        written - started,
                        kept - written,
                        time.perf_counter() - started_drop,
                    )
                    return int(found["n"])
                except StoreError as exc:
                    if not isinstance(exc.__cause__, pg_errors.LockNotAvailable):
                        raise
                    log.info("partition %s not dropped yet: its lock is busy", part.from_at)
            return 0
        finally:
            if not dropped:
                self._freeze(bounds, frozen=False)

    def _freeze(self, bounds: dict[str, int], *, frozen: bool) -> bool:
        try:
            with self._autocommit() as tx:
                tx.fetch_one(
                    "freeze_partition", {**bounds, "frozen": frozen, "wait": PARTITION_LOCK_WAIT}
                )
            return True
        except StoreError as exc:
            if not isinstance(exc.__cause__, pg_errors.LockNotAvailable):
                raise
            log.info(
                "partition [%s, %s) busy: not %s now",
                bounds["from_id"],
                bounds["to_id"],
                "frozen" if frozen else "thawed",
            )
            return False

    def window_floor(self, tx: Tx, before: int, window: int) -> int:
        """The partitioned layout's ids are creation times, far apart: the window is
        the `window` rows below `before`, read from the primary key."""
        if not self.partitioned:
            return super().window_floor(tx, before, window)
        row = tx.fetch_one("find_submission_window_floor", {"before": before, "window": window})
        return int(row["floor"]) if row else 0

    def maintain_partitions(self) -> None:
        """Have pg_partman make the coming partitions (at most once per
        `MAINTENANCE_EVERY` seconds from `upkeep`; at each `prune` and `archive`)."""
        if self._is_partitioned():
            with self._autocommit() as tx:
                tx.fetch_one("maintain_partitions")
            self._maintained_at = time.monotonic()

    def upkeep(self) -> None:
        super().upkeep()
        due = time.monotonic() - self._maintained_at >= MAINTENANCE_EVERY
        if self.capabilities.partitions and due:
            try:
                self.maintain_partitions()
            except StoreError as exc:
                log.warning("cannot make the coming partitions now: %s", exc)
