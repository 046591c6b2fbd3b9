"""Lease renewal: while a call runs, a heartbeat renews the lease of every row the
worker holds, so a long call is never mistaken for a dead sender.

A renewal that fails extends no deadline: each hold keeps this process's own
deadline (`domain/lease.py`), and a call past it never starts. The outage is logged
once, alerted past a third of the shortest lease, and over when a renewal works again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from denpyo.domain.lease import Lease
from denpyo.domain.settings import DEFAULT_LEASE
from denpyo.domain.status import Status
from denpyo.engine.runners import AsyncRunner

if TYPE_CHECKING:
    from denpyo.engine.ledger import Ledger

log = logging.getLogger("denpyo.worker")


@dataclass(slots=True, eq=False)
class HeldRow:
    """A row this worker holds: its holder (a new one when a flow starts a new
    attempt), this process's deadline for starting its call, and, while it is only
    being verified, the status it is held in (a row in doubt must never be given
    back as if it had not been sent). One object per claim: compared by identity."""

    holder: str
    lease: Lease
    verifying: Status | None = None


class Renewal:
    """Renews the leases of the rows in `held` (the worker's own dict, shared) and
    keeps the store tidy (`Store.upkeep`) at the same pace."""

    def __init__(self, ledger: Ledger, held: dict[int, HeldRow], runner: AsyncRunner) -> None:
        self.ledger = ledger
        self.held = held
        self.runner = runner  # the worker's, replaced once its store is open
        self.renewed_at = time.monotonic()  # the last round of renewals that worked
        self.renewing = asyncio.Lock()  # one round at a time: heartbeat, or after a stall
        self.failing_since: float | None = None  # monotonic, while renewals fail
        self.alerted = False

    def shortest_lease(self) -> float:
        return min([spec.lease for spec in self.ledger.channels.values()] or [DEFAULT_LEASE])

    async def heartbeat(self) -> None:
        """Renew every third of the shortest lease. Rows whose deadline passed (the
        process stalled, or renewals failed) are given back unsent by their flows
        (`Lease.begin`)."""
        while True:
            await asyncio.sleep(self.shortest_lease() / 3)
            await self.renew()

    async def revalidate(self) -> None:
        """After a stall (renewals late by half a beat), renew before looking for rows
        in doubt: a call of this worker's own that was running through the stall must
        not be found in doubt and verified, or resent, while it is still on the wire."""
        if self.held and time.monotonic() - self.renewed_at > self.shortest_lease() / 2:
            await self.renew()

    async def renew(self) -> None:
        """One round of renewals."""
        async with self.renewing:
            await self._round()

    async def _round(self) -> None:
        shortest = self.shortest_lease()
        # Holders as sent: a hold that starts a new attempt meanwhile is not this renewal's.
        held = [(row_id, hold, hold.holder) for row_id, hold in self.held.items()]
        since = time.monotonic()
        try:
            if held:
                rows = [(row_id, holder, hold.lease.seconds) for row_id, hold, holder in held]
                renewed = await self.runner.in_db(self.ledger.store.renew, rows)
                for row_id, hold, holder in held:
                    if row_id in renewed and hold.holder == holder:
                        hold.lease.renewed(since)
            await self.runner.in_db(self.ledger.store.upkeep)
        except Exception as exc:
            self._failed(exc, since, shortest)
        else:
            self.renewed_at = since
            if self.failing_since is not None:
                log.warning("lease renewal works again after %.1fs", since - self.failing_since)
                self.failing_since = None

    def _failed(self, exc: Exception, since: float, shortest: float) -> None:
        if self.failing_since is None:
            self.failing_since = since
            self.alerted = False
            log.error(
                "lease renewal failed (%s); no call starts past its lease until it works again",
                exc,
                exc_info=exc,
            )
        elif not self.alerted and since - self.failing_since > shortest / 3:
            self.alerted = True
            self.ledger.alerts.raise_alert(
                "renewal_failing",
                f"this worker has not renewed its leases for "
                f"{since - self.failing_since:.1f}s ({exc}); its held rows "
                "will be given back or verified",
                None,
            )
