"""The engine's flows, written once for synchronous and asynchronous callers.

Each flow is a generator that yields *effects* (a store operation, a call to
the provider, a verify) and receives their results; a driver (`drivers.py`)
performs them, blocking or awaiting. So `submit` and `asubmit`, the worker
and `reconcile`, all run the same decisions in the same order.

What a crash leaves behind is noted at each effect: the row is always
committed before the call leaves, so a crash between `Call` and `Settle` leaves
a `requesting` row whose lease runs out, which the reconciler verifies.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from denpyo.domain.lease import Lease
from denpyo.domain.limits import check_same_payload
from denpyo.domain.moves import Move
from denpyo.domain.policy import Alarm, Next, decide_in_doubt, resend_in_window, settle
from denpyo.domain.status import FINAL, ErrorKind, Status
from denpyo.domain.submission import Submission
from denpyo.domain.verdict import Verdict
from denpyo.engine.alerts import Alerts
from denpyo.engine.channel import ChannelSpec
from denpyo.engine.observers import CallObservers
from denpyo.errors import LeaseExpired
from denpyo.store import NewSubmission, Store

log = logging.getLogger("denpyo.engine")


@dataclass(frozen=True, slots=True)
class StoreOp:
    """Run a store method; the flow receives its return value."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Settle:
    """Apply moves in one transaction (a worker may group several flows' moves
    into one commit); the flow receives one Submission or None per move."""

    moves: Sequence[Move]


@dataclass(frozen=True, slots=True)
class Call:
    """Perform the provider call; the flow receives a CallResult."""

    spec: ChannelSpec
    submission: Submission


@dataclass(frozen=True, slots=True)
class Check:
    """Ask the channel's verify; the flow receives a Verdict (never an exception)."""

    spec: ChannelSpec
    submission: Submission


@dataclass(frozen=True, slots=True)
class CallResult:
    value: Any = None
    error: BaseException | None = None
    duration_ms: int = 0


Effect = StoreOp | Settle | Call | Check
Flow = Generator[Effect, Any, Submission]


