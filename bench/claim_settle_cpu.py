"""Client and server CPU per row of the worker's claims and settles, by statement.

    PYTHONPATH=src .venv/bin/python bench/claim_settle_cpu.py [--rows 20000] [--rounds 2]

One connection, no concurrency: claim 64 due rows, settle them as synced, until
none is left, on a fresh database of `--rows` rows (no ANALYZE: a young table,
as the dispatch benchmark's). Three ways, rounds alternated:

- `floor`: the two hand-written statements of `bench/peers/floor.py` on the bare
  driver (no Submission, no Move);
- `settle_many`: the store's claim (`claim_submissions_ready`, rows read by
  `to_submission`) and the worker's settle (a `Settle` of each row, written
  by `settle_submissions_many`, read back by `moved`);
- `move_batch`: the same, the settles written as general moves by
  `move_submissions_batch` (the JSON recordset every other group of moves takes).

It prints this process's CPU per row (`time.process_time`) and the CPU per row
of the PostgreSQL session serving it (`/proc/<pid>/stat`, 10 ms ticks), split
between the claims and the settles.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg
from drivers import CHANNEL, filled_database, rounds_of
from peers.floor import CLAIM, SETTLE, _named
from psycopg.rows import dict_row

from denpyo.domain.moves import Settle
from denpyo.domain.policy import AttemptDecision
from denpyo.domain.status import Status
from denpyo.store.postgresql import PostgresStore
from denpyo.store.postgresql_async import _batch_params, _claim_statement, _statements

WORKER, LIMIT = "w", 64
WAYS = ("floor", "settle_many", "move_batch")
TICK = os.sysconf("SC_CLK_TCK")


def session_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


async def drain(
    store: PostgresStore, conn: psycopg.AsyncConnection[dict[str, Any]], way: str
) -> tuple[float, float, float]:
    """Claim and settle every row; µs per row: client, server claims, server settles."""
    found = await (await conn.execute("SELECT pg_backend_pid() AS pid")).fetchone()
    assert found is not None
    pid = int(found["pid"])
    client, server, claims, done = time.process_time(), session_cpu(pid), 0.0, 0
    while True:
        before = session_cpu(pid)
        if way == "floor":
            params = {"p1": CHANNEL, "p2": LIMIT, "p3": WORKER, "p4": 30.0}
            rows = await (await conn.execute(_named(CLAIM, 4), params)).fetchall()
            claims += session_cpu(pid) - before
            if not rows:
                break
            ids, remote_ids = [row["id"] for row in rows], [f"r{row['id']}" for row in rows]
            params = {"p1": ids, "p2": remote_ids, "p3": WORKER}
            await (await conn.execute(_named(SETTLE, 3), params)).fetchall()
            done += len(rows)
            continue
        query, params = _claim_statement(CHANNEL, WORKER, LIMIT, 30.0, in_doubt=False)
        held = [
            store.to_submission(row)
            for row in await (await conn.execute(store.queries[query], params)).fetchall()
        ]
        claims += session_cpu(pid) - before
        if not held:
            break
        settles = [
            Settle.of(sub, WORKER, AttemptDecision(Status.SYNCED, remote_id=f"r{sub.id}"), 0)
            for sub in held
        ]
        if way == "settle_many":
            statements = _statements(settles)
        else:
            moves = [(ordinal, settle.as_move()) for ordinal, settle in enumerate(settles)]
            statements = [(("move_submissions_batch", _batch_params(moves)), list(moves))]
        returned = [
            await (await conn.execute(store.queries[query], params)).fetchall()
            for (query, params), _ in statements
        ]
        assert all(store.moved(statements, returned, len(settles)))
        done += len(held)
    await asyncio.sleep(0.1)  # the session's last ticks
    settles = session_cpu(pid) - server - claims
    return (time.process_time() - client) / done * 1e6, claims / done * 1e6, settles / done * 1e6


def one_round(way: str, rows: int) -> tuple[float, float, float]:
    with filled_database(rows) as (store, url):

        async def run() -> tuple[float, float, float]:
            conn = await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row)
            async with conn:
                return await drain(store, conn, way)

        return asyncio.run(run())


def main() -> None:
    args, results = rounds_of(__doc__ or "", WAYS, one_round, rounds=2)
    print(f"µs of CPU per row, median of {args.rounds} rounds of {args.rows:,} rows")
    print(f"{'way':12} {'client':>7} {'server claim':>13} {'server settle':>14}")
    for way, rounds in results.items():
        client, claim, settle = (statistics.median(column) for column in zip(*rounds, strict=True))
        print(f"{way:12} {client:7.1f} {claim:13.1f} {settle:14.1f}")


if __name__ == "__main__":
    main()
