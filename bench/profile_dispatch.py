"""Where a peer's worker spends its CPU per job: cProfile of one dispatch.

    PYTHONPATH=src:bench bench/.venv-peers/bin/python bench/profile_dispatch.py \\
        denpyo_peer --port 18555 [--jobs 10000] [--concurrency 64] [--top 30] [--no-profile]

Start the fake provider first (`python -m denpyo.testing --port 18555 --latency 0`).
On a fresh PostgreSQL database (`prof_<peer>`) it enqueues `--jobs` rows with
the peer's bulk enqueue, then runs the peer's `dispatch` in this process under
cProfile, and prints the jobs/s, the CPU per job (`time.process_time()`), the
profiled time per job by package, and by function for denpyo's code and the
bench's own (the peers' loops). Profiling inflates everything about 1.5–2×,
the HTTP client most: compare two peers, or two trees (PYTHONPATH), run by
run, alternated. `--no-profile` gives the CPU per job alone.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib
import os
import pstats
import time
from collections import Counter

import psycopg
from common import Ctx

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
PACKAGES = ("denpyo", "aiohttp", "asyncio", "psycopg", "json", "peers", "yarl", "multidict")


def package_of(path: str) -> str:
    for name in PACKAGES:
        if f"/{name}/" in path or path.endswith(f"/{name}.py"):
            return name
    return "builtins" if path == "~" else os.path.basename(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("peer", help="a module of bench/peers, e.g. denpyo_peer, floor_call")
    parser.add_argument("--port", type=int, required=True, help="the fake provider's port")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--top", type=int, default=30, help="functions to list")
    parser.add_argument("--no-profile", action="store_true", help="the CPU per job alone")
    args = parser.parse_args()

    database = f"prof_{args.peer}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {database}")
    peer = importlib.import_module(f"peers.{args.peer}")
    ctx = Ctx(
        db_url=f"postgresql://postgres@127.0.0.1:5432/{database}",
        provider_url=f"http://127.0.0.1:{args.port}",
    )
    asyncio.run(peer.setup(ctx))
    asyncio.run(peer.enqueue(ctx, args.jobs, bulk=True))

    profile = None if args.no_profile else cProfile.Profile()
    wall, cpu = time.perf_counter(), time.process_time()
    if profile is not None:
        profile.enable()
    asyncio.run(peer.dispatch(ctx, args.jobs, args.concurrency))
    if profile is not None:
        profile.disable()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    per_job = 1e6 / args.jobs
    print(f"{args.peer}: {args.jobs / wall:,.0f} jobs/s, {cpu * per_job:.0f} µs of CPU per job")
    if profile is None:
        return

    by_package: Counter[str] = Counter()
    by_function: Counter[str] = Counter()
    for (path, _, function), (_, _, own, _, _) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
        by_package[package_of(path)] += own
        if "/denpyo/" in path or "/bench/peers/" in path:
            by_function[f"{os.path.basename(path)}:{function}"] += own
    print("profiled µs per job, by package:")
    for name, own in by_package.most_common(12):
        print(f"  {name:24} {own * per_job:7.1f}")
    print("by function (denpyo's, the peers'):")
    for name, own in by_function.most_common(args.top):
        print(f"  {name:50} {own * per_job:6.1f}")


if __name__ == "__main__":
    main()
