"""The distributed SQL profile against plain PostgreSQL, on this server: dispatch,
claims by 8 claimers, and the transactions run again per thousand calls.

    PYTHONPATH=src .venv/bin/python bench/distributed.py [--rows 3000] [--claim-rows 4000]
        [--faults 0.0] [--json FILE]

Each measurement gets a fresh database: plain PostgreSQL (its default isolation,
READ COMMITTED sessions, SKIP LOCKED claims, NOTIFY) and the profile
(`?denpyo_profile=distributed`, the database's default isolation SERIALIZABLE, the
atomic UPDATE claim, workers polling every 0.05 s).

1. Dispatch: `--rows` rows enqueued by `enqueue_many`, then `Ledger.work(until_idle=
   True, concurrency=16)` with a channel that returns at once: rows per second of
   the work (enqueue not timed).
2. Claims: `--claim-rows` rows, 8 threads each claiming 10 at a time through
   `Store.claim` until none is left: rows per second, and the claims that lost every
   try (a worker's would wait for its next poll).
3. Retries: the store's log lines of transactions that needed more than one try
   (`store/conflicts.py` logs one per such transaction, with its tries) during 1 and
   2, as tries beyond the first per thousand rows.

With `--faults R`, the profile's runs also have a share R of their statements fail as
a distributed engine's may (denpyo/testing/faults.py, seed 1).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import psycopg

import denpyo
from denpyo.errors import StoreConflict
from denpyo.store import NewSubmission, open_store
from denpyo.testing.faults import inject

SERVER = os.environ.get("DENPYO_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
PROFILE = "?denpyo_profile=distributed"


class Retries(logging.Handler):
    """Counts the tries beyond the first that the store's conflicts logged."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.extra = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "succeeded at try" in message or "gave up after" in message:
            tries = record.args[1] if isinstance(record.args, tuple) else 1
            self.extra += int(tries) - 1  # type: ignore[call-overload]


@contextmanager
def database(profile: bool) -> Iterator[str]:
    """A fresh migrated database: plain, or SERIALIZABLE under the profile."""
    name = f"denpyo_bench_{uuid.uuid4().hex[:10]}"
    base = SERVER.rpartition("/")[0]
    with psycopg.connect(SERVER, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
        if profile:
            admin.execute(
                f"ALTER DATABASE {name} SET default_transaction_isolation = 'serializable'"
            )
    url = f"{base}/{name}" + (PROFILE if profile else "")
    try:
        with denpyo.Ledger(url) as ledger:
            ledger.migrate()
        yield url
    finally:
        with psycopg.connect(SERVER, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def dispatch(url: str, rows: int) -> float:
    with denpyo.Ledger(url) as ledger:

        @ledger.channel("bench")
        async def send(sub: denpyo.Submission) -> str:
            return f"r-{sub.id}"

        ledger.enqueue_many("bench", [(f"k{i}", {"i": i}) for i in range(rows)])
        started = time.perf_counter()
        report = ledger.work(until_idle=True, concurrency=16, poll_interval=0.05)
        seconds = time.perf_counter() - started
    assert report.outcomes["synced"] == rows, report
    return rows / seconds


def claims(url: str, rows: int) -> tuple[float, int]:
    store = open_store(url)
    try:
        store.record_many(
            [NewSubmission("bench", f"k{i}", str(uuid.uuid4()), "{}") for i in range(rows)],
            actor="bench",
            check=lambda new, existing: None,
        )
        held: list[int] = []
        gave_up = [0]
        lock = threading.Lock()

        def claimer(n: int) -> None:
            while True:
                try:
                    got = store.claim(
                        "bench", holder=f"w{n}-{uuid.uuid4().hex[:6]}", limit=10, lease=600
                    )
                except StoreConflict:
                    with lock:
                        gave_up[0] += 1
                    continue
                if not got:
                    return
                with lock:
                    held.extend(sub.id for sub in got)

        started = time.perf_counter()
        threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - started
        assert len(held) == len(set(held)) == rows, "every row claimed once"
        return rows / seconds, gave_up[0]
    finally:
        store.close()


def measure(profile: bool, args: argparse.Namespace) -> dict[str, Any]:
    retries = Retries()
    logging.getLogger("denpyo.store").addHandler(retries)
    logging.getLogger("denpyo.store").setLevel(logging.INFO)
    logging.getLogger("denpyo.store").propagate = False
    faults = inject(1, args.faults) if profile and args.faults else nullcontext()
    try:
        with faults:
            with database(profile) as url:
                rate = dispatch(url, args.rows)
            with database(profile) as url:
                claim_rate, gave_up = claims(url, args.claim_rows)
    finally:
        logging.getLogger("denpyo.store").removeHandler(retries)
    return {
        "dispatch_per_s": round(rate),
        "claims_8_per_s": round(claim_rate),
        "claims_given_up": gave_up,
        "retries_per_1000": round(1000 * retries.extra / (args.rows + args.claim_rows), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--claim-rows", type=int, default=4000)
    parser.add_argument("--faults", type=float, default=0.0)
    parser.add_argument("--json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    results = {"postgresql": measure(False, args), "distributed": measure(True, args)}
    for name, figures in results.items():
        print(f"{name:12} " + " ".join(f"{key}={value}" for key, value in figures.items()))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)


if __name__ == "__main__":
    main()
