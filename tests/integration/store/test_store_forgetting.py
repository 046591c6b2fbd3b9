"""Forgetting payloads, the store's side: the searches that find the rows (by a
payload's field, the encrypted ones, the removed ones), and the batches that erase
closed rows' payloads and the texts quoting them, under the forget's lease."""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import replace
from typing import Any

from store_helpers import GONE, REJECTED

from denpyo.domain.actions import ActionKind, RowOutcome, Scope
from denpyo.domain.forgetting import FORGOTTEN, Scrubber, Where
from denpyo.domain.moves import Move, Settle
from denpyo.domain.retention import Retention
from denpyo.domain.sealed import SealedPayload
from denpyo.store import NewSubmission, Store
from denpyo.store.actions import NewAction
from denpyo.store.forgetting import Outcomes
from denpyo.store.sealing import CLEAR, AesGcmKeys, Sealing

ADA = {"to": "ada@example.com", "customer": {"email": "ada@example.com"}}


def recorded(store: Store, key: str, payload: object, channel: str = "c") -> int:
    new = NewSubmission(channel, key, str(uuid.uuid4()), json.dumps(payload))
    return store.record(new, actor="t")[0].id


def rejected(store: Store, key: str, payload: dict[str, Any]) -> int:
    """A closed row whose provider's error quotes its payload."""
    new = NewSubmission("c", key, str(uuid.uuid4()), json.dumps(payload))
    sub, _ = store.record(new, actor="h", lease=60)
    error = f"no such address {payload['to']}"
    [after] = store.move([Settle.of(sub, "h", replace(REJECTED, last_error=error), 5)])
    assert after is not None and after.last_error == error
    return sub.id


def abandoned(store: Store, key: str, payload: dict[str, Any]) -> int:
    """A rejected row a person resolved: retention may let it go."""
    sub = store.get(rejected(store, key, payload))
    assert sub is not None
    [after] = store.move([Move.give_up(sub, "operator:bob", "abandon", "abandoned", "n")])
    assert after is not None
    return sub.id


def forget_entry(store: Store, ids: list[int], holder: str = "h") -> int:
    entry = NewAction(ActionKind.FORGET, Scope.ROWS, "rows", "operator:ada", "erasure request")
    return store.add_action(entry, ids=ids, holder=holder, lease=60).id


def forget(store: Store, ids: list[int], action_id: int, holder: str) -> Outcomes | None:
    """`forget_rows` of Ada's payload, by Ada, under `holder`'s lease."""
    return store.forget_rows(
        ids,
        scrub=Scrubber([ADA]),
        actor="operator:ada",
        note="erasure",
        action_id=action_id,
        holder=holder,
        lease=60,
    )


def test_the_live_rows_of_a_payloads_field_are_found_page_by_page(store: Store) -> None:
    a = recorded(store, "a", ADA)
    recorded(store, "b", {"to": "bob@example.com"})
    sms = recorded(store, "s", {"to": "ada@example.com"}, channel="sms")
    nested = recorded(store, "n", {"customer": {"email": "ada@example.com"}})
    recorded(store, "x", {"to": "ADA@example.com"})  # compared byte for byte
    to = Where.parse("to=ada@example.com")
    assert [s.id for s in store.forget_matches(to, channel=None, after=0, limit=10)] == [a, sms]
    assert [s.id for s in store.forget_matches(to, channel="c", after=0, limit=10)] == [a]
    assert [s.id for s in store.forget_matches(to, channel=None, after=a, limit=1)] == [sms]
    email = Where.parse("customer.email=ada@example.com")
    found = store.forget_matches(email, channel=None, after=0, limit=10)
    assert [s.id for s in found] == [a, nested] and found[0].payload == ADA


def test_the_encrypted_rows_are_read_one_by_one(store: Store) -> None:
    clear = recorded(store, "clear", ADA)
    store.sealing = Sealing(AesGcmKeys([os.urandom(32)]))
    sealed = recorded(store, "sealed", ADA)
    other = recorded(store, "other", ADA, channel="sms")
    [one, two] = store.forget_sealed(channel=None, after=0, limit=10)
    assert (one.id, two.id) == (sealed, other) and one.payload == ADA, "opened with the key"
    assert [s.id for s in store.forget_sealed(channel="sms", after=0, limit=10)] == [other]
    assert [s.id for s in store.forget_sealed(channel=None, after=sealed, limit=10)] == [other]
    store.sealing = CLEAR
    [without] = store.forget_sealed(channel="c", after=0, limit=10)
    assert isinstance(without.payload, SealedPayload), "no key here: read as every row is"
    assert clear not in [s.id for s in store.forget_sealed(channel=None, after=0, limit=10)]


