"""`denpyo worker --processes N`: the supervisor and its children, as real processes.

Rows are safe with several workers by the claims (SKIP LOCKED, one writer on
SQLite) and the leases; these tests check that N processes of the command keep
that: every row synced with one call the provider saw once, a SIGTERM drains
them all, and a child killed with SIGKILL is started again while its rows in
flight are verified by a reconciler. Timeouts here only keep a broken run from
hanging; nothing asserts how fast anything went.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

import denpyo
from conftest import free_ports
from denpyo.testing import FakeProvider

APP = """
import os

import denpyo
from denpyo.channels.http import HttpChannel

if os.environ.get("TEST_CRASH_ON_IMPORT"):
    os._exit(3)  # a worker that dies as soon as it starts, every time

ledger = denpyo.Ledger(os.environ["DENPYO_DATABASE_URL"])
_http = HttpChannel(
    os.environ["TEST_PROVIDER"] + "/send",
    lookup_url=os.environ["TEST_PROVIDER"] + "/lookup/{idempotency_key}",
)
ledger.channel(
    "email", verify=_http.verify, lease=float(os.environ.get("TEST_LEASE", "30"))
)(_http.send)
"""

SLOW = 120.0  # seconds: only so that a broken run fails instead of hanging
STARTED = re.compile(r"worker process (\d+) started \(pid (\d+)\)")
STOPPED = re.compile(r"worker stopped: attempted (\d+)")


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Supervised:
    """`denpyo worker --processes N …` in a subprocess, its stderr read as it comes."""

    started: ClassVar[list[Supervised]] = []  # a test's, ended after it (`_end_all`)

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        Supervised.started.append(self)
        command = [sys.executable, "-m", "denpyo.cli", "worker", *args]
        self.proc = subprocess.Popen(
            command,
            env={**os.environ, "COLUMNS": "250", **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    @property
    def stderr(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def wait_for_line(self, pattern: re.Pattern[str], count: int = 1) -> list[re.Match[str]]:
        """The first `count` lines matching `pattern`, once that many have been written."""
        deadline = time.monotonic() + SLOW
        with self._changed:
            while True:
                found = [m for line in self.lines if (m := pattern.search(line))]
                if len(found) >= count:
                    return found[:count]
                assert time.monotonic() < deadline, (
                    f"no {count} line(s) matching {pattern.pattern!r}:\n" + "\n".join(self.lines)
                )
                self._changed.wait(0.5)

    def children(self) -> dict[int, int]:
        """Process index -> pid of the child started last in that slot."""
        with self._changed:
            return {int(m[1]): int(m[2]) for line in self.lines if (m := STARTED.search(line))}

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        return self.wait()

    def wait(self) -> int:
        try:
            code = self.proc.wait(timeout=SLOW)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=10)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return code


@pytest.fixture(autouse=True)
def _end_all() -> Iterator[None]:
    """A test that failed midway leaves no supervisor running, nor its pipe open for
    the next test to find (an unclosed file is an error there)."""
    yield
    for supervised in Supervised.started:
        if supervised.proc.stderr is not None and not supervised.proc.stderr.closed:
            supervised.proc.kill()  # a no-op on one that has ended
            supervised.wait()
    Supervised.started.clear()


@pytest.fixture
def app(tmp_path: Path) -> Callable[[str, FakeProvider], dict[str, str]]:
    (tmp_path / "processes_test_app.py").write_text(APP)

    def env_for(db_url: str, provider: FakeProvider) -> dict[str, str]:
        return {
            "DENPYO_DATABASE_URL": db_url,
            "DENPYO_APP": "processes_test_app:ledger",
            "TEST_PROVIDER": provider.url,
            "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        }

    return env_for


def enqueue(db_url: str, count: int) -> None:
    with denpyo.Ledger(db_url) as ledger:
        ledger.channel("email")(lambda sub: "unused")  # to enqueue; the workers send
        for i in range(count):
            ledger.enqueue("email", f"p{i}", {"i": i})


def wait_until(check: Callable[[], bool], what: str, worker: Supervised) -> None:
    deadline = time.monotonic() + SLOW
    while not check():
        assert worker.proc.poll() is None, f"the supervisor ended early:\n{worker.stderr}"
        assert time.monotonic() < deadline, f"{what} never happened:\n{worker.stderr}"
        time.sleep(0.05)


def synced(sql: Callable[[str], list[tuple[Any, ...]]]) -> int:
    return int(sql("SELECT COUNT(*) FROM denpyo_submissions WHERE status = 'synced'")[0][0])


def assert_each_call_once(provider: FakeProvider, count: int) -> None:
    """The provider (which does not dedupe by key) saw each key once: one effect each."""
    stats = provider.stats()
    assert stats.distinct_keys == count and stats.duplicates == 0, stats
    assert stats.requests == count, stats  # not even a second request that it deduped
    assert set(provider.accepted_keys().values()) == {1}


def assert_synced_with_the_provider_ids(
    sql: Callable[[str], list[tuple[Any, ...]]], provider: FakeProvider
) -> None:
    rows = sql("SELECT idempotency_key, remote_id FROM denpyo_submissions WHERE status = 'synced'")
    assert all(provider.accepted_ids_for(key) == [remote] for key, remote in rows)


def scrape(port: int) -> str:
    deadline = time.monotonic() + SLOW
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                return str(r.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_two_processes_send_every_row_once_and_stop_cleanly_on_sigterm(
    db_url: str,
    backend: str,
    app: Callable[[str, FakeProvider], dict[str, str]],
    sql: Callable[[str], list[tuple[Any, ...]]],
) -> None:
    """A SIGTERM mid-run drains both children as one worker drains (calls in flight
    settle, rows not started are given back: none is left held); a second run finishes
    the rest. Each child serves its metrics on the port plus its index."""
    total = 240
    enqueue(db_url, total)
    port = free_ports(2)
    with FakeProvider(honour_idempotency=False, latency=0.05) as provider:
        env = app(db_url, provider)
        args = ["--processes", "2", "--concurrency", "4", "--poll-interval", "0.05"]
        first = Supervised([*args, "--metrics-port", str(port)], env)
        wait_until(lambda: synced(sql) >= 40, "40 rows synced", first)
        for i in range(2):
            assert "denpyo_calls_total" in scrape(port + i)
        assert first.stop(signal.SIGTERM) == 0, first.stderr
        stopped = STOPPED.findall(first.stderr)
        assert len(stopped) == 2, first.stderr  # each child drained and reported
        held = sql("SELECT COUNT(*) FROM denpyo_submissions WHERE locked_by IS NOT NULL")
        assert held == [(0,)], first.stderr  # settled or given back: nothing to recover
        after_stop = synced(sql)
        assert sum(int(n) for n in stopped) >= after_stop
        assert_synced_with_the_provider_ids(sql, provider)
        assert provider.stats().duplicates == 0

        second = Supervised(args, env)
        wait_until(lambda: synced(sql) == total, "every row synced", second)
        assert second.stop(signal.SIGTERM) == 0, second.stderr
        attempted = sum(int(n) for n in STOPPED.findall(second.stderr))
        assert attempted == total - after_stop, second.stderr  # each remaining row once
        assert_each_call_once(provider, total)
        assert_synced_with_the_provider_ids(sql, provider)
    # Every worker wrote under an id of its own, with its own pid in it.
    pids = set(first.children().values()) | set(second.children().values())
    actors = {a for (a,) in sql("SELECT DISTINCT actor FROM denpyo_events") if a.startswith("w")}
    assert actors and {int(a.split(":")[2]) for a in actors} <= pids


def test_a_child_killed_with_sigkill_is_started_again_and_nothing_is_lost_or_doubled(
    db_url: str,
    backend: str,
    app: Callable[[str, FakeProvider], dict[str, str]],
    sql: Callable[[str], list[tuple[Any, ...]]],
) -> None:
    total = 300
    enqueue(db_url, total)
    with FakeProvider(honour_idempotency=False, latency=0.05) as provider:
        env = {**app(db_url, provider), "TEST_LEASE": "3"}
        args = ["--processes", "2", "--concurrency", "8", "--poll-interval", "0.05"]
        worker = Supervised(args, env)
        worker.wait_for_line(STARTED, 2)
        wait_until(lambda: synced(sql) >= 30, "30 rows synced", worker)
        victim = worker.children()[0]
        os.kill(victim, signal.SIGKILL)
        worker.wait_for_line(re.compile(r"worker process 0 .*died \(killed by SIGKILL\); start"))
        restarted = worker.wait_for_line(STARTED, 3)[2]
        assert restarted[1] == "0" and int(restarted[2]) != victim
        # The killed child's rows in flight stay held until their lease runs out; a
        # reconciler then verifies each and settles or resends it.
        wait_until(lambda: synced(sql) == total, "every row synced", worker)
        assert worker.stop(signal.SIGTERM) == 0, worker.stderr
        assert_each_call_once(provider, total)
        assert_synced_with_the_provider_ids(sql, provider)
    assert sql("SELECT COUNT(*) FROM denpyo_submissions WHERE locked_by IS NOT NULL") == [(0,)]


def denpyo_cli(db_url: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "denpyo.cli", "--db", db_url, *args],
        env={**os.environ, "COLUMNS": "250"},
        capture_output=True,
        text=True,
        timeout=SLOW,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def calls_sent_on_the_chart(db_url: str) -> int:
    """The dashboard's `sent`, every event folded."""
    with denpyo.Ledger(db_url) as ledger:
        while ledger.store.fold_outcomes(lag=0):
            pass
        return sum(n for _, outcome, n in ledger.store.outcomes_per_minute(1) if outcome == "sent")


