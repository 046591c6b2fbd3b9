"""One benchmark step, run by `run.py` as its own process.

    python bench/child.py '{"scenario": "dispatch", "peer": "denpyo", ...}'

The last line on stdout is ``BENCH-RESULT {json}``. The parent measures the
process's peak RSS and CPU time itself (``os.wait4``), so nothing else in the
machine's run shares this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    Ctx,
    cpu_now,
    cpu_since,
    job_payload,
    machine_busy,
    new_session,
    pg_conninfo,
    post_job,
    tree_cpu,
)
from peers import PEERS

MARK = "BENCH-RESULT "
BENCH = Path(__file__).resolve().parent


def _peer(name: str) -> Any:
    return importlib.import_module(PEERS[name])


def _ctx(spec: dict[str, Any]) -> Ctx:
    return Ctx(spec.get("db_url", ""), spec.get("provider_url", ""), spec.get("options", {}))


def _provider_stats(url: str) -> dict[str, int]:
    from denpyo.testing import FakeProviderClient

    return FakeProviderClient(url).stats().to_dict()


# -- peers: setup, enqueue, dispatch --------------------------------------------------


async def run_setup(spec: dict[str, Any]) -> dict[str, Any]:
    peer = _peer(spec["peer"])
    await peer.setup(_ctx(spec))
    return {"peer": peer.NAME}


async def run_enqueue(spec: dict[str, Any]) -> dict[str, Any]:
    peer, ctx, n = _peer(spec["peer"]), _ctx(spec), int(spec["n"])
    if spec.get("setup", False):
        await peer.setup(ctx)
    started = time.perf_counter()
    api = await peer.enqueue(ctx, n, bulk=bool(spec.get("bulk", False)))
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "rate": n / seconds, "api": api}


async def run_dispatch(spec: dict[str, Any]) -> dict[str, Any]:
    peer, ctx = _peer(spec["peer"]), _ctx(spec)
    n, concurrency = int(spec["n"]), int(spec["concurrency"])
    profiler = _profiler(spec)
    started, cpu_started = time.perf_counter(), time.process_time()
    extras = await peer.dispatch(ctx, n, concurrency)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    _profiler_stop(profiler, spec)
    done = await peer.done(ctx)
    stats = _provider_stats(ctx.provider_url)
    calls = getattr(peer, "CALLS", True)
    ok = done == n and (not calls or (stats["accepted"] == n and stats["duplicates"] == 0))
    return {
        "seconds": seconds,
        "cpu_s": cpu,  # the worker process's CPU while timed
        "rate": n / seconds,
        "done": done,
        "provider": stats,
        "ok": ok,
        "extras": extras,
    }


def _profiler(spec: dict[str, Any]) -> Any:
    if spec.get("profile") != "pyinstrument":
        return None
    from pyinstrument import Profiler

    profiler = Profiler(async_mode="enabled", interval=0.0005)
    profiler.start()
    return profiler


def _profiler_stop(profiler: Any, spec: dict[str, Any]) -> None:
    if profiler is None:
        return
    profiler.stop()
    Path(spec["profile_out"]).write_text(profiler.output_text(unicode=False, show_all=False))


# -- processes: `denpyo worker --processes N`, the real command ---------------------

HOLD = "UPDATE denpyo_submissions SET next_attempt_at = now() + interval '1 day'"
RELEASE = (
    "UPDATE denpyo_submissions SET next_attempt_at = now() - interval '1 second';"
    " SELECT pg_notify('denpyo', 'bench')"
)
SYNCED = "SELECT count(*) FROM denpyo_submissions WHERE status = 'synced'"


async def run_processes(spec: dict[str, Any]) -> dict[str, Any]:
    """Start `python -m denpyo.cli --app worker_app:ledger worker --processes N`
    on the prefilled rows held back (due tomorrow); once every process says it has
    started, make them all due at once (one UPDATE and a NOTIFY) and time until the
    database counts n synced; then SIGTERM, which must end it with exit code 0.
    Interpreter start-up is not timed; the workers' CPU is read from /proc while timed."""
    import signal
    import subprocess

    import psycopg

    ctx, n = _ctx(spec), int(spec["n"])
    count, per_process = int(spec["processes"]), int(spec["concurrency"])
    timeout = float(spec.get("timeout", 3600))
    conninfo = pg_conninfo(ctx.db_url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(HOLD)
    import denpyo

    # The same denpyo as this process's (a relative PYTHONPATH would not survive the cwd).
    paths = [str(BENCH), str(Path(denpyo.__file__).resolve().parents[1])]
    paths += [
        str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p
    ]
    env = {
        **os.environ,
        "BENCH_DB_URL": ctx.db_url,
        "BENCH_PROVIDER_URL": ctx.provider_url,
        "PYTHONPATH": os.pathsep.join(paths),
    }
    command = [
        sys.executable,
        "-m",
        "denpyo.cli",
        "--app",
        "worker_app:ledger",
        "worker",
        "--processes",
        str(count),
        "--concurrency",
        str(per_process),
        "--poll-interval",
        "0.05",
    ]
    log_path = Path(spec["log"])
    with log_path.open("w") as log:
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=log, cwd=BENCH)
    code: int | None = None
    try:
        deadline = time.monotonic() + 120
        while log_path.read_text().count("worker started on channels") < count:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the workers did not start: {log_path.read_text()[-2000:]}")
            await asyncio.sleep(0.05)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            cpu, busy, started = tree_cpu(proc.pid), machine_busy(), time.perf_counter()
            conn.execute(RELEASE)
            deadline = time.monotonic() + timeout
            done = 0
            while done < n:
                row = conn.execute(SYNCED).fetchone()
                done = int(row[0]) if row else 0
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{done} of {n} synced; log: {log_path.read_text()[-2000:]}")
                await asyncio.sleep(0.02)
            seconds = time.perf_counter() - started
            cpu, busy = tree_cpu(proc.pid) - cpu, machine_busy() - busy
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    stats = _provider_stats(ctx.provider_url)
    ok = done == n and stats["accepted"] == n and stats["duplicates"] == 0 and code == 0
    return {
        "seconds": seconds,
        "rate": n / seconds,
        "workers_cpu_s": cpu,  # all the worker processes' CPU while timed
        "timed_machine_busy_s": busy,
        "done": done,
        "provider": stats,
        "exit_code": code,
        "ok": ok,
    }


