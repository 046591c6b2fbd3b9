"""Fire-and-forget: the calls alone, no database. The ceiling for everyone else."""

from __future__ import annotations

import asyncio
from typing import Any

from common import Ctx, job_payload, new_session, post_job

NAME = "fire-and-forget"
DURABLE = False

_done = 0


async def setup(ctx: Ctx) -> None:
    return None


async def enqueue(ctx: Ctx, n: int, bulk: bool = False) -> None:
    raise NotImplementedError("fire-and-forget records nothing")


async def dispatch(ctx: Ctx, n: int, concurrency: int) -> dict[str, Any]:
    """n calls, `concurrency` at a time, from an in-memory list."""
    global _done
    jobs = iter(range(n))

    async with new_session() as session:

        async def lane() -> None:
            global _done
            for i in jobs:
                await post_job(session, ctx.send_url, f"ff:{i}", job_payload(i))
                _done += 1

        await asyncio.gather(*(lane() for _ in range(concurrency)))
    return {}


async def done(ctx: Ctx) -> int:
    return _done
