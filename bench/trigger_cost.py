"""What the running counts' triggers cost a write, on SQLite or MariaDB.

Two fresh databases at the latest schema, one with its counting triggers dropped;
`--rows` single-row INSERTs into denpyo_submissions and as many settles (UPDATE
requesting -> synced) on each, the two alternated for `--rounds` rounds. Each
write commits on its own, as the store writes a lone row, or (`--one-transaction`)
all in one transaction, which leaves the statements' own work. Prints the median
microseconds per write.

    PYTHONPATH=src .venv/bin/python bench/trigger_cost.py sqlite --rows 20000 --one-transaction
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
import uuid
from typing import Any

import pymysql

import denpyo
from denpyo.store.mysql import connect_args

MYSQL = "mysql://root@127.0.0.1:3306/test"
TRIGGERS = ("denpyo_count_inserted", "denpyo_count_updated", "denpyo_count_deleted")


def fresh(backend: str) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tempfile.mkdtemp()}/counts.db"
    name = f"denpyo_tc_{uuid.uuid4().hex[:8]}"
    admin = pymysql.connect(**connect_args(MYSQL), autocommit=True)
    admin.cursor().execute(f"CREATE DATABASE {name}")
    admin.close()
    return MYSQL.rsplit("/", 1)[0] + "/" + name


def connect(backend: str, url: str) -> Any:
    if backend == "sqlite":
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        return conn
    return pymysql.connect(**connect_args(url), autocommit=True)


def writes(backend: str, conn: Any, tag: str, rows: int, one: bool) -> tuple[float, float]:
    """Microseconds per insert and per settle."""
    p, key, now = ("?", "key", "strftime('%Y-%m-%d %H:%M:%f', 'now')")
    if backend == "mysql":
        p, key, now = "%s", "`key`", "UTC_TIMESTAMP(6)"
    insert = (
        f"INSERT INTO denpyo_submissions (channel, {key}, idempotency_key, payload, status, "
        f"next_attempt_at) VALUES ('c', {p}, {p}, '{{}}', 'requesting', {now})"
    )
    settle = (
        f"UPDATE denpyo_submissions SET status = 'synced', next_attempt_at = NULL, "
        f"synced_at = {now} WHERE id = {p}"
    )
    cursor = conn.cursor()
    if one:
        cursor.execute("BEGIN")
    ids = []
    started = time.perf_counter()
    for i in range(rows):
        cursor.execute(insert, (f"{tag}-{i}", f"{tag}-{i}"))
        ids.append(cursor.lastrowid)
    inserted = time.perf_counter()
    for row_id in ids:
        cursor.execute(settle, (row_id,))
    settled = time.perf_counter()
    if one:
        cursor.execute("COMMIT")
    return (inserted - started) / rows * 1e6, (settled - inserted) / rows * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("backend", choices=["sqlite", "mysql"])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--one-transaction", action="store_true")
    args = parser.parse_args()
    urls = {"with": fresh(args.backend), "without": fresh(args.backend)}
    try:
        for url in urls.values():
            with denpyo.Ledger(url) as ledger:
                ledger.migrate()
        conn = connect(args.backend, urls["without"])
        for trigger in TRIGGERS:
            conn.cursor().execute(f"DROP TRIGGER {trigger}")
        conn.close()
        times: dict[str, list[tuple[float, float]]] = {label: [] for label in urls}
        for round_ in range(args.rounds):
            for label, url in urls.items():
                conn = connect(args.backend, url)
                times[label].append(
                    writes(args.backend, conn, f"r{round_}", args.rows, args.one_transaction)
                )
                conn.close()
        for label, found in times.items():
            insert = statistics.median(x for x, _ in found)
            settle = statistics.median(y for _, y in found)
            print(f"{label} triggers: insert {insert:.1f} µs, settle {settle:.1f} µs per row")
    finally:
        if args.backend == "mysql":
            admin = pymysql.connect(**connect_args(MYSQL), autocommit=True)
            for url in urls.values():
                admin.cursor().execute(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]}")
            admin.close()


if __name__ == "__main__":
    main()