# -- inline: submit() against the bare call and a hand-written INSERT/call/UPDATE ------


def _sync_clients(url: str) -> dict[str, Callable[[str, Any], str]]:
    """Each available synchronous HTTP client, as `post(key, payload) -> id`."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host, port, path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path
    clients: dict[str, Callable[[str, Any], str]] = {}

    def headers(key: str) -> dict[str, str]:
        return {"Idempotency-Key": key, "Content-Type": "application/json"}

    def body(payload: Any) -> bytes:
        return json.dumps(payload, separators=(",", ":")).encode()

    import http.client

    conn = http.client.HTTPConnection(host, port, timeout=10)

    def stdlib_post(key: str, payload: Any) -> str:
        conn.request("POST", path, body=body(payload), headers=headers(key))
        response = conn.getresponse()
        raw = response.read()
        if response.status >= 300:
            raise RuntimeError(f"HTTP {response.status}")
        return str(json.loads(raw)["id"])

    clients["http.client"] = stdlib_post
    try:
        import urllib3

        pool = urllib3.HTTPConnectionPool(host, port, maxsize=4, timeout=10.0)

        def urllib3_post(key: str, payload: Any) -> str:
            response = pool.request("POST", path, body=body(payload), headers=headers(key))
            if response.status >= 300:
                raise RuntimeError(f"HTTP {response.status}")
            return str(json.loads(response.data)["id"])

        clients["urllib3"] = urllib3_post
    except ImportError:
        pass
    try:
        import requests

        session = requests.Session()

        def requests_post(key: str, payload: Any) -> str:
            response = session.post(url, data=body(payload), headers=headers(key), timeout=10)
            response.raise_for_status()
            return str(response.json()["id"])

        clients["requests"] = requests_post
    except ImportError:
        pass
    try:
        import httpx

        client = httpx.Client(timeout=10.0)

        def httpx_post(key: str, payload: Any) -> str:
            response = client.post(url, content=body(payload), headers=headers(key))
            response.raise_for_status()
            return str(response.json()["id"])

        clients["httpx"] = httpx_post
    except ImportError:
        pass
    return clients


async def run_httpclients(spec: dict[str, Any]) -> dict[str, Any]:
    """Sequential POSTs with each synchronous client; the fastest serves `inline`."""
    ctx, n, rounds = _ctx(spec), int(spec["n"]), int(spec.get("rounds", 3))
    clients = _sync_clients(ctx.send_url)
    rates: dict[str, list[float]] = {name: [] for name in clients}
    for r in range(rounds):
        for name, post in clients.items():
            for i in range(20):  # warm the connection
                post(f"warm:{name}:{r}:{i}", job_payload(i))
            started = time.perf_counter()
            for i in range(n):
                post(f"hc:{name}:{r}:{i}", job_payload(i))
            rates[name].append(n / (time.perf_counter() - started))
    medians = {name: statistics.median(values) for name, values in rates.items()}
    return {"rates": rates, "median": medians, "fastest": max(medians, key=medians.__getitem__)}


INLINE_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS inline_calls (
    id bigserial PRIMARY KEY, key text NOT NULL UNIQUE, payload jsonb NOT NULL,
    status text NOT NULL, remote_id text, created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS inline_events (
    id bigserial PRIMARY KEY, call_id bigint NOT NULL, kind text NOT NULL,
    detail text, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX IF NOT EXISTS inline_events_call ON inline_events (call_id);
"""
INLINE_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS inline_calls (
    id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, payload TEXT NOT NULL,
    status TEXT NOT NULL, remote_id TEXT, created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP);
