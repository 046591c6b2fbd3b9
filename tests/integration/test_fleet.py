"""A fleet that respects its provider: pause and resume, the shared back-off, the
provider-down mode, and the fleet's rate and concurrency limits, on every database.

Several workers share a ledger here as they do in production: separate `Ledger`
objects (each its own view of the channel states) in threads, or worker processes
(`denpyo worker`) on one database, SQLite's file included. Each call's start and
end are written by the channel itself, so that what the provider would have seen
is checked, not what the worker says it did. Times bound only what the guarantee
says (no call starts while the channel is throttled, at most R starts in a second):
nothing asserts how fast anything went.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import denpyo
from denpyo import Submission
from denpyo.domain.alert import Alert
from denpyo.domain.channel_state import PROBE_FIRST, PROBE_GROWTH, Mode
from denpyo.domain.status import Status
from denpyo.engine.pacing import Pacing
from denpyo.engine.worker import Worker
from denpyo.errors import ConfigurationError, InvalidInput, Transient
from waiting import wait_until

POLL = 0.1
ARRIVES_LATE_BY = 0.05  # seconds: how late a start may reach the provider (docs/guide/worker.md)
SLOW = 120.0  # seconds: only so that a broken run fails instead of hanging


class Calls:
    """What the provider saw: each call's key and its start and end (monotonic)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.starts: list[tuple[float, str]] = []
        self.ends: list[float] = []

    def start(self, sub: Submission) -> float:
        now = time.monotonic()
        with self.lock:
            self.starts.append((now, sub.key))
        return now

    def end(self) -> None:
        with self.lock:
            self.ends.append(time.monotonic())

    def count(self) -> int:
        with self.lock:
            return len(self.starts)


def run_workers(
    ledgers: list[denpyo.Ledger], until: Callable[[], bool], *, concurrency: int = 8
) -> list[Worker]:
    """Run one worker per ledger on one event loop until `until()` holds."""

    async def main() -> list[Worker]:
        workers = [Worker(lg, concurrency=concurrency, poll_interval=POLL) for lg in ledgers]
        tasks = [asyncio.create_task(worker.run()) for worker in workers]
        deadline = time.monotonic() + SLOW
        while not until():
            assert time.monotonic() < deadline, "the workers did not finish"
            await asyncio.sleep(0.02)
        for worker in workers:
            worker.stop()
        await asyncio.gather(*tasks)
        return workers

    return asyncio.run(main())


@pytest.fixture
def second(db_url: str) -> Iterator[denpyo.Ledger]:
    """Another process's ledger on the same database."""
    with denpyo.Ledger(db_url) as other:
        yield other


def all_synced(ledger: denpyo.Ledger, channel: str, n: int) -> Callable[[], bool]:
    def done() -> bool:
        counts = ledger.store.count_by_status(channel)
        return sum(count for _, status, count in counts if status.value == "synced") >= n

    return done


# -- pause and resume ------------------------------------------------------------------


def test_a_paused_channel_records_rows_and_calls_nothing_until_resumed(
    ledger: denpyo.Ledger,
) -> None:
    calls = Calls()
    ledger.channel("sms")(lambda sub: calls.start(sub) and "r")
    ledger.channel("email")(lambda sub: calls.start(sub) and "r")
    assert ledger.pause("sms", note="template went out wrong", by="ann")
    assert not ledger.pause("sms", note="again", by="bob")  # paused already: nothing written
    for i in range(5):
        ledger.enqueue("sms", f"k{i}", {})
    ledger.enqueue("email", "e0", {})
    sub = ledger.submit("sms", "inline", {})
    assert sub.status.value == "requesting" and sub.attempts == 0 and sub.locked_by is None
    report = ledger.work(until_idle=True, poll_interval=POLL)
    assert report.outcomes["synced"] == 1  # the other channel goes on
    assert [key for _, key in calls.starts] == ["e0"]

    assert ledger.resume("sms", note="fixed the template", by="ann")
    assert not ledger.resume("sms", note="again")
    # The inline submit's process read the pause less than a poll ago: a worker sends.
    assert ledger.work(until_idle=True, poll_interval=POLL).outcomes["synced"] == 6
    history = ledger.store.channel_history("sms")
    assert [(e.kind, e.actor, e.note) for e in history] == [
        ("resumed", "operator:ann", "fixed the template"),
        ("paused", "operator:ann", "template went out wrong"),
    ]


