"""The chaos run: worker processes killed with SIGKILL at random, the database restarted.

Used by `test_chaos.py` (a short run by default, a long one behind `-m slow`).
Workers are real processes sharing one database; a separate provider process
injects 503s, rejections and accept-then-slow replies, and does NOT honour
idempotency keys, so a double send would show as a duplicate effect.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import denpyo
from denpyo.channels.http import HttpChannel
from denpyo.testing import FakeProviderClient

WORKER = Path(__file__).with_name("chaos_worker.py")


@dataclass
class ChaosFigures:
    submissions: int
    kills: int = 0
    restarts: int = 0
    in_doubt_found: int = 0
    resolved_by_verify: int = 0
    resent: int = 0
    synced: int = 0
    rejected: int = 0
    provider_accepted: int = 0
    duplicates: int = 0
    lost: int = 0
    unsettled: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def lines(self) -> str:
        return (
            f"submissions={self.submissions} kills={self.kills} restarts={self.restarts} "
            f"in_doubt_found={self.in_doubt_found} resolved_by_verify={self.resolved_by_verify} "
            f"resent={self.resent} synced={self.synced} rejected={self.rejected} "
            f"provider_accepted={self.provider_accepted} duplicates={self.duplicates} "
            f"lost={self.lost} unsettled={self.unsettled} seconds={self.seconds:.1f}"
        )


def start_provider() -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "denpyo.testing", "--port", "0", "--no-honour-idempotency",
         "--fail-rate", "0.08", "--reject-rate", "0.03", "--slow-rate", "0.03",
         "--slow-seconds", "2.5", "--seed", "7"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    assert line.startswith("listening on "), line
    return process, line.removeprefix("listening on ")


def run_chaos(
    db_url: str,
    *,
    submissions: int,
    workers: int = 4,
    kill_every: tuple[float, float] = (0.2, 0.6),
    restart_database: Callable[[], None] | None = None,
    deadline: float = 600.0,
    seed: int = 1,
) -> ChaosFigures:
    rng = random.Random(seed)
    figures = ChaosFigures(submissions)
    started = time.monotonic()
    provider, provider_url = start_provider()
    client = FakeProviderClient(provider_url)
    ledger = denpyo.Ledger(db_url)
    http = HttpChannel(
        url=f"{provider_url}/send", lookup_url=f"{provider_url}/lookup/{{idempotency_key}}"
    )
    ledger.channel("invoice-email", verify=http.verifier, lease=2.0, max_attempts=50,
                   backoff=denpyo.Backoff(initial=0.1, maximum=1.0))(http.send)  # fmt: skip
    running: list[subprocess.Popen[bytes]] = []
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}

    def spawn() -> None:
        running.append(
            subprocess.Popen([sys.executable, str(WORKER), db_url, provider_url], env=env)
        )

    try:
        for first in range(0, submissions, 1000):
            ledger.enqueue_many(
                "invoice-email",
                [
                    (f"order:{n}", {"order": n, "total": 1000 + n})
                    for n in range(first, min(first + 1000, submissions))
                ],
            )
        for _ in range(workers):
            spawn()
        restart_at = submissions // 3
        while time.monotonic() - started < deadline:
            time.sleep(rng.uniform(*kill_every))
            victim = running.pop(rng.randrange(len(running)))
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            figures.kills += 1
            spawn()
            settled = _count_settled(ledger)
            if restart_database is not None and not figures.restarts and settled >= restart_at:
                restart_database()
                figures.restarts += 1
            if settled >= submissions:
                break
        for process in running:
            process.send_signal(signal.SIGKILL)
            process.wait()
        running.clear()
        # What remains is what the kills left: in doubt, or due for a retry. Settle it.
        while _count_settled(ledger) < submissions and time.monotonic() - started < deadline:
            ledger.work(until_idle=True, poll_interval=0.1)
            ledger.reconcile()
            time.sleep(0.3)
        _check(ledger, client, figures)
    finally:
        for process in running:
            process.kill()
            process.wait()
        ledger.close()
        provider.terminate()
        provider.wait()
        if provider.stdout is not None:
            provider.stdout.close()
    figures.seconds = time.monotonic() - started
    return figures


def _count_settled(ledger: denpyo.Ledger) -> int:
    final = (denpyo.Status.SYNCED, denpyo.Status.REJECTED)
    return sum(n for _, status, n in ledger.store.count_by_status() if status in final)


def _check(ledger: denpyo.Ledger, client: FakeProviderClient, figures: ChaosFigures) -> None:
    accepted = client.accepted()
    by_key: dict[str, list[str]] = {}
    for effect in accepted:
        by_key.setdefault(effect["idempotency_key"], []).append(effect["id"])
    figures.provider_accepted = len(by_key)
    figures.duplicates = sum(len(ids) - 1 for ids in by_key.values())
    for n in range(figures.submissions):
        sub = ledger.get("invoice-email", f"order:{n}")
        assert sub is not None, f"order:{n} lost from the ledger"
        events = ledger.events(sub.id)
        verifies = [e for e in events if e.kind == "verify"]
        resends = [e for e in events if e.kind == "attempt" and "not delivered" in (e.detail or "")]
        figures.in_doubt_found += bool(verifies or resends)
        figures.resolved_by_verify += any(e.detail == "verify: delivered" for e in verifies)
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
