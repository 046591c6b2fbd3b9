"""What keeping removed rows' keys costs: bytes per remembered key, and a submit of a
known key whose row was pruned against one whose row is live.

    PYTHONPATH=src .venv/bin/python bench/kept_keys.py [--keys 200000] [--submits 2000]
        [--databases sqlite,postgresql,mysql]

For each database, on a fresh one: `--keys` keys are remembered (written straight
into denpyo_keys with realistic values: a channel name, `order:<n>` keys, a UUID
idempotency key, a provider's id, times), and the size of the table with its
indexes is read from the database (PostgreSQL `pg_total_relation_size`, MariaDB
`information_schema.TABLES` after `ANALYZE TABLE`, SQLite `dbstat`). Then
`--submits` submits of one pruned key and of one live synced key, alternated in
rounds: both call nothing; the figure is the client's wall time per submit.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import denpyo

URLS = {
    "postgresql": "postgresql://postgres@127.0.0.1:5432/{name}",
    "mysql": "mysql://root@127.0.0.1:3306/{name}",
}


def fresh_url(database: str, folder: str) -> tuple[str, Any]:
    """A new empty database and how to drop it."""
    name = f"denpyo_bench_{uuid.uuid4().hex[:10]}"
    if database == "sqlite":
        return f"sqlite:///{folder}/{name}.db", lambda: None
    if database == "postgresql":
        import psycopg

        with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as c:
            c.execute(f"CREATE DATABASE {name}")

        def drop() -> None:
            with psycopg.connect(
                "postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True
            ) as c:
                c.execute(f"DROP DATABASE {name} WITH (FORCE)")

        return URLS[database].format(name=name), drop
    import pymysql

    conn = pymysql.connect(host="127.0.0.1", user="root", autocommit=True)
    conn.cursor().execute(f"CREATE DATABASE {name}")

    def drop_mysql() -> None:
        conn.cursor().execute(f"DROP DATABASE {name}")

    return URLS[database].format(name=name), drop_mysql


def remember(database: str, n: int) -> None:
    """`n` keys in denpyo_keys, as a prune of synced rows leaves them."""
    rows = [
        {
            "channel": "invoice-email",
            "key": f"order:{i}",
            "idem": str(uuid.uuid4()),
            "id": 1_000_000 + i,
            "remote": f"msg_{uuid.uuid4().hex[:20]}",
        }
        for i in range(n)
    ]
    mark = "?" if database == "sqlite" else "%s"
    now = (
        "strftime('%Y-%m-%d %H:%M:%f', 'now')"
        if database == "sqlite"
        else ("now()" if database == "postgresql" else "UTC_TIMESTAMP(6)")
    )
    key = "`key`" if database == "mysql" else "key"
    sql = (
        f"INSERT INTO denpyo_keys (channel, {key}, idempotency_key, submission_id, status, "
        f"attempts, remote_id, created_at, synced_at) VALUES ({mark}, {mark}, {mark}, {mark}, "
        f"'synced', 1, {mark}, {now}, {now})"
    )
    conn = connect(database)
    cursor = conn.cursor()
    for start in range(0, n, 10_000):
        chunk = rows[start : start + 10_000]
        cursor.executemany(
            sql, [(r["channel"], r["key"], r["idem"], r["id"], r["remote"]) for r in chunk]
        )
        conn.commit()


def connect(database: str) -> Any:
    """A plain driver connection to the database being measured."""
    url = store_url[0]
    if database == "sqlite":
        import sqlite3

        return sqlite3.connect(url.split("///", 1)[1])
    if database == "postgresql":
        import psycopg

        return psycopg.connect(url)
    import pymysql

    name = url.rsplit("/", 1)[1]
    return pymysql.connect(host="127.0.0.1", user="root", database=name)


store_url: list[str] = [""]


def size_of_keys(database: str) -> int:
    conn = connect(database)
    cursor = conn.cursor()
    if database == "postgresql":
        cursor.execute("SELECT pg_total_relation_size('denpyo_keys')")
    elif database == "mysql":
        cursor.execute("ANALYZE TABLE denpyo_keys")
        cursor.fetchall()
        cursor.execute(
            "SELECT data_length + index_length FROM information_schema.TABLES "
            "WHERE table_schema = DATABASE() AND table_name = 'denpyo_keys'"
        )
    else:
        cursor.execute(
            "SELECT SUM(pgsize) FROM dbstat WHERE name = 'denpyo_keys' "
            "OR name LIKE 'denpyo_keys_%' OR name LIKE 'sqlite_autoindex_denpyo_keys%'"
        )
    (size,) = cursor.fetchone()
    conn.close()
    return int(size)


def submits(ledger: denpyo.Ledger, n: int) -> tuple[float, float]:
    """µs per submit of a pruned key and of a live synced key, alternated rounds."""
    pruned, live = [], []
    for _ in range(4):
        for key, into in (("pruned", pruned), ("live", live)):
            started = time.perf_counter()
            for _ in range(n // 4):
                ledger.submit("invoice-email", key, {"to": "a@example.com"})
            into.append((time.perf_counter() - started) / (n // 4) * 1e6)
    return statistics.median(pruned), statistics.median(live)


def run(database: str, keys: int, n: int, folder: str) -> None:
    url, drop = fresh_url(database, folder)
    store_url[0] = url
    try:
        with denpyo.Ledger(url) as ledger:
            ledger.migrate()
            calls: list[str] = []
            ledger.channel("invoice-email")(lambda sub: calls.append(sub.key) or "msg")
            ledger.submit("invoice-email", "pruned", {"to": "a@example.com"})
            ledger.prune(older_than=0)
            ledger.submit("invoice-email", "live", {"to": "a@example.com"})
            remember(database, keys)
            size = size_of_keys(database)
            pruned, live = submits(ledger, n)
            assert calls == ["pruned", "live"], calls
        print(
            f"| {database} | {keys:,} | {size / keys:,.0f} | {size / keys * 1e6 / 2**20:,.0f} MiB "
            f"| {pruned:,.0f} | {live:,.0f} | {pruned / live:.2f}× |"
        )
    finally:
        drop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--submits", type=int, default=2000)
    parser.add_argument("--databases", default="sqlite,postgresql,mysql")
    args = parser.parse_args()
    print(
        "| database | keys | bytes per key | per million keys | submit of a pruned key, µs "
        "| of a live key, µs | pruned ÷ live |"
    )
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for database in args.databases.split(","):
            run(database, args.keys, args.submits, folder)


if __name__ == "__main__":
    main()
