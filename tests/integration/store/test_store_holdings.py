"""Holdings: the rows held now under a live lease, per channel and holder, with when
their leases end by the database clock (what `status` and a starting worker tell)."""

from __future__ import annotations

from store_helpers import new

from denpyo.domain.moves import Move
from denpyo.domain.status import Status
from denpyo.store import Store


def test_rows_held_are_counted_per_holder_with_their_leases(store: Store) -> None:
    for i in range(5):
        store.record(new(f"k{i}"), actor="t")
    store.record(new("s0", "sms"), actor="t")
    store.record(new("inline"), actor="app:h:1:abc/1", lease=600)  # an inline submit's
    store.claim("c", holder="worker:h:2:def/1", limit=2, lease=60)
    store.claim("c", holder="worker:h:2:def/2", limit=1, lease=120)
    [expired] = store.claim("sms", holder="worker:h:3:ghi/1", limit=1, lease=60)
    run_out = Move(
        expired.id,
        Status.REQUESTING,
        Status.REQUESTING,
        "worker:h:3:ghi/1",
        holder="worker:h:3:ghi/1",
        new_holder="worker:h:3:ghi/1",
        lease=0,
        keep_error=True,
    )
    assert store.move([run_out]) != [None]  # its lease ran out: in doubt, not held

    held = store.holdings()
    assert [(h.channel, h.holder, h.rows) for h in held] == [
        ("c", "app:h:1:abc/1", 1),
        ("c", "worker:h:2:def/2", 1),
        ("c", "worker:h:2:def/1", 2),
    ]
    for holding, lease in zip(held, (600, 120, 60), strict=True):
        first, last = holding.ends_in
        assert 0 < first <= last <= lease and lease - last < 30
        assert not holding.gone  # the store cannot tell: the engine asks
    assert store.holdings("sms") == []
    assert [h.rows for h in store.holdings("c")] == [1, 1, 2]
