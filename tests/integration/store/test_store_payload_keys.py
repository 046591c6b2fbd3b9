"""Payload keys, the store's side: rotation reads the payloads as stored a batch at a
time and writes each back by a compare-and-set on it, changing nothing else; a row
given back for want of a key is made due once a worker has it."""

from __future__ import annotations

import json
import os

from store_helpers import GONE, new

from denpyo.domain.moves import Move
from denpyo.domain.sealed import SEALED, waiting_for_key
from denpyo.store import Store
from denpyo.store.payload_keys import Reseal
from denpyo.store.sealing import AesGcmKeys, Sealing


def test_a_batch_reads_the_payloads_as_stored(store: Store) -> None:
    a, _ = store.record(new("a"), actor="t")
    b, _ = store.record(new("b", "sms"), actor="t")
    store.sealing = Sealing(AesGcmKeys([os.urandom(32)]))
    c, _ = store.record(new("c"), actor="t")
    batch = store.payload_batch(0, 10)
    assert [(p.id, p.channel, p.key) for p in batch] == [
        (a.id, "c", "a"),
        (b.id, "sms", "b"),
        (c.id, "c", "c"),
    ]
    assert batch[0].value == {"n": 1} and list(batch[2].value) == [SEALED], "not opened"
    assert [p.id for p in store.payload_batch(a.id, 1)] == [b.id]
    assert [p.id for p in store.payload_batch(0, 10, channel="c")] == [a.id, c.id]


def test_reseal_writes_only_the_payloads_still_as_read(store: Store) -> None:
    a, _ = store.record(new("a"), actor="t")
    b, _ = store.record(new("b"), actor="t")
    [pa, _] = store.payload_batch(0, 10)
    assert store.reseal([]) == ([], [])
    written, busy = store.reseal(
        [
            Reseal(a.id, pa.text, json.dumps({"n": 2})),
            Reseal(b.id, '{"n": 0}', json.dumps({"n": 3})),  # changed since it was read
            Reseal(GONE, pa.text, "{}"),  # gone
        ]
    )
    assert (written, busy) == ([a.id], [GONE])
    after_a, after_b = store.get(a.id), store.get(b.id)
    assert after_a is not None and after_a.payload == {"n": 2}
    assert after_a.status is a.status and after_a.updated_at == a.updated_at, "nothing else"
    assert after_b is not None and after_b.payload == {"n": 1}
    assert [e.kind for e in store.events(a.id)] == ["created"], "no event: the history stays"


def test_rows_waiting_for_a_key_are_made_due(store: Store) -> None:
    for key in ("a", "b", "other", "late"):
        store.record(new(key), actor="t")
    store.record(new("s", "sms"), actor="t")
    held = store.claim("c", holder="w", limit=4, lease=60)
    [sms] = store.claim("sms", holder="w", limit=1, lease=60)
    wait = waiting_for_key("abcd1234")
    changes = [
        Move.release(
            sub.id,
            "w",
            "no key",
            retry_in=3600,
            last_error=wait if sub.key in ("a", "b") else "another reason",
        )
        for sub in held
    ] + [Move.release(sms.id, "w", "no key", retry_in=3600, last_error=wait)]
    assert None not in store.move(changes)
    assert store.due_for_keys("c", [waiting_for_key("ffff0000")]) == 0
    assert store.due_for_keys("c", [wait, waiting_for_key("ffff0000")]) == 2
    due = {sub.key for sub in store.claim("c", holder="w2", limit=10, lease=60)}
    assert due == {"a", "b"}, "the others wait as they were told"
    assert store.due_for_keys("c", [wait]) == 0, "held now"
