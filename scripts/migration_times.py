"""How long each PostgreSQL migration takes on a big table, and what it locks.

    .venv/bin/python scripts/migration_times.py [--rows 1000000] [--admin URL]

Makes a scratch database at schema 1 holding ROWS submissions (96 % synced, the
rest requesting, failed transient, failed ambiguous, rejected; one resend per
thousand rows) with two events each, then applies the migrations one at a time,
each in its own transaction, and prints for each its time and the strongest lock
it holds on the two big tables until it commits. Then the same upgrade as
`denpyo migrate` runs it (every pending migration in one transaction), from a
copy of the schema-1 database. The scratch databases are dropped at the end.
"""

from __future__ import annotations

import argparse
import time
import uuid

import psycopg

import denpyo
from denpyo.store.queries import load_migrations

# Weakest first: what each mode stops other sessions doing on that table.
LOCKS = {
    "AccessShareLock": "nothing",
    "RowShareLock": "nothing",
    "RowExclusiveLock": "nothing",
    "ShareUpdateExclusiveLock": "other schema changes",
    "ShareLock": "writes",
    "ShareRowExclusiveLock": "writes",
    "ExclusiveLock": "writes",
    "AccessExclusiveLock": "reads and writes",
}
BIG = ("denpyo_submissions", "denpyo_events")


def fill(conn: psycopg.Connection, rows: int) -> None:
    conn.execute(
        """
        INSERT INTO denpyo_submissions (channel, key, idempotency_key, payload, status,
            attempts, next_attempt_at, remote_id, error_kind, created_at, updated_at,
            synced_at, resolution)
        SELECT 'email', 'order:' || n, md5(n::text), jsonb_build_object('to', n),
            s.status, 1, s.next_at, CASE WHEN s.status = 'synced' THEN 'msg_' || n END,
            s.error_kind, s.t, s.t, CASE WHEN s.status = 'synced' THEN s.t END, NULL
        FROM generate_series(1, %(rows)s) AS n,
            LATERAL (SELECT now() - (n || ' seconds')::interval AS t) AS at_,
            LATERAL (SELECT CASE n %% 100
                WHEN 0 THEN 'requesting' WHEN 1 THEN 'failed' WHEN 2 THEN 'failed'
                WHEN 3 THEN 'rejected' ELSE 'synced' END AS status,
              CASE n %% 100 WHEN 1 THEN 'transient' WHEN 2 THEN 'ambiguous'
                WHEN 3 THEN 'rejected' END AS error_kind,
              CASE WHEN n %% 100 IN (0, 1, 2) THEN now() END AS next_at,
              at_.t AS t) AS s
        """,
        {"rows": rows},
    )
    conn.execute("UPDATE denpyo_submissions SET supersedes = id - 1 WHERE id % 1000 = 0 AND id > 1")
    conn.execute(
        """
        INSERT INTO denpyo_events (submission_id, at, kind, from_status, to_status, attempt,
            actor, detail)
        SELECT id, created_at, e.kind, e.from_status, e.to_status, e.attempt, 'app:bench', NULL
        FROM denpyo_submissions,
            LATERAL (VALUES ('created', NULL, 'requesting', 0),
                            ('settle', 'requesting', status, 1)) AS e(kind, from_status,
                                                                   to_status, attempt)
        """
    )
    conn.execute("ANALYZE")


def strongest(conn: psycopg.Connection) -> dict[str, str]:
    held: dict[str, str] = {}
    order = list(LOCKS)
    for table, mode in conn.execute(
        "SELECT relation::regclass::text, mode FROM pg_locks "
        "WHERE pid = pg_backend_pid() AND locktype = 'relation'"
    ):
        if table in BIG and order.index(mode) > order.index(held.get(table, "AccessShareLock")):
            held[table] = mode
    return held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--admin", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    base, _, _ = args.admin.rpartition("/")
    name = f"denpyo_mig_{uuid.uuid4().hex[:8]}"
    copy = f"{name}_all"
    migrations = load_migrations("postgresql")
    with psycopg.connect(args.admin, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        with psycopg.connect(f"{base}/{name}") as conn:
            conn.execute(migrations[0][1])
            conn.execute("CREATE TABLE denpyo_schema_version (version integer PRIMARY KEY, "
                         "applied_at timestamptz NOT NULL DEFAULT now())")  # fmt: skip
            conn.execute("INSERT INTO denpyo_schema_version (version) VALUES (1)")
            started = time.monotonic()
            fill(conn, args.rows)
            conn.commit()
            print(f"schema 1, {args.rows:,} rows and {2 * args.rows:,} events written "
                  f"in {time.monotonic() - started:.1f} s")  # fmt: skip
        with psycopg.connect(args.admin, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {copy} TEMPLATE {name}")
        print("| migration | seconds | blocks on denpyo_submissions | on denpyo_events |")
        print("|---|---|---|---|")
        with psycopg.connect(f"{base}/{name}") as conn:
            for version, script in migrations[1:]:
                started = time.monotonic()
                conn.execute(script)
                took = time.monotonic() - started
                held = strongest(conn)
                conn.execute("INSERT INTO denpyo_schema_version (version) VALUES (%s)",
                             [version])  # fmt: skip
                conn.commit()
                blocks = [LOCKS[held.get(table, "AccessShareLock")] for table in BIG]
                print(f"| {version:04d} | {took:.2f} | {blocks[0]} | {blocks[1]} |")
        with denpyo.Ledger(f"{base}/{copy}") as ledger:
            started = time.monotonic()
            applied = ledger.migrate()
            print(f"denpyo migrate from schema 1 (applied {applied[0]}-{applied[-1]}, "
                  f"one transaction): {time.monotonic() - started:.1f} s")  # fmt: skip
    finally:
        with psycopg.connect(args.admin, autocommit=True) as admin:
            for db in (name, copy):
                admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


if __name__ == "__main__":
    main()
