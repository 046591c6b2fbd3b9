"""The chaos run: worker processes killed with SIGKILL or paused with SIGSTOP at
random, their connections to the database dropped or black-holed (all workers
at once, or one alone), the database restarted.

Used by `test_chaos.py` (short runs by default, long ones behind `-m slow`).
Workers are real processes sharing one database; a separate provider process
injects 503s, rejections and accept-then-slow replies. By default it does NOT
honour idempotency keys, so a double send shows as a duplicate effect.

A paused worker may hold a call that had started, its request not yet on the
wire: its lease runs out, another worker verifies the row (not delivered) and
resends it, and when the paused worker resumes its request goes out too. Only
a provider that honours the key can merge those two. So each worker logs every
call it starts (wall time, row, key), the harness records every pause, and a
duplicate is *explained* when one of its calls started in the `lease` seconds
before its worker was paused. Any other double is a fault of the engine.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

from dbproxy import ProxyProcess

import denpyo
from denpyo.channels.http import HttpChannel
from denpyo.testing import FakeProviderClient

T = TypeVar("T")

WORKER = Path(__file__).with_name("chaos_worker.py")
CHANNEL = "invoice-email"
EXAMPLES = 3  # unexplained doubles shown with their histories


@dataclass
class ChaosFigures:
    submissions: int
    kills: int = 0
    pauses: int = 0
    cuts: int = 0  # every worker's connections dropped
    blackholes: int = 0  # every worker's traffic black-holed
    partitions: int = 0  # one worker's traffic black-holed
    links_cut: int = 0  # connections dropped or black-holed, in all
    restarts: int = 0
    exited: int = 0  # workers that ended by themselves (the harness starts another)
    finished_by_workers: bool = False  # every row settled before the harness stepped in
    in_doubt_found: int = 0
    resolved_by_verify: int = 0
    resent: int = 0
    synced: int = 0
    rejected: int = 0
    provider_accepted: int = 0
    duplicates: int = 0
    duplicates_in_flight_at_pause: int = 0
    lost: int = 0
    unsettled: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    doubles: list[str] = field(default_factory=list)  # unexplained ones, with their histories

    def lines(self) -> str:
        return (
            f"submissions={self.submissions} kills={self.kills} pauses={self.pauses} "
            f"cuts={self.cuts} blackholes={self.blackholes} partitions={self.partitions} "
            f"links_cut={self.links_cut} restarts={self.restarts} "
            f"exited={self.exited} finished_by_workers={self.finished_by_workers} "
            f"in_doubt_found={self.in_doubt_found} resolved_by_verify={self.resolved_by_verify} "
            f"resent={self.resent} synced={self.synced} rejected={self.rejected} "
            f"provider_accepted={self.provider_accepted} duplicates={self.duplicates} "
            f"duplicates_in_flight_at_pause={self.duplicates_in_flight_at_pause} "
            f"lost={self.lost} unsettled={self.unsettled} seconds={self.seconds:.1f}"
        )


@dataclass
class Pause:
    pid: int
    stopped_at: float  # wall time, taken once SIGSTOP was sent
    continued_at: float | None = None


@dataclass(frozen=True)
class CallStart:
    at: float  # wall time
    pid: int
    row: int
    key: str  # idempotency key


def start_provider(*, honour_keys: bool, latency: float) -> tuple[subprocess.Popen[str], str]:
    """The provider the sends meet: its 503s carry no Retry-After (a call failing on
    its own, not the provider asking the whole channel to wait, which would hold
    every worker back a second per failure: test_fleet.py covers that)."""
    honour = "--honour-idempotency" if honour_keys else "--no-honour-idempotency"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "denpyo.testing",
            "--port",
            "0",
            honour,
            "--retry-after",
            "0",
            "--fail-rate",
            "0.08",
            "--reject-rate",
            "0.03",
            "--slow-rate",
            "0.03",
            "--slow-seconds",
            "2.5",
            "--latency",
            str(latency),
            "--seed",
            "7",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    assert line.startswith("listening on "), line
    return process, line.removeprefix("listening on ")


def via_port(db_url: str, port: int) -> str:
    """The same database URL, through 127.0.0.1:port."""
    parts = urlsplit(db_url)
    user = f"{parts.netloc.rpartition('@')[0]}@" if "@" in parts.netloc else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))


def run_chaos(
    db_url: str,
    *,
    submissions: int,
    workers: int = 4,
    kill_every: tuple[float, float] = (0.2, 0.6),
    restart_database: Callable[[], None] | None = None,
    stall: float = 60.0,
    seed: int = 1,
    lease: float = 2.0,
    concurrency: int = 16,
    latency: float = 0.0,
    enqueue_rate: float | None = None,
    enqueue_every: float = 0.0,
    honour_keys: bool = False,
    kills: bool = True,
    pause_share: float = 0.0,
    pause_for: tuple[float, float] = (3.5, 6.0),
    cut_connections: bool = False,
    cuts: int = 3,
    blackholes: int = 2,
    partitions: int = 2,
    log_dir: Path | None = None,
) -> ChaosFigures:
    """Rows are enqueued all at once, or `enqueue_rate` a second in bursts every
    `enqueue_every` seconds (workers then keep up, and reconcile rows in doubt as
    soon as their lease runs out; a burst leaves each worker holding rows it
    claimed ahead). Every
    `kill_every` seconds a fault: a pause (`pause_share` of them) of a running
    worker for `pause_for` seconds, or a kill (if `kills`), if some row settled
    since the last one (a worker killed before it could start would prove nothing).

    With `cut_connections`, each worker reaches the database through a proxy of
    its own, and at random points of the run's first two thirds the harness drops
    every worker's connections (`cuts` times), black-holes every worker's traffic
    (`blackholes` times), or one worker's only (`partitions` times: the others
    take over its rows), for `lease` + 1.5 s.

    The run has no deadline: a slow machine makes it longer, not wrong. It ends
    when every row is settled, or when none has settled (and none was enqueued)
    for `stall` seconds: the faults stop, the harness settles what it can the same
    way, and the check then counts what stayed unsettled."""
    started = time.monotonic()
    provider, provider_url = start_provider(honour_keys=honour_keys, latency=latency)
    chaos: _Chaos | None = None
    try:
        chaos = _Chaos(
            db_url,
            provider_url,
            rng=random.Random(seed),
            figures=ChaosFigures(submissions),
            lease=lease,
            concurrency=concurrency,
            enqueue=(enqueue_rate, enqueue_every),
            proxied=cut_connections,
            log_dir=log_dir or Path(tempfile.mkdtemp(prefix="chaos-")),
        )
        chaos.feed()
        for _ in range(workers):
            chaos.spawn()
        kinds = ["cut"] * cuts + ["blackhole"] * blackholes + ["partition"] * partitions
        network = sorted(
            (int(chaos.rng.uniform(0.1, 0.65) * submissions), kind)
            for kind in (kinds if cut_connections else [])
        )
        restart_at = submissions // 3
        settled = 0
        progress = Progress(stall)
        faulted_at = -1  # rows settled at the last kill or pause
        while not progress.stalled((settled, chaos.fed)):
            chaos.sleep(chaos.rng.uniform(*kill_every))
            chaos.reap()
            while network and settled >= network[0][0]:
                chaos.network_fault(network.pop(0)[1])
            if settled > faulted_at:  # a slow machine gets no more faults per row
                faulted_at = settled
                if pause_share and chaos.rng.random() < pause_share and chaos.pausable():
                    chaos.pause(pause_for)
                elif kills:
                    chaos.kill()
            settled = _count_settled(chaos.ledger, settled)
            if restart_database and not chaos.figures.restarts and settled >= restart_at:
                restart_database()
                chaos.figures.restarts += 1
                progress.moved()  # the restart's own time is not a stall
            if settled >= submissions:
                chaos.figures.finished_by_workers = True
                break
        chaos.stop_workers()
        # What remains is what the faults left: in doubt, or due for a retry. Settle it.
        progress = Progress(stall)
        while (settled := _count_settled(chaos.ledger, settled)) < submissions and (
            not progress.stalled((settled, chaos.fed))
        ):
            chaos.feed()
            try:
                chaos.ledger.work(until_idle=True, poll_interval=0.1)
                chaos.ledger.reconcile()
            except denpyo.StoreError:
                pass  # the database is restarting: again, until nothing moves
            time.sleep(0.3)
        if progress.stalled((settled, chaos.fed)) and settled < submissions:
            chaos.figures.notes.append(f"no row settled for {stall:.0f} s: the run stopped there")
        client = FakeProviderClient(provider_url)
        _check(chaos.ledger, client, chaos.figures)
        _explain_doubles(chaos, client)
    finally:
        if chaos is not None:
            chaos.stop_workers()
            chaos.ledger.close()
        provider.terminate()
        provider.wait()
        if provider.stdout is not None:
            provider.stdout.close()
    chaos.figures.seconds = time.monotonic() - started
    return chaos.figures


class Progress:
    """Whether a run still moves: `stalled(state)` holds once `state` has not changed
    for `stall` seconds. A wait that ends on this scales with the machine's speed."""

    def __init__(self, stall: float) -> None:
        self.stall = stall
        self.state: object = None
        self.at = time.monotonic()

    def moved(self) -> None:
        self.at = time.monotonic()

    def stalled(self, state: object) -> bool:
        if state != self.state:
            self.state = state
            self.moved()
        return time.monotonic() - self.at > self.stall


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    proxy: ProxyProcess | None  # between this worker and the database

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL (it ends a stopped process too), and close its proxy."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        if self.proxy is not None:
            self.proxy.close()


