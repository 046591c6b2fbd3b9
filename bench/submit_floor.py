"""The floor under `submit()` on SQLite: what denpyo's own statements cost, and each
piece of its schema, against the hand-written INSERT / call / UPDATE.

    PYTHONPATH=src .venv/bin/python bench/submit_floor.py [--n 800] [--rounds 5]

One fake provider (`python -m denpyo.testing`, 0 ms) and one synchronous
`http.client` connection, as section 2 of `bench/run.py`. Each way has a database
file of its own (WAL, `synchronous=FULL`, as the store sets); the ways take turns,
round after round, so that a slow minute of the machine falls on all of them:

- `bare call`: the HTTP call alone;
- `hand-written`, `hand-written with its history`: section 2's baselines
  (`bench/child.py`);
- `denpyo's statements`: the store's own named queries for one inline submit, run
  directly with `sqlite3` and nothing of the engine: INSERT ... RETURNING and the
  `created` and `attempt` events, commit; the call; the compare-and-set UPDATE ...
  RETURNING and the `settle` event, commit;
- the same with one piece of the schema removed, to show what it costs: the
  running counts' triggers (schema 8), the claim and in-doubt partial indexes and
  the audit's synced index, the events' index;
- `submit()`: `Ledger.submit` with a channel making the same call.

Prints µs per call (median of the rounds, min-max) and each way's ratio to the
hand-written one, the figure the `submit()` target is stated in.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from child import _handwritten, _sync_clients
from common import job_payload

import denpyo

Way = Callable[[str, Any], None]
PIECES: dict[str, list[str]] = {
    "without the running counts' triggers": [
        "DROP TRIGGER denpyo_count_inserted",
        "DROP TRIGGER denpyo_count_updated",
    ],
    "without the claim, in-doubt and synced indexes": [
        "DROP INDEX denpyo_submissions_ready",
        "DROP INDEX denpyo_submissions_in_doubt",
        "DROP INDEX denpyo_submissions_synced",
    ],
    "without the events' index": ["DROP INDEX denpyo_events_submission"],
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def migrated(folder: Path, name: str, drops: list[str]) -> str:
    """A fresh ledger database with `drops` applied; returns its URL."""
    url = f"sqlite:///{folder / name}.db"
    with denpyo.Ledger(url) as ledger:
        ledger.migrate()
    conn = sqlite3.connect(folder / f"{name}.db")
    for statement in drops:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return url


def statements_alone(url: str, post: Callable[[str, Any], str]) -> Way:
    """One inline submit as denpyo's store writes it, with nothing of the engine."""
    queries = denpyo.Ledger(url).store.queries
    conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    for pragma in ("PRAGMA journal_mode = WAL", "PRAGMA synchronous = FULL",
                   "PRAGMA foreign_keys = ON"):  # fmt: skip
        conn.execute(pragma)
    record, started = queries["submission_insert"], queries["event_insert_sent_inline"]
    move, event = queries["submission_move"], queries["event_insert"]

    def one(key: str, payload: Any) -> None:
        idempotency_key = str(uuid.uuid4())
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute(record, {
            "channel": "inline", "key": key, "idempotency_key": idempotency_key,
            "payload": json.dumps(payload), "attempts": 1, "ordering_key": None,
            "supersedes": None, "locked_by": "floor/1", "lease": 60.0,
        }).fetchone()  # fmt: skip
        conn.execute(started, {"submission_id": row[0], "actor": "floor/1"})
        conn.execute("COMMIT")
        remote_id = post(idempotency_key, payload)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(move, {
            "id": row[0], "from_status": "requesting", "to_status": "synced",
            "expect_locked_by": "floor/1", "locked_by": None, "lease": None,
            "attempt_delta": 0, "retry_in": None, "remote_id": remote_id, "keep_error": 0,
            "error_kind": None, "last_error": None, "resolution": None,
        }).fetchall()  # fmt: skip
        conn.execute(event, {
            "submission_id": row[0], "kind": "settle", "from_status": "requesting",
            "to_status": "synced", "attempt": 1, "actor": "floor", "detail": remote_id,
            "duration_ms": 0,
        })  # fmt: skip
        conn.execute("COMMIT")

    return one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=800, help="calls per way and round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    port = free_port()
    provider = subprocess.Popen(
        [sys.executable, "-m", "denpyo.testing", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="denpyo-submit-floor-"))
    try:
        for _ in range(100):  # the provider is up when it accepts a connection
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        post = _sync_clients(f"http://127.0.0.1:{port}/send")["http.client"]
        ways: dict[str, Way] = {"bare call": post}
        hand, _ = _handwritten(migrated(folder, "hand", []))
        history, _ = _handwritten(migrated(folder, "history", []), history=True)
        ways["hand-written"] = lambda k, p: hand(k, p, lambda: post(k, p))
        ways["hand-written with its history"] = lambda k, p: history(k, p, lambda: post(k, p))
        ways["denpyo's statements"] = statements_alone(migrated(folder, "ours", []), post)
        for n, (name, drops) in enumerate(PIECES.items()):
            ways[f"denpyo's statements {name}"] = statements_alone(
                migrated(folder, f"piece{n}", drops), post
            )
        ledger = denpyo.Ledger(migrated(folder, "submit", []))
        ledger.add_channel("inline", lambda sub: post(sub.idempotency_key, sub.payload))
        ways["submit()"] = lambda k, p: ledger.submit("inline", k, p) and None
        timings: dict[str, list[float]] = {name: [] for name in ways}
        for r in range(args.rounds):
            for name, way in ways.items():
                for i in range(20):  # warm the caches and the statements
                    way(f"warm:{r}:{i}", job_payload(i))
                started = time.perf_counter()
                for i in range(args.n):
                    way(f"{r}:{i}", job_payload(i))
                timings[name].append((time.perf_counter() - started) / args.n * 1e6)
        ledger.close()
    finally:
        provider.terminate()
        provider.wait()
        shutil.rmtree(folder, ignore_errors=True)
    hand_us = timings["hand-written"]
    print(f"{args.n} calls per way and round, {args.rounds} rounds; median (min-max)\n")
    print("| way | µs per call | ÷ hand-written |\n|---|---|---|")
    for name, values in timings.items():
        ratio = statistics.median(v / h for v, h in zip(values, hand_us, strict=True))
        print(
            f"| {name} | {statistics.median(values):,.0f} ({min(values):,.0f}–"
            f"{max(values):,.0f}) | {ratio:.2f}× |"
        )


if __name__ == "__main__":
    main()
