"""Rows leaving the table in batches: `remove` (what `prune` runs), and `archive`:
old rows written to Parquet, read back, and only then removed.

Batch by batch: the rows retention lets go and their histories are written to the
archive (denpyo/archive), every file is read back (`Archive.verify`), and only
then does the store remove them, remembering each key and outcome with where it
was archived. A crash before the removal leaves the rows in the table and, at
worst, the batch's files written: the next run writes the same batch again (the
same rows make the same file names, which it replaces) and removes them. A row
that moved between being read and being removed (a person marked it synced, say)
stays in the table, and its next archiving writes it again under another batch:
the archive may then hold an older copy of it too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from denpyo.domain.retention import Retention
from denpyo.domain.submission import Submission

if TYPE_CHECKING:
    from denpyo.archive import Archive
    from denpyo.store import Store
    from denpyo.store.base import Partition

Progress = Callable[[int], None]
"""`progress(rows_so_far)`, after each batch."""


@dataclass(frozen=True, slots=True)
class ArchiveReport:
    """What one `archive` run did: rows and events written and removed, the files and
    bytes written, in how many batches, and where."""

    target: str
    rows: int = 0
    events: int = 0
    files: int = 0
    bytes: int = 0
    batches: int = 0

    def to_json(self) -> dict[str, Any]:
        """The report as `denpyo archive --json` prints it."""
        return {
            "target": self.target,
            "rows": self.rows,
            "events": self.events,
            "files": self.files,
            "bytes": self.bytes,
            "batches": self.batches,
        }


def archive(
    store: Store,
    target: Archive,
    retention: Retention,
    *,
    batch_size: int = 1000,
    progress: Progress | None = None,
) -> ArchiveReport:
    """Archive, then remove, every row `retention` lets go (module docstring)."""
    target.check_writable()
    rows = events = files = size = batches = 0

    def write(batch: list[Submission]) -> None:
        nonlocal events, files, size, batches
        ids = [sub.id for sub in batch]
        at_rest = [store.sealing.at_rest(sub) for sub in batch]  # encrypted as in the table
        written = target.write(at_rest, store.events_of(ids), batch=f"rows-{min(ids)}-{max(ids)}")
        target.verify(written)
        events, files = events + written.events, files + len(written.files)
        size, batches = size + written.size, batches + 1

    def write_partition(part: Partition) -> None:
        after = part.from_id - 1
        while batch := store.partition_rows(part, after, batch_size):
            write(batch)
            after = batch[-1].id

    # A crash after a batch is written leaves its rows in the table: the next run
    # writes them again.
    removing = remove(
        store, retention, batch_size, first=write, whole=write_partition, where=target.where
    )
    for removed in removing:
        rows += removed
        if progress is not None:
            progress(rows)
    return ArchiveReport(target.where, rows, events, files, size, batches)


def remove(
    store: Store,
    retention: Retention,
    batch_size: int,
    *,
    first: Callable[[list[Submission]], None] | None = None,
    whole: Callable[[Partition], None] | None = None,
    where: str | None = None,
) -> Iterator[int]:
    """Remove the rows `retention` lets go; yields how many went each time. First
    the partitions (PostgreSQL's partitioned layout) old enough for every row in
    them to go, each dropped whole (`whole(partition)` before: the archive writes
    it); then, batch by batch, the rest (`first(batch)` before each). Stops after a
    short batch, or one of which none went: another transaction holds them
    (store/removal.py), and the next run takes them."""
    parts = store.partitions()
    if parts:
        store.maintain_partitions()
        cutoff = store.now() - timedelta(seconds=retention.youngest)
        for part in parts:
            if part.to_at > cutoff:
                break
            before = None if whole is None else functools.partial(whole, part)
            dropped = store.drop_partition(part, retention, before_drop=before, archived_to=where)
            if dropped:
                yield dropped
    while batch := store.removable(retention, batch_size):
        if first is not None:
            first(batch)
        removed = store.remove([sub.id for sub in batch], retention, archived_to=where)
        yield removed
        if len(batch) < batch_size or not removed:
            return
