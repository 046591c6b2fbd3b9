"""PostgreSQL's partitioned layout against the plain one, same machine, same run.

    PYTHONPATH=src .venv/bin/python bench/partitions.py [--days 30] [--per-day 1000000]
        [--rows 5000] [--size-days 90] [--size-kept 30] [--size-per-day 100000] [--json FILE]

1. Hot path as the table grows: `--days` days of `--per-day` settled rows each (with
   three events per row, and in the partitioned layout every key in denpyo_keys) are
   written straight into each layout, oldest first. After day 1 and after the last
   day, `--rows` rows are recorded (one statement each, as `enqueue`), claimed by 100
   and settled by 100 (as a worker's group commit), and the CPU they cost is read:
   this process's and the database backends' (/proc). The figure is CPU microseconds
   per row, and the ratio of the last day to the first.
2. Dropping the oldest day: the partitioned layout archives it (Parquet, in a
   temporary folder) and drops it; the plain layout prunes the same rows. Reported:
   the archive's time and MB/s, the time the keys took, the drop (its lock held), and
   the plain prune's time.
3. The key memory: denpyo_keys' bytes per key (the partitioned layout keeps every
   key), and a submit of a key whose row was dropped against one whose row is live
   (both call nothing).
4. Size on disk over time: `--size-days` days of `--size-per-day` rows, keeping the
   last `--size-kept` days (each day past that, retention removes the oldest); the
   tables' and indexes' size is read every 10 days.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import denpyo
from denpyo.domain.moves import Settle
from denpyo.domain.policy import AttemptDecision
from denpyo.domain.status import Status
from denpyo.store.base import NewSubmission

ADMIN = os.environ.get("DENPYO_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
LAYOUTS = ("plain", "partitioned")
DAY = 86_400
CHUNK = 100_000
PAYLOAD_7 = {"to": "customer-7@example.com", "order": 7, "amount": 4200, "template": "invoice"}
"""The payload FILL gives row 7 of a day (a live key is submitted with it again)."""
TICKS = os.sysconf("SC_CLK_TCK")

FILL = """
WITH new AS (
    INSERT INTO denpyo_submissions (
        {id_column} channel, key, idempotency_key, payload, status, attempts, remote_id,
        created_at, updated_at, synced_at)
    SELECT {id_value} 'email', 'order:' || %(day)s || ':' || g, gen_random_uuid()::text,
        jsonb_build_object('to', 'customer-' || g || '@example.com', 'order', g,
                           'amount', 4200, 'template', 'invoice'),
        'synced', 1, 'msg-' || g,
        %(start)s::timestamptz + g * %(step)s * interval '1 microsecond',
        %(start)s::timestamptz + g * %(step)s * interval '1 microsecond',
        %(start)s::timestamptz + g * %(step)s * interval '1 microsecond'
    FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g
    RETURNING id, channel, key, idempotency_key, created_at
), events AS (
    INSERT INTO denpyo_events (submission_id, at, kind, from_status, to_status, attempt, actor)
    SELECT new.id, new.created_at, e.kind, e.from_status, e.to_status, e.attempt, 'bench'
    FROM new, (VALUES ('created', NULL, 'requesting', 0), ('attempt', 'requesting',
        'requesting', 1), ('settle', 'requesting', 'synced', 1)) AS e(kind, from_status,
        to_status, attempt)
)
{keys}
SELECT COUNT(*) FROM new
"""
KEYS = """, kept AS (
    INSERT INTO denpyo_keys (channel, key, idempotency_key, submission_id, status, attempts,
        created_at)
    SELECT channel, key, idempotency_key, id, 'requesting', 0, created_at FROM new
)"""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Layout:
    """One database in one layout, and what the bench does to it."""

    def __init__(self, layout: str) -> None:
        self.layout = layout
        self.name = f"denpyo_bench_{layout}_{uuid.uuid4().hex[:6]}"
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {self.name}")
        self.url = f"{ADMIN.rpartition('/')[0]}/{self.name}"
        self.ledger = denpyo.Ledger(self.url)
        self.ledger.migrate(partitions="daily" if layout == "partitioned" else None)
        self.conn = psycopg.connect(self.url, autocommit=True)

        @self.ledger.channel("email", idempotent=True)
        def send(sub: denpyo.Submission) -> str:
            return "msg"

    def close(self) -> None:
        self.conn.close()
        self.ledger.close()
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")

    def fill_day(self, day: datetime, per_day: int) -> None:
        """`per_day` settled rows created over `day`, with their events (and keys)."""
        partitioned = self.layout == "partitioned"
        if partitioned:
            for table in ("denpyo_submissions", "denpyo_events"):
                self.conn.execute(
                    "SELECT partman.create_partition_time(%s, ARRAY[%s::timestamptz])",
                    (f"public.{table}", day),
                )
        step = DAY * 1_000_000 // per_day  # microseconds between two rows
        query = FILL.format(
            id_column="id," if partitioned else "",
            id_value="denpyo_id_at(%(start)s::timestamptz) + g * %(step)s * 1000,"
            if partitioned
            else "",
            keys=KEYS if partitioned else "",
        )
        for first in range(0, per_day, CHUNK):
            last = min(first + CHUNK, per_day) - 1
            params = {"day": day.date().isoformat(), "start": day, "step": step}
            self.conn.execute(query, {**params, "first": first, "last": last})
        self.conn.execute("ANALYZE denpyo_submissions")

    def size(self) -> tuple[int, int]:
        """Bytes on disk, indexes included, of the rows and their events, and of the
        keys (which grow by design: every key is kept)."""
        row = self.conn.execute(
            """SELECT SUM(pg_total_relation_size(c.oid)) FILTER (WHERE c.relname <> 'denpyo_keys'),
                      SUM(pg_total_relation_size(c.oid)) FILTER (WHERE c.relname = 'denpyo_keys')
               FROM pg_class c
               WHERE c.relkind = 'r' AND (c.relname LIKE 'denpyo_submissions%%'
                  OR c.relname LIKE 'denpyo_events%%' OR c.relname = 'denpyo_keys')"""
        ).fetchone()
        return (int(row[0] or 0), int(row[1] or 0)) if row else (0, 0)

    def backend_cpu(self) -> float:
        """CPU seconds of this database's server processes so far."""
        pids = [
            r[0]
            for r in self.conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            ).fetchall()
        ]
        total = 0
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])
        return total / TICKS

    def hot_path(self, rows: int, tag: str) -> dict[str, float]:
        """CPU microseconds per row of recording, claiming and settling `rows` rows."""
        store = self.ledger.store
        figures: dict[str, float] = {}
        news = [
            NewSubmission("hot", f"{tag}:{i}", str(uuid.uuid4()), '{"to": "a@example.com"}', None)
            for i in range(rows)
        ]

        def measured(name: str, work: Callable[[], None]) -> None:
            server, client = self.backend_cpu(), time.process_time()
            work()
            used = time.process_time() - client + self.backend_cpu() - server
            figures[name] = used / rows * 1e6

        def record() -> None:
            for new in news:
                store.record(new, actor="bench")

        claimed: list[denpyo.Submission] = []

        def claim() -> None:
            while batch := store.claim("hot", holder="w", limit=100, lease=600):
                claimed.extend(batch)

        def settle() -> None:
            synced = AttemptDecision(Status.SYNCED, remote_id="r")
            for start in range(0, len(claimed), 100):
                store.move([Settle.of(s, "w", synced, 5) for s in claimed[start : start + 100]])

        store.record(NewSubmission("hot", f"{tag}:warm", str(uuid.uuid4()), "{}", None), actor="b")
        measured("record", record)
        measured("claim", claim)
        measured("settle", settle)
        assert len(claimed) == rows + 1 or len(claimed) == rows, len(claimed)
        return figures


