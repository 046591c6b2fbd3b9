"""The floor under `submit()`: what denpyo's own statements cost, and each piece of
its schema, against the hand-written INSERT / call / UPDATE.

    PYTHONPATH=src .venv/bin/python bench/submit_floor.py [--database postgresql]
        [--n 800] [--rounds 5]

One fake provider (`python -m denpyo.testing`, 0 ms) and one synchronous
`http.client` connection, as section 2 of `bench/run.py`. Each way has a database
of its own (SQLite: a file, WAL, `synchronous=FULL`, as the store sets;
PostgreSQL: a fresh database on `DENPYO_BENCH_POSTGRES_URL`'s server); the ways
take turns, round after round, so that a slow minute of the machine falls on all
of them:

- `bare call`: the HTTP call alone;
- `hand-written`, `hand-written with its history`: section 2's baselines
  (`bench/child.py`);
- `denpyo's statements`: the store's own named queries for one inline submit, run
  directly on the driver with nothing of the engine (`_statements_alone` in
  `bench/child.py`, which section 2 of `bench/run.py` runs too);
- the same with one piece of the schema removed, to show what it costs: the
  running counts' triggers (schema 8 on SQLite, 3 on PostgreSQL), the claim and
  in-doubt partial indexes and the audit's synced index, the events' index;
- `submit()`: `Ledger.submit` with a channel making the same call.

Prints µs per call (median of the rounds, min-max), each way's ratio to the
hand-written one (the figure the `submit()` target is stated in), and the CPU per
call of this process (the driver, the HTTP client and, for `submit()`, the
engine) and, on PostgreSQL, of the way's server processes: figures that swing
less than the wall time when the machine is busy.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from child import _handwritten, _statements_alone, _sync_clients
from common import job_payload, pg_conninfo

import denpyo

ADMIN = os.environ.get("DENPYO_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
Way = Callable[[str, Any], None]
COUNTS_TRIGGERS = ("denpyo_count_inserted", "denpyo_count_updated")
CLAIM_INDEXES = (
    "denpyo_submissions_ready",
    "denpyo_submissions_in_doubt",
    "denpyo_submissions_synced",
)
PIECES: dict[str, dict[str, list[str]]] = {
    "without the running counts' triggers": {
        "sqlite": [f"DROP TRIGGER {name}" for name in COUNTS_TRIGGERS],
        "postgresql": [
            f"ALTER TABLE denpyo_submissions DISABLE TRIGGER {name}" for name in COUNTS_TRIGGERS
        ],
    },
    "without the claim, in-doubt and synced indexes": {
        dialect: [f"DROP INDEX {name}" for name in CLAIM_INDEXES]
        for dialect in ("sqlite", "postgresql")
    },
    "without the events' index": {
        dialect: ["DROP INDEX denpyo_events_submission"] for dialect in ("sqlite", "postgresql")
    },
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def migrated(folder: Path, name: str, drops: list[str]) -> str:
    """A fresh SQLite ledger database with `drops` applied; returns its URL."""
    url = f"sqlite:///{folder / name}.db"
    with denpyo.Ledger(url) as ledger:
        ledger.migrate()
    conn = sqlite3.connect(folder / f"{name}.db")
    for statement in drops:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return url


def server_pids(database: str | None) -> list[int]:
    """The server processes of a PostgreSQL database's sessions."""
    if database is None:
        return []
    import psycopg

    with psycopg.connect(pg_conninfo(ADMIN), autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (database,)
        ).fetchall()
    return [int(pid) for (pid,) in rows]