def test_a_worker_killed_mid_run_counts_as_attempts_exactly_the_calls_the_provider_received(
    db_url: str,
    backend: str,
    app: Callable[[str, FakeProvider], dict[str, str]],
    sql: Callable[[str], list[tuple[Any, ...]]],
) -> None:
    """A worker that claims ahead is killed with SIGKILL mid-run. Right after, the rows
    it held show who held them, that the holder is gone and when their leases end; the
    attempts counted are calls the provider received, never more (its rows claimed
    ahead and never sent count nothing). Once another worker has verified and resent
    them, every row's attempts is the number of requests the provider received for
    its key, and the dashboard's `sent` is their sum."""
    total = 300
    enqueue(db_url, total)
    with FakeProvider(honour_idempotency=False, latency=0.05) as provider:
        env = {**app(db_url, provider), "TEST_LEASE": "8"}
        args = ["--concurrency", "8", "--poll-interval", "0.05"]
        first = Supervised(args, env)
        wait_until(lambda: synced(sql) >= 30, "30 rows synced", first)
        os.kill(first.proc.pid, signal.SIGKILL)
        assert first.wait() == -signal.SIGKILL
        counted = int(sql("SELECT SUM(attempts) FROM denpyo_submissions")[0][0])
        assert counted <= provider.stats().requests  # no call counted that did not leave
        held = sql(
            "SELECT id FROM denpyo_submissions WHERE status = 'requesting' "
            "AND locked_by IS NOT NULL ORDER BY id"
        )
        assert held, "the killed worker held rows (in flight, or claimed ahead)"
        status = denpyo_cli(db_url, "status")
        assert f"held {len(held)} of email by worker:" in status, status
        assert ", holder gone; leases end in" in status, status
        shown = denpyo_cli(db_url, "show", str(held[0][0]))
        assert re.search(r"held by +worker:\S+, lease ends in \d+ s \(holder gone\)", shown), shown
        listed = denpyo_cli(db_url, "list", "--status", "requesting", "--limit", "300")
        assert "requesting held" in listed and "holder gone: worker:" in listed, listed

        second = Supervised(args, env)
        wait_until(lambda: synced(sql) == total, "every row synced", second)
        assert second.stop(signal.SIGTERM) == 0, second.stderr
        # Its start-up line about the dead worker's rows shows only while their leases
        # run (status, show and list said so above); on a slow machine they may be over.
        assert "reconcile pass" in second.stderr, second.stderr
        assert_each_call_once(provider, total)
        requests = provider.accepted_keys()
        rows = sql("SELECT idempotency_key, attempts FROM denpyo_submissions")
        assert {key: attempts for key, attempts in rows} == requests
        assert sum(attempts for _, attempts in rows) == provider.stats().requests == total
    assert calls_sent_on_the_chart(db_url) == total