CREATE TABLE IF NOT EXISTS inline_events (
    id INTEGER PRIMARY KEY, call_id INTEGER NOT NULL, kind TEXT NOT NULL,
    detail TEXT, at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP);
CREATE INDEX IF NOT EXISTS inline_events_call ON inline_events (call_id);
"""


def _handwritten(
    db_url: str, history: bool = False
) -> tuple[Callable[[str, Any, Callable[[], str]], None], Any]:
    """INSERT (commit), call, UPDATE (commit): the same durability as denpyo's store
    (SQLite: WAL, synchronous=FULL, BEGIN IMMEDIATE; PostgreSQL: default commit).
    With `history`, each transaction also INSERTs an event row, as denpyo records
    the created and settle events: what the spec's history costs by hand."""
    if db_url.startswith("sqlite"):
        import sqlite3

        from denpyo.store import sqlite_path  # type: ignore[attr-defined]

        conn = sqlite3.connect(sqlite_path(db_url), isolation_level=None, timeout=30)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.executescript(INLINE_SQLITE_SCHEMA)
        event = "INSERT INTO inline_events (call_id, kind, detail) VALUES (?, ?, ?)"

        def sqlite_one(key: str, payload: Any, call: Callable[[], str]) -> None:
            conn.execute("BEGIN IMMEDIATE")
            row_id = conn.execute(
                "INSERT INTO inline_calls (key, payload, status) VALUES (?, ?, 'requesting')"
                " RETURNING id",
                (key, json.dumps(payload)),
            ).fetchone()[0]
            if history:
                conn.execute(event, (row_id, "created", None))
            conn.execute("COMMIT")
            remote_id = call()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "UPDATE inline_calls SET status = 'synced', remote_id = ?,"
                " updated_at = CURRENT_TIMESTAMP WHERE id = ?",
                (remote_id, row_id),
            )
            if history:
                conn.execute(event, (row_id, "settle", remote_id))
            conn.execute("COMMIT")

        return sqlite_one, conn
    import psycopg
    from psycopg.types.json import Jsonb

    pg = psycopg.connect(pg_conninfo(db_url))
    pg.execute(INLINE_PG_SCHEMA)
    pg.commit()
    event = "INSERT INTO inline_events (call_id, kind, detail) VALUES (%s, %s, %s)"

    def pg_one(key: str, payload: Any, call: Callable[[], str]) -> None:
        cur = pg.execute(
            "INSERT INTO inline_calls (key, payload, status) VALUES (%s, %s, 'requesting')"
            " RETURNING id",
            (key, Jsonb(payload)),
        )
        row_id = cur.fetchone()[0]  # type: ignore[index]
        if history:
            pg.execute(event, (row_id, "created", None))
        pg.commit()
        remote_id = call()
        pg.execute(
            "UPDATE inline_calls SET status = 'synced', remote_id = %s, updated_at = now()"
            " WHERE id = %s",
            (remote_id, row_id),
        )
        if history:
            pg.execute(event, (row_id, "settle", remote_id))
        pg.commit()

    return pg_one, pg


