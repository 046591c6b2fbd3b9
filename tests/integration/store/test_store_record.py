"""Recording: a key is recorded once, alone or in a batch (copied in, on
PostgreSQL), each new row with its own `created` event, and a row another session
records during a batch keeps its own history."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from store_helpers import SQL, new

from denpyo import Status
from denpyo.domain.submission import Submission
from denpyo.store import NewSubmission, Store, open_store
from waiting import wait_until


def test_record_returns_the_row_already_recorded_for_a_key(store: Store) -> None:
    first, created = store.record(new("k"), actor="t")
    again, created_again = store.record(new("k"), actor="t")
    assert created and not created_again and again.id == first.id
    assert again.idempotency_key == first.idempotency_key

    seen: list[str] = []
    recorded = store.record_many(
        [new("k"), new("k2")], actor="t", check=lambda fresh, old: seen.append(old.key)
    )
    assert recorded == 1 and seen == ["k"]
    assert [e.kind for e in store.events(first.id)] == ["created"]


def test_a_batch_records_each_key_once_with_its_history(store: Store, sql: SQL) -> None:
    """Batches large enough that PostgreSQL copies them in (`COPY_FROM` rows and more):
    each new row gets one `created` event, in the batch's order, and counts as
    requesting; a key recorded already (by an earlier batch, or earlier in the same
    one) is recorded once, and shown to `check`."""
    seen: list[str] = []

    def check(fresh: NewSubmission, old: Submission) -> None:
        seen.append(old.key)

    first = [new(f"k{i}") for i in range(250)]
    assert store.record_many(first, actor="a", check=check) == 250 and seen == []
    again = [*(new(f"k{i}") for i in range(125, 375)), new("twice"), new("twice")]
    assert store.record_many(again, actor="b", check=check) == 126
    assert sorted(seen) == sorted([*(f"k{i}" for i in range(125, 250)), "twice"])
    assert store.record_many(first[:120], actor="c", check=lambda n, old: None) == 0

    history = sql(
        "SELECT s.key, e.actor, e.from_status, e.to_status, e.attempt FROM denpyo_events e "
        "JOIN denpyo_submissions s ON s.id = e.submission_id ORDER BY e.id"
    )
    expected = [f"k{i}" for i in range(375)] + ["twice"]
    assert [row[0] for row in history] == expected  # one each, in order
    assert {row[1:] for row in history[:250]} == {("a", None, "requesting", 0)}
    assert {row[1] for row in history[250:]} == {"b"}
    assert sql("SELECT COUNT(*) FROM denpyo_events WHERE kind = 'created'") == [(376,)]
    assert store.count_by_status() == [("c", Status.REQUESTING, 376)]
    stored = store.get_by_key("c", "k300")
    assert stored is not None and stored.payload == {"n": 1} and stored.attempts == 0
    assert stored.idempotency_key == again[300 - 125].idempotency_key
    assert stored.next_attempt_at is not None and stored.locked_by is None


@pytest.mark.parametrize("backend", ["postgresql", "mysql"], indirect=True)
def test_a_row_recorded_elsewhere_during_a_batch_keeps_its_own_history(
    store: Store, backend: str, db_url: str, sql: SQL
) -> None:
    """(SQLite has one writer at a time.) Another session's row, committed while a
    batch is being written, takes an id among the batch's; neither takes the
    other's `created` event."""
    other = open_store(db_url)
    n, middle = 3000, 1500

    def batch() -> Iterator[NewSubmission]:
        for i in range(n):
            if i == middle:
                if store.capabilities.copy:  # until the server has copied some rows in
                    wait_until(lambda: sql(SEQUENCE)[0][0] > 100, "the sequence", every=0.01)
                other.record(new("elsewhere"), actor="other")
            yield new(f"k{i}")

    try:
        assert store.record_many(batch(), actor="batch", check=lambda n, old: None) == n
    finally:
        other.close()
    owners = sql(
        "SELECT e.actor, s.key FROM denpyo_events e "
        "JOIN denpyo_submissions s ON s.id = e.submission_id ORDER BY s.id"
    )
    assert [key for actor, key in owners if actor == "other"] == ["elsewhere"]
    assert [key for actor, key in owners if actor == "batch"] == [f"k{i}" for i in range(n)]
    keys = [row[0] for row in sql("SELECT s.key FROM denpyo_submissions s ORDER BY s.id")]
    assert 0 < keys.index("elsewhere") < n  # its id lies among the batch's


SEQUENCE = "SELECT last_value FROM denpyo_submissions_id_seq"
