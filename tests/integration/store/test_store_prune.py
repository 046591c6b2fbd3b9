"""Removal takes only the rows retention lets go, with their history, and leaves
their keys and counts."""

from __future__ import annotations

import time

from store_helpers import new

from denpyo import Status
from denpyo.domain.moves import Move
from denpyo.domain.retention import Retention
from denpyo.store import Store


def test_prune_deletes_only_settled_rows_and_their_history(store: Store) -> None:
    settled, _ = store.record(new("settled"), actor="h", lease=60)
    [doubt] = store.move([Move.still_in_doubt(settled, "h", 0, "lease run out")])
    assert doubt is not None
    [synced] = store.move([Move.mark_synced(doubt, "op", "r-1", "found", "seen there")])
    assert synced is not None and synced.status is Status.SYNCED
    waiting, _ = store.record(new("waiting"), actor="t")
    held, _ = store.record(new("held"), actor="h", lease=60)
    time.sleep(0.02)  # created strictly before the cutoff, on a millisecond clock
    everything = Retention.of(older_than=0)
    found = store.removable(everything, 10)
    assert [sub.id for sub in found] == [settled.id]
    assert store.remove([sub.id for sub in found], everything) == 1
    kept = store.get(settled.id)
    assert kept is not None and kept.removed_at is not None and store.events(settled.id) == []
    assert store.get(waiting.id) is not None and store.get(held.id) is not None
    assert store.removable(everything, 10) == []
    assert store.remove([waiting.id, held.id], everything) == 0, "never one retention keeps"