def _statements_alone(db_url: str, post: Callable[[str, Any], str]) -> Callable[[str, Any], None]:
    """One inline submit as denpyo's store writes it, its own named queries run
    directly on the driver with nothing of the engine: the floor under `submit()`.
    SQLite: INSERT ... RETURNING with the `created` and `attempt` events, commit;
    the call; the lean compare-and-set `settle_submission` with the `settle` event,
    commit. PostgreSQL: `record_submission`, the call, `settle_submission_one`, each
    autocommitted, on a connection set up as the store's pool sets its own."""
    import uuid

    import denpyo

    with denpyo.Ledger(db_url) as ledger:
        queries = ledger.store.queries
    record_params: dict[str, Any] = {
        "channel": "inline",
        "ordering_key": None,
        "supersedes": None,
        "locked_by": "floor/1",
        "lease": 60.0,
        "actor": "floor/1",
        "detail": None,
        "traceparent": None,
        "tracestate": None,
    }
    if db_url.startswith("sqlite"):
        import sqlite3

        from denpyo.store import sqlite_path  # type: ignore[attr-defined]

        conn = sqlite3.connect(sqlite_path(db_url), isolation_level=None, timeout=30)
        for pragma in (
            "PRAGMA journal_mode = WAL",
            "PRAGMA synchronous = FULL",
            "PRAGMA foreign_keys = ON",
        ):
            conn.execute(pragma)
        insert, started = queries["insert_submission"], queries["insert_events_sent_inline"]
        settle, event = queries["settle_submission"], queries["insert_event"]

        def sqlite_one(key: str, payload: Any) -> None:
            idempotency_key = str(uuid.uuid4())
            conn.execute("BEGIN IMMEDIATE")
            params = {
                **record_params,
                "key": key,
                "idempotency_key": idempotency_key,
                "payload": json.dumps(payload),
            }
            row_id = conn.execute(insert, params).fetchone()[0]
            conn.execute(started, {"submission_id": row_id, "actor": "floor/1"})
            conn.execute("COMMIT")
            remote_id = post(idempotency_key, payload)
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                settle,
                {
                    "id": row_id,
                    "holder": "floor/1",
                    "to_status": "synced",
                    "retry_in": None,
                    "remote_id": remote_id,
                    "error_kind": None,
                    "last_error": None,
                },
            ).fetchall()
            conn.execute(
                event,
                {
                    "submission_id": row_id,
                    "kind": "settle",
                    "from_status": "requesting",
                    "to_status": "synced",
                    "attempt": 1,
                    "actor": "floor",
                    "detail": remote_id,
                    "duration_ms": 0,
                },
            )
            conn.execute("COMMIT")

        return sqlite_one
    import psycopg
    from psycopg.rows import dict_row

    pg = psycopg.connect(pg_conninfo(db_url), autocommit=True, row_factory=dict_row)
    record, settle = queries["record_submission"], queries["settle_submission_one"]

    def pg_one(key: str, payload: Any) -> None:
        idempotency_key = str(uuid.uuid4())
        params = {
            **record_params,
            "key": key,
            "idempotency_key": idempotency_key,
            "payload": json.dumps(payload),
        }
        row = pg.execute(record, params).fetchone()
        assert row is not None
        remote_id = post(idempotency_key, payload)
        pg.execute(
            settle,
            {
                "id": row["id"],
                "holder": "floor/1",
                "to_status": "synced",
                "retry_in": None,
                "remote_id": remote_id,
                "error_kind": None,
                "last_error": None,
                "actor": "floor",
                "duration_ms": 0,
            },
        ).fetchall()

    return pg_one