class _Chaos:
    """The harness's state: its own ledger (straight to the database), the worker
    processes, and every pause and call start, for explaining doubles."""

    def __init__(
        self,
        db_url: str,
        provider_url: str,
        *,
        rng: random.Random,
        figures: ChaosFigures,
        lease: float,
        concurrency: int,
        enqueue: tuple[float | None, float],
        proxied: bool,
        log_dir: Path,
    ) -> None:
        self.db_url = db_url
        self.provider_url = provider_url
        self.rng = rng
        self.figures = figures
        self.lease = lease
        self.concurrency = concurrency
        self.rate, self.every = enqueue
        self.fed = 0  # rows enqueued so far
        self.fed_since = 0.0
        self.fed_at = float("-inf")
        self.proxied = proxied
        self.log_dir = log_dir
        self.running: list[_Worker] = []
        self.spawned = 0
        self.paused: dict[int, tuple[_Worker, float, Pause]] = {}  # pid -> resume at
        self.pauses: list[Pause] = []
        self.env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        self.calls_files: list[Path] = []
        self.ledger = self._ledger()

    def _ledger(self) -> denpyo.Ledger:
        """The harness's own ledger, straight to the database, its calls logged too."""
        ledger = denpyo.Ledger(self.db_url)
        http = HttpChannel(
            url=f"{self.provider_url}/send",
            lookup_url=f"{self.provider_url}/lookup/{{idempotency_key}}",
        )
        calls = self.log_dir / "calls-harness.log"
        self.calls_files.append(calls)
        pid = os.getpid()

        async def send(sub: denpyo.Submission) -> str | None:
            with calls.open("a") as out:
                out.write(f"{time.time():.6f} {pid} {sub.id} {sub.idempotency_key}\n")
            return await http.send(sub)

        ledger.channel(
            CHANNEL,
            verify=http.verifier,
            lease=self.lease,
            max_attempts=50,
            backoff=denpyo.Backoff(initial=0.1, maximum=1.0),
        )(send)
        return ledger

    def feed(self) -> None:
        """Enqueue the rows due by now: all at once, or `enqueue_rate` a second."""
        total = self.figures.submissions
        now = time.monotonic()
        if self.rate is None:
            due = total
        elif now - self.fed_at < self.every:
            return
        else:
            self.fed_since = self.fed_since or now
            due = min(total, int((now - self.fed_since) * self.rate))
            self.fed_at = now
        while self.fed < due:
            upto = min(due, self.fed + 1000)
            rows = [(f"order:{n}", {"order": n, "total": 1000 + n}) for n in range(self.fed, upto)]
            try:
                self.ledger.enqueue_many(CHANNEL, rows)
            except denpyo.StoreError:
                return  # the database is restarting: next time (rows written are skipped)
            self.fed = upto

    def spawn(self) -> None:
        n = self.spawned
        self.spawned += 1
        proxy, url = None, self.db_url
        if self.proxied:
            target = urlsplit(self.db_url)
            proxy = ProxyProcess(target.hostname or "127.0.0.1", target.port or 0)
            url = via_port(self.db_url, proxy.port)
        calls = self.log_dir / f"calls-{n}.log"
        self.calls_files.append(calls)
        log = self.log_dir / f"worker-{n}.log"
        command = [
            sys.executable,
            str(WORKER),
            url,
            self.provider_url,
            "--lease",
            str(self.lease),
            "--concurrency",
            str(self.concurrency),
            "--calls",
            str(calls),
            "--log",
            str(log),
        ]
        self.running.append(_Worker(subprocess.Popen(command, env=self.env), proxy))

    def sleep(self, seconds: float) -> None:
        """Sleep, resuming paused workers as their time comes, and enqueuing."""
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            self.resume(due_only=True)
            self.feed()
            time.sleep(min(left, 0.05))
        self.resume(due_only=True)

    def reap(self) -> None:
        """A worker that ended by itself is counted, and another one started."""
        for worker in [w for w in self.running if w.process.poll() is not None]:
            self.running.remove(worker)
            self.paused.pop(worker.pid, None)
            worker.kill()
            self.figures.exited += 1
            self.figures.notes.append(f"worker {worker.pid} exited: {worker.process.returncode}")
            self.spawn()

    def pausable(self) -> list[_Worker]:
        return [w for w in self.running if w.pid not in self.paused]

    def pause(self, pause_for: tuple[float, float]) -> None:
        victim = self.rng.choice(self.pausable())
        victim.process.send_signal(signal.SIGSTOP)
        record = Pause(victim.pid, time.time())
        self.pauses.append(record)
        self.paused[victim.pid] = (victim, time.monotonic() + self.rng.uniform(*pause_for), record)
        self.figures.pauses += 1

    def resume(self, *, due_only: bool) -> None:
        now = time.monotonic()
        for pid, (worker, resume_at, record) in list(self.paused.items()):
            if not due_only or now >= resume_at:
                worker.process.send_signal(signal.SIGCONT)
                record.continued_at = time.time()
                del self.paused[pid]

    def kill(self) -> None:
        """SIGKILL a random worker, paused or not, and start another."""
        victim = self.running.pop(self.rng.randrange(len(self.running)))
        victim.kill()
        stopped = self.paused.pop(victim.pid, None)
        if stopped is not None:
            stopped[2].continued_at = time.time()  # the pause ends with the process
        self.figures.kills += 1
        self.spawn()

    def network_fault(self, kind: str) -> None:
        proxies = [w.proxy for w in self.running if w.proxy is not None]
        if kind == "cut":
            self.figures.links_cut += sum(proxy.cut() for proxy in proxies)
            self.figures.cuts += 1
        elif kind == "blackhole":
            self.figures.links_cut += sum(proxy.blackhole(self.lease + 1.5) for proxy in proxies)
            self.figures.blackholes += 1
        else:
            self.figures.links_cut += self.rng.choice(proxies).blackhole(self.lease + 1.5)
            self.figures.partitions += 1

    def stop_workers(self) -> None:
        self.resume(due_only=False)
        for worker in self.running:
            worker.kill()
        self.running.clear()

    def call_starts(self) -> list[CallStart]:
        starts = []
        for path in self.calls_files:
            if not path.exists():
                continue
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) != 4:
                    continue  # a line cut short by a kill
                at, pid, row, key = parts
                starts.append(CallStart(float(at), int(pid), int(row), key))
        return starts

    def in_flight_at_pause(self, start: CallStart) -> bool:
        """The call started by a worker at most `lease` seconds before that worker was
        paused: it may have been on the wire, or about to be, when the worker stopped."""
        return any(
            p.pid == start.pid and p.stopped_at - self.lease <= start.at <= p.stopped_at
            for p in self.pauses
        )


