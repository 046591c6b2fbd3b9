"""What the broker channels' tests share: a submission to publish, and a loop to run on."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from denpyo import Status, Submission

T = TypeVar("T")


def sub(key: str = "idem-1", payload: Any = None) -> Submission:
    return Submission(
        id=1,
        channel="events",
        key="order:1",
        idempotency_key=key,
        payload={"order": 1} if payload is None else payload,
        status=Status.REQUESTING,
    )


def run(body: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(body())
