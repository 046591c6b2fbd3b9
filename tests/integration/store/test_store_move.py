"""Moves: a compare-and-set loses when the row moved or another holder holds it,
and a batch of moves mixes winners and losers, answered in order."""

from __future__ import annotations

from store_helpers import new

from denpyo import Status
from denpyo.domain.moves import Move
from denpyo.store import Store


def test_a_move_that_loses_its_compare_and_set_returns_none(store: Store) -> None:
    sub, _ = store.record(new("k"), actor="holder", lease=60)

    def to_synced(expect: str | None) -> Move:
        return Move(sub.id, Status.REQUESTING, Status.SYNCED, "x", holder=expect, event="settle")

    # another holder, or "nobody" while a live lease is held: both lose
    assert store.move([to_synced("thief"), to_synced(None)]) == [None, None]
    # a wrong expected status loses too
    wrong = Move(sub.id, Status.FAILED, Status.SYNCED, "x", holder="holder")
    assert store.move([wrong]) == [None]
    [won] = store.move([to_synced("holder")])
    assert won is not None and won.status is Status.SYNCED and won.locked_by is None
    assert won.synced_at is not None and not won.in_doubt
    assert store.move([to_synced("holder")]) == [None]  # already moved
    assert [e.kind for e in store.events(sub.id)] == ["created", "attempt", "settle"]


def test_a_batch_of_moves_mixes_winners_and_losers_in_order(store: Store) -> None:
    """Results come back in the order of the moves, None for each loser; a row named
    twice takes its moves one after the other, each with its event."""
    a, _ = store.record(new("a"), actor="h", lease=60)
    b, _ = store.record(new("b"), actor="h", lease=60)
    moves = [
        Move.release(a.id, "h", "never started"),
        Move.release(b.id, "thief", "not the holder"),
        Move.claim(a.id, Status.REQUESTING, "w2", 60, verify=False),
        Move.release(a.id, "h", "no longer the holder"),
    ]
    released, lost, claimed, late = store.move(moves)
    assert lost is None and late is None
    assert released is not None and released.locked_by is None and released.attempts == 0
    assert claimed is not None and claimed.locked_by == "w2" and claimed.attempts == 0
    assert claimed.payload == {"n": 1}
    history = [(e.kind, e.attempt) for e in store.events(a.id)]
    # each hold to send names the attempt its call takes; none started, none counted
    assert history == [("created", 0), ("attempt", 1), ("released", 0), ("attempt", 1)]
    assert [e.kind for e in store.events(b.id)] == ["created", "attempt"]
