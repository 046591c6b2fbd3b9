"""The floor under a bulk enqueue: the same rows, written in the cheapest ways there are.

    PYTHONPATH=src .venv/bin/python bench/enqueue_floor.py [--n 20000] [--rounds 5]

Each way runs on a fresh PostgreSQL database (a copy of one migrated template), in
one transaction, timed from connecting to the commit as `bench/run.py --only enqueue`
times a peer; the ways take turns, round after round:

- `denpyo`: `Ledger.enqueue_many` (the row, its `created` event, NOTIFY at commit);
- `outbox executemany`: the hand-written outbox's INSERT
  (`bench/peers/outbox.py`): its own table (three indexes, no trigger), no history;
- `denpyo_submissions executemany`: the same INSERT by hand into denpyo's table,
  with the columns denpyo writes, no events (the bulk enqueue target's baseline);
- `COPY`: the same rows and columns COPYed into denpyo's table, nothing else;
- `COPY + events`: and their `created` events (one INSERT ... SELECT).

Prints rows/s (median, min-max), and per way the median CPU of the client process
and of the server backends that did the work (Linux: /proc/<pid>/schedstat).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import job_payload
from peers import outbox
from peers.denpyo_peer import HANDWRITTEN as INSERT  # the bench's same-table baseline

import denpyo

ADMIN = os.environ.get("DENPYO_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")

COLUMNS = "channel, key, idempotency_key, payload, status, attempts, next_attempt_at"
COPY = f"COPY denpyo_submissions ({COLUMNS}) FROM STDIN"
EVENTS = """
INSERT INTO denpyo_events (submission_id, kind, from_status, to_status, attempt, actor)
SELECT id, 'created', NULL, 'requesting', 0, 'floor' FROM denpyo_submissions ORDER BY id
"""


def backend_cpu(conn: Any) -> float:
    """CPU seconds the connection's server process has used (0 off Linux)."""
    try:
        text = Path(f"/proc/{conn.info.backend_pid}/schedstat").read_text()
    except OSError:
        return 0.0
    return int(text.split()[0]) / 1e9


def by_denpyo(url: str, n: int) -> float:
    ledger = denpyo.Ledger(url)
    ledger.add_channel("bench", lambda sub: None)
    try:
        assert ledger.enqueue_many("bench", [(f"job:{i}", job_payload(i)) for i in range(n)]) == n
        with ledger.store.pool.connection() as conn:  # type: ignore[attr-defined]
            return backend_cpu(conn)  # the pool's one connection did the work
    finally:
        ledger.close()


def by_outbox(url: str, n: int) -> float:
    with psycopg.connect(url) as conn:
        with conn.cursor() as cur:
            cur.executemany(
                outbox.INSERT, ((f"outbox:{i}", Jsonb(job_payload(i))) for i in range(n))
            )
        conn.commit()
        return backend_cpu(conn)


def by_insert(url: str, n: int) -> float:
    rows = (("bench", f"job:{i}", str(uuid.uuid4()), Jsonb(job_payload(i))) for i in range(n))
    with psycopg.connect(url) as conn:
        with conn.cursor() as cur:
            cur.executemany(INSERT, rows)
        conn.commit()
        return backend_cpu(conn)


def _copy(conn: psycopg.Connection[Any], n: int) -> None:
    encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    with conn.cursor() as cur, cur.copy(COPY) as copy:
        for i in range(n):
            row = ("bench", f"job:{i}", str(uuid.uuid4()), encode(job_payload(i)))
            copy.write_row((*row, "requesting", 0, "now"))


def by_copy(url: str, n: int) -> float:
    with psycopg.connect(url) as conn:
        _copy(conn, n)
        conn.commit()
        return backend_cpu(conn)


def by_copy_events(url: str, n: int) -> float:
    with psycopg.connect(url) as conn:
        _copy(conn, n)
        conn.execute(EVENTS)
        conn.commit()
        return backend_cpu(conn)


WAYS: dict[str, Callable[[str, int], float]] = {
    "denpyo enqueue_many": by_denpyo,
    "outbox executemany (its own, lighter table)": by_outbox,
    "denpyo_submissions executemany (the target's baseline)": by_insert,
    "COPY into denpyo_submissions": by_copy,
    "COPY + created events": by_copy_events,
}


class Databases:
    """Fresh databases copied from one migrated template (denpyo's tables and the outbox's)."""

    def __init__(self) -> None:
        self.admin = psycopg.connect(ADMIN, autocommit=True)
        self.template = self.create()
        with denpyo.Ledger(self.url(self.template)) as ledger:
            ledger.migrate()
        with psycopg.connect(self.url(self.template), autocommit=True) as conn:
            conn.execute(outbox.SCHEMA)

    def create(self, template: str | None = None) -> str:
        name = f"denpyo_floor_{uuid.uuid4().hex[:10]}"
        clause = f" TEMPLATE {template}" if template else ""
        self.admin.execute(f"CREATE DATABASE {name}{clause}")
        return name

    def url(self, name: str) -> str:
        return f"{ADMIN.rpartition('/')[0]}/{name}"

    def drop(self, name: str) -> None:
        self.admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def close(self) -> None:
        self.drop(self.template)
        self.admin.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument(
        "--only", default="", help="ways whose name contains one of these, comma-separated"
    )
    args = p.parse_args()
    ways = {
        name: way
        for name, way in WAYS.items()
        if not args.only or any(part in name for part in args.only.split(","))
    }
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in ways}
    dbs = Databases()
    try:
        for r in range(args.rounds):
            for name, way in ways.items():
                db = dbs.create(dbs.template)
                try:
                    started, cpu = time.perf_counter(), time.process_time()
                    server = way(dbs.url(db), args.n)
                    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
                finally:
                    dbs.drop(db)
                results[name].append((args.n / seconds, cpu, server))
                print(f"round {r + 1}: {name}: {args.n / seconds:,.0f} rows/s", file=sys.stderr)
    finally:
        dbs.close()
    print(f"{args.n:,} rows, {args.rounds} rounds: rows/s median (min-max); CPU ms, median")
    print("| way | rows/s | client CPU ms | server CPU ms |\n|---|---|---|---|")
    for name, runs in results.items():
        rates = [rate for rate, _, _ in runs]
        client = statistics.median(cpu for _, cpu, _ in runs) * 1000
        server = statistics.median(srv for _, _, srv in runs) * 1000
        print(
            f"| {name} | {statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f}) "
            f"| {client:,.0f} | {server:,.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