def _count_settled(ledger: denpyo.Ledger, before: int = 0) -> int:
    """Rows synced or rejected; `before` while the database is restarting (the
    harness's own restart, or a server restarted under the run)."""
    final = (denpyo.Status.SYNCED, denpyo.Status.REJECTED)
    try:
        return sum(n for _, status, n in ledger.store.count_by_status() if status in final)
    except denpyo.StoreError:
        return before


def _read(read: Callable[[], T]) -> T:
    """One of the check's reads, again while the database is out of reach (a restart
    the run made may still be ending on a busy machine): the check reads, it does
    not judge the server's speed."""
    deadline = time.monotonic() + 120
    while True:
        try:
            return read()
        except denpyo.StoreUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _check(ledger: denpyo.Ledger, client: FakeProviderClient, figures: ChaosFigures) -> None:
    accepted = client.accepted()
    by_key: dict[str, list[str]] = {}
    for effect in accepted:
        by_key.setdefault(effect["idempotency_key"], []).append(effect["id"])
    figures.provider_accepted = len(by_key)
    figures.duplicates = sum(len(ids) - 1 for ids in by_key.values())
    for n in range(figures.submissions):
        key = f"order:{n}"
        sub = _read(lambda key=key: ledger.get(CHANNEL, key))
        assert sub is not None, f"order:{n} lost from the ledger"
        row_id = sub.id
        events = _read(lambda row_id=row_id: ledger.events(row_id))
        verifies = [e for e in events if e.kind == "verify"]
        resends = [e for e in events if e.kind == "attempt" and "not delivered" in (e.detail or "")]
        figures.in_doubt_found += bool(verifies or resends)
        figures.resolved_by_verify += any(
            (e.detail or "").startswith("verify: delivered") for e in verifies
        )
        figures.resent += len(resends)
        if sub.status is denpyo.Status.SYNCED:
            figures.synced += 1
            if sub.idempotency_key not in by_key:
                figures.notes.append(f"order:{n} synced but the provider never accepted it")
        elif sub.status is denpyo.Status.REJECTED:
            figures.rejected += 1
        else:
            figures.unsettled += 1
        if sub.idempotency_key in by_key and sub.status is not denpyo.Status.SYNCED:
            figures.lost += 1  # the provider has it; the ledger does not say so


