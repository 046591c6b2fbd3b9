"""Renewal extends only the holder's leases."""

from __future__ import annotations

from datetime import timedelta

from store_helpers import new

from denpyo import Status
from denpyo.store import Store


def test_renewal_extends_only_the_holders_leases(store: Store) -> None:
    sub, _ = store.record(new("k"), actor="holder", lease=1)
    assert store.renew([(sub.id, "holder", 60), (sub.id, "thief", 60)]) == {sub.id}
    assert store.renew([(sub.id, "thief", 60)]) == set()
    renewed = store.get(sub.id)
    assert renewed is not None and renewed.locked_until is not None
    assert renewed.locked_until - store.now() > timedelta(seconds=50)
    assert renewed.status is Status.REQUESTING and renewed.locked_by == "holder"