def test_a_batch_forgets_closed_rows_and_the_texts_about_them(store: Store) -> None:
    closed = rejected(store, "a", ADA)
    waiting = recorded(store, "w", ADA)
    retry = NewAction(
        ActionKind.RETRY, Scope.ROWS, "rows", "operator:bob", "asked ada@example.com again"
    )
    earlier = store.add_action(retry, ids=[closed]).id
    gone = GONE
    action_id = forget_entry(store, [closed, waiting, gone])
    assert forget(store, [closed], action_id, "other") is None
    kept = store.get(closed)
    assert kept is not None and kept.payload == ADA, "a holder without the forget writes nothing"

    nothing = forget(store, [], action_id, "h")
    assert nothing == [], "an empty batch is no error"
    results = forget(store, [closed, waiting, gone], action_id, "h")
    assert results is not None and [(sid, outcome) for sid, outcome, _ in results] == [
        (closed, RowOutcome.DONE),
        (waiting, RowOutcome.SKIPPED),
        (gone, RowOutcome.SKIPPED),
    ]
    row = store.get(closed)
    assert row is not None and row.payload is None and row.last_error is None
    assert row.forgotten_at is not None
    history = store.events(closed)
    assert history[-1].kind == "forgotten" and history[-1].detail == "erasure"
    assert not any("ada@example.com" in (e.detail or "") for e in history)
    note = store.action(earlier)
    assert note is not None and note.note == FORGOTTEN, "another action's note is replaced"
    still = store.get(waiting)
    assert still is not None and still.payload == ADA, "an open row keeps its payload"
    by = store.forget_action_of(closed)
    assert by is not None and by.id == action_id and store.forget_action_of(waiting) is None

    assert forget(store, [closed], action_id, "h") is None, "it is done"
    second = forget_entry(store, [closed])
    again = forget(store, [closed], second, "h")
    assert again == [(closed, RowOutcome.SKIPPED, "forgotten already")]


def test_removed_rows_memories_are_forgotten(store: Store) -> None:
    pruned = abandoned(store, "p", ADA)
    archived = abandoned(store, "a", {"to": "bob@example.com"})
    other = abandoned(store, "o", {"to": "cy@example.com"})
    assert store.forget_archives() == [] and not store.forget_pruned()
    time.sleep(0.02)  # created strictly before the cutoff, on a millisecond clock
    everything = Retention.of(older_than=0)
    assert store.remove([pruned, other], everything) == 2
    assert store.remove([archived], everything, archived_to="file:///archive/1.jsonl") == 1
    assert store.forget_archives() == ["file:///archive/1.jsonl"]
    assert store.forget_archives("sms") == [] and not store.forget_pruned("sms")
    assert store.forget_pruned() and store.forget_pruned("c")

    action_id = forget_entry(store, [pruned, other, archived])
    scrub = Scrubber([ADA])
    assert (
        store.forget_kept([pruned], scrub=scrub, action_id=action_id, holder="x", lease=60) is None
    )
    done = store.forget_kept(
        [pruned, other, GONE], scrub=scrub, action_id=action_id, holder="h", lease=60
    )
    assert done is not None and [(sid, outcome) for sid, outcome, _ in done] == [
        (pruned, RowOutcome.DONE),
        (other, RowOutcome.DONE),
        (GONE, RowOutcome.SKIPPED),
    ]
    memory = store.get(pruned)
    assert memory is not None and memory.removed_at is not None and memory.forgotten_at is not None
    assert not store.forget_pruned(), "every pruned row is forgotten now"
    forget = store.forget_action_of(pruned)
    assert forget is not None and forget.id == action_id
    second = forget_entry(store, [pruned])
    again = store.forget_kept([pruned], scrub=scrub, action_id=second, holder="h", lease=60)
    assert again == [(pruned, RowOutcome.SKIPPED, "forgotten already")]