async def run_inline(spec: dict[str, Any]) -> dict[str, Any]:
    """Per-call time of: the bare call; INSERT/call/UPDATE by hand, without and with
    its history; denpyo's own statements alone (`_statements_alone`); `ledger.submit`.
    The same synchronous HTTP client in all of them, modes interleaved per round."""
    import denpyo

    ctx, n, rounds = _ctx(spec), int(spec["n"]), int(spec.get("rounds", 3))
    client = spec.get("client", "http.client")
    post = _sync_clients(ctx.send_url)[client]
    ledger = denpyo.Ledger(ctx.db_url)
    ledger.migrate()

    def send(sub: denpyo.Submission) -> str:
        return post(sub.idempotency_key, sub.payload)

    ledger.add_channel("inline", send)
    one, conn = _handwritten(ctx.db_url)
    one_with_history, history_conn = _handwritten(ctx.db_url, history=True)
    statements = _statements_alone(ctx.db_url, post)
    timings: dict[str, list[float]] = {
        "bare": [],
        "handwritten": [],
        "history": [],
        "statements": [],
        "submit": [],
    }
    for r in range(rounds):
        for i in range(20):  # warm up connections, caches and the query plans
            post(f"warm:{r}:{i}", job_payload(i))
            one(f"warm:{r}:{i}", job_payload(i), lambda: "x")
            one_with_history(f"warm-history:{r}:{i}", job_payload(i), lambda: "x")
            statements(f"warm-statements:{r}:{i}", job_payload(i))
            ledger.submit("inline", f"warm:{r}:{i}", job_payload(i))
        for mode in timings:
            started = time.perf_counter()
            for i in range(n):
                key, payload = f"{mode}:{r}:{i}", job_payload(i)
                if mode == "bare":
                    post(key, payload)
                elif mode == "handwritten":
                    one(key, payload, lambda k=key, p=payload: post(k, p))
                elif mode == "history":
                    one_with_history(key, payload, lambda k=key, p=payload: post(k, p))
                elif mode == "statements":
                    statements(key, payload)
                else:
                    ledger.submit("inline", key, payload)
            timings[mode].append((time.perf_counter() - started) / n * 1e6)
    conn.close()
    history_conn.close()
    ledger.close()
    return {"client": client, "us_per_call": timings}


# -- recovery: reconcile in-doubt rows against the provider's lookup ------------------


async def run_recovery(spec: dict[str, Any]) -> dict[str, Any]:
    import psycopg
    from peers.denpyo_peer import ledger_for

    import denpyo

    ctx, n, concurrency = _ctx(spec), int(spec["n"]), int(spec.get("concurrency", 16))
    provider_pid = int(spec.get("provider_pid", 0))
    with denpyo.Ledger(ctx.db_url) as admin:
        admin.migrate()
    with psycopg.connect(pg_conninfo(ctx.db_url), autocommit=True) as conn:
        # n rows for denpyo's channel and n for the floor's: one table for both.
        for channel in ("bench", FLOOR_CHANNEL):
            conn.execute(
                """
                INSERT INTO denpyo_submissions (channel, key, idempotency_key, payload, status,
                    attempts, locked_by, locked_until, next_attempt_at)
                SELECT %s, 'doubt:' || i, gen_random_uuid()::text,
                       jsonb_build_object('order', i), 'requesting', 1, 'worker:crashed/1',
                       now() - interval '1 minute', now() - interval '1 minute'
                FROM generate_series(1, %s) AS i
                """,
                (channel, n),
            )
        every = conn.execute(
            "SELECT channel, idempotency_key, payload FROM denpyo_submissions"
        ).fetchall()
    keys = [key for channel, key, _ in every if channel == "bench"]
    # The calls arrived before the crash: the provider has every one of them.
    async with new_session() as session:
        sent = [post_job(session, ctx.send_url, key, payload) for _, key, payload in every]
        await _bounded(sent, 64)

        async def lookup(key: str) -> str:
            async with session.get(ctx.lookup_url.replace("{idempotency_key}", key)) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"lookup answered {resp.status}")
            return str(json.loads(raw)["id"])

        started, cpu = time.perf_counter(), cpu_now(provider_pid)
        await _bounded([lookup(key) for key in keys], concurrency)
        lookup_seconds, lookup_cpu = time.perf_counter() - started, cpu_since(cpu, provider_pid)
        started, cpu = time.perf_counter(), cpu_now(provider_pid)
        floor_done = await _reconcile_floor(ctx, n, concurrency, lookup)
        floor_seconds, floor_cpu = time.perf_counter() - started, cpu_since(cpu, provider_pid)
    before = _provider_stats(ctx.provider_url)
    ledger, channel = ledger_for(ctx)
    started, cpu = time.perf_counter(), cpu_now(provider_pid)
    report = await ledger.areconcile(concurrency=concurrency)
    seconds, reconcile_cpu = time.perf_counter() - started, cpu_since(cpu, provider_pid)
    await channel.aclose()
    ledger.close()
    after = _provider_stats(ctx.provider_url)
    with psycopg.connect(pg_conninfo(ctx.db_url)) as conn:
        synced = conn.execute(
            "SELECT count(*) FROM denpyo_submissions WHERE status = 'synced'"
            " AND remote_id IS NOT NULL AND channel = 'bench'"
        ).fetchone()[0]  # type: ignore[index]
    resends = after["requests"] - before["requests"]
    return {
        "seconds": seconds,
        "rate": n / seconds,
        "lookup_rate": n / lookup_seconds,
        "lookup_cpu": lookup_cpu,
        "floor_rate": n / floor_seconds,
        "floor_cpu": floor_cpu,
        "floor_ok": floor_done == n,
        "reconcile_cpu": reconcile_cpu,
        "synced": synced,
        "reconciled": report.reconciled,
        "lookups_by_reconcile": after["lookups"] - before["lookups"],
        "resends": resends,
        "ok": synced == n and resends == 0,
    }


