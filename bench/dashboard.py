"""Page times of the dashboard on a big table, on SQLite, PostgreSQL and MariaDB.

Fills a fresh database per backend with `--rows` submissions (default 10^6) and
three events each, in the mix a ledger holds after a month (see `MIX`), created
evenly over 30 days; runs ANALYZE, as autovacuum would have; folds the running
counts the fill appended (MariaDB: one row per row inserted) and sets the chart's
fold to the start of the last 24 hours, timing the batches of both (what the
workers' upkeep does); then times every page through the ASGI app (the same requests a browser
makes, with the Bearer token), counts' caches off, so each request pays for its
queries. Prints a Markdown section.

    python bench/dashboard.py --rows 1000000 --backends sqlite,postgresql,mysql
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pymysql
from starlette.testclient import TestClient

import denpyo
from denpyo.store.mysql import connect_args
from denpyo.web import create_app

POSTGRES = os.environ.get(
    "DENPYO_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
MYSQL = os.environ.get("DENPYO_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
TOKEN = "bench-dashboard-token"
CHANNELS = ("invoice-email", "charge", "sms", "crm-push")

MIX = """per 1,000 rows (i % 1000): 15 rejected (every other one resolved by a person),
5 failed and exhausted, 3 failed ambiguous (in doubt), 2 requesting and waiting,
1 requesting with its lease run out (in doubt), 974 synced"""

# One statement per dialect fills the table: row i of `seq` (1..:n) becomes a row.
# Its status, error and times follow i, so every database holds the same rows.
SUBMISSIONS = {
    "postgresql": """
INSERT INTO denpyo_submissions (channel, key, idempotency_key, payload, status, attempts,
    next_attempt_at, locked_by, locked_until, last_error, error_kind, created_at, updated_at,
    synced_at, resolution, remote_id)
SELECT (ARRAY['invoice-email','charge','sms','crm-push'])[1 + i %% 4], 'order:' || i, 'ik-' || i,
    jsonb_build_object('to', 'customer' || i || '@example.com', 'amount', i),
    CASE WHEN m < 15 THEN 'rejected' WHEN m < 23 THEN 'failed' WHEN m < 26 THEN 'requesting'
         ELSE 'synced' END,
    CASE WHEN m BETWEEN 23 AND 24 THEN 0 ELSE 1 END,
    CASE WHEN m BETWEEN 20 AND 22 THEN t + interval '1 hour' WHEN m BETWEEN 23 AND 25 THEN t
         END,
    CASE WHEN m = 25 THEN 'worker:gone/1' END,
    CASE WHEN m = 25 THEN t + interval '60 seconds' END,
    CASE WHEN m < 15 THEN 'Rejected: 550 no such mailbox' WHEN m < 20 THEN 'Transient: 503'
         WHEN m < 23 THEN 'TimeoutError: read timeout' END,
    CASE WHEN m < 15 THEN 'rejected' WHEN m < 20 THEN 'transient' WHEN m < 23 THEN 'ambiguous'
         END,
    t, t, CASE WHEN m >= 26 THEN t END,
    CASE WHEN m < 15 AND m %% 2 = 0 THEN 'abandoned by operator:ops: not ours' END,
    CASE WHEN m >= 26 THEN 'msg_' || i END
FROM (SELECT i, i %% 1000 AS m,
             now() - make_interval(secs => (%(n)s - i) * 2592000.0 / %(n)s) AS t
      FROM generate_series(1, %(n)s) AS i) AS seq
""",
    "sqlite": """
WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < :n),
rows AS (SELECT i, i % 1000 AS m,
    strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || ((:n - i) * 2592000.0 / :n) || ' seconds') AS t
    FROM seq)
INSERT INTO denpyo_submissions (channel, key, idempotency_key, payload, status, attempts,
    next_attempt_at, locked_by, locked_until, last_error, error_kind, created_at, updated_at,
    synced_at, resolution, remote_id)
