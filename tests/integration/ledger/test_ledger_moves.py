"""Moves and settles through the ledger's store, by every path that reaches the
database: a disallowed move writes nothing, a compare-and-set loses when the row
moved, a batch answers each change in its place, and a settle ends as the same
change written as a general move would."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from ledger_helpers import as_prepared, ok

import denpyo
from denpyo import ErrorKind, Status, Submission
from denpyo.domain.moves import Move
from denpyo.store.postgresql import PostgresStore


def test_disallowed_move_raises_and_writes_nothing(ledger: denpyo.Ledger) -> None:
    ledger.channel("c")(ok)
    sub = ledger.submit("c", "k", {})
    with pytest.raises(denpyo.TransitionNotAllowed):
        ledger.store.move([denpyo.domain.moves.Move(sub.id, Status.SYNCED, Status.FAILED, "x")])
    assert ledger.get("c", "k") == sub


def test_compare_and_set_loses_when_the_row_moved(ledger: denpyo.Ledger) -> None:
    from denpyo.domain.moves import Move

    ledger.channel("c")(ok)
    sub = ledger.enqueue("c", "k", {})
    [claimed] = ledger.store.claim("c", holder="w1", limit=5, lease=60)
    assert claimed.locked_by == "w1" and claimed.attempts == 0  # counted when its call started
    assert ledger.store.claim("c", holder="w2", limit=5, lease=60) == []
    wrong_holder = Move(sub.id, Status.REQUESTING, Status.SYNCED, "w2", holder="w2")
    wrong_status = Move(sub.id, Status.FAILED, Status.SYNCED, "w1", holder="w1")
    assert ledger.store.move([wrong_holder, wrong_status]) == [None, None]
    right = Move(sub.id, Status.REQUESTING, Status.SYNCED, "w1", holder="w1", event="x")
    [moved] = ledger.store.move([right])
    assert moved is not None and moved.status is Status.SYNCED
    assert ledger.store.move([right]) == [None]  # a second settle of the same row loses


def test_a_batch_of_moves_answers_each_in_its_place(ledger: denpyo.Ledger) -> None:
    """Winners and losers mixed in one batch: each move gets its own row back (or None),
    in the order given, and only the winners write their event."""
    from denpyo.domain.moves import Move

    ledger.channel("c")(ok)
    ledger.enqueue_many("c", [(f"k{i}", {"i": i}) for i in range(5)])
    claimed = ledger.store.claim("c", holder="w", limit=5, lease=60)
    assert len(claimed) == 5

    def settle(sub: Submission, holder: str) -> Move:
        return Move(
            sub.id,
            Status.REQUESTING,
            Status.SYNCED,
            holder,
            holder=holder,
            event="settle",
            remote_id=f"r-{sub.key}",
        )

    holders = ["w", "thief", "w", "thief", "w"]
    results = ledger.store.move([settle(s, h) for s, h in zip(claimed, holders, strict=True)])
    for sub, holder, result in zip(claimed, holders, results, strict=True):
        if holder == "thief":
            assert result is None
            assert [e.kind for e in ledger.store.events(sub.id)] == ["created", "attempt"]
        else:
            assert result is not None and result.id == sub.id and result.payload == sub.payload
            assert result.status is Status.SYNCED and result.remote_id == f"r-{sub.key}"
            assert [e.kind for e in ledger.store.events(sub.id)] == [
                "created",
                "attempt",
                "settle",
            ]


def _move_paths(ledger: denpyo.Ledger) -> list[Callable[[list[Any]], list[Submission | None]]]:
    """The ways moves reach the database: the store, and the worker's async form
    (on its event loop where the driver has one: PostgreSQL)."""

    async def natively(batch: list[Any]) -> list[Submission | None]:
        native = ledger.store.async_ops(db)
        await native.open()
        try:
            return await native.move(batch)
        finally:
            await native.close()

    db = ThreadPoolExecutor(1)
    return [ledger.store.move, lambda batch: asyncio.run(natively(batch))]


def test_a_moved_row_takes_its_payload_from_the_mover_when_it_has_it(
    ledger: denpyo.Ledger,
) -> None:
    """A move never changes the payload: given the row as the mover read it, the
    store hands back that payload instead of reading it again (the worker's settles);
    without it, the stored payload is read. Alone or in a batch, by every path."""
    import dataclasses

    from denpyo.domain.moves import Move

    ledger.channel("c")(ok)

    def settle(sub: Submission, row: Submission | None) -> Move:
        return Move(
            sub.id,
            Status.REQUESTING,
            Status.SYNCED,
            sub.locked_by or "",
            holder=sub.locked_by,
            event="settle",
            row=row,
        )

    for n, apply in enumerate(_move_paths(ledger)):
        ledger.enqueue_many("c", [(f"p{n}-{i}", {"i": i}) for i in range(3)])
        claimed = ledger.store.claim("c", holder=f"w{n}", limit=3, lease=60)
        as_read = [dataclasses.replace(sub, payload={"as read by": sub.key}) for sub in claimed]

        alone = apply([settle(claimed[0], as_read[0])])
        together = apply([settle(claimed[1], as_read[1]), settle(claimed[2], None)])
        got = [sub.payload if sub else None for sub in [*alone, *together]]
        assert got == [{"as read by": f"p{n}-0"}, {"as read by": f"p{n}-1"}, {"i": 2}]
        stored = [ledger.get("c", sub.key) for sub in claimed]
        assert [sub.payload if sub else None for sub in stored] == [{"i": 0}, {"i": 1}, {"i": 2}]
    if isinstance(ledger.store, PostgresStore):  # and the server does not send it back
        from denpyo.store.postgresql_async import _statements

        ledger.enqueue_many("c", [(f"q{i}", {"i": i}) for i in range(3)])
        held = ledger.store.claim("c", holder="w", limit=3, lease=60)
        note = dataclasses.replace(settle(held[0], held[0]), event="note")
        moves = [[note], [settle(held[1], held[1]), settle(held[2], None)]]
        statements = [statement for batch in moves for statement, _ in _statements(batch)]
        assert [query for query, _ in statements] == [
            "move_submission_one",
            "move_submissions_batch",
        ]
        with ledger.store.transaction() as tx:
            rows = [row for query, params in statements for row in tx.fetch_all(query, params)]
        payloads = {row["id"]: row["payload"] for row in rows}
        assert payloads == {held[0].id: None, held[1].id: None, held[2].id: {"i": 2}}


def test_ended_attempts_are_recorded_alike_by_every_statement(ledger: denpyo.Ledger) -> None:
    """A settle (`Settle`) goes by a statement of its own, leaner than a move's: every
    outcome, and a settle whose lease was lost, ends with the same row, the same
    returned row and the same event as the same change written as a general `Move`,
    by every path."""
    import dataclasses

    from denpyo.domain.moves import Settle
    from denpyo.domain.policy import AttemptDecision

    ledger.channel("c")(ok)
    outcomes = [
        AttemptDecision(Status.SYNCED, remote_id="r-1"),
        AttemptDecision(Status.FAILED, ErrorKind.TRANSIENT, "HTTP 503", retry_in=30),
        AttemptDecision(Status.REJECTED, ErrorKind.REJECTED, "HTTP 422: no such customer"),
        AttemptDecision(Status.FAILED, ErrorKind.AMBIGUOUS, "read timed out", retry_in=5),
        AttemptDecision(Status.SYNCED),
    ]
    lost = len(outcomes)  # one more row, whose lease another worker took

    def shape(sub: Submission | None) -> tuple[Any, ...] | None:
        if sub is None:
            return None
        return (
            sub.status,
            sub.attempts,
            sub.locked_by,
            sub.locked_until,
            sub.remote_id,
            sub.last_error,
            sub.error_kind,
            sub.resolution,
            sub.in_doubt,
            sub.payload,
            sub.next_attempt_at is None,
            sub.synced_at is None,
            sub.updated_at is None,
        )

    seen: list[Any] = []
    for n, apply in enumerate(_move_paths(ledger)):
        for known in (True, False):
            prefix = f"{n}-{known}-"
            ledger.enqueue_many("c", [(f"{prefix}{i}", {"i": i}) for i in range(lost + 1)])
            held = ledger.store.claim("c", holder="claimer", limit=lost + 1, lease=60)
            held[lost] = dataclasses.replace(held[lost], locked_by="someone else")
            settles = [
                Settle.of(sub, "w", outcome, duration_ms=12)
                for sub, outcome in zip(held, [*outcomes, outcomes[0]], strict=True)
            ]
            changes: list[Any] = settles if known else [s.as_move() for s in settles]
            returned = apply(changes)
            stored = [ledger.get("c", sub.key) for sub in held]
            events = [
                [
                    (
                        e.kind,
                        e.from_status,
                        e.to_status,
                        e.attempt,
                        e.actor,
                        e.detail,
                        e.duration_ms,
                    )
                    for e in ledger.events(sub.id)
                ]
                for sub in held
            ]
            assert returned[lost] is None and stored[lost] is not None
            assert stored[lost].status is Status.REQUESTING and stored[lost].locked_by == "claimer"
            returned, stored = returned[:lost], stored[:lost]
            assert [shape(sub) for sub in returned] == [shape(sub) for sub in stored]
            seen.append(([shape(sub) for sub in returned], events))
    for case in seen:
        assert case == seen[0]
    assert [row[0] for row in seen[0][0]] == [outcome.status for outcome in outcomes]
    assert seen[0][1][0][-1] == ("settle", Status.REQUESTING, Status.SYNCED, 1, "w", "r-1", 12)
    assert [kind for kind, *_ in seen[0][1][lost]] == ["created", "attempt"]


def test_a_batch_naming_a_row_twice_applies_its_moves_in_order(ledger: denpyo.Ledger) -> None:
    """Each move sees the one before it, through the store and, where the worker
    runs its claims and settles on its event loop (PostgreSQL), through that path."""
    from denpyo.domain.moves import Move

    ledger.channel("c")(ok)

    def moves(row_id: int) -> list[Move]:
        return [
            Move(
                row_id,
                Status.REQUESTING,
                Status.FAILED,
                "w1",
                holder="w1",
                event="settle",
                attempt_delta=1,
                retry_in=0,
                error_kind=denpyo.ErrorKind.TRANSIENT,
                last_error="HTTP 503",
            ),
            Move(
                row_id,
                Status.FAILED,
                Status.REQUESTING,
                "w2",
                event="attempt",
                new_holder="w2",
                lease=60,
                keep_error=True,
            ),
        ]

    for n, apply in enumerate(_move_paths(ledger)):
        ledger.enqueue("c", f"k{n}", {})
        [claimed] = ledger.store.claim("c", holder="w1", limit=5, lease=60)
        failed, retaken = apply(moves(claimed.id))
        assert failed is not None and failed.status is Status.FAILED
        assert retaken is not None and retaken.status is Status.REQUESTING
        assert retaken.attempts == 1 and retaken.locked_by == "w2"
        assert retaken.last_error == "HTTP 503"
        history = [(event.kind, event.attempt) for event in ledger.events(claimed.id)]
        assert history == [("created", 0), ("attempt", 1), ("settle", 1), ("attempt", 2)]


def test_an_inline_settle_is_planned_once_and_reaches_its_row_by_index(
    postgres_url: str,
) -> None:
    """A submit settles one row. Its statement must keep one plan for the session
    (not be planned again at each call) and that plan must find the row by its
    primary key, even when it was made on a nearly empty table; so must the plan of
    any other lone move (a person's, say)."""
    with denpyo.Ledger(postgres_url) as ledger:
        ledger.channel("c")(lambda sub: "r")
        for i in range(30):
            ledger.submit("c", f"k{i}", {"i": i})
        store = ledger.store
        assert isinstance(store, PostgresStore)
        plans: dict[str, str] = {}
        with store.pool.connection() as conn:
            cached = conn.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement LIKE %s",
                ["-- settle_submission_one:%"],
            ).fetchall()
            assert cached and all(row["generic_plans"] > 0 for row in cached)
            conn.execute("SET plan_cache_mode = force_generic_plan")
            for name in ("settle_submission_one", "move_submission_one"):
                prepared, nulls = as_prepared(store.queries[name])
                conn.execute(f"PREPARE lone_plan AS {prepared}")
                plans[name] = "\n".join(
                    row["QUERY PLAN"]
                    for row in conn.execute(f"EXPLAIN EXECUTE lone_plan {nulls}").fetchall()
                )
                conn.execute("DEALLOCATE lone_plan")
            conn.execute("RESET plan_cache_mode")
    for plan in plans.values():
        assert "Index Scan using denpyo_submissions_pkey" in plan and "Seq Scan" not in plan