FLOOR_CHANNEL = "bench-floor"
FLOOR_ACTOR = "bench-floor-verifier"
FLOOR_CLAIM_IN_DOUBT = """
WITH due AS (
    SELECT id FROM denpyo_submissions
    WHERE channel = %(channel)s AND next_attempt_at <= now()
      AND status = 'requesting' AND locked_until <= now()
    ORDER BY next_attempt_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE denpyo_submissions s SET
    locked_by = %(actor)s, locked_until = now() + make_interval(secs => %(lease)s),
    next_attempt_at = now() + make_interval(secs => %(lease)s), updated_at = now()
FROM due WHERE s.id = due.id
RETURNING s.id, s.idempotency_key
"""
FLOOR_SETTLE_VERIFIED = """
WITH settled AS (
    UPDATE denpyo_submissions s SET
        status = 'synced', remote_id = u.remote_id, locked_by = NULL, locked_until = NULL,
        next_attempt_at = NULL, synced_at = now(), updated_at = now()
    FROM unnest(%(ids)s::bigint[], %(remote_ids)s::text[]) AS u(id, remote_id)
    WHERE s.id = u.id AND s.status = 'requesting' AND s.locked_by = %(actor)s
    RETURNING s.id, s.attempts, u.remote_id
), events AS (
    INSERT INTO denpyo_events (submission_id, kind, from_status, to_status, attempt, actor, detail)
    SELECT id, 'verify', 'requesting', 'synced', attempts, %(actor)s, remote_id FROM settled
)
SELECT id FROM settled
"""


async def _reconcile_floor(
    ctx: Ctx, n: int, concurrency: int, lookup: Callable[[str], Awaitable[str]]
) -> int:
    """The floor under `reconcile()`: the same lookups between two hand-written
    statements on bare psycopg (hold the in-doubt rows, settle the found ones
    `synced` with their `verify` event), under the floor's lanes, on rows
    of a channel of its own in the same table. Nothing of denpyo's in between."""
    import psycopg
    from peers.denpyo_peer import ledger_for
    from peers.denpyo_store import Jobs, lanes, worker_shape

    ledger, _ = ledger_for(ctx)
    try:
        ahead, batch, lease = worker_shape(ledger, concurrency)
    finally:
        ledger.close()
    info = pg_conninfo(ctx.db_url)
    claims = await psycopg.AsyncConnection.connect(info, autocommit=True)
    settles = await psycopg.AsyncConnection.connect(info, autocommit=True)
    fields = {"channel": FLOOR_CHANNEL, "actor": FLOOR_ACTOR, "lease": lease}

    async def claim(limit: int) -> list[tuple[int, str]]:
        params = {**fields, "limit": limit}
        cursor = await claims.execute(FLOOR_CLAIM_IN_DOUBT, params, prepare=True, binary=True)
        return await cursor.fetchall()

    async def verify(row: tuple[int, str]) -> str:
        return await lookup(row[1])

    async def commit(found: list[tuple[int, str]]) -> int:
        params = {**fields, "ids": [i for i, _ in found], "remote_ids": [r for _, r in found]}
        cursor = await settles.execute(FLOOR_SETTLE_VERIFIED, params, prepare=True, binary=True)
        return len(await cursor.fetchall())

    try:
        found = Jobs(
            claim,
            verify,
            lambda row, remote_id: (row[0], remote_id),
            commit,
            n,
            concurrency,
            ahead,
            batch,
        )
        return await lanes(found)
    finally:
        await claims.close()
        await settles.close()