SELECT CASE i % 4 WHEN 0 THEN 'invoice-email' WHEN 1 THEN 'charge' WHEN 2 THEN 'sms'
            ELSE 'crm-push' END,
    'order:' || i, 'ik-' || i,
    json_object('to', 'customer' || i || '@example.com', 'amount', i),
    CASE WHEN m < 15 THEN 'rejected' WHEN m < 23 THEN 'failed' WHEN m < 26 THEN 'requesting'
         ELSE 'synced' END,
    CASE WHEN m BETWEEN 23 AND 24 THEN 0 ELSE 1 END,
    CASE WHEN m BETWEEN 20 AND 22 THEN strftime('%Y-%m-%d %H:%M:%f', t, '+1 hour')
         WHEN m BETWEEN 23 AND 25 THEN t END,
    CASE WHEN m = 25 THEN 'worker:gone/1' END,
    CASE WHEN m = 25 THEN strftime('%Y-%m-%d %H:%M:%f', t, '+60 seconds') END,
    CASE WHEN m < 15 THEN 'Rejected: 550 no such mailbox' WHEN m < 20 THEN 'Transient: 503'
         WHEN m < 23 THEN 'TimeoutError: read timeout' END,
    CASE WHEN m < 15 THEN 'rejected' WHEN m < 20 THEN 'transient' WHEN m < 23 THEN 'ambiguous'
         END,
    t, t, CASE WHEN m >= 26 THEN t END,
    CASE WHEN m < 15 AND m % 2 = 0 THEN 'abandoned by operator:ops: not ours' END,
    CASE WHEN m >= 26 THEN 'msg_' || i END
FROM rows
""",
    "mysql": """
INSERT INTO denpyo_submissions (channel, `key`, idempotency_key, payload, status, attempts,
    next_attempt_at, locked_by, locked_until, last_error, error_kind, created_at, updated_at,
    synced_at, resolution, remote_id)
SELECT ELT(1 + i %% 4, 'invoice-email', 'charge', 'sms', 'crm-push'), CONCAT('order:', i),
    CONCAT('ik-', i), JSON_OBJECT('to', CONCAT('customer', i, '@example.com'), 'amount', i),
    CASE WHEN m < 15 THEN 'rejected' WHEN m < 23 THEN 'failed' WHEN m < 26 THEN 'requesting'
         ELSE 'synced' END,
    CASE WHEN m BETWEEN 23 AND 24 THEN 0 ELSE 1 END,
    CASE WHEN m BETWEEN 20 AND 22 THEN t + INTERVAL 1 HOUR WHEN m BETWEEN 23 AND 25 THEN t END,
    CASE WHEN m = 25 THEN 'worker:gone/1' END,
    CASE WHEN m = 25 THEN t + INTERVAL 60 SECOND END,
    CASE WHEN m < 15 THEN 'Rejected: 550 no such mailbox' WHEN m < 20 THEN 'Transient: 503'
         WHEN m < 23 THEN 'TimeoutError: read timeout' END,
    CASE WHEN m < 15 THEN 'rejected' WHEN m < 20 THEN 'transient' WHEN m < 23 THEN 'ambiguous'
         END,
    t, t, CASE WHEN m >= 26 THEN t END,
    CASE WHEN m < 15 AND m %% 2 = 0 THEN 'abandoned by operator:ops: not ours' END,
    CASE WHEN m >= 26 THEN CONCAT('msg_', i) END
FROM (SELECT seq AS i, seq %% 1000 AS m,
             UTC_TIMESTAMP(6) - INTERVAL ROUND((%(n)s - seq) * 2592000000000 / %(n)s) MICROSECOND
                 AS t
      FROM seq_1_to_{n}) AS seq