def test_pause_needs_a_note_and_a_channel_name(ledger: denpyo.Ledger) -> None:
    for note in ("", "   ", None):
        with pytest.raises(InvalidInput, match="note"):
            ledger.pause("sms", note=note)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="channel name"):
        ledger.pause("no spaces", note="x")
    assert ledger.store.channel_states() == []
    assert ledger.store.channel_history("sms") == []


def test_workers_stop_starting_calls_within_a_poll_of_a_pause_and_start_on_resume(
    ledger: denpyo.Ledger, second: denpyo.Ledger
) -> None:
    calls = Calls()

    def send(sub: Submission) -> str:
        calls.start(sub)
        time.sleep(0.01)
        return "r"

    for lg in (ledger, second):
        lg.channel("c")(send)
    for i in range(400):
        ledger.enqueue("c", f"k{i}", {})
    seen: dict[str, Any] = {}

    def until() -> bool:
        if "paused" not in seen and calls.count() >= 20:
            ledger.pause("c", note="incident at the provider")
            seen["paused"] = True
        paused_everywhere = all(w.gates.mode("c") is Mode.PAUSED for w in seen.get("workers", []))
        if seen.get("paused") and "after" not in seen and paused_everywhere:
            seen["after"] = calls.count()
            seen["at"] = time.monotonic()
        if "at" in seen and time.monotonic() - seen["at"] > 5 * POLL and "resumed" not in seen:
            seen["still"] = calls.count()
            ledger.resume("c", note="over")
            seen["resumed"] = True
        return all_synced(ledger, "c", 400)()

    async def main() -> None:
        workers = [Worker(lg, concurrency=4, poll_interval=POLL) for lg in (ledger, second)]
        seen["workers"] = workers
        tasks = [asyncio.create_task(worker.run()) for worker in workers]
        deadline = time.monotonic() + SLOW
        while not until():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        for worker in workers:
            worker.stop()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    # Once both workers knew of the pause, no call started (those on the wire ended).
    assert seen["still"] == seen["after"]
    assert calls.count() == 400


# -- the shared back-off -----------------------------------------------------------------


def test_a_retry_after_seen_by_one_worker_holds_the_channel_on_every_worker(
    ledger: denpyo.Ledger, second: denpyo.Ledger
) -> None:
    calls = Calls()
    told: dict[str, float] = {}
    hold = 2.0

    def send(sub: Submission) -> str:
        started = calls.start(sub)
        if sub.key == "k5" and sub.attempts == 0:
            told["at"] = started
            raise Transient("HTTP 429: slow down", retry_after=hold)
        time.sleep(0.005)
        return "r"

    for lg in (ledger, second):
        lg.channel("c", concurrency=2)(send)
    for i in range(60):
        ledger.enqueue("c", f"k{i}", {})
    run_workers([ledger, second], all_synced(ledger, "c", 60), concurrency=2)
    # The other worker learns of it at its next read of the states (one poll), so a
    # call may start in that poll; none from then to the end of the hold.
    quiet_from, quiet_to = told["at"] + 4 * POLL, told["at"] + hold - 0.05
    during = [key for at, key in calls.starts if quiet_from <= at < quiet_to]
    assert during == []
    # The rows that waited spent no attempt learning it; the one told spent one.
    rows = [ledger.get("c", f"k{i}") for i in range(60)]
    assert {sub.key: sub.attempts for sub in rows if sub and sub.attempts != 1} == {"k5": 2}


# -- the provider down ---------------------------------------------------------------------