async def _bounded(coros: list[Any], limit: int) -> None:
    semaphore = asyncio.Semaphore(limit)

    async def one(coro: Any) -> None:
        async with semaphore:
            await coro

    await asyncio.gather(*(one(c) for c in coros))


# -- scale: claim and status with 10^5 .. 10^7 rows --------------------------------------

FILL = """
INSERT INTO denpyo_submissions (channel, key, idempotency_key, payload, status, attempts,
    remote_id, error_kind, last_error, created_at, updated_at, synced_at)
SELECT 'bench', 'old:' || i, 'old-' || i, jsonb_build_object('order', i),
       CASE WHEN i %% 100 = 0 THEN 'rejected' WHEN i %% 100 = 1 THEN 'failed' ELSE 'synced' END,
       1,
       CASE WHEN i %% 100 > 1 THEN 'msg_' || i END,
       CASE WHEN i %% 100 = 0 THEN 'rejected' WHEN i %% 100 = 1 THEN 'transient' END,
       CASE WHEN i %% 100 < 2 THEN 'HTTP 422' END,
       t.ts, t.ts, CASE WHEN i %% 100 > 1 THEN t.ts END
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS i,
     LATERAL (SELECT now() - (i %% 31536000) * interval '1 second' AS ts) AS t
"""

LIVE = """
INSERT INTO denpyo_submissions (channel, key, idempotency_key, payload, status, attempts,
    next_attempt_at)
SELECT 'bench', 'live:' || %(level)s || ':' || i, gen_random_uuid()::text,
       jsonb_build_object('order', i), 'requesting', 0, now() - interval '1 second'
FROM generate_series(1, %(n)s) AS i
"""

SETTLE_LIVE = """
UPDATE denpyo_submissions SET status = 'synced', locked_by = NULL, locked_until = NULL,
    next_attempt_at = NULL, synced_at = now(), remote_id = 'msg_live'
WHERE key LIKE 'live:%%' AND status = 'requesting'
"""

STATUS_SQL = [
    "SELECT channel, status, count(*) FROM denpyo_submissions GROUP BY channel, status",
    "SELECT count(*) FROM denpyo_submissions WHERE (status = 'requesting'"
    " AND locked_until <= now()) OR (status = 'failed' AND error_kind = 'ambiguous')",
    "SELECT min(created_at) FROM denpyo_submissions WHERE status IN ('requesting', 'failed')",
]


STATUS_QUERIES = ("count_submissions_by_status", "count_submissions_needs_person")


def _status_queries(queries: dict[str, str]) -> list[str]:
    """The store's own status queries where it names them; else the generic SQL."""
    if all(name in queries for name in STATUS_QUERIES):
        return [queries[name] for name in STATUS_QUERIES]
    return STATUS_SQL


def _status_fn(ledger: Any) -> tuple[str, Callable[[], Any]]:
    """denpyo's own status when it has one; otherwise the SQL a status command runs."""
    try:
        operator = importlib.import_module("denpyo.engine.operator")
        status = operator.status
    except (ImportError, AttributeError):
        status = None
    if status is not None:
        for call in (lambda: status(ledger), lambda: status(ledger.store)):
            try:
                call()
                return "denpyo.engine.operator.status", call
            except TypeError:
                continue

    def sql_status() -> None:
        with ledger.store.transaction() as tx:
            for query in STATUS_SQL:
                tx.cursor.execute(query)
                tx.cursor.fetchall()

    return "SQL (no status API yet): " + "; ".join(STATUS_SQL), sql_status


