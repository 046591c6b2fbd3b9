"""denpyo with a call that does nothing: the ledger's own cost, alone.

The same worker, rows and settings as the `denpyo` peer (a channel with a lookup),
but the channel returns an id at once instead of POSTing. Not a peer to compare
with: it shows what the ledger costs per job (claim, settle, events, bookkeeping)
and how fast it goes when the call is free, so that the report can split denpyo's
time per job into the call (as fire-and-forget pays it) and the ledger.
"""

from __future__ import annotations

from typing import Any

from common import Ctx

import denpyo
from peers import denpyo_peer

NAME = "denpyo, no call"
DURABLE = True
CALLS = False  # the provider sees nothing: the harness checks the database only

setup = denpyo_peer.setup
enqueue = denpyo_peer.enqueue
done = denpyo_peer.done


async def no_call(sub: denpyo.Submission) -> str:
    return f"local-{sub.id}"


async def no_lookup(sub: denpyo.Submission) -> denpyo.Delivered:
    """The call above always lands: a row in doubt was delivered. Registered, as the
    `denpyo` peer registers its lookup, so that the worker claims as far ahead."""
    return denpyo.Delivered(f"local-{sub.id}")


def ledger_for(ctx: Ctx) -> denpyo.Ledger:
    ledger = denpyo.Ledger(ctx.db_url)
    ledger.add_channel(denpyo_peer.CHANNEL, no_call, verify=no_lookup)
    return ledger


async def dispatch(ctx: Ctx, n: int, concurrency: int) -> dict[str, Any]:
    ledger = ledger_for(ctx)
    try:
        report = await ledger.awork(until_idle=True, concurrency=concurrency, poll_interval=0.05)
    finally:
        ledger.close()
    return {"attempted": report.attempted, "outcomes": dict(report.outcomes)}
