"""The two senders of the demo, run as child processes that the demo kills with SIGKILL.

``python -m denpyo.demo naive|denpyo --send-url URL --db PATH ...`` (see `__main__`)

Both send the same invoice emails to a fake provider over HTTP, several at a
time. Both take a moment to prepare each email (render the invoice) before the
call, and a moment after the provider's answer before writing it down (a
receipt, a log line): a kill in that second pause lands "after the provider
accepted, before the database recorded"; a kill in the first, before the call
left. Both pauses vary per order, so the calls drift apart.

- naive: the seed's code. Prepare, call, then ``INSERT INTO invoice_emails``.
- denpyo: `Ledger.asubmit`: the row is committed `requesting`, then the channel
  prepares, calls and returns the provider's id, and the row is settled.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections.abc import Iterable
from typing import Any

import aiohttp

from denpyo.channels.http import HttpChannel
from denpyo.domain.submission import Submission
from denpyo.engine.ledger import Ledger

CHANNEL = "invoice-email"
LEASE = 2.0
"""Seconds an attempt may take before its row counts as in doubt; short, so that
the demo need not wait long for the killed sender's leases to run out."""

NAIVE_TABLE = """
CREATE TABLE IF NOT EXISTS invoice_emails (
    order_id  INTEGER PRIMARY KEY,
    remote_id TEXT,
    sent_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
)
"""


def invoice(order_id: int) -> dict[str, Any]:
    return {
        "order_id": order_id,
        "to": f"customer{order_id}@example.com",
        "subject": f"Invoice for order #{order_id}",
        "amount": 1000 + order_id,
    }


def order_key(order_id: int) -> str:
    return f"order:{order_id}"


def pause_for(order_id: int, pause: float, step: str) -> float:
    """Between half and one and a half `pause`, fixed per order and step."""
    return pause * (0.5 + random.Random(f"{step}-{order_id}").random())


async def send_naive(
    send_url: str,
    db_path: str,
    orders: Iterable[int],
    concurrency: int,
    pause: float = 0.0,
    prepare: float = 0.0,
) -> None:
    """The seed's `send_invoice_email`, for many orders at once: call, then INSERT."""
    db = sqlite3.connect(db_path, isolation_level=None, timeout=30)
    gate = asyncio.Semaphore(concurrency)
    try:
        async with aiohttp.ClientSession() as session:

            async def one(order_id: int) -> None:
                async with gate:
                    await asyncio.sleep(pause_for(order_id, prepare, "prepare"))
                    headers = {"Idempotency-Key": f"invoice-{order_id}"}
                    async with session.post(
                        send_url, json=invoice(order_id), headers=headers
                    ) as response:
                        response.raise_for_status()
                        remote_id = (await response.json())["id"]
                    # A kill here: sent, and the table never knows.
                    await asyncio.sleep(pause_for(order_id, pause, "record"))
                    db.execute(
                        "INSERT INTO invoice_emails (order_id, remote_id) VALUES (?, ?)",
                        (order_id, remote_id),
                    )

            await asyncio.gather(*(one(n) for n in orders))
    finally:
        db.close()


def demo_ledger(
    db_url: str, send_url: str, lookup_url: str, pause: float = 0.0, prepare: float = 0.0
) -> tuple[Ledger, HttpChannel]:
    """The demo's ledger: one HTTP channel that verifies through the provider's lookup.
    With `prepare` and `pause`, the channel waits before the call and after the reply."""
    ledger = Ledger(db_url)
    http = HttpChannel(send_url, lookup_url=lookup_url, timeout=10.0)
    if pause <= 0 and prepare <= 0:
        ledger.channel(CHANNEL, verify=http.verify, lease=LEASE)(http.send)
        return ledger, http

    async def send(sub: Submission) -> str | None:
        # A kill here: the row is `requesting` and the call never left.
        await asyncio.sleep(pause_for(sub.payload["order_id"], prepare, "prepare"))
        remote_id = await http.send(sub)
        # A kill here: sent, and the row stays `requesting` until its lease runs out.
        await asyncio.sleep(pause_for(sub.payload["order_id"], pause, "record"))
        return remote_id

    ledger.channel(CHANNEL, verify=http.verify, lease=LEASE)(send)
    return ledger, http


async def send_denpyo(ledger: Ledger, orders: Iterable[int], concurrency: int) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(order_id: int) -> None:
        async with gate:
            await ledger.asubmit(CHANNEL, order_key(order_id), invoice(order_id))

    await asyncio.gather(*(one(n) for n in orders))