def test_an_outage_is_not_the_rows_fault(ledger: denpyo.Ledger, second: denpyo.Ledger) -> None:
    """Three failures in a row: down for the fleet; one probe at a time, the first two
    seconds on; no row spends an attempt while it is down (max_attempts=2 would
    exhaust them otherwise); the first answered probe brings it up and every row
    goes out."""
    calls = Calls()
    up = threading.Event()
    down_at: list[float] = []
    alerts: list[str] = []

    def told(alert: Alert) -> None:
        alerts.append(alert.reason)
        if alert.reason == "channel_down":
            down_at.append(time.monotonic())

    def send(sub: Submission) -> str:
        started = calls.start(sub)
        # Every worker knows it is down a poll after it was declared: from then on
        # only probes go out.
        probe = bool(down_at) and started > down_at[0] + 3 * POLL
        time.sleep(0.01)
        if not up.is_set():
            if probe:
                up.set()  # the first probe fails; the provider answers the next
            raise Transient("HTTP 503: down for maintenance")
        return "r"

    for lg in (ledger, second):
        lg.channel("c", down_after=3, max_attempts=2, concurrency=1)(send)
        lg.on_alert(told)
    for i in range(30):
        ledger.enqueue("c", f"k{i}", {})
    run_workers([ledger, second], all_synced(ledger, "c", 30), concurrency=1)

    rows = [ledger.get("c", f"k{i}") for i in range(30)]
    assert all(sub is not None and sub.status.value == "synced" for sub in rows)
    assert max(sub.attempts for sub in rows if sub) <= 2  # none ran out while down
    assert alerts.count("channel_down") == 1 and alerts.count("channel_up") == 1
    assert [event.kind for event in ledger.store.channel_history("c")] == ["up", "down"]
    assert ledger.store.channel_states()[0].mode is Mode.ACTIVE
    # While down, the probes: the first one no sooner than PROBE_FIRST, the next
    # PROBE_FIRST * PROBE_GROWTH after it; nothing else in between.
    quiet = sorted(at for at, _ in calls.starts if at > down_at[0] + 3 * POLL)
    first, answered = quiet[0], quiet[1]
    assert first >= down_at[0] + PROBE_FIRST - 0.2
    assert answered >= first + PROBE_FIRST * PROBE_GROWTH - 0.2


# -- the fleet's limits --------------------------------------------------------------------

# The worker processes' app. Beside each call's start and end (wall time: what the
# provider receives, and when), it notes the time the fleet's clock gave that start
# ("slot"): the database clock's reading when the start was reserved, plus the wait
# it gave, so that a process the machine kept waiting (on its way back from the
# database, or to the call) is seen as late.
APP = """
import asyncio, datetime, os, threading, time

import denpyo
from denpyo.engine.pacing import Pacing
from denpyo.engine.worker import Worker

ledger = denpyo.Ledger(os.environ["DENPYO_DATABASE_URL"])
LOG = os.environ["TEST_CALLS"]


def note(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")


store = ledger.store
lock_channel, store_reserve = store._lock_channel, store.reserve_starts
pacing_reserve, pacing_take, spawn = Pacing.reserve, Pacing.take, Worker._spawn
clock = threading.local()  # the database clock, read with the channel's lock
answered = []  # the fleet clock's first start of each reservation (wall time)
slot_of = {}  # a start as this process placed it -> the fleet clock's (wall time)
taken = []  # the fleet clock's time of the start just taken


def locked(tx, channel):
    now, next_start = lock_channel(tx, channel)
    clock.now = now
    return now, next_start


def reserve_starts(*args):
    delay = store_reserve(*args)
    answered.append((clock.now + datetime.timedelta(seconds=delay)).timestamp())
    return delay


def reserve(self, count, first):
    pacing_reserve(self, count, first)
    if self.shared and answered:
        fleet_first = answered.pop()
        for i, start in enumerate(list(self.starts)[-count:]):
            slot_of[start] = fleet_first + i * self.fleet_gap


def take(self):
    taken.append(slot_of.pop(self.starts[0], None))
    pacing_take(self)


def spawned(self, spec, sub, doubt):
    if taken and taken[-1] is not None:
        note(f"slot {taken.pop():.6f} {os.getpid()} {sub.key}")
    taken.clear()
    spawn(self, spec, sub, doubt)


store._lock_channel, store.reserve_starts = locked, reserve_starts
Pacing.reserve, Pacing.take, Worker._spawn = reserve, take, spawned


@ledger.channel(
    "sms",
    fleet_rate_limit=float(os.environ.get("TEST_FLEET_RATE") or 0) or None,
    fleet_concurrency=int(os.environ.get("TEST_FLEET_CONCURRENCY") or 0) or None,
    lease=float(os.environ.get("TEST_LEASE", "30")),
    idempotent=True,
)
async def send(sub):  # on the worker's loop: its start is the worker's, not a thread's
    note(f"start {time.time():.6f} {os.getpid()} {sub.key}")
    await asyncio.sleep(float(os.environ.get("TEST_CALL_SECONDS", "0")))
    note(f"end {time.time():.6f} {os.getpid()} {sub.key}")
    return "r"
"""