def test_children_that_keep_dying_make_the_supervisor_give_up(
    tmp_path: Path, app: Callable[[str, FakeProvider], dict[str, str]]
) -> None:
    with FakeProvider() as provider:
        env = {**app(f"sqlite:///{tmp_path}/unused.db", provider), "TEST_CRASH_ON_IMPORT": "1"}
        worker = Supervised(["--processes", "2"], env)
        code = worker.wait()
    assert code == 1, worker.stderr
    assert "died (exit code 3); starting it again" in worker.stderr
    assert "giving up" in worker.stderr


def test_a_configuration_error_stops_all_with_exit_2(tmp_path: Path) -> None:
    env = {"DENPYO_DATABASE_URL": f"sqlite:///{tmp_path}/unused.db"}
    without_app = Supervised(["--processes", "3"], env)
    assert without_app.wait() == 2
    assert "needs the application's channels" in without_app.stderr
    assert "started" not in without_app.stderr  # said once, before any child

    bad_app = Supervised(["--processes", "2"], {**env, "DENPYO_APP": "no_such_module:ledger"})
    assert bad_app.wait() == 2
    assert "cannot import 'no_such_module'" in bad_app.stderr
    assert "usage or configuration error" in bad_app.stderr

    past = Supervised(["--processes", "4", "--metrics-port", "65534"], env)
    assert past.wait() == 2
    assert "past 65535" in past.stderr
