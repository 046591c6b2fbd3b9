"""The two senders of the demo, run as child processes that the demo kills with SIGKILL.

``python -m denpyo.demo naive|denpyo --send-url URL --db PATH ...`` (see `__main__`)

Both send the same invoice emails to a fake provider over HTTP with the
standard library (nothing to install), from `concurrency` threads. Both take a
moment to prepare each email (render the invoice) before the call, and a moment
after the provider's answer before writing it down (a receipt, a log line): a
kill in that second pause lands "after the provider accepted, before the
database recorded"; a kill in the first, before the call left. Both pauses vary
per order, so the calls drift apart.

- naive: the usual code. Prepare, call, then ``INSERT INTO invoice_emails``.
- denpyo: `Ledger.submit`: the row is committed `requesting`, then the channel
  prepares, calls and returns the provider's id, and the row is settled. The
  channel and its verify are written as docs/guide/using.md tells you to write your own.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

import denpyo

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


def in_threads(concurrency: int, job: Callable[[int], object], orders: Iterable[int]) -> None:
    """`job` for each order, `concurrency` at a time; the first error is raised."""
    with ThreadPoolExecutor(concurrency) as pool:
        for _ in pool.map(job, orders):
            pass


def send_naive(
    send_url: str,
    db_path: str,
    orders: Iterable[int],
    concurrency: int,
    pause: float = 0.0,
    prepare: float = 0.0,
) -> None:
    """The usual `send_invoice_email`, for many orders at once: call, then INSERT."""
    db = sqlite3.connect(db_path, isolation_level=None, timeout=30, check_same_thread=False)
    db_lock = threading.Lock()  # one connection, shared by the threads

    def one(order_id: int) -> None:
        time.sleep(pause_for(order_id, prepare, "prepare"))
        request = urllib.request.Request(
            send_url,
            data=json.dumps(invoice(order_id)).encode(),
            headers={"Content-Type": "application/json", "Idempotency-Key": f"invoice-{order_id}"},
        )
        with urllib.request.urlopen(request, timeout=10) as reply:  # raises unless 2xx
            remote_id = json.loads(reply.read())["id"]
        # A kill here: sent, and the table never knows.
        time.sleep(pause_for(order_id, pause, "record"))
        with db_lock:
            db.execute(
                "INSERT INTO invoice_emails (order_id, remote_id) VALUES (?, ?)",
                (order_id, remote_id),
            )

    try:
        in_threads(concurrency, one, orders)
    finally:
        db.close()


def post_invoice(send_url: str, sub: denpyo.Submission) -> str:
    """The call, as a channel of your own makes it: the idempotency key in its
    header; 2xx the provider's id; 408, 429 and 5xx `Transient`; another 4xx
    `Rejected`; anything after the request may have left raises as it is, so the
    row is in doubt and verified before any resend."""
    request = urllib.request.Request(
        send_url,
        data=json.dumps(sub.payload).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": sub.idempotency_key},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            remote_id: str = json.loads(reply.read())["id"]
            return remote_id
    except urllib.error.HTTPError as exc:
        if exc.code in (408, 429) or exc.code >= 500:
            retry_after = float(exc.headers.get("Retry-After") or 0) or None
            raise denpyo.Transient(f"HTTP {exc.code}", retry_after=retry_after) from exc
        raise denpyo.Rejected(exc.read().decode(errors="replace")) from exc
    except urllib.error.URLError as exc:  # failed connecting or writing: it never fully left
        raise denpyo.Transient(str(exc.reason)) from exc


def look_up_invoice(lookup_url: str, sub: denpyo.Submission) -> denpyo.Verdict:
    """The verify: did the provider get the call with this key?"""
    url = lookup_url.replace("{idempotency_key}", quote(sub.idempotency_key, safe=""))
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return denpyo.Delivered(json.loads(reply.read())["id"])
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return denpyo.NotDelivered()
        return denpyo.Unknown(f"lookup answered {exc.code}")


def demo_ledger(
    db_url: str, send_url: str, lookup_url: str, pause: float = 0.0, prepare: float = 0.0
) -> denpyo.Ledger:
    """The demo's ledger: one HTTP channel that verifies through the provider's lookup.
    With `prepare` and `pause`, the channel waits before the call and after the reply."""
    ledger = denpyo.Ledger(db_url)

    def verify(sub: denpyo.Submission) -> denpyo.Verdict:
        return look_up_invoice(lookup_url, sub)

    @ledger.channel(CHANNEL, verify=verify, lease=LEASE)
    def send(sub: denpyo.Submission) -> str:
        # A kill here: the row is `requesting` and the call never left.
        time.sleep(pause_for(sub.payload["order_id"], prepare, "prepare"))
        remote_id = post_invoice(send_url, sub)
        # A kill here: sent, and the row stays `requesting` until its lease runs out.
        time.sleep(pause_for(sub.payload["order_id"], pause, "record"))
        return remote_id

    return ledger


def send_denpyo(ledger: denpyo.Ledger, orders: Iterable[int], concurrency: int) -> None:
    def one(order_id: int) -> None:
        ledger.submit(CHANNEL, order_key(order_id), invoice(order_id))

    in_threads(concurrency, one, orders)
