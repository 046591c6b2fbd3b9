"""The group commit never strands a settle queued while a flush is finishing."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from denpyo.engine.batching import SettleBatcher


class FakeDriver:
    """Stands in for the async driver: `move` echoes its moves back."""

    async def move(self, moves: Sequence[Any]) -> list[Any]:
        await asyncio.sleep(0)
        return list(moves)


def test_a_settle_queued_as_the_last_flush_ends_is_still_committed() -> None:
    async def main() -> list[list[Any]]:
        batcher = SettleBatcher(FakeDriver(), commits=1)  # type: ignore[arg-type]
        results = []
        for round_ in range(200):
            first = asyncio.create_task(batcher([f"a{round_}"]))
            # Queue the next settle at every possible step of the first flush's ending.
            for _ in range(round_ % 5):
                await asyncio.sleep(0)
            second = batcher([f"b{round_}"])
            results.append(await asyncio.wait_for(second, timeout=5))
            results.append(await asyncio.wait_for(first, timeout=5))
        assert not batcher.flushers
        return results

    results = asyncio.run(main())
    assert len(results) == 400
