"""What a synchronous standby costs a call (scenario `replication` of run.py).

    PYTHONPATH=src .venv/bin/python bench/replication.py [--quick] [--rows 3000]
        [--submits 300] [--rounds 3] [--json FILE]

denpyo raises `synchronous_commit` to `on` for its own sessions (where the server
or role says `off` or `local`): the commit of a row, and of the attempt's start,
is on disk and on every synchronous standby before its call leaves. What that
costs depends on the replication the database runs, so the same work is measured
on a pair of PostgreSQL servers of the bench's own (tests/acceptance/pg_pair.py:
initdb, a streaming standby, fsync on), in four set-ups:

- `alone`: the standby stopped; commits wait for the primary's disk only;
- `async`: a streaming standby, asynchronous (commits do not wait for it);
- `sync`: the standby synchronous (`synchronous_standby_names`), commits wait
  until it has flushed them (`synchronous_commit = on`, denpyo's default);
- `sync_remote_write`: the same, the role set to `remote_write` (the standby has
  written the commit, not yet flushed it): kept by denpyo, which raises only
  `off` and `local`.

Per set-up: an inline `submit` (record, call, settle: two commits per call) done
`--submits` times in a row, its median latency; and a worker (`work(until_idle,
concurrency 16)`) over `--rows` enqueued rows, calls per second. The channel's
call does nothing, so what is measured is the commits. The standby is on the same
machine: a real one adds the network's round trip to each commit that waits.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT / "tests" / "acceptance"))
sys.path.insert(0, str(ROOT / "tests"))

import psycopg  # noqa: E402
from pg_pair import PgPair  # noqa: E402

import denpyo  # noqa: E402

SETUPS = ("alone", "async", "sync", "sync_remote_write")
CHANNEL = "bench"


def measure(setup: str, rows: int, submits: int) -> dict[str, float]:
    with PgPair(synchronous=setup.startswith("sync"), fsync=True) as pair:
        url = pair.primary_url
        if setup == "alone":
            pair.stop_standby()
        if setup == "sync_remote_write":
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("ALTER ROLE postgres SET synchronous_commit = remote_write")
        with denpyo.Ledger(url) as ledger:
            ledger.migrate()

            @ledger.channel(CHANNEL, lease=30)
            async def send(sub: denpyo.Submission) -> str:
                return f"r{sub.id}"

            latencies = []
            for n in range(submits):
                started = time.perf_counter()
                ledger.submit(CHANNEL, f"inline:{n}", {"n": n})
                latencies.append(time.perf_counter() - started)
            ledger.enqueue_many(CHANNEL, [(f"row:{n}", {"n": n}) for n in range(rows)])
            started = time.perf_counter()
            ledger.work(until_idle=True, concurrency=16)
            seconds = time.perf_counter() - started
            durability = ledger.store.durability()
        return {
            "submit_ms": statistics.median(latencies) * 1000,
            "worker_calls_per_s": rows / seconds,
            "synchronous_commit": durability.synchronous_commit if durability else "",
            "at_risk": bool(durability and durability.risk),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--submits", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.rows, args.submits, args.rounds = 300, 30, 1
    runs: dict[str, list[dict[str, float]]] = {setup: [] for setup in SETUPS}
    for _ in range(args.rounds):
        for setup in SETUPS:
            runs[setup].append(measure(setup, args.rows, args.submits))
    results: dict[str, Any] = {}
    for setup, found in runs.items():
        results[setup] = {
            "submit_ms": statistics.median(r["submit_ms"] for r in found),
            "worker_calls_per_s": statistics.median(r["worker_calls_per_s"] for r in found),
            "synchronous_commit": found[0]["synchronous_commit"],
            "at_risk": found[0]["at_risk"],
        }
    base = results["alone"]
    print(
        f"{'set-up':<18} {'commit':<13} {'submit ms':>9} {'x':>6} {'worker/s':>9} {'x':>6}  at risk"
    )
    for setup, got in results.items():
        print(
            f"{setup:<18} {got['synchronous_commit']:<13} {got['submit_ms']:>9.2f} "
            f"{got['submit_ms'] / base['submit_ms']:>6.2f} {got['worker_calls_per_s']:>9.0f} "
            f"{got['worker_calls_per_s'] / base['worker_calls_per_s']:>6.2f}  {got['at_risk']}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
