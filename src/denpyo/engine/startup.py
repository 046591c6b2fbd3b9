"""What a worker says and does once, as it starts: who holds which rows now, whether
a commit acknowledged to it could be lost, and the rows that waited for a payload key
it has. Each is only a head start or a message: a failure is logged and the worker
runs on (its claims will say more if the trouble lasts)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from denpyo.domain.holders import actor_of, by_actor
from denpyo.domain.sealed import waiting_for_key
from denpyo.domain.text import visible
from denpyo.engine.holders import holder_gone
from denpyo.engine.runners import AsyncRunner

if TYPE_CHECKING:
    from denpyo.engine.ledger import Ledger

log = logging.getLogger("denpyo.worker")


async def tell_holdings(ledger: Ledger, runner: AsyncRunner) -> None:
    """Say which rows of the ledger's channels others hold: after a crash, the dead
    worker's rows wait for their leases to end before they are in doubt and verified."""
    try:
        found = await runner.in_db(ledger.store.holdings, None)
    except Exception as exc:
        log.warning("cannot read which rows are held now: %s", exc)
        return
    for held in by_actor(found):
        if held.channel not in ledger.channels:
            continue
        gone = " (its process is gone)" if holder_gone(held.holder) else ""
        log.info(
            "%d rows of %s held by %s%s; their leases end in %.0f s at the latest, "
            "then they are in doubt and verified",
            held.rows,
            held.channel,
            visible(actor_of(held.holder)),
            gone,
            max(held.ends_in[1], 0.0),
        )


async def due_for_keys(ledger: Ledger, runner: AsyncRunner) -> None:
    """Send at once the rows of the ledger's channels that were given back for want
    of a payload key it has: they are looked at less and less often (up to once a
    day), and whoever configured the key again and restarted the workers should not
    wait for their next look."""
    kids = ledger.store.sealing.kids()
    if not kids:
        return
    prefixes = [waiting_for_key(kid) for kid in kids]
    for spec in list(ledger.channels.values()):
        try:
            woken = await runner.in_db(ledger.store.due_for_keys, spec.name, prefixes)
        except Exception as exc:  # their next look sends them
            log.warning("cannot look for rows waiting for a payload key: %s", exc)
            return
        if woken:
            log.info(
                "%d rows of %s waited for a payload key this worker has: sent now",
                woken,
                spec.name,
            )


async def check_durability(ledger: Ledger, runner: AsyncRunner) -> None:
    """Say when a commit acknowledged to the worker could still be lost with the
    database server (an asynchronous standby, synchronous_commit off): a failover
    could then forget a slip whose call was made. A warning and a
    `durability_at_risk` alert; the worker runs on (`denpyo status` says it too)."""
    try:
        durability = await runner.in_db(ledger.store.durability)
    except Exception as exc:
        log.warning("cannot read the database's replication settings: %s", exc)
        return
    if durability is not None and durability.risk is not None:
        ledger.alerts.raise_alert("durability_at_risk", durability.risk, None)
