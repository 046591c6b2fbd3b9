"""The engine's flows, written once for synchronous and asynchronous callers.

Each flow is a generator that yields *effects* (a store operation, a call to
the provider, a verify) and receives their results; a runner (`runners.py`)
performs them, blocking or awaiting. So `submit` and `asubmit`, the worker
and `reconcile`, all run the same decisions in the same order.

What a crash leaves behind is noted at each effect: the row is always
committed before the call leaves, so a crash between `Call` and `Apply` leaves
a `requesting` row whose lease runs out, which the reconciler verifies.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from denpyo.domain.alert import Alert
from denpyo.domain.doubt import DoubtHistory
from denpyo.domain.forgetting import Scrubber
from denpyo.domain.lease import Lease
from denpyo.domain.limits import check_same_call
from denpyo.domain.moves import Change, Move, Settle
from denpyo.domain.policy import (
    AttemptDecision,
    DoubtDecision,
    Next,
    Outcome,
    OutcomeKind,
    decide_attempt,
    decide_in_doubt,
    resend_in_window,
)
from denpyo.domain.sealed import NOT_SENT, QUOTED, SealedPayload, unreadable_retry_in
from denpyo.domain.settings import DEFAULT_POLL_INTERVAL
from denpyo.domain.status import FINAL, ErrorKind, Status
from denpyo.domain.submission import Event, Submission
from denpyo.domain.text import age, visible
from denpyo.domain.verdict import Delivered, NotDelivered, Verdict
from denpyo.engine import tracing
from denpyo.engine.alerts import Alerts
from denpyo.engine.channel import ChannelSpec
from denpyo.engine.gates import NO_NEWS, Gates
from denpyo.engine.observers import CallObservers
from denpyo.engine.tracing import NO_SPAN, RowSpan
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
class Apply:
    """Apply changes (moves, settles) in one transaction (a worker may group several
    flows' changes into one commit); the flow receives one Submission or None per
    change."""

    changes: Sequence[Change]


@dataclass(frozen=True, slots=True)
class Call:
    """Perform the provider call; the flow receives a CallResult. `span`: the attempt's,
    current while the channel's send runs."""

    spec: ChannelSpec
    submission: Submission
    span: RowSpan = NO_SPAN


@dataclass(frozen=True, slots=True)
class Check:
    """Ask the channel's verify; the flow receives a Verdict (never an exception).
    `span`: the verify's, current while the channel's verify runs."""

    spec: ChannelSpec
    submission: Submission
    span: RowSpan = NO_SPAN


@dataclass(frozen=True, slots=True)
class CallResult:
    value: Any = None
    error: BaseException | None = None
    duration_ms: int = 0


class CallCut(Exception):
    """The worker stopped while the call was on the wire, its grace over: the call
    started and may have arrived. Its attempt is counted and its row left in doubt
    (an ambiguous failure), to be verified; never classified by the channel, and
    never the provider's failure."""


Effect = StoreOp | Apply | Call | Check
Flow = Generator[Effect, Any, Submission]


@dataclass(frozen=True, slots=True)
class Done:
    """A flow has ended; `value` is what it returned (its row as it ended)."""

    value: Any


def step(
    flow: Generator[Effect, Any, Any], value: Any = None, error: BaseException | None = None
) -> Effect | Done:
    """Advance a flow to its next effect: send it the last effect's result, or throw
    the error the effect raised into it. Every runner, the worker's too, steps flows
    by this one function."""
    try:
        return flow.throw(error) if error is not None else flow.send(value)
    except StopIteration as stop:
        return Done(stop.value)


class Flows:
    """The decisions of the engine for one ledger and one actor (a process or worker)."""

    def __init__(
        self,
        store: Store,
        alerts: Alerts,
        actor: str,
        calls: CallObservers | None = None,
        gates: Gates | None = None,
        *,
        inline: bool = True,
    ) -> None:
        self.store = store
        self.alerts = alerts
        self.actor = actor
        # Payloads encrypted at rest: a provider's error must not give their values back.
        sealing = getattr(store, "sealing", None)  # (a store without it keeps them in clear)
        self.seals = sealing is not None and sealing.codec is not None
        # Calls made in the caller's request (`submit`): their spans are children of
        # the caller's current span; a worker's, of the context the row kept.
        self.inline = inline
        self.calls = calls or CallObservers()
        self.gates = gates or Gates(store, alerts, actor)
        self._holds = itertools.count(1)

    def new_holder(self) -> str:
        """A fresh holder for a row (written to `locked_by`). Every hold of a row is
        unique, so a sender whose lease ran out can never settle a row that someone
        has since taken, even within the same process."""
        return f"{self.actor}/{next(self._holds)}"

    def submit(self, spec: ChannelSpec, new: NewSubmission) -> Flow:
        """Record, then call, then settle. The row is committed before the call. A
        channel that is paused, throttled, down or limited fleet-wide is sent by the
        workers only: its row is recorded for them."""
        why = yield from self._left_to_workers(spec)
        since = time.monotonic()  # before the lease starts by the database's clock
        sub: Submission
        created: bool
        sub, created = yield StoreOp(
            self.store.record,
            (new,),
            {"actor": self.new_holder(), "lease": None if why is not None else spec.lease},
        )
        if created and why is not None:
            log.info(
                "%s:%s recorded for a worker to send: %s",
                visible(sub.channel),
                visible(sub.key),
                why,
            )
            return sub
        if created:
            held = sub.held(Lease(spec.lease, since))
            if (yield from self._waits_in_order(sub)):
                return (yield from self._give_back(held, "waits for the rows before it"))
            return (yield from self.attempt(spec, held))
        check_same_call(sub, new.payload_json)
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
        if sub.status in FINAL or sub.in_flight or sub.forgotten_at is not None:
            return sub  # (a forgotten row's payload is gone: it is never sent again)
        if (yield from self._left_to_workers(spec)) is not None:
            return sub
        if sub.in_doubt:
            held = yield from self._apply(Move.take_to_verify(sub, self.new_holder(), spec.lease))
            if held is None:
                return (yield from self._reread(sub))
            return (yield from self.reconcile(spec, held))
        if sub.status is Status.FAILED and sub.error_kind is not ErrorKind.TRANSIENT:
            return sub
        if (yield from self._waits_in_order(sub)):
            return sub  # a worker retries it in its turn
        held = yield from self._apply(self._start(spec, sub, "resubmitted"))
        if held is None:
            return (yield from self._reread(sub))
        return (yield from self.attempt(spec, held))

    def attempt(self, spec: ChannelSpec, sub: Submission) -> Flow:
        """Call the provider for a row this actor holds, and record the outcome. Its
        span (engine/tracing.py) is told the outcome, and ends however the flow ends."""
        if isinstance(sub.payload, SealedPayload):  # no key here opens it: never sent
            return (yield from self._give_back_unreadable(sub))
        span = tracing.attempt_span(
            spec.name, sub, inline=self.inline, told=lambda text: self.told(text, sub)
        )
        try:
            # A crash during the call leaves the row `requesting` under this lease.
            result: CallResult = yield Call(spec, sub, span)
            if isinstance(result.error, LeaseExpired):
                span.not_sent(str(result.error))
                return (yield from self._give_back(sub, f"not sent: {result.error}"))
            cut = isinstance(result.error, CallCut)  # by the worker's stop: not the provider
            if cut:
                outcome = Outcome(OutcomeKind.AMBIGUOUS, error=str(result.error))
            else:
                outcome = spec.outcome(result.value, result.error)
            self.calls.called(spec.name, outcome.kind, result.duration_ms)
            seen = NO_NEWS
            if not cut:
                # the channel's state outlives the row: its note keeps no hidden value
                said = None if outcome.error is None else self.told(outcome.error, sub)
                seen = self.gates.seen(spec, replace(outcome, error=said))
                if seen.news:  # the provider asked to wait, or is down, or is up again
                    yield StoreOp(self.gates.tell, (spec.name, seen))
            # The call started: its settle counts it, as the row's next attempt, unless
            # the provider is down (then it is the provider's failure, not the row's).
            attempt = sub.attempts + 1 if seen.counted else max(sub.attempts, 1)
            decided = self._unquoted(decide_attempt(attempt, outcome, spec.policy), sub)
            settle = Settle.of(sub, self.actor, decided, result.duration_ms)
            after = yield from self._apply(settle if seen.counted else settle.uncounted())
            span.attempted(attempt, decided, after, result.error)
            if after is None:
                with span.current():  # the line carries the attempt's trace
                    log.warning(
                        "lease lost on %s:%s (id %s): another process took the row while it "
                        "was being sent; its outcome (%s) is in this log only",
                        visible(sub.channel),
                        visible(sub.key),
                        sub.id,
                        outcome.kind.value,
                    )
                return (yield from self._reread(sub))
            self._alert(decided.alert, after, span)
            return after
        except Exception as exc:
            span.failed(exc)
            raise
        finally:
            span.end()

    def reconcile(self, spec: ChannelSpec, sub: Submission) -> Flow:
        """Decide a row this actor holds for verification: synced, resent, or held (one
        history line and one alert per state, however often it is asked). Its span is
        told the verdict and the decision, and ends however the flow ends."""
        asks = spec.verify is not None
        span = tracing.verify_span(
            spec.name, sub, inline=self.inline, asks=asks, told=lambda text: self.told(text, sub)
        )
        try:
            verdict: Verdict | None = None
            if spec.verify is not None:
                verdict = yield Check(spec, sub, span)
                if isinstance(verdict, Delivered | NotDelivered):  # the provider answers again
                    seen = self.gates.answered(spec, type(verdict).__name__)
                    if seen.news:
                        yield StoreOp(self.gates.tell, (spec.name, seen))
            events, now = yield StoreOp(self.store.history, (sub.id,))
            history = DoubtHistory.of(sub, events, now)
            window_closed = (
                verdict is None
                and spec.idempotent
                and spec.idempotency_window is not None
                and not resend_in_window(
                    history.first_attempt_at, now, spec.idempotency_window, spec.lease
                )
            )
            decision = self._unquoted_doubt(
                decide_in_doubt(
                    history.tries,
                    verdict,
                    spec.policy,
                    window_closed=window_closed,
                    in_doubt_for=history.in_doubt_for,
                ),
                sub,
            )
            span.verified(verdict, decision)
            if decision.next is Next.RESEND:
                # Never arrived (or the provider dedups): the same key goes out again.
                held = yield from self._apply(
                    self._start(spec, sub, decision.note, holder=sub.locked_by)
                )
                if held is None:
                    return (yield from self._reread(sub))
                return (yield from self.attempt(spec, held))
            if decision.next is Next.MARK_SYNCED:
                move = Move.verified_delivered(sub, self.actor, decision.remote_id, decision.note)
            elif decision.next is Next.GIVE_UP:
                kind = ErrorKind.TRANSIENT if verdict is not None else ErrorKind.AMBIGUOUS
                move = Move.verified_given_up(sub, self.actor, kind, decision.note)
            else:  # RECHECK later, or ASK_PERSON; the row stays in doubt
                move = Move.still_in_doubt(
                    sub, self.actor, decision.retry_in, decision.note, again=decision.again
                )
            after = yield from self._apply(move)
            if after is None:
                return (yield from self._reread(sub))
            self._alert(decision.alert, after, span)
            return after
        except Exception as exc:
            span.failed(exc)
            raise
        finally:
            span.end()

    def _left_to_workers(self, spec: ChannelSpec) -> Generator[Effect, Any, str | None]:
        """Why an inline submit leaves the call to the workers (None: it makes it):
        the channel is not running, or its limits hold for the fleet, which only the
        workers pace. The states are read at most once per poll interval."""
        if self.gates.stale(DEFAULT_POLL_INTERVAL):
            yield StoreOp(self.gates.refresh)
        return self.gates.left_to_workers(spec)

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
        released = yield from self._apply(Move.release(sub.id, sub.locked_by or "", detail))
        return released or (yield from self._reread(sub))

    def _unquoted(self, decided: AttemptDecision, sub: Submission) -> AttemptDecision:
        """The decision with its error, and its alert's text, quoting no value of an
        encrypted payload."""
        if not decided.last_error or not self.seals:
            return decided
        alert = decided.alert
        if alert is not None:
            alert = replace(alert, message=self.unquoted_text(alert.message, sub) or "")
        return replace(decided, last_error=self.unquoted_text(decided.last_error, sub), alert=alert)

    def _unquoted_doubt(self, decided: DoubtDecision, sub: Submission) -> DoubtDecision:
        """A decision on a row in doubt with its note, and its alert's text, quoting no
        value of an encrypted payload (a verify's error may quote it)."""
        if not self.seals:
            return decided
        alert = decided.alert
        if alert is not None:
            alert = replace(alert, message=self.unquoted_text(alert.message, sub) or "")
        return replace(decided, note=self.unquoted_text(decided.note, sub) or "", alert=alert)

    def told(self, text: str, sub: Submission) -> str:
        """A text derived from a row's error as it leaves the ledger (a span, the
        channel's state): unquoted as the stored error is, and its hidden values
        redacted."""
        return self.alerts.redaction.scrub_text(self.unquoted_text(text, sub) or "", sub.payload)

    def unquoted_text(self, text: str | None, sub: Submission) -> str | None:
        """A provider's error, where the ledger encrypts payloads, with each value of the
        row's payload it quotes replaced by `QUOTED`: it is stored in clear."""
        if not text or not self.seals:
            return text
        return Scrubber([sub.payload], marker=QUOTED)(text)

    def _give_back_unreadable(self, sub: Submission) -> Flow:
        """A held row whose payload no key here opens (a `SealedPayload`) is never sent:
        given back unsent, its attempt not counted, due again later (not at once: a
        backlog of such rows would spin): 10 minutes after the first look, the wait
        doubling at each look up to a day (`unreadable_retry_in`), so that a row
        waiting long for its key does not grow its history every few minutes. Its last
        error says why. The first time the row is found so (its last error said
        something else), one `payload_unreadable` alert, logged as a WARNING; each later
        look, an INFO line. A key configured again sends the row at its next look, or
        at once from a worker that starts with it (`Worker._due_for_keys`)."""
        payload = sub.payload
        assert isinstance(payload, SealedPayload)
        why = NOT_SENT + payload.why()
        first = sub.last_error != why
        looks = 1
        if not first:  # the earlier looks are the releases that said so
            events: list[Event] = yield StoreOp(self.store.events, (sub.id,))
            looks += sum(1 for e in events if e.kind == "released" and e.detail == why)
        wait = unreadable_retry_in(looks)
        move = Move.release(sub.id, sub.locked_by or "", why, retry_in=wait, last_error=why)
        after = yield from self._apply(move)
        if after is None:  # another sender took the row meanwhile: it is theirs
            return (yield from self._reread(sub))
        if first:
            self.alerts.tell(
                Alert(
                    "payload_unreadable",
                    f"{why}; a worker looks at it again in {age(wait)}, then at "
                    "doubling intervals up to once a day",
                    after,
                )
            )
        else:
            log.info(
                "%s:%s (id %s) not sent, again (look %s): %s; next look in %s",
                visible(sub.channel),
                visible(sub.key),
                sub.id,
                looks,
                why,
                age(wait),
            )
        return after

    def _start(
        self, spec: ChannelSpec, sub: Submission, note: str, holder: str | None = None
    ) -> Move:
        """Begin the next attempt on a row (held by `holder`, or by nobody):
        `requesting`, held anew, attempts + 1."""
        return Move.start_attempt(sub, self.new_holder(), spec.lease, note, holder)

    def _apply(self, change: Change) -> Generator[Effect, Any, Submission | None]:
        """Apply one change. A row a move holds (`lease` > 0) carries this process's
        own deadline for starting its call, counted from before the move was sent."""
        since = time.monotonic()
        applied: list[Submission | None] = yield Apply([change])
        after = applied[0]
        if after is None or isinstance(change, Settle) or not change.lease:
            return after
        lease = change.row.lease if change.row is not None else None
        if lease is None:
            return after.held(Lease(change.lease, since))
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

    def _alert(self, alert: Alert | None, sub: Submission, span: RowSpan = NO_SPAN) -> None:
        """Tell an alert, with the row's span current: its log line carries the trace."""
        if alert is not None:
            with span.current():
                self.alerts.tell(alert.about(sub))