def server_cpu(pids: list[int]) -> float:
    """CPU seconds those server processes have used (Linux: /proc/<pid>/schedstat)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):  # a session that ended meanwhile
            total += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    return total / 1e9


def pg_migrated(name: str, drops: list[str]) -> str:
    """A fresh PostgreSQL ledger database with `drops` applied; returns its URL."""
    import psycopg

    with psycopg.connect(pg_conninfo(ADMIN), autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    url = ADMIN.rsplit("/", 1)[0] + f"/{name}"
    with denpyo.Ledger(url) as ledger:
        ledger.migrate()
    with psycopg.connect(pg_conninfo(url), autocommit=True) as conn:
        for statement in drops:
            conn.execute(statement)
    return url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=800, help="calls per way and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args()
    postgres = args.database == "postgresql"
    port = free_port()
    provider = subprocess.Popen(
        [sys.executable, "-m", "denpyo.testing", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    folder = Path(tempfile.mkdtemp(prefix="denpyo-submit-floor-"))
    try:
        for _ in range(100):  # the provider is up when it accepts a connection
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        post = _sync_clients(f"http://127.0.0.1:{port}/send")["http.client"]

        databases: dict[str, str] = {}  # way -> its PostgreSQL database's name

        def database(name: str, drops: list[str] | None = None) -> str:
            if postgres:
                return pg_migrated(f"submit_floor_{name}", drops or [])
            return migrated(folder, name, drops or [])

        ways: dict[str, Way] = {"bare call": post}
        hand, _ = _handwritten(database("hand"))
        history, _ = _handwritten(database("history"), history=True)
        ways["hand-written"] = lambda k, p: hand(k, p, lambda: post(k, p))
        ways["hand-written with its history"] = lambda k, p: history(k, p, lambda: post(k, p))
        ways["denpyo's statements"] = _statements_alone(database("ours"), post)
        for n, (name, drops) in enumerate(PIECES.items()):
            ways[f"denpyo's statements {name}"] = _statements_alone(
                database(f"piece{n}", drops[args.database]), post
            )
            databases[f"denpyo's statements {name}"] = f"submit_floor_piece{n}"
        databases.update(
            {
                "hand-written": "submit_floor_hand",
                "hand-written with its history": "submit_floor_history",
                "denpyo's statements": "submit_floor_ours",
                "submit()": "submit_floor_submit",
            }
        )
        ledger = denpyo.Ledger(database("submit"))
        ledger.add_channel("inline", lambda sub: post(sub.idempotency_key, sub.payload))
        ways["submit()"] = lambda k, p: ledger.submit("inline", k, p) and None
        timings: dict[str, list[float]] = {name: [] for name in ways}
        cpu: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
        for r in range(args.rounds):
            for name, way in ways.items():
                for i in range(20):  # warm the caches and the statements
                    way(f"warm:{r}:{i}", job_payload(i))
                backends = server_pids(databases.get(name)) if postgres else []
                server, client = server_cpu(backends), time.process_time()
                started = time.perf_counter()
                for i in range(args.n):
                    way(f"{r}:{i}", job_payload(i))
                timings[name].append((time.perf_counter() - started) / args.n * 1e6)
                cpu[name].append(
                    (
                        (time.process_time() - client) / args.n * 1e6,
                        (server_cpu(backends) - server) / args.n * 1e6,
                    )
                )
        ledger.close()
    finally:
        provider.terminate()
        provider.wait()
        shutil.rmtree(folder, ignore_errors=True)
    hand_us = timings["hand-written"]
    print(f"{args.n} calls per way and round, {args.rounds} rounds; median (min-max)\n")
    server_column = " server CPU µs |" if postgres else ""
    print(f"| way | µs per call | ÷ hand-written | client CPU µs |{server_column}")
    print("|---|---|---|---|" + ("---|" if postgres else ""))
    for name, values in timings.items():
        ratio = statistics.median(v / h for v, h in zip(values, hand_us, strict=True))
        client_us = statistics.median(c for c, _ in cpu[name])
        server_us = f" {statistics.median(s for _, s in cpu[name]):,.0f} |" if postgres else ""
        print(
            f"| {name} | {statistics.median(values):,.0f} ({min(values):,.0f}–"
            f"{max(values):,.0f}) | {ratio:.2f}× | {client_us:,.0f} |{server_us}"
        )


if __name__ == "__main__":
    main()
