"""Running the engine for a person: one reconcile pass with progress, an audit
against the provider, and the long-running worker that stops cleanly on SIGINT
or SIGTERM.

Both run the `Worker` on the ledger's private event loop (where async channels
keep their sessions, closed by `Ledger.close`), while the calling thread waits,
reports progress and receives signals.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import FrameType
from typing import TYPE_CHECKING

from denpyo.domain.audit import AuditReport
from denpyo.domain.filters import parse_when
from denpyo.domain.settings import DEFAULT_CONCURRENCY, DEFAULT_GRACE, DEFAULT_POLL_INTERVAL
from denpyo.engine.audit import Progress
from denpyo.engine.worker import Worker, WorkReport
from denpyo.errors import ConfigurationError

if TYPE_CHECKING:
    from denpyo.engine.ledger import Ledger


@dataclass(frozen=True, slots=True)
class ReconcileSummary:
    """What one reconcile pass did. `due`: in-doubt rows due when it began (on the
    ledger's channels); `checked`: rows it took; then how they ended (`synced`:
    verify found the call, or it was resent and accepted; `requesting`: still in
    doubt, waiting for a recheck or a person); `in_doubt_after`: rows in doubt
    after the pass, on every channel."""

    due: int
    checked: int
    synced: int
    failed: int
    rejected: int
    requesting: int
    errors: int
    in_doubt_after: int

    def to_json(self) -> dict[str, int]:
        return {
            "due": self.due,
            "checked": self.checked,
            "synced": self.synced,
            "failed": self.failed,
            "rejected": self.rejected,
            "requesting": self.requesting,
            "errors": self.errors,
            "in_doubt_after": self.in_doubt_after,
        }


def require_channels(ledger: Ledger, what: str) -> None:
    """ConfigurationError unless the ledger has channels (loaded with --app)."""
    if not ledger.channels:
        raise ConfigurationError(
            f"{what} needs the application's channels (the code that calls the provider): "
            "load them with --app module:attr"
        )


def reconcile(ledger: Ledger, progress: Progress | None = None) -> ReconcileSummary:
    """One pass over the in-doubt rows that are due: verify, sync, resend or leave for a person."""
    require_channels(ledger, "reconcile")
    due = sum(ledger.store.count_in_doubt_due(name) for name in ledger.channels)

    def tick(report: WorkReport) -> None:
        if progress is not None:
            progress(report.verified.total(), max(due, report.reconciled))

    report = ledger.reconcile(progress=tick)
    tick(report)
    return ReconcileSummary(
        due=due,
        checked=report.reconciled,
        synced=report.verified["synced"],
        failed=report.verified["failed"],
        rejected=report.verified["rejected"],
        requesting=report.verified["requesting"],
        errors=report.errors,
        in_doubt_after=int(ledger.store.count_attention()["in_doubt"]),
    )


def audit(
    ledger: Ledger,
    channel: str,
    *,
    since: str | None = None,
    until: str | None = None,
    progress: Progress | None = None,
    adopt: bool = False,
) -> AuditReport:
    """The ledger against the provider's own records for a window a person typed
    (``24h``, ``2024-05-01``; relative to the database clock): by default the 24 hours
    before `until`, which defaults to now. `progress(steps_done, steps)`; `adopt`:
    record the calls the ledger lost (`Ledger.audit`)."""
    require_channels(ledger, "audit")
    now = ledger.now()
    end = now if until is None else parse_when(until, now)
    start = end - timedelta(days=1) if since is None else parse_when(since, now)
    return ledger.audit(channel, since=start, until=end, progress=progress, adopt=adopt)


def serve(
    ledger: Ledger,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    grace: float = DEFAULT_GRACE,
    signals: Sequence[signal.Signals] = (signal.SIGINT, signal.SIGTERM),
) -> WorkReport:
    """Run the worker until one of `signals` arrives; then stop claiming, give back
    the rows claimed but not started, let the calls in flight finish for `grace`
    seconds, and return. Call from the main thread.

    A call still running when the process dies anyway keeps its row `requesting`
    under its lease; the lease runs out and the reconciler verifies it.
    """
    require_channels(ledger, "the worker")
    worker = Worker(ledger, concurrency=concurrency, poll_interval=poll_interval, grace=grace)
    loop = ledger.bridge.loop

    def stop(signum: int, frame: FrameType | None) -> None:
        loop.call_soon_threadsafe(worker.stop)

    previous = {sig: signal.signal(sig, stop) for sig in signals}
    try:
        return ledger.bridge.wait(worker.run(), worker.stop, lambda: None)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
