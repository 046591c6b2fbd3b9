"""The audit's reads: the synced rows of a window page by page, rows by their
idempotency keys, and a row's first attempt (for the idempotency window), each
from an index."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from store_helpers import new, plans

from denpyo import Status
from denpyo.domain.doubt import DoubtHistory
from denpyo.domain.moves import Move
from denpyo.store import Store


def _synced(store: Store, keys: list[str], channel: str = "c") -> list[Any]:
    """Rows recorded, sent and settled `synced` together (one statement: on PostgreSQL
    they share one synced_at, which the audit's paging must step through)."""
    held = [store.record(new(k, channel), actor="h", lease=60)[0] for k in keys]
    moves = [
        Move(
            sub.id,
            Status.REQUESTING,
            Status.SYNCED,
            "h",
            holder="h",
            event="settle",
            remote_id=f"r-{sub.key}",
        )
        for sub in held
    ]
    return [row for row in store.move(moves) if row is not None]


def test_synced_rows_of_a_window_come_page_by_page_in_order(store: Store) -> None:
    early = _synced(store, ["e1", "e2"])
    time.sleep(0.02)
    since = store.now()
    time.sleep(0.02)
    inside = _synced(store, [f"k{i}" for i in range(5)]) + _synced(store, ["k5", "k6"])
    _synced(store, ["other"], channel="d")
    store.record(new("waiting"), actor="t")
    until = store.now() + timedelta(seconds=1)

    pages: list[list[int]] = []
    after = None
    while True:
        page = store.list_synced("c", since, until, after=after, limit=2)
        if not page:
            break
        pages.append([sub.id for sub in page])
        last = page[-1]
        assert last.synced_at is not None
        after = (last.synced_at, last.id)
    assert [len(page) for page in pages] == [2, 2, 2, 1]
    ordered = sorted(inside, key=lambda sub: (sub.synced_at, sub.id))
    assert [i for page in pages for i in page] == [sub.id for sub in ordered]
    assert all(sub.status is Status.SYNCED for sub in store.list_synced("c", since, until))
    whole = store.list_synced("c", early[0].synced_at, until, limit=100)
    assert len(whole) == 9
    assert store.list_synced("c", since, since) == []


def test_rows_are_found_by_their_idempotency_keys(store: Store) -> None:
    a, _ = store.record(new("a"), actor="t")
    b, _ = store.record(new("b"), actor="t")
    store.record(new("c"), actor="t")
    found = store.get_by_idempotency_keys([a.idempotency_key, b.idempotency_key, "unknown"])
    assert sorted(sub.key for sub in found) == ["a", "b"]
    assert store.get_by_idempotency_keys([]) == []


def test_the_first_attempt_is_read_from_the_history(store: Store) -> None:
    """A reconciler reads a row's history with the database clock: the first hold to
    send it starts the idempotency window, and holds given back are no tries."""
    sub, _ = store.record(new("k"), actor="t")
    events, now = store.history(sub.id)
    found = DoubtHistory.of(sub, events, now)
    assert (found.first_attempt_at, found.tries) == (None, 0) and now is not None
    [claimed] = store.claim("c", holder="w", limit=1, lease=60)
    store.move([Move.release(claimed.id, "w", "given back")])
    time.sleep(0.02)
    [again] = store.claim("c", holder="w2", limit=1, lease=60)
    assert again.attempts == 0  # held to send: counted once its call started
    events, now = store.history(sub.id)
    attempts = [e.at for e in events if e.kind == "attempt"]
    assert len(attempts) == 2
    found = DoubtHistory.of(again, events, now)
    assert (found.first_attempt_at, found.tries) == (attempts[0], 1) and now >= attempts[1]


AUDIT_INDEXES = {
    "sqlite": (
        "denpyo_submissions_synced",
        "sqlite_autoindex_denpyo_submissions_2",
        "denpyo_events_submission",
    ),
    "postgresql": (
        "denpyo_submissions_synced",
        "denpyo_submissions_idempotency_key",
        "denpyo_events_submission",
    ),
    "mysql": (
        "denpyo_submissions_synced",
        "denpyo_submissions_idempotency_key",
        "denpyo_events_submission",
    ),
}


def test_the_audits_reads_are_planned_on_indexes(store: Store, backend: str, db_url: str) -> None:
    """The audit's page of synced rows, its lookup by idempotency key, and a row's
    history (the idempotency window, a reconciler's) each read an index, not the table."""
    now = store.now()
    params: dict[str, Any] = {
        "channel": "c",
        "after_at": store.time_param(now - timedelta(hours=1)),  # type: ignore[attr-defined]
        "after_id": 0,
        "until": store.time_param(now),  # type: ignore[attr-defined]
        "limit": 500,
        "keys": store.text_list(["a", "b"]),  # type: ignore[attr-defined]
        "submission_id": 1,
    }
    names = ("list_submissions_synced", "get_submissions_by_idempotency_keys", "list_events")
    with plans(store, backend, db_url) as plan:
        for name, index in zip(names, AUDIT_INDEXES[backend], strict=True):
            found = plan(name, params)
            if getattr(store, "partitioned", False) and name == "list_events":
                index = "denpyo_events_pkey"  # there (submission_id, id): one index, not two
            assert index in found, (name, found)