""",
}

# Three events per row: created, the attempt, and (for a settled row) its settle.
EVENTS = """
INSERT INTO denpyo_events (submission_id, at, kind, from_status, to_status, attempt, actor)
SELECT id, created_at, 'created', NULL, 'requesting', 0, 'app' FROM denpyo_submissions
UNION ALL
SELECT id, created_at, 'attempt', 'requesting', 'requesting', 1, 'worker'
FROM denpyo_submissions WHERE attempts > 0
UNION ALL
SELECT id, created_at, 'settle', 'requesting', status, 1, 'worker'
FROM denpyo_submissions WHERE status <> 'requesting'
"""

# Where the chart's fold would stand if workers had folded all along: the first
# event of the last 24 hours.
CURSOR = {
    "postgresql": "UPDATE denpyo_outcome_cursor SET last_event_id = (SELECT COALESCE(MIN(id), 1)"
    " - 1 FROM denpyo_events WHERE at >= now() - interval '24 hours')",
    "sqlite": "UPDATE denpyo_outcome_cursor SET last_event_id = (SELECT COALESCE(MIN(id), 1) - 1"
    " FROM denpyo_events WHERE at >= strftime('%Y-%m-%d %H:%M:%f', 'now', '-24 hours'))",
    "mysql": "UPDATE denpyo_outcome_cursor SET last_event_id = (SELECT COALESCE(MIN(id), 1) - 1"
    " FROM denpyo_events WHERE at >= UTC_TIMESTAMP(6) - INTERVAL 24 HOUR)",
}
ANALYZE = {
    "postgresql": ["ANALYZE denpyo_submissions", "ANALYZE denpyo_events"],
    "sqlite": ["ANALYZE"],
    "mysql": ["ANALYZE TABLE denpyo_submissions", "ANALYZE TABLE denpyo_events"],
}


def fresh(backend: str, tmp: Path) -> str:
    name = f"denpyo_dash_{uuid.uuid4().hex[:8]}"
    if backend == "sqlite":
        return f"sqlite:///{tmp / (name + '.db')}"
    if backend == "postgresql":
        with psycopg.connect(POSTGRES, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")
        return POSTGRES.rsplit("/", 1)[0] + "/" + name
    conn = pymysql.connect(**connect_args(MYSQL), autocommit=True)
    conn.cursor().execute(f"CREATE DATABASE {name}")
    conn.close()
    return MYSQL.rsplit("/", 1)[0] + "/" + name


def drop(backend: str, url: str) -> None:
    name = url.rsplit("/", 1)[1]
    if backend == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            Path(url.removeprefix("sqlite:///") + suffix).unlink(missing_ok=True)
    elif backend == "postgresql":
        with psycopg.connect(POSTGRES, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    else:
        conn = pymysql.connect(**connect_args(MYSQL), autocommit=True)
        conn.cursor().execute(f"DROP DATABASE IF EXISTS {name}")
        conn.close()


def execute(backend: str, url: str, statements: list[tuple[str, dict[str, Any]]]) -> None:
    if backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        for sql, params in statements:
            conn.execute(sql, params)
            conn.commit()
        conn.close()
    elif backend == "postgresql":
        with psycopg.connect(url, autocommit=True) as conn:
            for sql, params in statements:
                conn.execute(sql.encode() if not params else sql, params or None)
    else:
        conn = pymysql.connect(**connect_args(url), autocommit=True)
        cursor = conn.cursor()
        for sql, params in statements:
            cursor.execute(sql, params or None)
        conn.close()


def fill(backend: str, url: str, n: int) -> float:
    started = time.perf_counter()
    insert = SUBMISSIONS[backend].replace("{n}", str(n))
    execute(
        backend,
        url,
        [(insert, {"n": n}), (EVENTS, {}), (CURSOR[backend], {})]
        + [(sql, {}) for sql in ANALYZE[backend]],
    )
    return time.perf_counter() - started


def timed(fn: Any, runs: int) -> tuple[float, float]:
    fn()  # warm: connections, plans, templates
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), max(times)


def measure(backend: str, url: str, n: int, runs: int) -> dict[str, tuple[float, float] | None]:
    results: dict[str, tuple[float, float] | None] = {}
    with denpyo.Ledger(url) as ledger:
        assert ledger.migrate() == []
        fold_counts = getattr(ledger.store, "fold_counts_batch", None)  # MariaDB's
        counted = []
        while fold_counts is not None:
            started = time.perf_counter()
            if fold_counts() < 20_000:
                break
            counted.append((time.perf_counter() - started) * 1000)
        results["fold: one batch of 20,000 running counts (MariaDB's upkeep)"] = (
            (statistics.median(counted), max(counted)) if counted else None
        )
        rows = sum(count for _, _, count in ledger.store.count_by_status())
        assert rows == n, (rows, n)
        folds = []
        while True:
            started = time.perf_counter()
            span = ledger.store.fold_outcomes()
            if span == 0:
                break
            folds.append((time.perf_counter() - started) * 1000)
        results["fold: one batch of 20,000 events (workers' upkeep)"] = (
            statistics.median(folds) if folds else 0.0,
            max(folds, default=0.0),
        )
        app = create_app(ledger, token=TOKEN)
        dashboard = app.state.dashboard
        client = TestClient(app, base_url="http://127.0.0.1:8000")
        client.headers["authorization"] = f"Bearer {TOKEN}"
        sample = n // 2 - (n // 2) % 1000 + 1  # a rejected row half-way down the table
        key, prefix = n * 7 // 9, n // 200
        pages = {
            "overview (`/`)": "/",
            "overview refresh (`/partials/overview`)": "/partials/overview",
            "needs attention (`/attention`)": "/attention",
            "list, newest (`/submissions`)": "/submissions",
            "list, status rejected": "/submissions?status=rejected",
            "list, a channel's rows in doubt (rare)": "/submissions?channel=sms&in_doubt=yes",
            "list, page half-way down (`before=`)": f"/submissions?before={n // 2}",
            f"search a key (`q=order:{key}`)": f"/submissions?channel={CHANNELS[key % 4]}"
            f"&q=order:{key}",
            f"search a prefix (`q=order:{prefix}`)": f"/submissions?channel={CHANNELS[prefix % 4]}"
            f"&q=order:{prefix}",
            "a row's page (`/submissions/{id}`)": f"/submissions/{sample}",
            "metrics (`/metrics`)": "/metrics",
        }
        for name, path in pages.items():

            def get(path: str = path) -> None:
                dashboard.counts = None  # no cache: every request pays its queries
                dashboard.metrics.counts.cached = None
                response = client.get(path, headers={"accept": "text/html"})
                assert response.status_code == 200, (path, response.text[:300])

            results[name] = timed(get, runs)
    return results


def _cell(times: tuple[float, float] | None) -> str:
    return "–" if times is None else f"{times[0]:.1f} ({times[1]:.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--backends", default="sqlite,postgresql,mysql")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--tmp", default="/tmp")
    parser.add_argument("--keep", action="store_true", help="Keep the databases.")
    args = parser.parse_args()
    backends = args.backends.split(",")
    table: dict[str, dict[str, tuple[float, float] | None]] = {}
    loads = {}
    for backend in backends:
        url = fresh(backend, Path(args.tmp))
        try:
            with denpyo.Ledger(url) as ledger:
                ledger.migrate()
            loads[backend] = fill(backend, url, args.rows)
            print(
                f"{backend}: filled {args.rows:,} rows in {loads[backend]:.0f} s", file=sys.stderr
            )
            table[backend] = measure(backend, url, args.rows, args.runs)
        finally:
            if not args.keep:
                drop(backend, url)
    names = {"sqlite": "SQLite", "postgresql": "PostgreSQL", "mysql": "MariaDB"}
    print(
        f"{args.rows:,} submissions and {3 * args.rows - 25 * args.rows // 1000:,} events; "
        f"median of {args.runs} requests (max in brackets), ms:\n"
    )
    print("| page | " + " | ".join(names[b] for b in backends) + " |")
    print("|---|" + "---|" * len(backends))
    for page in next(iter(table.values())):
        cells = [_cell(table[b][page]) for b in backends]
        print(f"| {page} | " + " | ".join(cells) + " |")
    print("\nfilling took " + ", ".join(f"{names[b]} {loads[b]:.0f} s" for b in backends))


if __name__ == "__main__":
    main()
