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

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from denpyo.domain.retention import Retention
from denpyo.domain.submission import Submission

if TYPE_CHECKING:
    from denpyo.archive import Archive
    from denpyo.store import Store

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
        written = target.write(batch, store.events_of(ids), batch=f"rows-{min(ids)}-{max(ids)}")
        target.verify(written)
        events, files = events + written.events, files + len(written.files)
        size, batches = size + written.size, batches + 1

    # A crash after a batch is written leaves its rows in the table: the next run
    # writes them again.
    for removed in remove(store, retention, batch_size, first=write, where=target.where):
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
    where: str | None = None,
) -> Iterator[int]:
    """Remove, batch by batch, the rows `retention` lets go (`first(batch)` before
    each batch is removed: the archive writes it); yields how many went each time.
    Stops after a short batch, or one of which none went: another transaction holds
    them (store/removal.py), and the next run takes them."""
    while batch := store.removable(retention, batch_size):
        if first is not None:
            first(batch)
        removed = store.remove([sub.id for sub in batch], retention, archived_to=where)
        yield removed
        if len(batch) < batch_size or not removed:
            return
