"""The group commit never strands a settle: not one queued while a flush is finishing,
nor the others of a batch whose callback for one flow fails."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from denpyo.engine.batching import GroupCommit


async def echo(moves: Sequence[Any]) -> list[Any]:
    """Stands in for the store: the commit returns its moves."""
    await asyncio.sleep(0)
    return list(moves)


def test_a_settle_queued_as_the_last_flush_ends_is_still_committed() -> None:
    async def main() -> dict[str, list[Any]]:
        committed: dict[str, list[Any]] = {}
        batcher: GroupCommit[str] = GroupCommit(
            echo, lambda waiter, moves, results, error: committed.setdefault(waiter, results)
        )
        for round_ in range(200):
            batcher.add([f"a{round_}"], f"a{round_}")
            # Queue the next settle at every possible step of the first flush's ending.
            for _ in range(round_ % 5):
                await asyncio.sleep(0)
            batcher.add([f"b{round_}"], f"b{round_}")
            for _ in range(100):
                if f"b{round_}" in committed:
                    break
                await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        assert not batcher.flushers
        return committed

    committed = asyncio.run(main())
    assert len(committed) == 400
    assert all(results == [waiter] for waiter, results in committed.items())


def test_a_failed_commit_reaches_every_flow_in_it() -> None:
    async def fail(moves: Sequence[Any]) -> list[Any]:
        raise RuntimeError("connection lost")

    async def main() -> list[tuple[str, Any, Any]]:
        seen: list[tuple[str, Any, Any]] = []
        batcher: GroupCommit[str] = GroupCommit(
            fail, lambda waiter, moves, results, error: seen.append((waiter, results, error))
        )
        batcher.add(["m1"], "one")
        batcher.add(["m2", "m3"], "two")
        await asyncio.sleep(0.01)
        return seen

    seen = asyncio.run(main())
    assert [(waiter, results) for waiter, results, _ in seen] == [("one", None), ("two", None)]
    assert all(isinstance(error, RuntimeError) for _, _, error in seen)


def test_a_callback_that_fails_for_one_flow_strands_no_other(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def committed(waiter: str, moves: Any, results: Any, error: Any) -> None:
        if waiter == "broken":
            raise ValueError("a bug in the caller")
        seen.append(waiter)

    async def main() -> None:
        batcher: GroupCommit[str] = GroupCommit(echo, committed)
        batcher.add(["m1"], "broken")
        batcher.add(["m2"], "after")
        await asyncio.sleep(0.01)
        batcher.add(["m3"], "next batch")
        await asyncio.sleep(0.01)
        assert not batcher.flushers

    seen: list[str] = []
    with caplog.at_level(logging.ERROR, logger="denpyo.engine"):
        asyncio.run(main())
    assert seen == ["after", "next batch"]
    assert "callback failed" in caplog.text