class Flows:
    """The decisions of the engine for one ledger and one actor (a process or worker)."""

    def __init__(
        self, store: Store, alerts: Alerts, actor: str, calls: CallObservers | None = None
    ) -> None:
        self.store = store
        self.alerts = alerts
        self.actor = actor
        self.calls = calls or CallObservers()
        self._holds = itertools.count(1)

    def hold(self) -> str:
        """A fresh lock token. Every hold of a row is unique, so a sender whose
        lease ran out can never settle a row that someone has since taken, even
        within the same process."""
        return f"{self.actor}/{next(self._holds)}"

    def submit(self, spec: ChannelSpec, new: NewSubmission) -> Flow:
        """Record, then call, then settle. The row is committed before the call."""
        since = time.monotonic()  # before the lease starts by the database's clock
        sub, created = yield StoreOp(
            self.store.record, (new,), {"actor": self.hold(), "lease": spec.lease}
        )
        if created:
            held = sub.held(Lease(spec.lease, since))
            if (yield from self._waits_in_order(sub)):
                return (yield from self._give_back(held, "waits for the rows before it"))
            return (yield from self.attempt(spec, held))
        check_same_payload(new.channel, new.key, sub.payload, new.payload_json)
        after: Submission = yield from self.resume(spec, sub)
        if after.resolution is not None:  # a person resolved it while this submit read it
            return (yield from self._successor(after))
        return after

    def resume(self, spec: ChannelSpec, sub: Submission) -> Flow:
        """Submit of a channel and key that already exist: never a second call while
        the row is settled or in flight, nor once a person resolved it (the row that
        supersedes it, if a person resent it, is returned instead); a failed row is
        retried under its key; an in-doubt row is verified first."""
        if sub.resolution is not None:
            return (yield from self._successor(sub))
        if sub.status in FINAL or sub.in_flight:
            return sub
        if sub.in_doubt:
            held = yield from self._settle(Move.hold_to_verify(sub, self.hold(), spec.lease))
            if held is None:
                return (yield from self._reread(sub))
            return (yield from self.settle_in_doubt(spec, held))
        if sub.status is Status.FAILED and sub.error_kind is not ErrorKind.TRANSIENT:
            return sub
        if (yield from self._waits_in_order(sub)):
            return sub  # a worker retries it in its turn
        held = yield from self._settle(self._start(spec, sub, "resubmitted"))
        if held is None:
            return (yield from self._reread(sub))
        return (yield from self.attempt(spec, held))

    def attempt(self, spec: ChannelSpec, sub: Submission) -> Flow:
        """Call the provider for a row this actor holds, and record the outcome."""
        # A crash during the call leaves the row `requesting` under this lease.
        result: CallResult = yield Call(spec, sub)
        if isinstance(result.error, LeaseExpired):
            return (yield from self._give_back(sub, f"not sent: {result.error}"))
        outcome = spec.outcome(result.value, result.error)
        self.calls.called(spec.name, outcome.kind, result.duration_ms)
        decided = settle(sub.attempts, outcome, spec.policy)
        after = yield from self._settle(Move.settle(sub, self.actor, decided, result.duration_ms))
        if after is None:
            log.warning(
                "lease lost on %s:%s (id %s): another process took the row while it was "
                "being sent; its outcome (%s) is in this log only",
                sub.channel, sub.key, sub.id, outcome.kind.value,
            )  # fmt: skip
            return (yield from self._reread(sub))
        self._alarm(decided.alert, after)
        return after

    def settle_in_doubt(self, spec: ChannelSpec, sub: Submission) -> Flow:
        """Decide a row this actor holds for verification: synced, resent, or held."""
        verdict: Verdict | None = None
        if spec.verify is not None:
            verdict = yield Check(spec, sub)
        window_closed = False
        if verdict is None and spec.idempotent and spec.idempotency_window is not None:
            first, now = yield StoreOp(self.store.first_attempt_at, (sub.id,))
            window_closed = not resend_in_window(first, now, spec.idempotency_window, spec.lease)
        decision = decide_in_doubt(sub.attempts, verdict, spec.policy, window_closed=window_closed)
        if decision.next is Next.RESEND:
            # Never arrived (or the provider dedups): the same key goes out again.
            held = yield from self._settle(
                self._start(spec, sub, decision.note, expect=sub.locked_by)
            )
            if held is None:
                return (yield from self._reread(sub))
            return (yield from self.attempt(spec, held))
        if decision.next is Next.MARK_SYNCED:
            move = Move.verified_delivered(sub, self.actor, decision.remote_id, decision.note)
        elif decision.next is Next.GIVE_UP:
            kind = ErrorKind.TRANSIENT if verdict is not None else ErrorKind.AMBIGUOUS
            move = Move.verified_given_up(sub, self.actor, kind, decision.note)
        else:  # RECHECK later, or HOLD for a person; the row stays in doubt
            move = Move.still_in_doubt(sub, self.actor, decision.retry_in, decision.note)
        after = yield from self._settle(move)
        if after is None:
            return (yield from self._reread(sub))
        self._alarm(decision.alert, after)
        return after

    def _waits_in_order(self, sub: Submission) -> Generator[Effect, Any, bool]:
        """Whether an earlier row of its ordering key is open (no read without a key)."""
        if sub.ordering_key is None:
            return False
        waits: bool = yield StoreOp(self.store.ordering_waits, (sub,))
        return waits

    def _give_back(self, sub: Submission, detail: str) -> Flow:
        """A row this actor holds and will not send: unsent, due again at once (a row
        behind an open one of its ordering key, for the worker's claim, which sends
        them in order). If another sender took it meanwhile, the compare-and-set loses
        and the row is theirs."""
        released = yield from self._settle(Move.release(sub.id, sub.locked_by or "", detail))
        return released or (yield from self._reread(sub))

    def _start(
        self, spec: ChannelSpec, sub: Submission, note: str, expect: str | None = None
    ) -> Move:
        """Begin the next attempt on a row: `requesting`, held, attempts + 1."""
        return Move.start_attempt(sub, self.hold(), spec.lease, note, expect)

    def _settle(self, move: Move) -> Generator[Effect, Any, Submission | None]:
        """Apply one move. A row it holds (`lease` > 0) carries this process's own
        deadline for starting its call, counted from before the move was sent."""
        since = time.monotonic()
        settled: list[Submission | None] = yield Settle([move])
        after = settled[0]
        if after is None or not move.lease:
            return after
        lease = move.row.lease if move.row is not None else None
        if lease is None:
            return after.held(Lease(move.lease, since))
        lease.renewed(since)
        return after.held(lease)

    def _successor(self, sub: Submission) -> Flow:
        """The newest row in the chain of resends of a resolved row, else the row."""
        for _ in range(100):  # a chain of resends is short; never loop for ever
            newer: Submission | None = yield StoreOp(self.store.find_superseding, (sub.id,))
            if newer is None:
                break
            sub = newer
        return sub

    def _reread(self, sub: Submission) -> Flow:
        current: Submission | None = yield StoreOp(self.store.get, (sub.id,))
        return current if current is not None else sub

    def _alarm(self, alarm: Alarm | None, sub: Submission) -> None:
        if alarm is not None:
            self.alerts.raise_alert(alarm.reason, alarm.message, sub)