async def run_scale(spec: dict[str, Any]) -> dict[str, Any]:
    import psycopg

    import denpyo

    ctx, levels = _ctx(spec), [int(x) for x in spec["levels"]]
    live, claims = int(spec.get("live", 2000)), int(spec.get("claims", 40))
    ledger = denpyo.Ledger(ctx.db_url)
    ledger.migrate()
    queries = ledger.store.queries
    claim_query = "claim_submissions_ready" if "claim_submissions_ready" in queries else None
    claim_sql = queries[claim_query or "find_submissions_ready"]
    out: list[dict[str, Any]] = []
    filled = 0
    conn = psycopg.connect(pg_conninfo(ctx.db_url), autocommit=True)
    try:
        for level in levels:
            fill_started = time.perf_counter()
            chunk = 1_000_000
            for lo in range(filled + 1, level + 1, chunk):
                conn.execute(FILL, {"lo": lo, "hi": min(lo + chunk - 1, level)})
                print(f"scale: {min(lo + chunk - 1, level):,} rows", file=sys.stderr, flush=True)
            filled = level
            conn.execute("VACUUM (ANALYZE) denpyo_submissions")
            fill_seconds = time.perf_counter() - fill_started
            conn.execute(LIVE, {"level": level, "n": live})
            conn.execute("ANALYZE denpyo_submissions")
            claim_ms = []
            for c in range(claims):
                started = time.perf_counter()
                got = ledger.store.claim("bench", holder=f"bench/{level}/{c}", limit=16, lease=60)
                claim_ms.append((time.perf_counter() - started) * 1000)
                assert len(got) == 16, f"claimed {len(got)} rows, expected 16"
            # The claim statement itself, rolled back: EXPLAIN ANALYZE runs it.
            params = {"channel": "bench", "limit": 16, "holder": "explain/1", "lease": 60.0}
            plan: list[Any] = []
            with contextlib.suppress(psycopg.Rollback), conn.transaction():
                plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + claim_sql, params).fetchall()
                raise psycopg.Rollback()
            status_name, status = _status_fn(ledger)
            status_ms = []
            for _ in range(5):
                started = time.perf_counter()
                status()
                status_ms.append((time.perf_counter() - started) * 1000)
            status_plans = []
            for query in _status_queries(queries):
                rows = conn.execute("EXPLAIN (ANALYZE) " + query, {"channel": None}).fetchall()
                status_plans.append("\n".join(r[0] for r in rows))
            size = conn.execute("SELECT pg_total_relation_size('denpyo_submissions')").fetchone()[0]  # type: ignore[index]
            conn.execute(SETTLE_LIVE)
            out.append(
                {
                    "rows": level,
                    "fill_seconds": fill_seconds,
                    "claim_ms": claim_ms,
                    "claim_plan": "\n".join(r[0] for r in plan),
                    "claim_query": claim_query or "find_submissions_ready",
                    "status": status_name,
                    "status_ms": status_ms,
                    "status_plans": status_plans,
                    "table_bytes": size,
                }
            )
    finally:
        conn.close()
        ledger.close()
    return {"levels": out}


# -- probes ----------------------------------------------------------------------------


async def run_probe(spec: dict[str, Any]) -> dict[str, Any]:
    """Which versions this interpreter has, and whether each peer imports."""
    from importlib import metadata

    versions: dict[str, str] = {}
    for dist in spec.get("packages", []):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = ""
    peers: dict[str, str] = {}
    for name in spec.get("peers", []):
        try:
            _peer(name)
            peers[name] = ""
        except Exception as exc:
            peers[name] = f"{type(exc).__name__}: {exc}"
    from denpyo.store.dialects import DIALECTS

    stores: dict[str, str] = {}
    for name, dialect in DIALECTS.items():
        try:
            dialect.store_class()
            stores[name] = ""
        except Exception as exc:
            stores[name] = f"{type(exc).__name__}: {exc}"
    return {
        "python": sys.version.split()[0],
        "versions": versions,
        "peers": peers,
        "stores": stores,
        "pid": os.getpid(),
    }


SCENARIOS = {
    "setup": run_setup,
    "enqueue": run_enqueue,
    "dispatch": run_dispatch,
    "processes": run_processes,
    "httpclients": run_httpclients,
    "inline": run_inline,
    "recovery": run_recovery,
    "scale": run_scale,
    "probe": run_probe,
}


def main() -> int:
    spec = json.loads(sys.argv[1])
    result = asyncio.run(SCENARIOS[spec["scenario"]](spec))
    print(MARK + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
