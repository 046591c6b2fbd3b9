"""Ordering keys: the rows of one key are sent one at a time, in order, by the
worker and by an inline submit alike."""

from __future__ import annotations

import asyncio

import pytest

import denpyo
from denpyo import ErrorKind, Status, Submission
from denpyo.domain.moves import Move


def test_ordering_key_sends_one_at_a_time_in_order(ledger: denpyo.Ledger) -> None:
    order: list[str] = []

    async def record(sub: Submission) -> str:
        order.append(sub.key)
        await asyncio.sleep(0.01)
        return "r"

    ledger.channel("c")(record)
    for i in range(6):
        ledger.enqueue("c", f"a{i}", {}, ordering_key="customer:a")
    claimed = ledger.store.claim("c", holder="w", limit=10, lease=60)
    assert [s.key for s in claimed] == ["a0"]  # followers wait for their head
    ledger.store.move(
        [
            denpyo.domain.moves.Move(
                claimed[0].id,
                Status.REQUESTING,
                Status.REQUESTING,
                "w",
                holder="w",
                attempt_delta=-1,
                retry_in=0,
            )
        ]
    )
    ledger.work(until_idle=True, poll_interval=0.01)
    assert order == [f"a{i}" for i in range(6)]


def test_an_inline_submit_behind_an_open_row_of_its_ordering_key_waits_its_turn(
    ledger: denpyo.Ledger,
) -> None:
    sent: list[str] = []
    ledger.channel("c")(lambda sub: sent.append(sub.key) or "r")
    ledger.enqueue("c", "a0", {}, ordering_key="customer:a")  # the head, for a worker
    follower = ledger.submit("c", "a1", {}, ordering_key="customer:a")
    assert sent == [] and follower.status is Status.REQUESTING and follower.attempts == 0
    assert [e.kind for e in ledger.events(follower.id)][-1] == "released"
    assert ledger.submit("c", "b0", {}, ordering_key="customer:b").status is Status.SYNCED
    ledger.work(until_idle=True, poll_interval=0.01)
    assert sent == ["b0", "a0", "a1"]


def test_a_failed_row_submitted_again_behind_an_open_one_is_left_to_the_worker(
    ledger: denpyo.Ledger,
) -> None:
    sent: list[str] = []
    ledger.channel("c")(lambda sub: sent.append(sub.key) or "r")
    ledger.enqueue("c", "head", {}, ordering_key="k")
    failed = ledger.enqueue("c", "next", {}, ordering_key="k")
    ledger.store.move([Move.claim(failed.id, Status.REQUESTING, "w", 60, verify=False)])
    ledger.store.move(
        [
            Move(
                failed.id,
                Status.REQUESTING,
                Status.FAILED,
                "w",
                holder="w",
                error_kind=ErrorKind.TRANSIENT,
                last_error="HTTP 503",
                retry_in=0,
            )
        ]
    )  # a failure the head's order would have prevented (a race), made here
    with pytest.raises(denpyo.SubmissionFailed):
        ledger.submit("c", "next", {}, ordering_key="k")
    assert sent == []
    ledger.work(until_idle=True, poll_interval=0.01)
    assert sent == ["head", "next"]