def start_workers(
    tmp_path: Path, db_url: str, n: int, **env: str
) -> tuple[list[subprocess.Popen[bytes]], Path]:
    (tmp_path / "fleetapp.py").write_text(APP)
    log = tmp_path / "calls.log"
    environ = {
        **os.environ,
        "DENPYO_DATABASE_URL": db_url,
        "TEST_CALLS": str(log),
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        **env,
    }
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "denpyo.cli",
                "--app",
                "fleetapp:ledger",
                "worker",
                "--poll-interval",
                str(POLL),
                "--concurrency",
                "8",
            ],
            env=environ,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(n)
    ]
    return procs, log


def read_calls(log: Path) -> list[tuple[str, float, int, str]]:
    if not log.exists():
        return []
    found = []
    for line in log.read_text().splitlines():
        what, at, pid, key = line.split()
        found.append((what, float(at), int(pid), key))
    return found


def wait_for(check: Callable[[], bool], log: Path) -> None:
    """Until `check()` holds, while the workers still start or end calls."""
    wait_until(check, "the fleet's calls", moving=lambda: len(read_calls(log)))


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def worst_window(times: list[float], width: float = 1.0) -> int:
    """The most starts in any window [t, t + width)."""
    times = sorted(times)
    most, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] >= width:
            first += 1
        most = max(most, last - first + 1)
    return most


def test_a_fleet_rate_limit_holds_across_worker_processes(
    ledger: denpyo.Ledger, db_url: str, tmp_path: Path
) -> None:
    ledger.channel("sms")(lambda sub: "r")  # the enqueueing side needs no limit
    rows = 60
    for i in range(rows):
        ledger.enqueue("sms", f"k{i}", {})
    procs, log = start_workers(tmp_path, db_url, 3, TEST_FLEET_RATE="20")
    try:
        wait_for(lambda: sum(1 for c in read_calls(log) if c[0] == "end") >= rows, log)
    finally:
        stop(procs)
    calls = read_calls(log)
    starts = {key: at for what, at, _, key in calls if what == "start"}
    slots = {key: at for what, at, _, key in calls if what == "slot"}
    assert len(starts) == rows and slots
    # What the provider receives: 20 in any second, each start reaching it up to the
    # documented 50 ms after the time the fleet's clock gave it (starts are spaced
    # 5 % wider for that). A start the machine kept waiting longer counts at 50 ms
    # after its time: its delay is the machine's, not the limit's. (A start whose
    # time went unnoted counts when it was received.)
    received = [min(at, slots.get(key, at) + ARRIVES_LATE_BY) for key, at in starts.items()]
    late = sum(at > slots.get(key, at) + ARRIVES_LATE_BY for key, at in starts.items())
    print(f"\n{late} of {rows} starts reached the provider more than 50 ms late")
    fleet_clock = worst_window(list(slots.values()))
    assert worst_window(received) <= 20, f"the fleet's clock gave {fleet_clock} in a second"
    assert len({pid for what, _, pid, _ in calls if what == "start"}) >= 2


def test_a_killed_workers_share_of_the_fleet_concurrency_comes_back_within_a_lease(
    ledger: denpyo.Ledger, db_url: str, tmp_path: Path
) -> None:
    ledger.channel("sms")(lambda sub: "r")
    rows = 12
    for i in range(rows):
        ledger.enqueue("sms", f"k{i}", {})
    lease = 3.0
    procs, log = start_workers(
        tmp_path,
        db_url,
        2,
        TEST_FLEET_CONCURRENCY="2",
        TEST_CALL_SECONDS="0.5",
        TEST_LEASE=str(lease),
    )
    try:
        wait_for(lambda: any(c[0] == "start" for c in read_calls(log)), log)
        victim_pid = next(c[2] for c in read_calls(log) if c[0] == "start")
        victim = next(p for p in procs if p.pid == victim_pid)
        victim.send_signal(signal.SIGKILL)  # its calls in flight never end
        victim.wait()
        # The rows it held are in doubt once their leases end: verified (the channel
        # is idempotent: sent again under the same key) by the survivor.
        wait_for(all_synced(ledger, "sms", rows), log)
    finally:
        stop(procs)
    calls = read_calls(log)
    # At no instant were more than 2 calls in flight across the fleet: a killed call
    # holds its share until its lease ends, a lease from its claim, just before it
    # started (a quarter of a second is far more than a claim and a call's start take).
    events: list[tuple[float, int]] = []
    ended = {(pid, key) for what, _, pid, key in calls if what == "end"}
    for what, at, pid, key in calls:
        if what == "start":
            events.append((at, 1))
            if (pid, key) not in ended:
                events.append((at + lease - 0.25, -1))
        else:
            events.append((at, -1))
    running = most = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):
        running += delta
        most = max(most, running)
    assert most <= 2
    killed = {key for what, _, pid, key in calls if what == "start" and pid == victim_pid}
    assert killed and all(
        getattr(ledger.get("sms", key), "status", None) is Status.SYNCED for key in killed
    )


