"""psycopg against asyncpg for the worker's claims and settles, side by side.

    PYTHONPATH=src .venv/bin/python bench/drivers.py [--rows 20000] [--rounds 3]

The store's own statements (`claim_submissions_ready`, then `settle_submissions_many`
settling the 64 rows it claimed as synced), its own parameters and its own rows
(`to_submission`), one after the other on one connection, through the two
drivers in turn on fresh databases, rounds alternated. It prints the client CPU
per row of each (`time.process_time`, so time spent waiting on PostgreSQL is not
counted): what a second driver would save the worker's hot path.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import asyncpg
import psycopg

import denpyo
from denpyo.domain.moves import Move
from denpyo.domain.status import Status
from denpyo.store.params import distinct_groups
from denpyo.store.postgresql import PostgresStore
from denpyo.store.postgresql_async import _claim_statement, _move_statement

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
CHANNEL, WORKER, CLAIM = "bench", "bench-drivers", 64
Run = Callable[[str, Mapping[str, Any]], Awaitable[list[Any]]]


def positional(sql: str) -> tuple[str, list[str]]:
    """psycopg's named placeholders as asyncpg's $1…$n, and the names in their order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)[sb]", number, sql), names


async def drain(store: PostgresStore, run: Run) -> tuple[float, float]:
    """Claim and settle every row; client CPU µs per row of the claims and of the settles."""
    claiming = settling = 0.0
    done = 0
    while True:
        started = time.process_time()
        query, params = _claim_statement(CHANNEL, WORKER, CLAIM, 30.0, in_doubt=False)
        rows = [store.to_submission(row) for row in await run(query, params)]
        claimed = time.process_time()
        if not rows:
            break
        moves = [
            Move(
                sub.id,
                Status.REQUESTING,
                Status.SYNCED,
                WORKER,
                holder=sub.locked_by,
                event="settle",
                remote_id=f"r{sub.id}",
                detail=f"r{sub.id}",
                duration_ms=0,
                row=sub,
            )
            for sub in rows
        ]
        made = time.process_time()
        runs = distinct_groups(moves)
        statements = [_move_statement(each) for each in runs]
        returned = [await run(*statement) for statement in statements]
        moved = store.moved(zip(runs, statements, returned, strict=True), len(moves))
        assert all(sub is not None for sub in moved)
        settling += time.process_time() - made
        claiming += claimed - started
        done += len(rows)
    return claiming / done * 1e6, settling / done * 1e6


async def with_psycopg(store: PostgresStore) -> tuple[float, float]:
    native = store.async_ops(db=None)  # type: ignore[arg-type]
    await native.open()
    try:
        conn_pool = native.pool  # type: ignore[attr-defined]
        async with conn_pool.connection() as conn:

            async def run(query: str, params: Mapping[str, Any]) -> list[Any]:
                cursor = await conn.execute(store.queries[query], params)
                return await cursor.fetchall()  # type: ignore[no-any-return]

            return await drain(store, run)
    finally:
        await native.close()


async def with_asyncpg(store: PostgresStore, url: str) -> tuple[float, float]:
    conn = await asyncpg.connect(url)
    prepared: dict[str, tuple[Any, list[str]]] = {}

    async def run(query: str, params: Mapping[str, Any]) -> list[Any]:
        if query not in prepared:
            sql, names = positional(store.queries[query])
            prepared[query] = (await conn.prepare(sql), names)
        statement, names = prepared[query]
        return list(await statement.fetch(*[params[name] for name in names]))

    try:
        return await drain(store, run)
    finally:
        await conn.close()


@contextmanager
def filled_database(rows: int) -> Iterator[tuple[PostgresStore, str]]:
    """A fresh database with `rows` due jobs on the bench channel (no ANALYZE: a
    young table), its store and URL; dropped afterwards."""
    name = f"bench_drivers_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = ADMIN.rsplit("/", 1)[0] + f"/{name}"
    try:
        with denpyo.Ledger(url) as ledger:
            ledger.add_channel(CHANNEL, lambda sub: "unused")
            ledger.migrate()
            jobs = [(f"job:{i}", {"to": f"c{i}@example.com", "order": i}) for i in range(rows)]
            ledger.enqueue_many(CHANNEL, jobs)
            store = ledger.store
            assert isinstance(store, PostgresStore)
            yield store, url
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def one_round(driver: str, rows: int) -> tuple[float, float]:
    with filled_database(rows) as (store, url):
        if driver == "psycopg":
            return asyncio.run(with_psycopg(store))
        return asyncio.run(with_asyncpg(store, url))


T = TypeVar("T")


def rounds_of(
    doc: str, ways: tuple[str, ...], one_round: Callable[[str, int], T], rounds: int
) -> tuple[argparse.Namespace, dict[str, list[T]]]:
    """`--rows` and `--rounds` from the command line, then that many rounds of
    `one_round(way, rows)`, the ways alternated within each round."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=rounds)
    args = parser.parse_args()
    if args.rows < 1 or args.rounds < 1:
        parser.error("--rows and --rounds must be at least 1")
    results: dict[str, list[T]] = {way: [] for way in ways}
    for _ in range(args.rounds):
        for way in ways:
            results[way].append(one_round(way, args.rows))
    return args, results


def main() -> None:
    args, results = rounds_of(__doc__ or "", ("psycopg", "asyncpg"), one_round, rounds=3)
    print(f"client CPU µs per row, median of {args.rounds} rounds of {args.rows:,} rows")
    print(f"{'driver':<10}{'claim':>8}{'settle':>8}{'total':>8}")
    for driver, runs in results.items():
        claim = statistics.median(c for c, _ in runs)
        settle = statistics.median(s for _, s in runs)
        total = statistics.median(c + s for c, s in runs)
        print(f"{driver:<10}{claim:>8.1f}{settle:>8.1f}{total:>8.1f}")


if __name__ == "__main__":
    main()