def ratio(a: float, b: float) -> float:
    return round(a / b, 2) if b else float("nan")


def hot_path_and_drop(args: argparse.Namespace, results: dict[str, Any]) -> None:
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    first_day = today - timedelta(days=args.days)
    layouts = {name: Layout(name) for name in LAYOUTS}
    try:
        hot: dict[str, dict[str, Any]] = {name: {} for name in LAYOUTS}
        for day in range(args.days):
            for name, layout in layouts.items():
                started = time.perf_counter()
                layout.fill_day(first_day + timedelta(days=day), args.per_day)
                log(f"{name}: day {day + 1} filled in {time.perf_counter() - started:.1f} s")
            if day in (0, args.days - 1):
                for name, layout in layouts.items():
                    hot[name][f"day {day + 1}"] = layout.hot_path(args.rows, f"d{day}")
                    log(f"{name}: day {day + 1}: {hot[name][f'day {day + 1}']}")
        for name in LAYOUTS:
            first, last = hot[name]["day 1"], hot[name][f"day {args.days}"]
            hot[name]["ratio"] = {k: ratio(last[k], first[k]) for k in first}
        results["hot_path_cpu_us_per_row"] = hot

        # The oldest day leaves: archived and dropped whole, or pruned row by row.
        age = (datetime.now(UTC) - first_day).total_seconds() - DAY - 60  # the first day
        timings: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: timings.append(record.getMessage())  # type: ignore[method-assign]
        logging.getLogger("denpyo.store").addHandler(handler)
        logging.getLogger("denpyo.store").setLevel(logging.INFO)
        partitioned, plain = layouts["partitioned"], layouts["plain"]
        with tempfile.TemporaryDirectory() as folder:
            started = time.perf_counter()
            archived = partitioned.ledger.archive(folder, older_than=age, batch_size=20_000)
            archive_seconds = time.perf_counter() - started
        started = time.perf_counter()
        pruned = plain.ledger.prune(older_than=age, batch_size=10_000)
        prune_seconds = time.perf_counter() - started
        results["drop_one_day"] = {
            "rows": archived.rows,
            "archive_total_s": round(archive_seconds, 2),
            "archive_mb": round(archived.bytes / 1e6, 1),
            "archive_mb_per_s": round(archived.bytes / 1e6 / archive_seconds, 1),
            "partition_steps": timings,
            "plain_prune_rows": pruned,
            "plain_prune_s": round(prune_seconds, 2),
        }
        log(f"drop: {results['drop_one_day']}")

        # The key memory.
        keys = partitioned.conn.execute(
            "SELECT pg_total_relation_size('denpyo_keys'), COUNT(*) FROM denpyo_keys"
        ).fetchone()
        assert keys is not None
        dropped_key = f"order:{first_day.date().isoformat()}:7"
        live_key = f"order:{(today - timedelta(days=1)).date().isoformat()}:7"
        led = partitioned.ledger
        assert led.get("email", dropped_key).removed_at is not None
        assert led.get("email", live_key).removed_at is None
        times: dict[str, list[float]] = {"dropped": [], "live": []}
        for _ in range(args.submits // 100):
            for which, key in (("dropped", dropped_key), ("live", live_key)):
                started = time.perf_counter()
                for _ in range(100):
                    led.submit("email", key, PAYLOAD_7)
                times[which].append((time.perf_counter() - started) / 100 * 1e6)
        results["key_memory"] = {
            "keys": int(keys[1]),
            "bytes_per_key": round(int(keys[0]) / int(keys[1])),
            "mb_per_million_keys": round(int(keys[0]) / int(keys[1]), 0),
            "submit_dropped_key_us": round(statistics.median(times["dropped"])),
            "submit_live_key_us": round(statistics.median(times["live"])),
        }
        log(f"keys: {results['key_memory']}")
    finally:
        for layout in layouts.values():
            layout.close()


def size_over_time(args: argparse.Namespace, results: dict[str, Any]) -> None:
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    first_day = today - timedelta(days=args.size_days)
    layouts = {name: Layout(name) for name in LAYOUTS}
    sizes: dict[str, list[dict[str, Any]]] = {name: [] for name in LAYOUTS}
    try:
        for day in range(args.size_days):
            now_day = first_day + timedelta(days=day)
            for name, layout in layouts.items():
                layout.fill_day(now_day, args.size_per_day)
                if day >= args.size_kept:  # at this day's end, the oldest day goes
                    keep_from = now_day + timedelta(days=1 - args.size_kept)
                    age = (datetime.now(UTC) - keep_from).total_seconds()
                    layout.ledger.prune(older_than=age, batch_size=10_000)
                if (day + 1) % 10 == 0 or day + 1 == args.size_days:
                    layout.conn.execute("VACUUM denpyo_submissions, denpyo_events")
                    rows, keys = layout.size()
                    sizes[name].append(
                        {
                            "day": day + 1,
                            "mb": round(rows / 1e6, 1),
                            "keys_mb": round(keys / 1e6, 1),
                        }
                    )
                    log(f"{name}: day {day + 1}: {sizes[name][-1]}")
        results["size_over_time"] = {
            "per_day": args.size_per_day,
            "kept_days": args.size_kept,
            "mb": sizes,
        }
    finally:
        for layout in layouts.values():
            layout.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--days", type=int, default=30)
    p.add_argument("--per-day", type=int, default=1_000_000)
    p.add_argument("--rows", type=int, default=5000, help="rows per hot-path measurement")
    p.add_argument("--submits", type=int, default=2000)
    p.add_argument("--size-days", type=int, default=90)
    p.add_argument("--size-kept", type=int, default=30)
    p.add_argument("--size-per-day", type=int, default=100_000)
    p.add_argument("--only", default="hot,size", help="hot (1-3), size (4)")
    p.add_argument("--json", default=None, help="write the results here too")
    args = p.parse_args(argv)
    results: dict[str, Any] = {"args": vars(args)}
    if "hot" in args.only:
        hot_path_and_drop(args, results)
    if "size" in args.only:
        size_over_time(args, results)
    text = json.dumps(results, indent=2, default=str)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