def test_limits_must_be_positive(ledger: denpyo.Ledger) -> None:
    for bad in (
        {"fleet_rate_limit": 0},
        {"fleet_rate_limit": -1},
        {"fleet_rate_limit": float("nan")},
        {"fleet_concurrency": 0},
        {"fleet_concurrency": 1.5},
        {"down_after": 0},
        {"rate_limit": 0},
        {"fleet_rate_limit": True},
    ):
        with pytest.raises(ConfigurationError):
            ledger.channel("c", **bad)(lambda sub: "r")
    assert "c" not in ledger.channels


def test_the_rate_limit_of_one_process_has_no_burst(
    ledger: denpyo.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rate_limit=15` with 45 rows due: never more than 15 starts in a second (the
    token bucket it replaced let 30 through in the first one). The channel is async,
    so that a start is the worker's own, not a thread's that the machine delayed; a
    start counts at most 50 ms after the time its worker gave it, as in the fleet's
    test above."""
    calls = Calls()
    slots: dict[str, float] = {}
    taken: list[float] = []
    take, spawn = Pacing.take, Worker._spawn

    def taking(self: Pacing) -> None:
        taken.append(self.starts[0])
        take(self)

    def spawning(self: Worker, spec: Any, sub: Submission, doubt: Any) -> None:
        if taken:
            slots[sub.key] = taken.pop()
        spawn(self, spec, sub, doubt)

    monkeypatch.setattr(Pacing, "take", taking)
    monkeypatch.setattr(Worker, "_spawn", spawning)

    async def send(sub: Submission) -> str:
        calls.start(sub)
        return "r"

    ledger.channel("c", rate_limit=15)(send)
    for i in range(45):
        ledger.enqueue("c", f"k{i}", {})
    ledger.work(until_idle=True, poll_interval=POLL)
    assert calls.count() == 45 and len(slots) == 45
    assert worst_window([min(at, slots[key] + ARRIVES_LATE_BY) for at, key in calls.starts]) <= 15


def test_a_down_channel_whose_rows_all_wait_in_doubt_is_probed_by_a_verify(
    ledger: denpyo.Ledger,
) -> None:
    """Down, with no row ready to send and every row in doubt (their senders died
    mid-call): the probe is a verify. Verifies wait while a channel is down, so
    without it the channel would stay down for ever; answered, it is up again."""
    from denpyo.domain.moves import Move
    from denpyo.store import NewSubmission

    ledger.channel("c", verify=lambda sub: denpyo.Delivered(f"found-{sub.key}"))(lambda sub: "r")
    S = denpyo.Status
    for key in ("a", "b"):
        sub, _ = ledger.store.record(NewSubmission("c", key, f"i-{key}", "{}"), actor="w", lease=60)
        expire = Move(
            sub.id,
            S.REQUESTING,
            S.REQUESTING,
            "w",
            holder="w",
            new_holder="w",
            lease=0,
            retry_in=0,
            keep_error=True,
        )
        ledger.store.move([expire])
    assert ledger.store.channel_down("c", actor="w", note="10 calls failed", probe_in=0)
    ledger.work(until_idle=True, poll_interval=0.05)
    assert ledger.store.channel_states()[0].mode is Mode.ACTIVE
    assert [e.kind for e in ledger.store.channel_history("c")] == ["up", "down"]
    assert {ledger.get("c", k).status for k in ("a", "b")} == {S.SYNCED}  # type: ignore[union-attr]
