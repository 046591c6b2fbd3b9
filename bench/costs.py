"""What denpyo costs, for a person deciding: commits, bytes and CPU, on a real database.

    PYTHONPATH=src .venv/bin/python bench/costs.py [--backend sqlite|postgresql|mysql]
        [--n 2000] [--quick]

On a fresh database of `--backend`, with the fake provider (`python -m
denpyo.testing`) in a process of its own and an HTTP channel (`HttpChannel`)
calling it:

1. Commits: `--n` submits (each a real call), then `--n` rows enqueued in one
   `enqueue_many` and sent by a worker (`Ledger.work(until_idle=True)`); the
   transactions committed, reads included, counted by the database where it can
   (PostgreSQL: `pg_stat_database.xact_commit` of the database, read once every
   connection has closed) and else by the driver (SQLite: every COMMIT, and every
   statement run outside a transaction, seen by the connection's trace callback;
   MariaDB: every `commit()` of PyMySQL's connections). The same steps with no row
   are counted too and taken off: what is left is per row.
2. Bytes, tables with their indexes (PostgreSQL `pg_total_relation_size`, SQLite
   `dbstat`, MariaDB `information_schema.TABLES` after `ANALYZE TABLE`, whose
   figures InnoDB estimates by pages), before and after: per row of
   `denpyo_submissions`, per event of `denpyo_events`, and, after `prune`, per
   remembered key of `denpyo_keys`.
3. CPU per call in the worker: this process's CPU time (`os.times`: user and
   system) while the worker sends the `--n` enqueued rows, divided by `--n`. It
   counts the worker's claims, calls and settles, and on SQLite the database too
   (it runs in this process); not the provider's, nor a database server's.
4. A partition drop (PostgreSQL only): a day of `--n` settled rows written into the
   partitioned layout (pg_partman), then `prune`: the seconds to remember its keys
   (no lock on the table) and the seconds of the drop itself (its lock held), as the
   store logs them.

`--quick` (a test runs it so) uses 20 rows: the figures are then not meaningful,
only their form. Each line it prints is `name: number unit`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import platform
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kept_keys import fresh_url

import denpyo
from denpyo.channels.http import HttpChannel

CHANNEL = "invoice-email"
PAYLOAD = {"to": "customer-42@example.com", "order": 42, "amount": 4200, "template": "invoice"}
TABLES = ("denpyo_submissions", "denpyo_events", "denpyo_keys")
ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


# -- counting commits ------------------------------------------------------------------------


class Commits:
    """Transactions committed on the measured database since the start: counted by
    PostgreSQL itself, or by the driver (SQLite, MariaDB) once `install` has run."""

    def __init__(self, backend: str, url: str) -> None:
        self.backend, self.url, self.seen = backend, url, 0

    def install(self) -> None:
        if self.backend == "sqlite":
            self._trace_sqlite()
        elif self.backend == "mysql":
            self._count_pymysql()

    def _trace_sqlite(self) -> None:
        real = sqlite3.connect

        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn = real(*args, **kwargs)
            inside = [False]

            def statement(sql: str) -> None:
                word = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
                if word == "BEGIN":
                    inside[0] = True
                elif word in ("COMMIT", "END"):
                    inside[0] = False
                    self.seen += 1
                elif word == "ROLLBACK":
                    inside[0] = False
                elif not inside[0] and word != "PRAGMA":
                    self.seen += 1  # a statement on its own is its own transaction

            conn.set_trace_callback(statement)
            return conn

        sqlite3.connect = connect  # type: ignore[assignment]

    def _count_pymysql(self) -> None:
        import pymysql.connections

        real = pymysql.connections.Connection.commit

        def commit(conn: Any) -> None:
            self.seen += 1
            real(conn)

        pymysql.connections.Connection.commit = commit  # type: ignore[method-assign]

    def now(self) -> int:
        """The count so far; on PostgreSQL, once it stops moving (a backend reports its
        counts when it exits, and the ledger's have just closed)."""
        if self.backend != "postgresql":
            return self.seen
        import psycopg

        name = self.url.rsplit("/", 1)[1]
        last, still = -1, 0
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            while still < 3:
                conn.execute("SELECT pg_stat_clear_snapshot()")
                row = conn.execute(
                    "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (name,)
                ).fetchone()
                value = int(row[0]) if row else 0
                still = still + 1 if value == last else 0
                last = value
                time.sleep(0.4)
        return last


def per_row(
    commits: Commits,
    open_ledger: Callable[[], denpyo.Ledger],
    step: Callable[[denpyo.Ledger, int], None],
    n: int,
) -> float:
    """Commits per row of `step(ledger, n)`, less those of `step(ledger, 0)` (opening,
    closing, the worker's polls): each on a ledger of its own, closed before counting."""
    spent = []
    for rows in (0, n):
        before = commits.now()
        with open_ledger() as ledger:
            step(ledger, rows)
        spent.append(commits.now() - before)
    return (spent[1] - spent[0]) / n


# -- sizes ------------------------------------------------------------------------------------


def connect(backend: str, url: str) -> Any:
    """A plain driver connection to the database measured, for its sizes."""
    if backend == "sqlite":
        from denpyo.store import sqlite_path

        return sqlite3.connect(sqlite_path(url))
    if backend == "postgresql":
        import psycopg

        return psycopg.connect(url, autocommit=True)
    import pymysql

    return pymysql.connect(host="127.0.0.1", user="root", database=url.rsplit("/", 1)[1])


def sizes(backend: str, url: str) -> dict[str, int]:
    """Bytes of each table with its indexes, and its rows."""
    found: dict[str, int] = {}
    conn = connect(backend, url)
    try:
        cursor = conn.cursor()
        for table in TABLES:
            if backend == "postgresql":
                query = f"SELECT pg_total_relation_size('{table}')"
            elif backend == "mysql":
                cursor.execute(f"ANALYZE TABLE {table}")
                cursor.fetchall()
                query = (
                    "SELECT data_length + index_length FROM information_schema.TABLES "
                    f"WHERE table_schema = DATABASE() AND table_name = '{table}'"
                )
            else:
                query = (
                    "SELECT SUM(pgsize) FROM dbstat WHERE name IN (SELECT name FROM "
                    f"sqlite_master WHERE tbl_name = '{table}')"
                )
            cursor.execute(query)
            found[table] = int(cursor.fetchone()[0] or 0)
            cursor.execute(f"SELECT COUNT(*) FROM {table}")
            found[f"{table} rows"] = int(cursor.fetchone()[0])
    finally:
        conn.close()
    return found


# -- the provider and the ledger ----------------------------------------------------------------


@contextlib.contextmanager
def provider() -> Iterator[str]:
    """The fake provider in a process of its own: its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "denpyo.testing", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"listening on (\S+)", line)
        assert found, f"the fake provider said {line!r}"
        yield found.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def opener(url: str, provider_url: str) -> Callable[[], denpyo.Ledger]:
    def open_ledger() -> denpyo.Ledger:
        ledger = denpyo.Ledger(url)
        http = HttpChannel(
            f"{provider_url}/send", lookup_url=f"{provider_url}/lookup/{{idempotency_key}}"
        )
        ledger.add_channel(CHANNEL, http.send, verify=http.verify)
        return ledger

    return open_ledger


def submits(ledger: denpyo.Ledger, n: int, tag: str = "s") -> None:
    for i in range(n):
        ledger.submit(CHANNEL, f"order:{tag}:{time.time_ns()}:{i}", PAYLOAD)


def enqueue(ledger: denpyo.Ledger, n: int, tag: str) -> None:
    stamp = time.time_ns()
    ledger.enqueue_many(CHANNEL, [(f"order:{tag}:{stamp}:{i}", PAYLOAD) for i in range(n)])


def work(ledger: denpyo.Ledger) -> None:
    ledger.work(until_idle=True, poll_interval=0.05)


def worker_calls(ledger: denpyo.Ledger, n: int) -> None:
    enqueue(ledger, n, "w")
    work(ledger)


def cpu() -> float:
    times = os.times()
    return times.user + times.system


# -- the partition drop --------------------------------------------------------------------------


def partition_drop(n: int) -> tuple[int, float, float]:
    """Rows dropped, seconds remembering their keys, seconds of the drop (lock held)."""
    from partitions import Layout

    layout = Layout("partitioned")
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    store_log = logging.getLogger("denpyo.store")
    store_log.addHandler(handler)
    store_log.setLevel(logging.INFO)
    try:
        day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        day -= timedelta(days=3)
        layout.fill_day(day, n)
        layout.ledger.prune(older_than=2 * 86_400 + 3600)
    finally:
        store_log.removeHandler(handler)
        layout.close()
    for line in said:
        found = re.search(r"dropped: (\d+) rows; .* keys ([\d.]+) s, drop ([\d.]+) s", line)
        if found:
            return int(found.group(1)), float(found.group(2)), float(found.group(3))
    raise AssertionError(f"no partition was dropped: {said}")


# -- the run ---------------------------------------------------------------------------------------


def busy() -> str:
    """The load average over the last minute, and the cores: what else was running."""
    return f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "mysql"), default="sqlite")
    parser.add_argument("--n", type=int, default=2000, help="rows per measurement")
    parser.add_argument("--quick", action="store_true", help="20 rows: the form, not the figures")
    args = parser.parse_args(argv)
    n = 20 if args.quick else args.n
    logging.getLogger("denpyo").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as folder:
        url, drop = fresh_url(args.backend, folder)
        try:
            lines = measure(args.backend, url, n)
        finally:
            drop()
    print(
        f"denpyo {version('denpyo')} costs on {args.backend}, n={n}, "
        f"{platform.python_implementation()} {platform.python_version()}, {busy()}"
    )
    for line in lines:
        print(line)
    return 0


def measure(backend: str, url: str, n: int) -> list[str]:
    commits = Commits(backend, url)
    commits.install()
    with denpyo.Ledger(url) as ledger:
        ledger.migrate()
    lines = []
    with provider() as provider_url:
        open_ledger = opener(url, provider_url)
        lines.append(f"commits per submit: {per_row(commits, open_ledger, submits, n):.2f}")
        worker = per_row(commits, open_ledger, worker_calls, n)
        lines.append(f"commits per call sent by a worker: {worker:.2f}")
        with open_ledger() as ledger:
            empty = sizes(backend, url)
            submits(ledger, n, "b")
            full = sizes(backend, url)
            ledger.prune(older_than=0)
            pruned = sizes(backend, url)
            enqueue(ledger, n, "cpu")
            started = cpu()
            work(ledger)
            spent = cpu() - started

        def grown(before: dict[str, int], after: dict[str, int], table: str) -> float:
            rows = after[f"{table} rows"] - before[f"{table} rows"]
            return (after[table] - before[table]) / max(rows, 1)

        rows, events, keys = TABLES
        added = (full[f"{events} rows"] - empty[f"{events} rows"]) / n
        lines.append(f"bytes per row: {grown(empty, full, rows):.0f}")
        lines.append(f"bytes per event: {grown(empty, full, events):.0f}")
        lines.append(f"events per call: {added:.1f}")
        lines.append(f"bytes per remembered key: {grown(full, pruned, keys):.0f}")
        lines.append(f"CPU per call in the worker: {spent / n * 1e6:.0f} µs")
    if backend == "postgresql":
        dropped, keys_s, drop_s = partition_drop(n)
        lines.append(f"partition drop, rows: {dropped}")
        lines.append(f"partition drop, remembering the keys: {keys_s:.3f} s")
        lines.append(f"partition drop, the drop itself (lock held): {drop_s:.3f} s")
    return lines


if __name__ == "__main__":
    sys.exit(main())
