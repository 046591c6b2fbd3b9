"""`denpyo worker --grace 1` stopped by SIGTERM while calls are on the wire.

A call that ends within the grace is recorded as it ended; a call still on the
wire when the grace runs out is cut: it started, so its attempt is counted (as
many attempts as `attempt` events), its row is left in doubt, and the stop's
summary says how many were cut. A later verify finds them at the provider:
nothing lost, nothing sent twice. Timeouts here only keep a broken run from
hanging; nothing asserts how fast anything went.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import denpyo
from conftest import asker
from denpyo.channels.http import HttpChannel
from denpyo.testing import FakeProvider

APP = """
import os
import time
from pathlib import Path

import denpyo
from denpyo.channels.http import HttpChannel

ledger = denpyo.Ledger(os.environ["DENPYO_DATABASE_URL"])
_http = HttpChannel(
    os.environ["TEST_PROVIDER"] + "/send",
    lookup_url=os.environ["TEST_PROVIDER"] + "/lookup/{idempotency_key}",
)
ledger.channel("slow", verify=_http.verify, lease=60)(_http.send)
_flags = Path(os.environ["TEST_FLAGS"])


@ledger.channel("quick", lease=60)
def quick(sub):
    (_flags / f"started-{sub.key}").touch()
    while not (_flags / "answer").exists():  # answered once the stop is on its way
        time.sleep(0.01)
    return "q-" + sub.key
"""

SLOW_ROWS = 4
QUICK_ROWS = 3
SLOW = 120.0  # seconds: only so that a broken run fails instead of hanging


def wait_until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + SLOW
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def attempts_and_events(sql: Callable[[str], list[tuple[Any, ...]]]) -> dict[str, tuple[int, int]]:
    """Each row's key -> (its attempts, its attempt events)."""
    rows = sql(
        "SELECT s.key, s.attempts, (SELECT count(*) FROM denpyo_events e "
        "WHERE e.submission_id = s.id AND e.kind = 'attempt') FROM denpyo_submissions s"
    )
    return {key: (int(attempts), int(events)) for key, attempts, events in rows}


def by_key(sql: Callable[[str], list[tuple[Any, ...]]], column: str) -> dict[str, Any]:
    return dict(sql(f"SELECT s.key, s.{column} FROM denpyo_submissions s"))  # type: ignore[arg-type]


def test_a_stop_cuts_the_calls_on_the_wire_and_says_so(
    backend: str, db_url: str, tmp_path: Path
) -> None:
    sql = asker(backend, db_url)
    flags = tmp_path / "flags"
    flags.mkdir()
    (tmp_path / "stop_test_app.py").write_text(APP)
    with FakeProvider(slow_rate=1.0, slow_seconds=SLOW) as provider:
        with denpyo.Ledger(db_url) as ledger:
            for name in ("slow", "quick"):
                ledger.channel(name)(lambda sub: None)  # to enqueue; the worker sends
            for i in range(SLOW_ROWS):
                ledger.enqueue("slow", f"s{i}", {"n": i})
            for i in range(QUICK_ROWS):
                ledger.enqueue("quick", f"q{i}", {"n": i})
        env = {
            **os.environ,
            "COLUMNS": "300",
            "DENPYO_DATABASE_URL": db_url,
            "TEST_PROVIDER": provider.url,
            "TEST_FLAGS": str(flags),
            "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        }
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "denpyo.cli",
                "--app",
                "stop_test_app:ledger",
                "worker",
                "--grace",
                "1",
                "--concurrency",
                "16",
                "--poll-interval",
                "0.1",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_until(
                lambda: (
                    provider.stats().slow == SLOW_ROWS
                    and len(list(flags.glob("started-*"))) == QUICK_ROWS
                ),
                "every call on the wire",
            )
            (flags / "answer").touch()
            worker.send_signal(signal.SIGTERM)
            _, err = worker.communicate(timeout=SLOW)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.communicate()
        assert worker.returncode == 0, err
        assert (
            f"cut {SLOW_ROWS} calls on the wire at the end of the grace: their rows are "
            "in doubt and will be verified" in err
        ), err

        # Each call started is counted, as its attempt event says; the answered ones
        # synced, the cut ones in doubt (an ambiguous failure).
        counts = attempts_and_events(sql)
        assert counts == {key: (1, 1) for key in counts} and len(counts) == 7, counts
        statuses, kinds = by_key(sql, "status"), by_key(sql, "error_kind")
        for i in range(QUICK_ROWS):
            assert statuses[f"q{i}"] == "synced"
        for i in range(SLOW_ROWS):
            assert (statuses[f"s{i}"], kinds[f"s{i}"]) == ("failed", "ambiguous")

        # A later verify finds each cut call at the provider: synced, never sent again.
        http = HttpChannel(provider.send_url, lookup_url=provider.lookup_url)
        with denpyo.Ledger(db_url) as ledger:
            ledger.channel("slow", verify=http.verify, lease=60)(http.send)
            ledger.channel("quick", lease=60)(lambda sub: "never")

            def all_synced() -> bool:
                ledger.reconcile()
                return all(
                    status == "synced" for (status,) in sql("SELECT status FROM denpyo_submissions")
                )

            wait_until(all_synced, "every cut call verified")
        assert provider.stats().requests == SLOW_ROWS
        assert provider.accepted_keys() and max(provider.accepted_keys().values()) == 1
        counts = attempts_and_events(sql)
        assert counts == {key: (1, 1) for key in counts}, counts
