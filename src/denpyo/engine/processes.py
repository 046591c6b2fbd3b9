"""`denpyo worker --processes N`: N worker processes under one small supervisor.

Each child is the same command run again with `--processes 1`
(``python -m denpyo.cli [--db|--app …] worker --processes 1 …``), started with
`subprocess`, rather than a `multiprocessing` process, because that is the
simplest thing that is robust:

- a child is exactly the single worker, the same code path, signal handling and
  exit codes; it imports the `--app` module in its own fresh interpreter, so
  nothing the module opened at import (connections, threads, event loops) is
  shared or inherited through a fork, and there is nothing to pickle;
- its worker id is its own: the ledger's name holds the child's pid, and every
  hold adds a random suffix (`Ledger.new_actor`);
- the children write to the supervisor's stdout and stderr, so their log lines
  go where one worker's go;
- the supervisor is a loop over `Popen.poll`: standard library only, no event
  loop, no database connection.

What the supervisor does:

- SIGTERM or SIGINT is passed on to every child, which drains as one worker does
  (stop claiming, give back what has not started, let the calls in flight finish
  within `--grace`); the supervisor exits when all have: 0 if every child exited
  0 (or was stopped by that signal before it had started its worker).
- A child that dies unexpectedly (a signal, a crash, any exit code but 0 and 2)
  is started again after a back-off (0.5 s, doubling while it keeps dying within
  10 s of its start, at most 8 s), with a line saying so. Its rows in flight stay
  `requesting` under their leases; when those run out, a worker's reconciler
  verifies them, as after any crash.
- `MAX_DEATHS` deaths within `DEATH_WINDOW` seconds, over all children: the
  supervisor stops the others and exits 1, saying why.
- A child that exits 2 (usage or configuration error: the same for every child)
  stops the others; the supervisor exits 2.
- A child that exits 0 by itself was stopped on purpose (a SIGTERM sent to it
  alone): it is not started again; the supervisor exits when all have.
- On Linux a child gets SIGTERM if the supervisor dies (even by SIGKILL), so no
  worker is left behind unsupervised.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType

EXIT_OK = 0
EXIT_ATTENTION = 1
EXIT_INPUT = 2
"""Usage or configuration error: the same for every child, so not worth a restart."""
EXIT_UNAVAILABLE = 3
"""denpyo's exit codes (the CLI's, and what the supervisor reads from its children)."""

BACKOFF = 0.5
"""Seconds before a dead child is started again; doubled while it keeps dying soon."""
MAX_BACKOFF = 8.0
QUICK_DEATH = 10.0
"""A child that dies within this many seconds of its start doubles its next back-off."""
MAX_DEATHS = 5
DEATH_WINDOW = 60.0
"""`MAX_DEATHS` deaths within this many seconds, over all children: give up."""
TICK = 0.1
MAX_PROCESSES = 256
"""The most worker processes one supervisor starts (`worker --processes`)."""
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def worker_command(
    *,
    db: str | None,
    app: str | None,
    options: Sequence[str],
) -> list[str]:
    """The command line of one child: this interpreter, the same --db/--app, one process."""
    top = [*(["--db", db] if db else []), *(["--app", app] if app else [])]
    return [sys.executable, "-m", "denpyo.cli", *top, "worker", "--processes", "1", *options]


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


@dataclass
class Child:
    """One worker slot: its command, the process in it now, and its history."""

    index: int
    command: list[str]
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restart_at: float | None = None  # monotonic; a death waiting for its back-off
    quick_deaths: int = 0  # deaths in a row within QUICK_DEATH of their start
    final: int | None = None  # the exit code it ended with, once it is not restarted


@dataclass
class Supervisor:
    """Runs one child per command until a stop signal, restarting those that die."""

    commands: Sequence[list[str]]
    say: Callable[[str], None]
    children: list[Child] = field(init=False)
    stopping: signal.Signals | None = field(default=None, init=False)
    received: list[signal.Signals] = field(default_factory=list, init=False)
    failure: int | None = field(default=None, init=False)
    deaths: deque[float] = field(default_factory=deque, init=False)

    def __post_init__(self) -> None:
        self.children = [Child(i, list(cmd)) for i, cmd in enumerate(self.commands)]

    def run(self) -> int:
        """Start the children, supervise them until all have ended; the exit code."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}
        try:
            for child in self.children:
                self._start(child)
            while any(child.final is None for child in self.children):
                self._tick(time.monotonic())
                time.sleep(TICK)
        except BaseException:
            self._stop()  # no child outlives a supervisor that failed: they drain
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self.failure is not None:
            return self.failure
        codes = [child.final for child in self.children]
        return EXIT_OK if all(code == 0 for code in codes) else EXIT_ATTENTION

    # -- signals -------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only noted here: the loop acts on it between two of its own steps.
        self.received.append(signal.Signals(signum))

    def _stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Pass the stop on to every live child; cancel the restarts still waiting."""
        self.stopping = self.stopping or sig
        for child in self.children:
            if child.proc is not None and child.proc.poll() is None:
                child.proc.send_signal(sig)
            elif child.proc is None and child.final is None:
                child.restart_at = None
                child.final = 0  # waiting for its back-off: nothing to stop

    def _alive(self) -> int:
        return sum(1 for c in self.children if c.proc is not None and c.proc.poll() is None)

    # -- the loop ------------------------------------------------------------------

    def _start(self, child: Child) -> None:
        child.restart_at = None
        child.started_at = time.monotonic()
        child.proc = subprocess.Popen(child.command, preexec_fn=_die_with_parent)
        self.say(f"worker process {child.index} started (pid {child.proc.pid})")

    def _tick(self, now: float) -> None:
        while self.received:
            sig = self.received.pop(0)
            if self.stopping is None:
                self.say(f"{sig.name}: stopping {self._alive()} worker process(es)")
            self._stop(sig)  # each time: a second Ctrl-C is passed on too
        for child in self.children:
            if child.proc is not None:
                code = child.proc.poll()
                if code is not None:
                    self._ended(child, code, now)
            elif child.restart_at is not None and now >= child.restart_at:
                self._start(child)

    def _ended(self, child: Child, code: int, now: float) -> None:
        assert child.proc is not None
        pid, child.proc = child.proc.pid, None
        name = f"worker process {child.index} (pid {pid})"
        if self.stopping is not None:
            # Stopped by the signal passed on before its worker had installed its
            # handlers: it had not started anything.
            stopped_early = code in (-signal.SIGTERM, -signal.SIGINT)
            child.final = 0 if stopped_early else code
            if code != 0 and not stopped_early:
                self.say(f"{name} ended with {describe_exit(code)} while stopping")
            return
        if code == 0:
            self.say(f"{name} stopped by itself (exit code 0): not started again")
            child.final = 0
            return
        if code == EXIT_INPUT:
            self.say(
                f"{name} exited {EXIT_INPUT} (usage or configuration error, see above): "
                "stopping the others"
            )
            child.final = code
            self.failure = EXIT_INPUT
            self._stop()
            return
        self.deaths.append(now)
        while self.deaths and now - self.deaths[0] > DEATH_WINDOW:
            self.deaths.popleft()
        if len(self.deaths) >= MAX_DEATHS:
            self.say(
                f"{name} died ({describe_exit(code)}); {len(self.deaths)} worker deaths within "
                f"{DEATH_WINDOW:g}s: giving up, stopping the others"
            )
            child.final = code
            self.failure = EXIT_ATTENTION
            self._stop()
            return
        child.quick_deaths = child.quick_deaths + 1 if now - child.started_at < QUICK_DEATH else 0
        delay = min(BACKOFF * 2 ** max(child.quick_deaths - 1, 0), MAX_BACKOFF)
        child.restart_at = now + delay
        self.say(f"{name} died ({describe_exit(code)}); starting it again in {delay:g}s")


def _die_with_parent() -> None:
    """In the child, before exec (Linux): SIGTERM when the supervisor dies, however it
    dies, so that its children drain and stop rather than run on unsupervised."""
    if sys.platform != "linux":
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