def _explain_doubles(chaos: _Chaos, client: FakeProviderClient) -> None:
    """Count the duplicates that a call on the wire at a pause explains; describe a
    few of the others: the row's events, its call starts, its workers' pauses."""
    effects: dict[str, list[float]] = {}
    for effect in client.accepted():
        effects.setdefault(effect["idempotency_key"], []).append(float(effect["at"]))
    starts: dict[str, list[CallStart]] = {}
    for start in chaos.call_starts():
        starts.setdefault(start.key, []).append(start)
    figures = chaos.figures
    for key, times in effects.items():
        extra = len(times) - 1
        if not extra:
            continue
        mine = sorted(starts.get(key, []), key=lambda s: s.at)
        explained = min(extra, sum(chaos.in_flight_at_pause(s) for s in mine))
        figures.duplicates_in_flight_at_pause += explained
        if explained < extra and len(figures.doubles) < EXAMPLES:
            figures.doubles.append(_history(chaos, key, times, mine))


def _history(chaos: _Chaos, key: str, effects: list[float], starts: list[CallStart]) -> str:
    row = starts[0].row if starts else None
    lines = [f"idempotency key {key} (row {row}): {len(effects)} effects at the provider"]
    lines += [f"  effect at {at:.3f}" for at in effects]
    lines += [f"  call started at {s.at:.3f} by pid {s.pid}" for s in starts]
    pids = {s.pid for s in starts}
    lines += [
        f"  pid {p.pid} paused {p.stopped_at:.3f} .. {p.continued_at or 0:.3f}"
        for p in chaos.pauses
        if p.pid in pids
    ]
    if row is not None:
        for e in chaos.ledger.events(row):
            lines.append(
                f"  event {e.at.timestamp():.3f} {e.kind} {e.from_status} -> {e.to_status} "
                f"attempt={e.attempt} actor={e.actor} detail={e.detail}"
            )
    return "\n".join(lines)
