"""The worker: claim due rows in batches, call many at once, settle in groups.

One asyncio loop. Per channel it claims as many ready rows as it has room for
(`concurrency`, the channel's own `concurrency`, its rate limit), then in-doubt
rows for the reconciler. The worker drives each row's flow (`flows.py`) itself:
`concurrency` lanes perform the calls, verifies and lookups, and a lane goes
on to the next one as soon as its call returns; the settles are grouped into
one commit by `GroupCommit`, which resumes each flow once its own settle has
committed. No task and no future per row: a flow is a generator, stepped where
its last effect ended (measured: bench/CHANGES.md).

While a call runs, a heartbeat renews the lease of every row this worker
holds, so a long call is never mistaken for a dead sender; a row's lease runs
out only when its worker is gone (or stalled longer than the lease). Recovery
needs no table of workers: each row carries its own holder and lease.

A worker that stalled (paused, starved, or cut off from the database so that it
could not renew) may find that rows it holds now belong to another sender. Each
hold keeps this process's own deadline (`domain/lease.py`): a call past it
never starts, and its row is given back unsent. Only a call already on the wire
when its worker stalled can go out twice; a provider that honours the
idempotency key closes that window.

Every entry the worker keeps per row (`holds`, `slots`) belongs to one hold, and
a flow (`Run`) clears only its own: a row settled and claimed again at once (a retry
due now) has a new hold that the old flow's ending must not touch.

A crash anywhere leaves rows `requesting` with a lease that runs out; the
reconciler (any worker) then verifies them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from denpyo.domain.channel_state import Mode
from denpyo.domain.lease import Lease
from denpyo.domain.moves import Change, Move, Settle
from denpyo.domain.settings import (
    DEFAULT_CONCURRENCY,
    DEFAULT_GRACE,
    DEFAULT_POLL_INTERVAL,
    WorkerSettings,
)
from denpyo.domain.status import Status
from denpyo.domain.submission import Submission
from denpyo.engine import tracing
from denpyo.engine.batching import GroupCommit
from denpyo.engine.channel import ChannelSpec
from denpyo.engine.claim_shape import Shape, shape_of
from denpyo.engine.flows import (
    Apply,
    Call,
    CallCut,
    CallResult,
    Check,
    Done,
    Flow,
    Flows,
    StoreOp,
    step,
)
from denpyo.engine.pacing import Pacing
from denpyo.engine.renewal import HeldRow, Renewal
from denpyo.engine.startup import check_durability, due_for_keys, tell_holdings
from denpyo.engine.work_report import ReconcilePass, WorkReport, counts

__all__ = ["WorkReport", "Worker"]

if TYPE_CHECKING:
    from denpyo.engine.ledger import Ledger

log = logging.getLogger("denpyo.worker")

CLAIM_TRIES = 3
"""Claim rounds that may fail in a row before `work(until_idle=True)` raises."""


@dataclass(slots=True, eq=False)
class Run:
    """A flow the worker drives: the row it began with (its slot) and that row's
    hold, which its ending clears only if no newer hold replaced it; for a row taken
    in doubt, its reconcile pass."""

    spec: ChannelSpec
    sub: Submission
    hold: HeldRow
    flow: Flow
    doubt: ReconcilePass | None = None


class Worker:
    """Runs the ledger's channels until stopped, or until nothing is due."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        grace: float = DEFAULT_GRACE,
        actor: str | None = None,
    ) -> None:
        settings = WorkerSettings(concurrency, poll_interval, grace)  # refuses a bad one
        self.ledger = ledger
        self.concurrency = settings.concurrency
        self.poll_interval = settings.poll_interval
        self.grace = settings.grace
        self.gates = ledger.gates
        self.flows = Flows(
            ledger.store,
            ledger.alerts,
            actor or ledger.new_actor("worker"),
            ledger.calls,
            ledger.gates,
            inline=False,  # a row's spans join the trace it was written in
        )
        self.runner = ledger.async_runner()
        # One commit at a time: the settles that arrive meanwhile make the next batch
        # larger (measured faster than two concurrent commits, bench/).
        self.batcher: GroupCommit[Run] = GroupCommit(self._commit, self._committed, commits=1)
        self.running: Counter[str] = Counter()  # calls in flight per channel
        # (row, holder) whose call or verify runs -> channel; a claim's holder is
        # shared by the rows it took, and a row's next hold has another holder.
        self.slots: dict[tuple[int, str | None], str] = {}
        self.runs: set[Run] = set()  # flows begun and not ended
        self.no_runs = asyncio.Event()  # set whenever the last run ends
        self.outside: deque[tuple[Run, StoreOp | Call | Check]] = deque()  # for a lane
        self.on_wire: dict[Run, tuple[float, Submission]] = {}  # a lane's call: start, row
        self.idle_lanes: deque[asyncio.Future[None]] = deque()
        self.held: dict[int, HeldRow] = {}
        self.shapes: dict[str, Shape] = {}
        self.renewal = Renewal(ledger, self.held, self.runner)
        self.pacing = {
            spec.name: Pacing(spec.rate_limit, spec.fleet_rate_limit)
            for spec in ledger.channels.values()
            if spec.rate_limit is not None or spec.fleet_rate_limit is not None
        }
        self.probes: set[int] = set()  # rows claimed as a down channel's probe call
        self.report = WorkReport()
        self.stopping = asyncio.Event()
        self.wakeup = asyncio.Event()
        self.sends = True  # claim ready rows (off for a reconcile pass)
        # claimed, not started: (row, the reconcile pass that took it in doubt, if one did)
        self.ready: defaultdict[str, deque[tuple[Submission, ReconcilePass | None]]] = defaultdict(
            deque
        )
        self.throttled = False  # a rate limit or a hold kept the last claim round waiting

    def stop(self) -> None:
        """Stop claiming; calls in flight get `grace` seconds to finish and settle."""
        self.stopping.set()
        self.wakeup.set()

    async def run(self, *, until_idle: bool = False) -> WorkReport:
        ops = self.ledger.store.async_ops(self.runner.db)
        await ops.open()
        self.runner = self.renewal.runner = self.ledger.async_runner(ops)
        try:
            return await self._run(until_idle)
        finally:
            await ops.close()

    async def _run(self, until_idle: bool) -> WorkReport:
        helpers = [asyncio.create_task(self.renewal.heartbeat())]
        if self.ledger.store.capabilities.notifies:
            helpers.append(asyncio.create_task(self._listen()))
        lanes = [asyncio.create_task(self._lane()) for _ in range(self.concurrency)]
        loop = asyncio.get_running_loop()
        await tell_holdings(self.ledger, self.runner)
        await check_durability(self.ledger, self.runner)
        if self.sends:
            await due_for_keys(self.ledger, self.runner)
        with contextlib.suppress(Exception):  # read again at the first poll if it failed
            await self.runner.in_db(self.gates.refresh)  # no call of a paused channel
        doubt_checked = float("-inf")
        failures = 0  # claim rounds that failed in a row
        try:
            while not self.stopping.is_set():
                self.wakeup.clear()  # before claiming, so no completion is missed
                claimed = 0
                self._dispatch()  # first from rows already claimed: no call waits on a claim
                try:
                    if self.sends:
                        claimed += await self._fill()
                    # In-doubt rows are rare: look for them once per poll, not per call.
                    if until_idle or loop.time() - doubt_checked >= self.poll_interval:
                        doubt_checked = loop.time()
                        if self.gates.stale(self.poll_interval):  # not every idle round
                            await self.runner.in_db(self.gates.refresh)
                        claimed += await self._probe()
                        await self.renewal.revalidate()
                        # While its renewals fail, rows that look in doubt may be this
                        # worker's own calls on the wire: it leaves them to the others.
                        if self.renewal.failing_since is None:
                            claimed += await self._claim_in_doubt()
                except Exception:
                    # A deadlock or a restart is retried at the next poll; `until_idle`
                    # gives up after a few in a row rather than report idle it did not see.
                    failures += 1
                    if until_idle and failures >= CLAIM_TRIES:
                        raise
                    log.exception("claim failed; retrying in %.1fs", self.poll_interval)
                else:
                    failures = 0
                self._dispatch()
                if claimed and self._has_room():
                    continue
                # Idle only if nothing is running or waiting, no claim failed, and no call
                # finished while we claimed (its settle may have made a row due).
                busy = claimed or failures or self.runs or self.throttled or self.wakeup.is_set()
                if until_idle and not busy and not any(self.ready.values()):
                    break
                await self._wait()
        finally:
            await self._drain(lanes)
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
        return self.report

    async def reconcile_pass(self) -> WorkReport:
        """Verify and decide every in-doubt row that is due, then return."""
        self.sends = False
        return await self.run(until_idle=True)

    # -- claiming ---------------------------------------------------------------------
    #
    # Ready rows are claimed ahead (`_shape`), so that a call never waits for a
    # claim's round trip; a claim is made only when it can take a batch (`_wanted`).
    # Claimed rows that have not started are held (their leases renewed) and released
    # on shutdown; after a crash they are in doubt like the calls that had begun.

    def _shape(self, spec: ChannelSpec) -> Shape:
        """The channel's shape (`claim_shape.py`), worked out once per channel: it is
        asked at every call's end."""
        shape = self.shapes.get(spec.name)
        if shape is None:
            shape = self.shapes[spec.name] = shape_of(spec, self.concurrency)
        return shape

    def _wanted(self, spec: ChannelSpec) -> int:
        """How many rows of the channel to claim now: 0 unless a batch fits under the
        rows held."""
        _, ahead, batch = self._shape(spec)
        queued = self.running[spec.name] + len(self.ready[spec.name])
        want = ahead - queued
        return 0 if want <= 0 or (queued and want < batch) or self.stopping.is_set() else want

    async def _fill(self) -> int:
        claimed = 0
        self.throttled = False
        for spec in list(self.ledger.channels.values()):
            mode = self.gates.mode(spec.name)
            if mode is not Mode.ACTIVE:
                # Throttled: its rows wait for the time the provider asked for. Paused or
                # down: they go back, unsent, for whichever worker resumes first.
                self.throttled |= mode is Mode.THROTTLED
                if mode is not Mode.THROTTLED:
                    await self._give_back_ready(spec, f"channel {mode.value}")
                continue
            want = self._wanted(spec)
            pacing = self.pacing.get(spec.name)
            if pacing is not None:
                waiting = self._sends_waiting(spec.name)
                if waiting > len(pacing.starts):  # rows whose start was dropped as late
                    await self._reserve(spec, pacing, waiting - len(pacing.starts))
                room = pacing.room(waiting)
                self.throttled |= room == 0 and want > 0  # paced, not idle
                want = min(want, room)
            if want <= 0:
                continue
            rows = await self._claim(spec, want, in_doubt=False)
            if pacing is not None and rows:
                await self._reserve(spec, pacing, len(rows))
            self.ready[spec.name].extend((sub, None) for sub in rows)
            claimed += len(rows)
        return claimed

    async def _reserve(self, spec: ChannelSpec, pacing: Pacing, count: int) -> None:
        """Start times for `count` rows just claimed: from the fleet's clock (one round
        trip, starting no earlier than the database said), or this process's own."""
        if pacing.fleet_rate is None:
            pacing.reserve(count, time.monotonic())
            return
        delay = await self.runner.in_db(
            self.ledger.store.reserve_starts, spec.name, count, pacing.fleet_rate
        )
        pacing.reserve(count, time.monotonic() + delay)

    def _sends_waiting(self, channel: str) -> int:
        """The channel's rows claimed to be sent that have not started."""
        return sum(1 for _, doubt in self.ready[channel] if doubt is None)

    async def _probe(self) -> int:
        """For each channel whose provider is down: if its next probe is due and the
        fleet gives it to this worker, claim one row to send as the probe; with none
        ready, one row in doubt to verify (or resend) instead, which asks the provider
        as well: else a down channel whose rows all wait in doubt would never be asked
        again (in-doubt rows are verified only while it runs)."""
        claimed = 0
        for spec in list(self.ledger.channels.values()):
            if self.gates.mode(spec.name) is not Mode.DOWN or not self.gates.probe_due(spec.name):
                continue
            if self.running[spec.name] or self.ready[spec.name]:
                continue  # a call of this channel is still out here: let it answer first
            if not await self.runner.in_db(self.gates.take_probe, spec.name):
                continue
            rows = await self._claim(spec, 1, in_doubt=False)
            doubt: ReconcilePass | None = None
            if not rows:
                rows = await self._claim(spec, 1, in_doubt=True)
                if rows:
                    doubt = ReconcilePass(Counter({spec.name: len(rows)}))
            self.probes.update(sub.id for sub in rows)
            self.ready[spec.name].extend((sub, doubt) for sub in rows)
            claimed += len(rows)
        return claimed

    async def _give_back_ready(self, spec: ChannelSpec, why: str) -> None:
        """Give back the channel's claimed rows that have not started (a probe stays)."""
        queue = self.ready.get(spec.name)
        if not queue:
            return
        kept: deque[tuple[Submission, ReconcilePass | None]] = deque()
        holds: dict[int, HeldRow] = {}
        sends = 0
        for sub, doubt in queue:
            if sub.id in self.probes:
                kept.append((sub, doubt))
                continue
            holds[sub.id] = self.held.pop(sub.id)
            if doubt is None:
                sends += 1
            else:
                self._verified(doubt, "given back")
        self.ready[spec.name] = kept
        pacing = self.pacing.get(spec.name)
        if pacing is not None:
            pacing.drop(sends)
        await self._release(holds, why)

    async def _claim_in_doubt(self) -> int:
        """One reconcile pass: take the due rows in doubt of every channel to verify,
        logged with its counts as it begins and once its last row has ended."""
        taken: dict[str, list[Submission]] = {}
        for spec in list(self.ledger.channels.values()):
            if self.gates.mode(spec.name) is not Mode.ACTIVE:
                continue  # a verify is a call too: not while paused, throttled or down
            want = self._wanted(spec)
            if want > 0:
                taken[spec.name] = await self._claim(spec, want, in_doubt=True)
        doubt = ReconcilePass(Counter({name: len(rows) for name, rows in taken.items() if rows}))
        if not doubt.taken:
            log.debug("reconcile pass: no row in doubt is due")
            return 0
        log.info(
            "reconcile pass: %d rows in doubt taken to verify (%s)",
            doubt.taken.total(),
            counts(doubt.taken),
        )
        for name, rows in taken.items():
            self.ready[name].extend((sub, doubt) for sub in rows)
        return doubt.taken.total()

    def _verified(self, doubt: ReconcilePass, how: str) -> None:
        """A row of `doubt` ended as `how`; the pass is logged once all have."""
        self.report.verified[how] += 1
        if doubt.end(how):
            log.info(
                "reconcile pass of %d rows in doubt (%s) done: %s",
                doubt.taken.total(),
                counts(doubt.taken),
                counts(doubt.ended),
            )

    async def _claim(self, spec: ChannelSpec, limit: int, *, in_doubt: bool) -> list[Submission]:
        holder = self.flows.new_holder()
        since = time.monotonic()  # before the database starts the leases
        with tracing.claim_span(spec.name, limit=limit, in_doubt=in_doubt) as span:
            if spec.fleet_concurrency is not None and not in_doubt:
                rows = await self.runner.in_db(
                    self.ledger.store.claim_within,
                    spec.name,
                    holder=holder,
                    limit=limit,
                    lease=spec.lease,
                    fleet_concurrency=spec.fleet_concurrency,
                )
            else:
                rows = await self.runner.claim(
                    spec.name, holder=holder, limit=limit, lease=spec.lease, in_doubt=in_doubt
                )
            span.rows(len(rows))
        held = []
        for sub in rows:
            lease = Lease(spec.lease, since)
            # A flow of this row that is still ending keeps its own HeldRow object.
            self.held[sub.id] = HeldRow(holder, lease, sub.status if in_doubt else None)
            held.append(sub.held(lease))
        return held

    def _dispatch(self) -> None:
        """Start claimed calls while there is room: a channel's calls only while it
        runs (a down channel's probe excepted), and a paced one's at their times."""
        now = time.monotonic()
        for spec in self.ledger.channels.values():
            waiting = self.ready[spec.name]
            if not waiting:
                continue
            running = self.gates.mode(spec.name) is Mode.ACTIVE
            pacing = self.pacing.get(spec.name)
            if pacing is not None and pacing.drop_late(now):
                self.wakeup.set()  # their rows need new starts: the claim loop reserves them
            cap = self._shape(spec).cap
            while waiting and self.running[spec.name] < cap and self._has_room():
                sub, doubt = waiting[0]
                if not running and sub.id not in self.probes:
                    break
                if doubt is None and pacing is not None and sub.id not in self.probes:
                    if not pacing.due(now):
                        break
                    pacing.take()
                waiting.popleft()
                self._spawn(spec, sub, doubt)

    def _has_room(self) -> bool:
        return len(self.slots) < self.concurrency

    def _take_slot(self, spec: ChannelSpec, sub: Submission) -> None:
        slot = (sub.id, sub.locked_by)
        if slot not in self.slots:
            self.slots[slot] = spec.name
            self.running[spec.name] += 1

    def _free_slot(self, sub: Submission) -> None:
        channel = self.slots.pop((sub.id, sub.locked_by), None)
        if channel is not None:
            self.running[channel] -= 1
            if not self.stopping.is_set():
                self._dispatch()  # the next claimed row takes the slot at once
            self._wake_if_wanted(self.ledger.channels[channel])

    def _wake_if_wanted(self, spec: ChannelSpec) -> None:
        """Wake the claim loop when a claim of the channel is worth a round trip now,
        or nothing runs any more (`until_idle` then looks once more before it stops):
        not at every call's end, where it would only find its rows still held
        (measured: bench/CHANGES.md)."""
        if not self.runs or self._wanted(spec) > 0:
            self.wakeup.set()

    def _spawn(self, spec: ChannelSpec, sub: Submission, doubt: ReconcilePass | None) -> None:
        self._take_slot(spec, sub)
        if doubt is not None:
            self.report.reconciled += 1
            flow = self.flows.reconcile(spec, sub)
        else:
            self.report.attempted += 1
            flow = self.flows.attempt(spec, sub)
        run = Run(spec, sub, self.held[sub.id], flow, doubt)
        self.runs.add(run)
        self._step(run, None, None)

    # -- driving the flows --------------------------------------------------------------
    #
    # A flow runs in steps: from the end of one effect to its next. A settle goes to
    # the batcher, which steps the flow again when its commit is done; any other
    # effect (a call, a verify, a store lookup) waits for a lane.

    def _step(self, run: Run, value: object, error: Exception | None) -> None:
        try:
            effect = step(run.flow, value, error)
        except Exception:
            self.report.errors += 1
            log.exception(
                "a %s flow failed; its row is recovered when its lease ends", run.spec.name
            )
            self._ended(run, None)
            return
        if isinstance(effect, Done):
            self._ended(run, effect.value)
            return
        if isinstance(effect, Apply):
            self.batcher.add(effect.changes, run)
            return
        self.outside.append((run, effect))
        while self.idle_lanes:  # wake one lane (one cancelled at shutdown is skipped)
            idle = self.idle_lanes.popleft()
            if not idle.done():
                idle.set_result(None)
                break

    async def _lane(self) -> None:
        """Perform effects in turn, each where the last left off. A call (or verify)
        holds a slot from its start to its end, not while its outcome is being
        committed: its end frees the slot for the next claimed row at once."""
        loop = asyncio.get_running_loop()
        while True:
            if not self.outside:
                idle = loop.create_future()
                self.idle_lanes.append(idle)
                await idle
                continue
            run, effect = self.outside.popleft()
            if isinstance(effect, StoreOp):
                try:
                    value = await self.runner.perform(effect)
                except Exception as exc:
                    self._step(run, None, exc)
                    continue
            else:
                self._take_slot(effect.spec, effect.submission)
                if isinstance(effect, Call):
                    self.on_wire[run] = (time.monotonic(), effect.submission)
                try:
                    value = await self.runner.outside(effect)
                finally:
                    self._free_slot(effect.submission)
                    self.on_wire.pop(run, None)
            self._step(run, value, None)

    async def _commit(self, changes: Sequence[Change]) -> list[Submission | None]:
        with tracing.settle_span(len(changes)):
            return await self.runner.move(changes)

    def _committed(
        self,
        run: Run,
        changes: Sequence[Change],
        results: list[Submission | None] | None,
        error: Exception | None,
    ) -> None:
        """A flow's changes are committed (or failed to be): keep track of which rows
        this worker still holds (only a hold that made the change, its holder
        expected, is changed or ended), then step the flow on."""
        if results is None:
            self._step(run, None, error)
            return
        for change, sub in zip(changes, results, strict=True):
            if sub is not None and (isinstance(change, Settle) or change.event == "settle"):
                self.report.outcomes[sub.status.value] += 1  # how a call ended (counted or not)
            elif sub is not None and change.event == "released":
                self.report.released += 1  # given back: its call could not start
            hold = self.held.get(change.submission_id)
            if hold is None or hold.holder != change.holder:
                continue
            if sub is not None and sub.status is Status.REQUESTING and sub.locked_by:
                hold.holder, hold.verifying = sub.locked_by, None  # a new attempt, held
            else:
                del self.held[change.submission_id]
        self._step(run, results, None)

    def _ended(self, run: Run, settled: Submission | None) -> None:
        if run.doubt is not None:
            self._verified(run.doubt, "error" if settled is None else settled.status.value)
        self.runs.discard(run)
        self.probes.discard(run.sub.id)
        # Only this flow's own entries: the row may be held anew already.
        self._free_slot(run.sub)
        if self.held.get(run.sub.id) is run.hold:
            del self.held[run.sub.id]
        if not self.runs:
            self.no_runs.set()
        self._wake_if_wanted(run.spec)  # its settle may have made a row due

    async def _wait(self) -> None:
        """Until something wakes the loop, the next paced start or the end of a hold,
        or the next poll."""
        now = time.monotonic()
        timeout = self.poll_interval
        for name, pacing in self.pacing.items():
            start = pacing.next_at()
            if start is not None and self.ready[name]:
                timeout = min(timeout, max(start - now, 0.001))
        for name, waiting in self.ready.items():
            if waiting and self.gates.mode(name) is Mode.THROTTLED:
                timeout = min(timeout, max(self.gates.throttled_until(name) - now, 0.001))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wakeup.wait(), timeout=timeout)

    # -- background: wake-ups ----------------------------------------------------

    async def _listen(self) -> None:
        """Wake on the database's notifications (`Capabilities.notifies`), instead of
        only polling."""
        served = set(self.ledger.channels)

        def wake(channel: str) -> None:
            if channel in served:
                self.wakeup.set()

        await self.ledger.store.listen(wake)

    # -- shutdown -----------------------------------------------------------------------------

    async def _drain(self, lanes: list[asyncio.Task[None]]) -> None:
        """Give back claimed rows not started; let calls in flight finish for `grace`
        seconds; then stop the lanes and give back the rows whose call had not begun.
        A call that had begun is cut: it may have arrived, so its attempt is counted
        and its row left in doubt (`CallCut`), to be verified."""
        waiting = []
        for queue in self.ready.values():
            for sub, doubt in queue:
                waiting.append(sub.id)
                if doubt is not None:
                    self._verified(doubt, "given back")
        self.ready.clear()
        await self._release(
            {row_id: self.held.pop(row_id) for row_id in waiting}, "stopped before the call started"
        )
        if self.runs:
            self.no_runs.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.no_runs.wait(), timeout=self.grace)
        # Revoked here, a call waiting for a lane or a pool thread can no longer begin.
        unstarted = {
            run.sub.id: run.hold
            for run in self.runs
            if self.held.get(run.sub.id) is run.hold and run.hold.lease.revoke()
        }
        on_wire = dict(self.on_wire)
        for lane in lanes:
            lane.cancel()
        await asyncio.gather(*lanes, return_exceptions=True)
        await self._release(unstarted, "stopped before the call started")
        await self._cut(
            {
                run: since
                for run, (since, sub) in on_wire.items()
                if sub.lease is None or sub.lease.started  # (not revoked above: begun)
            }
        )

    async def _cut(self, calls: dict[Run, float]) -> None:
        """Settle the calls the stop cut as ambiguous: each started (its lease could not
        be revoked), so each is an attempt, and its row is in doubt."""
        why = CallCut(
            f"the worker stopped during the call ({self.grace:g} s of grace ran out): "
            "it may have arrived"
        )
        now = time.monotonic()
        for run, since in calls.items():
            self.report.cut += 1
            self._step(run, CallResult(error=why, duration_ms=int((now - since) * 1000)), None)
        while self.batcher.flushers:  # their settles committed before the worker ends
            await asyncio.gather(*self.batcher.flushers, return_exceptions=True)
        if calls:
            log.warning(
                "stopped with %d call(s) on the wire after %g s of grace: their rows are "
                "in doubt and will be verified",
                len(calls),
                self.grace,
            )

    async def _release(self, holds: dict[int, HeldRow], why: str) -> None:
        """Give back rows this worker holds but whose call never began: a row claimed
        to be sent becomes due again with its attempt undone; a row held to be
        verified goes back to being in doubt, due for the next reconciler."""
        releases = [
            Move.release(row_id, hold.holder, why)
            if hold.verifying is None
            else Move.release_to_doubt(row_id, hold.verifying, hold.holder)
            for row_id, hold in holds.items()
        ]
        if releases:
            done = await self.runner.move(releases)
            self.report.released += sum(1 for sub in done if sub is not None)
