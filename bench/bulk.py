"""A person's bulk retry of 10^5 rows, and what it costs the workers meanwhile
(scenario `bulk` of run.py).

    PYTHONPATH=src .venv/bin/python bench/bulk.py [--quick] [--only run,workers,sqlite]
        [--rows 100000] [--live 50000] [--batches 500,2000] [--rounds 2]
        [--sqlite-rows 20000] [--logs DIR] [--json FILE]

The rows. One template database per store, made once and copied for every
measurement (PostgreSQL: `CREATE DATABASE … TEMPLATE`; SQLite: the file copied), so
each starts from the same rows: `--rows` rows of channel `bulk` and `--live` rows of
channel `live`, written by `Ledger.enqueue_many` in chunks of 10,000 (COPY on
PostgreSQL), then made what a failed call leaves after its last attempt by one SQL
UPDATE of the `bulk` rows: `status = 'failed'`, `error_kind = 'transient'`,
`attempts = 5`, a `last_error`, `next_attempt_at` NULL (exhausted: unresolved, not in
doubt, waiting for a person). Their events are only the `created` ones (a real
exhausted row has its attempts too; a bulk retry reads none of them). The `live` rows
are held back (due tomorrow) until a worker is ready. The running counts are the
triggers' (the UPDATE moves them as any UPDATE does): `denpyo status`'s counts
(`operator.status`) are checked against a `GROUP BY` of the table before anything is
measured. PostgreSQL's template is then `VACUUM ANALYZE`d (what autovacuum does to a
table after 10^5 new rows); SQLite's is left as written.

1. Bulk retry of every `bulk` row (`--only run`; `sqlite` for the same on SQLite at
   `--sqlite-rows`), as `denpyo bulk retry --status failed --channel bulk --note …
   --yes --batch B` does it, in this process: `operator.plan_bulk(ledger,
   ActionKind.RETRY, Filter(statuses=(FAILED,), channel="bulk"), …, batch=B)` (the
   dry run: the ids frozen by one INSERT … SELECT into denpyo_action_rows, then every
   row read and its move computed, B at a time), `confirm_bulk` (not timed), then
   `operator.run(ledger, id, batch=B, progress=…)` (one transaction per batch; the
   progress callback reads the action once per batch, as the command's progress bar
   does). For each `--batches` size, `--rounds` rounds, the order of the sizes
   alternated, each on a fresh copy. Each phase is timed with `time.perf_counter()`
   around the call, on a ledger connected before the clock starts and closed after
   it; then rows/s = rows ÷ seconds. The database's work per row: the deltas of
   `pg_stat_database` for the copy (xact_commit, tup_inserted, tup_updated,
   tup_fetched, blks_read + blks_hit), read from another database's connection
   before the phase and after it, once every backend of the copy has exited (a
   backend flushes its statistics when it exits), each divided by the rows. The
   whole server's CPU per row too (every live `postgres` process's user + system
   time from /proc, plus the postmaster's children's that ended), and this process's
   (`time.process_time()`). Autovacuum runs of the phase are counted (it may vacuum
   `denpyo_submissions` during the run: its work is then in the deltas). Checked
   after the run: the action is `done` with done = rows and skipped = 0, and a
   `GROUP BY` over the rows' `retry` events finds exactly one for each.
2. The workers meanwhile (`--only workers`, PostgreSQL): the real command,
   `python -m denpyo.cli --app bulk_app:ledger worker --concurrency 16
   --poll-interval 1.0` (bench/bulk_app.py: channel `live` to `python -m
   denpyo.testing` at 0 ms, the HttpChannel with the bench's connection limit),
   started on a fresh copy and ready, then the `live` rows made due at once (one
   UPDATE and a NOTIFY). *Alone*: the worker syncs them; its rate is rows ÷ (last
   `synced_at` − first), from the database. *During*: when the provider has
   accepted 10 % of them (its `/stats`), this process runs the bulk retry of every
   `bulk` row (dry run, confirm, run at the first of `--batches`); the worker's
   rate is the rows whose `synced_at` falls in the window the bulk ran, ÷ its
   length (the window ends early if the worker ran out of rows first: *overlap*
   says which share of the bulk's time it covered; 50,000 live rows keep the
   worker busy to the bulk's end here, 20,000 ran out half-way and 40,000 at about
   90 %), also split into
   the dry run's and the run's windows. Ratio = during ÷ alone. `--rounds` rounds,
   the order of the pair alternated; the bulk's own rows/s under the worker are in
   the JSON too. The bulk rows are on a channel the worker does not serve:
   what is measured is the bulk action's cost to the workers, not their sending of
   the retried rows.

The code measured is a copy of src/ taken as the command starts (`tree` in the JSON:
when, and a fingerprint of its files), which this process and the worker import: the
working tree may be edited meanwhile. `--quick`: 2,000 bulk rows, 1,000 live rows,
500 on SQLite, one round (a few seconds). The machine's load average is in the JSON;
nothing here judges the figures but `checks`, and the script exits 0 with a check
not met.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

from common import alive, job_payload, machine_busy, run_on_a_copy  # noqa: E402

BULK, LIVE = "bulk", "live"  # the rows retried; the worker's (bench/bulk_app.py)
CHUNK = 10_000
"""Rows per `enqueue_many` while the template is written."""
WORKER_OPTIONS = ["--concurrency", "16", "--poll-interval", "1.0"]
START_AT = 0.10
"""The share of the live rows the provider has accepted when the bulk starts."""
STATS = ("xact_commit", "tup_inserted", "tup_updated", "tup_fetched", "blks_read", "blks_hit")
SNAPSHOT = "DENPYO_BULK_TREE"
"""Set in the run that measures: the folder whose `src/` it imports (a copy)."""
HZ = os.sysconf("SC_CLK_TCK")
NOTE = "bench: the provider is back"
T = TypeVar("T")


def log(message: str) -> None:
    print(f"[bulk {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def postgres_cpu() -> float:
    """CPU seconds of the PostgreSQL server so far: every live `postgres` process's,
    and the postmaster's ended children's (its backends that exited)."""
    procs: dict[int, tuple[int, float, float]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if text[text.index("(") + 1 : text.rindex(")")] != "postgres":
            continue
        fields = text.rsplit(")", 1)[1].split()
        own = (int(fields[11]) + int(fields[12])) / HZ
        ended = (int(fields[13]) + int(fields[14])) / HZ
        procs[int(stat.parent.name)] = (int(fields[1]), own, ended)
    return sum(own + (ended if ppid not in procs else 0.0) for ppid, own, ended in procs.values())


# -- the stores ---------------------------------------------------------------------------


class Store:
    """A template database of one store, and fresh copies of it."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.template: str | None = None
        if kind == "postgresql":
            from run import Databases

            self.dbs: Any = Databases()
        else:
            self.folder = Path(tempfile.mkdtemp(prefix="denpyo-bulk-"))

    # names and URLs: a PostgreSQL database's name, or a SQLite file's path

    def new(self) -> str:
        if self.kind == "postgresql":
            return str(self.dbs.create())
        return str(self.folder / f"db-{time.monotonic_ns()}.db")

    def url(self, name: str) -> str:
        return str(self.dbs.url(name)) if self.kind == "postgresql" else f"sqlite:///{name}"

    def copy(self) -> str:
        """A fresh copy of the template."""
        assert self.template is not None
        if self.kind == "postgresql":
            return str(self.dbs.create(template=self.template))
        name = self.new()
        shutil.copyfile(self.template, name)
        return name

    def drop(self, name: str) -> None:
        if self.kind == "postgresql":
            self.dbs.drop(name)
        else:
            for suffix in ("", "-wal", "-shm"):
                Path(name + suffix).unlink(missing_ok=True)

    def close(self) -> None:
        if self.template is not None:
            self.drop(self.template)
        if self.kind == "postgresql":
            self.dbs.close()
        else:
            shutil.rmtree(self.folder, ignore_errors=True)

    def execute(self, name: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.kind == "postgresql":
            import psycopg

            with psycopg.connect(self.url(name), autocommit=True) as conn:
                cursor = conn.execute(sql, params or None)
                return list(cursor.fetchall()) if cursor.description else []
        lite = sqlite3.connect(name, timeout=30)
        try:
            with lite:
                return list(lite.execute(sql.replace("%s", "?"), params).fetchall())
        finally:
            lite.close()

    # the database's work

    def settled(self, name: str) -> None:
        """Wait until no backend of the database is left (each flushed its statistics
        as it exited), at most 10 s."""
        if self.kind != "postgresql":
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            row = self.dbs._execute(
                "SELECT count(*) FROM pg_stat_activity"
                f" WHERE datname = '{name}' AND backend_type = 'client backend'"
            ).fetchone()
            if not row[0]:
                break
            time.sleep(0.05)
        time.sleep(0.1)

    def sample(self, name: str) -> dict[str, float]:
        """The database's counters (PostgreSQL: pg_stat_database, autovacuum runs, the
        server's CPU), this process's CPU and the machine's busy time."""
        found: dict[str, float] = {
            "client_cpu": time.process_time(),
            "machine_busy": machine_busy(),
        }
        if self.kind == "postgresql":
            row = self.dbs._execute(
                f"SELECT {', '.join(STATS)} FROM pg_stat_database WHERE datname = '{name}'"
            ).fetchone()
            found.update({stat: float(value or 0) for stat, value in zip(STATS, row, strict=True)})
            found["server_cpu"] = postgres_cpu()
        return found

    def autovacuums(self, name: str) -> int:
        """Autovacuum and autoanalyze runs on the database's tables so far."""
        if self.kind != "postgresql":
            return 0
        [(n,)] = self.execute(
            name,
            "SELECT COALESCE(SUM(autovacuum_count + autoanalyze_count), 0)"
            " FROM pg_stat_user_tables",
        )
        return int(n)


# -- the template -------------------------------------------------------------------------


def later(store: Store) -> str:
    if store.kind == "postgresql":
        return "now() + interval '1 day'"
    return "strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 day')"


def make_template(store: Store, rows: int, live: int) -> dict[str, Any]:
    """Write the template (see the module's docstring) and check its counts."""
    import denpyo

    name = store.new()
    store.template = name
    began = time.perf_counter()
    with denpyo.Ledger(store.url(name)) as ledger:
        for channel in (BULK, LIVE):
            ledger.add_channel(channel, lambda sub: "unused")
        ledger.migrate()
        for channel, n in ((BULK, rows), (LIVE, live)):
            for start in range(0, n, CHUNK):
                items = [
                    (f"{channel}:{i}", job_payload(i)) for i in range(start, min(n, start + CHUNK))
                ]
                ledger.enqueue_many(channel, items)
    now = "now()" if store.kind == "postgresql" else "strftime('%Y-%m-%d %H:%M:%f', 'now')"
    store.execute(
        name,
        "UPDATE denpyo_submissions SET status = 'failed', error_kind = 'transient', attempts = 5,"
        " last_error = 'HTTP 503: bench, after its last attempt', next_attempt_at = NULL,"
        f" locked_by = NULL, locked_until = NULL, updated_at = {now} WHERE channel = %s",
        (BULK,),
    )
    store.execute(
        name,
        f"UPDATE denpyo_submissions SET next_attempt_at = {later(store)} WHERE channel = %s",
        (LIVE,),
    )
    if store.kind == "postgresql":
        store.execute(name, "VACUUM ANALYZE")
    seconds = time.perf_counter() - began
    counts = status_counts(store, name)
    want = {
        "bulk_failed": rows,
        "exhausted": rows,
        "in_doubt": 0,
        "needs_person": rows,
        "pending": live,
        "live_requesting": live,
    }
    log(f"{store.kind}: template of {rows:,} + {live:,} rows in {seconds:.1f} s: {counts}")
    return {
        "seconds": round(seconds, 1),
        "rows": rows,
        "live": live,
        "counts": counts,
        "counts_ok": all(counts["status"][k] == v for k, v in want.items())
        and counts["status"] == counts["sql"],
    }


def status_counts(store: Store, name: str) -> dict[str, dict[str, int]]:
    """What `denpyo status` shows (the running counts) beside the same counted by SQL."""
    import denpyo
    from denpyo.engine import operator as op

    with denpyo.Ledger(store.url(name)) as ledger:
        report = op.status(ledger)
    shown = {
        "bulk_failed": report.channels.get(BULK, {}).get(denpyo.Status.FAILED, 0),
        "live_requesting": report.channels.get(LIVE, {}).get(denpyo.Status.REQUESTING, 0),
        "exhausted": report.exhausted,
        "in_doubt": report.in_doubt,
        "needs_person": report.needs_person,
        "pending": report.pending,
    }
    [row] = store.execute(
        name,
        "SELECT"
        " SUM(CASE WHEN channel = 'bulk' AND status = 'failed' THEN 1 ELSE 0 END),"
        " SUM(CASE WHEN channel = 'live' AND status = 'requesting' THEN 1 ELSE 0 END),"
        " SUM(CASE WHEN status = 'failed' AND next_attempt_at IS NULL AND resolution IS NULL"
        "     AND (error_kind IS NULL OR error_kind <> 'ambiguous') THEN 1 ELSE 0 END),"
        " SUM(CASE WHEN (status = 'failed' AND error_kind = 'ambiguous')"
        "     OR (status = 'requesting' AND locked_until <= CURRENT_TIMESTAMP) THEN 1 ELSE 0 END),"
        " SUM(CASE WHEN resolution IS NULL AND (status = 'rejected' OR (status = 'failed'"
        "     AND (error_kind = 'ambiguous' OR next_attempt_at IS NULL))) THEN 1 ELSE 0 END),"
        " SUM(CASE WHEN status = 'requesting' OR (status = 'failed'"
        "     AND next_attempt_at IS NOT NULL) THEN 1 ELSE 0 END)"
        " FROM denpyo_submissions",
    )
    sql = dict(zip(shown, (int(v or 0) for v in row), strict=True))
    return {"status": shown, "sql": sql}


# -- 1. the bulk retry --------------------------------------------------------------------


def bulk_filter() -> Any:
    import denpyo
    from denpyo.domain.filters import Filter

    return Filter(statuses=(denpyo.Status.FAILED,), channel=BULK)


def measured(
    store: Store, name: str, rows: int, action: Callable[[Any], T]
) -> tuple[T, dict[str, Any]]:
    """`action(ledger)` timed on a ledger connected before the clock starts, and the
    database's work per row once its backends are gone."""
    import denpyo

    ledger = denpyo.Ledger(store.url(name))
    vacuums = store.autovacuums(name)
    try:
        ledger.store.now()  # connected
        before = store.sample(name)
        began = time.perf_counter()
        result = action(ledger)
        seconds = time.perf_counter() - began
        cpu = time.process_time() - before["client_cpu"]
    finally:
        ledger.close()
    store.settled(name)
    after = store.sample(name)
    delta = {k: after[k] - before[k] for k in before}
    figures: dict[str, Any] = {
        "seconds": round(seconds, 3),
        "rows_per_s": round(rows / seconds, 1),
        "client_cpu_us_per_row": round(cpu / rows * 1e6, 1),
        "machine_busy_cores": round(delta["machine_busy"] / seconds, 2),
    }
    if store.kind == "postgresql":
        figures["server_cpu_us_per_row"] = round(delta["server_cpu"] / rows * 1e6, 1)
        per_row = {stat: delta[stat] / rows for stat in STATS}
        per_row["blocks"] = per_row["blks_read"] + per_row["blks_hit"]
        figures["db_per_row"] = {k: round(v, 3) for k, v in per_row.items()}
        figures["db_totals"] = {stat: int(delta[stat]) for stat in STATS}
        figures["autovacuums"] = store.autovacuums(name) - vacuums
    return result, figures


def retry_events(store: Store, name: str) -> dict[str, int]:
    """How many `bulk` rows have each number of `retry` events: {"1": rows} when every
    row was retried exactly once."""
    found = store.execute(
        name,
        "SELECT n, COUNT(*) FROM ("
        " SELECT s.id, (SELECT COUNT(*) FROM denpyo_events e"
        "  WHERE e.submission_id = s.id AND e.kind = 'retry') AS n"
        " FROM denpyo_submissions s WHERE s.channel = %s) per_row"
        " GROUP BY n ORDER BY n",
        (BULK,),
    )
    return {str(n): int(count) for n, count in found}


def action_json(record: Any) -> dict[str, Any]:
    return {
        "id": record.id,
        "state": record.state.value,
        "total": record.total,
        "done": record.done,
        "skipped": record.skipped,
    }


def bulk_once(store: Store, rows: int, batch: int) -> dict[str, Any]:
    """The dry run and the run of one bulk retry of every `bulk` row, on a fresh copy."""
    import denpyo
    from denpyo.domain.actions import ActionKind
    from denpyo.engine import operator as op

    flt = bulk_filter()
    name = store.copy()
    load = loadavg()
    try:
        store.settled(name)
        dry, planning = measured(
            store,
            name,
            rows,
            lambda ledger: op.plan_bulk(
                ledger,
                ActionKind.RETRY,
                flt,
                note=NOTE,
                by="bench",
                target=flt.describe(),
                batch=batch,
            ),
        )
        with denpyo.Ledger(store.url(name)) as ledger:
            started = op.confirm_bulk(ledger, dry.action.id, by="bench")
            assert not isinstance(started, op.Requested), started
        store.settled(name)
        batches: list[int] = []
        done, running = measured(
            store,
            name,
            rows,
            lambda ledger: op.carry_out(
                ledger, dry.action.id, batch=batch, progress=lambda r: batches.append(r.done)
            ),
        )
        events = retry_events(store, name)
        after = status_counts(store, name)
    finally:
        store.drop(name)
    result = {
        "store": store.kind,
        "rows": rows,
        "batch": batch,
        "dry_run": planning,
        "run": running,
        "plan_counts": dry.counts,
        "action": action_json(done),
        "batches": len(batches),
        "loadavg": load,
        "retry_events": events,
        "after": after,
    }
    result["ok"] = (
        done.state.value == "done"
        and (done.total, done.done, done.skipped) == (rows, rows, 0)
        and events == {"1": rows}
        and after["status"]["exhausted"] == 0
        and after["status"] == after["sql"]
    )
    log(
        f"{store.kind} batch {batch}: dry run {planning['rows_per_s']:,.0f} rows/s "
        f"({planning['seconds']:.1f} s), run {running['rows_per_s']:,.0f} rows/s "
        f"({running['seconds']:.1f} s), {'ok' if result['ok'] else 'NOT OK'}"
    )
    return result


def bulk_runs(store: Store, rows: int, batches: list[int], rounds: int) -> list[dict[str, Any]]:
    runs = []
    for round_ in range(rounds):
        for batch in batches if round_ % 2 == 0 else batches[::-1]:
            runs.append({"round": round_ + 1, **bulk_once(store, rows, batch)})
    return runs


# -- 2. the workers meanwhile ------------------------------------------------------------


@contextmanager
def worker(db_url: str, provider_url: str, log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`denpyo worker` on channel `live`, started and ready; SIGTERM on the way out
    (SIGKILL after 60 s)."""
    import denpyo

    env = {
        **os.environ,
        "BULK_DB_URL": db_url,
        "BULK_PROVIDER_URL": provider_url,
        "PYTHONPATH": os.pathsep.join([str(Path(denpyo.__file__).parents[1]), str(BENCH)]),
    }
    command = [
        sys.executable,
        "-m",
        "denpyo.cli",
        "--app",
        "bulk_app:ledger",
        "worker",
        *WORKER_OPTIONS,
    ]
    with log_path.open("w") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=out, cwd=BENCH)
    try:
        deadline = time.monotonic() + 120
        while "worker started on channels" not in log_path.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.05)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            log("the worker did not stop within 60 s: killed")
            if alive(proc.pid, b"bulk_app"):
                proc.kill()
            proc.wait()


def synced_times(store: Store, name: str) -> list[float]:
    """Each `live` row's `synced_at` (epoch seconds), sorted."""
    found = store.execute(
        name,
        "SELECT EXTRACT(EPOCH FROM synced_at) FROM denpyo_submissions"
        " WHERE channel = %s AND synced_at IS NOT NULL ORDER BY synced_at",
        (LIVE,),
    )
    return [float(at) for (at,) in found]


def rate_in(times: list[float], start: float, end: float) -> float | None:
    """Rows synced in [start, end] ÷ its length (None for a window under 0.5 s)."""
    if end - start < 0.5:
        return None
    return round(sum(1 for at in times if start <= at <= end) / (end - start), 1)


def worker_once(
    store: Store, provider: Any, live: int, bulk_rows: int, batch: int | None, log_path: Path
) -> dict[str, Any]:
    """The worker through the `live` rows of a fresh copy; with `batch`, a bulk retry
    of every `bulk` row in this process from when 10 % of them were accepted."""
    import denpyo
    from denpyo.domain.actions import ActionKind
    from denpyo.engine import operator as op

    name = store.copy()
    url = store.url(name)
    bulk: dict[str, Any] | None = None
    try:
        provider.reset()
        with worker(url, provider.url, log_path) as proc:
            load, busy = loadavg(), machine_busy()
            released = time.time()
            store.execute(
                name,
                f"UPDATE denpyo_submissions SET next_attempt_at = now() WHERE channel = '{LIVE}';"
                f" SELECT pg_notify('denpyo', '{LIVE}')",
            )
            deadline = released + live / 50 + 300
            if batch is not None:
                while provider.stats()["accepted"] < START_AT * live:
                    if proc.poll() is not None or time.time() > deadline:
                        raise RuntimeError(f"the worker stopped: {log_path.read_text()[-2000:]}")
                    time.sleep(0.02)
                flt = bulk_filter()
                with denpyo.Ledger(url) as ledger:
                    began = time.time()
                    dry = op.plan_bulk(
                        ledger,
                        ActionKind.RETRY,
                        flt,
                        note=NOTE,
                        by="bench",
                        target=flt.describe(),
                        batch=batch,
                    )
                    planned = time.time()
                    op.confirm_bulk(ledger, dry.action.id, by="bench")
                    confirmed = time.time()
                    done = op.carry_out(ledger, dry.action.id, batch=batch, progress=lambda r: None)
                    ended = time.time()
                bulk = {
                    "batch": batch,
                    "began": began,
                    "planned": planned,
                    "confirmed": confirmed,
                    "ended": ended,
                    "action": action_json(done),
                    "dry_run_rows_per_s": round(bulk_rows / (planned - began), 1),
                    "run_rows_per_s": round(bulk_rows / (ended - confirmed), 1),
                }
            while True:
                [(synced,)] = store.execute(
                    name,
                    "SELECT COUNT(*) FROM denpyo_submissions WHERE channel = %s"
                    " AND status = 'synced'",
                    (LIVE,),
                )
                if synced >= live:
                    break
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"{synced} of {live} synced: {log_path.read_text()[-2000:]}")
                time.sleep(0.5)
            busy = machine_busy() - busy
            wall = time.time() - released
        times = synced_times(store, name)
        events = retry_events(store, name) if bulk is not None else None
    finally:
        store.drop(name)
    stats = provider.stats()
    first, last = times[0], times[-1]
    result: dict[str, Any] = {
        "with_bulk": batch is not None,
        "synced": len(times),
        "rate": round((len(times) - 1) / (last - first), 1),
        "first_after_release_s": round(first - released, 3),
        "seconds": round(last - first, 2),
        "duplicates": stats["duplicates"],
        "loadavg": load,
        "machine_busy_cores": round(busy / wall, 2),
    }
    tenth = times[int(START_AT * len(times))]
    result["rate_after_10pct"] = rate_in(times, tenth, last)
    if bulk is not None:
        end = min(bulk["ended"], last)
        result.update(
            {
                "bulk": bulk,
                "retry_events": events,
                "window_s": round(end - bulk["began"], 2),
                "overlap": round((end - bulk["began"]) / (bulk["ended"] - bulk["began"]), 3),
                "rate_in_window": rate_in(times, bulk["began"], end),
                "rate_in_dry_run": rate_in(times, bulk["began"], min(bulk["planned"], last)),
                "rate_in_run": rate_in(times, bulk["confirmed"], end),
            }
        )
    return result


def workers_runs(store: Store, args: argparse.Namespace, logs: Path) -> list[dict[str, Any]]:
    from run import Provider

    provider = Provider(sys.executable, 0.0)
    runs = []
    try:
        for round_ in range(args.rounds):
            pair: dict[str, Any] = {"round": round_ + 1}
            order = ("alone", "during") if round_ % 2 == 0 else ("during", "alone")
            pair["order"] = list(order)
            for which in order:
                batch = args.batches[0] if which == "during" else None
                path = logs / f"worker-{round_ + 1}-{which}.log"
                pair[which] = worker_once(store, provider, args.live, args.rows, batch, path)
            during, alone = pair["during"], pair["alone"]
            window = during.get("rate_in_window")
            pair["ratio"] = round(window / alone["rate"], 3) if window else None
            runs.append(pair)
            log(
                f"workers round {round_ + 1}: alone {alone['rate']:,.0f} rows/s, during the "
                f"bulk {window or 0:,.0f} rows/s (overlap {during['overlap']:.0%}), "
                f"ratio {pair['ratio']}"
            )
    finally:
        provider.stop()
    return runs


# -- the tree measured ------------------------------------------------------------------


# -- checks, the table and main ----------------------------------------------------------


def checks(results: dict[str, Any]) -> list[dict[str, Any]]:
    """What the feature promises, measured: each with the figure and whether it holds."""
    found: list[dict[str, Any]] = []

    def check(what: str, value: Any, ok: bool) -> None:
        found.append({"check": what, "value": value, "ok": bool(ok)})

    for kind, setup in results.get("setup", {}).items():
        shown = ", ".join(
            f"{k.replace('_', ' ')} {v:,}" for k, v in setup["counts"]["status"].items()
        )
        check(
            f"{kind}: `denpyo status` counts = SQL counts after the set-up",
            shown,
            setup["counts_ok"],
        )
    for run in results.get("bulk", []):
        where = f"{run['store']}, batch {run['batch']}, round {run['round']}"
        check(
            f"{where}: done = rows, skipped 0, one retry event per row",
            f"{run['action']['done']:,} done, {run['action']['skipped']} skipped, "
            f"retry events {run['retry_events']}",
            run["ok"],
        )
    for pair in results.get("workers", []):
        during = pair["during"]
        action = during["bulk"]["action"]
        rows = results["args"]["rows"]
        check(
            f"workers round {pair['round']}: every live row synced, none twice, the bulk done",
            f"{during['synced']:,} / {pair['alone']['synced']:,} synced, "
            f"{action['done']:,} retried",
            during["duplicates"] == 0
            and pair["alone"]["duplicates"] == 0
            and action["done"] == rows
            and during["retry_events"] == {"1": rows},
        )
    return found


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """Medians over the rounds, per store and batch size; the workers' ratios."""
    out: dict[str, Any] = {}
    for run in results.get("bulk", []):
        out.setdefault(f"{run['store']} batch {run['batch']}", []).append(run)
    table: dict[str, Any] = {}
    for key, runs in out.items():
        table[key] = {
            "rows": runs[0]["rows"],
            "dry_run_rows_per_s": median([r["dry_run"]["rows_per_s"] for r in runs]),
            "run_rows_per_s": median([r["run"]["rows_per_s"] for r in runs]),
        }
        if runs[0]["store"] == "postgresql":
            for phase in ("dry_run", "run"):
                table[key][f"{phase}_db_per_row"] = {
                    stat: round(statistics.median([r[phase]["db_per_row"][stat] for r in runs]), 3)
                    for stat in runs[0][phase]["db_per_row"]
                }
    pairs = results.get("workers", [])
    return {
        "bulk": table,
        "workers": {
            "alone": [p["alone"]["rate"] for p in pairs],
            "during": [p["during"].get("rate_in_window") for p in pairs],
            "ratio": [p["ratio"] for p in pairs],
            "overlap": [p["during"]["overlap"] for p in pairs],
        },
    }


def print_table(results: dict[str, Any]) -> None:
    lines = [
        f"{'store':10} {'rows':>8} {'batch':>5}  {'dry run rows/s':>14} {'run rows/s':>10}  "
        "db work per row in the run (commits, tuples ins/upd, blocks)"
    ]
    for run in results.get("bulk", []):
        db = run["run"].get("db_per_row")
        work = (
            f"{db['xact_commit']:.3f}, {db['tup_inserted']:.1f}/{db['tup_updated']:.1f}, "
            f"{db['blocks']:.0f}"
            if db
            else "–"
        )
        lines.append(
            f"{run['store']:10} {run['rows']:>8,} {run['batch']:>5}  "
            f"{run['dry_run']['rows_per_s']:>14,.0f} {run['run']['rows_per_s']:>10,.0f}  {work}"
        )
    for pair in results.get("workers", []):
        during = pair["during"]
        lines.append(
            f"workers round {pair['round']} ({' then '.join(pair['order'])}): alone "
            f"{pair['alone']['rate']:,.0f} rows/s, during the bulk "
            f"{during.get('rate_in_window') or 0:,.0f} rows/s (dry run "
            f"{during.get('rate_in_dry_run') or 0:,.0f}, run {during.get('rate_in_run') or 0:,.0f};"
            f" overlap {during['overlap']:.0%}), ratio {pair['ratio']}"
        )
    print("\n".join(lines), flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    p.add_argument("--only", default="run,workers,sqlite")
    p.add_argument("--rows", type=int, default=None, help="rows retried on PostgreSQL (100000)")
    p.add_argument("--live", type=int, default=None, help="the worker's rows (50000)")
    p.add_argument("--sqlite-rows", type=int, default=None, help="rows retried on SQLite (20000)")
    p.add_argument("--batches", default="500,2000", help="batch sizes (the first: the workers')")
    p.add_argument("--rounds", type=int, default=None, help="rounds of each measurement (2)")
    p.add_argument("--logs", default=None, help="the worker's logs (a temporary folder)")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    if SNAPSHOT not in os.environ:
        return run_on_a_copy(__file__, sys.argv[1:] if argv is None else argv, SNAPSHOT)
    from fleet import fingerprint, git

    import denpyo

    tree = Path(os.environ[SNAPSHOT])
    assert Path(denpyo.__file__).resolve().is_relative_to(tree.resolve()), denpyo.__file__
    quick = {"rows": 2000, "live": 1000, "sqlite_rows": 500, "rounds": 1}
    full = {"rows": 100_000, "live": 50_000, "sqlite_rows": 20_000, "rounds": 2}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.batches = [int(b) for b in args.batches.split(",")]
    only = args.only.split(",")
    logs = Path(args.logs or tempfile.mkdtemp(prefix="denpyo-bulk-logs-"))
    logs.mkdir(parents=True, exist_ok=True)
    started = time.time()
    results: dict[str, Any] = {
        "args": vars(args),
        "worker_options": WORKER_OPTIONS,
        "nproc": os.cpu_count(),
        "loadavg_at_start": loadavg(),
        "logs": str(logs),
        "tree": {
            "copied_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "head": git("rev-parse", "--short", "HEAD"),
            "fingerprint": fingerprint(tree / "src"),
        },
        "setup": {},
    }
    if "run" in only or "workers" in only:
        store = Store("postgresql")
        results["postgresql"] = store.dbs.server_version()
        try:
            results["setup"]["postgresql"] = make_template(store, args.rows, args.live)
            if "run" in only:
                results["bulk"] = bulk_runs(store, args.rows, args.batches, args.rounds)
            if "workers" in only:
                results["workers"] = workers_runs(store, args, logs)
        finally:
            store.close()
    if "sqlite" in only:
        store = Store("sqlite")
        try:
            results["setup"]["sqlite"] = make_template(store, args.sqlite_rows, 0)
            results.setdefault("bulk", []).extend(
                bulk_runs(store, args.sqlite_rows, args.batches, 1)
            )
        finally:
            store.close()
    results["summary"] = summary(results)
    results["checks"] = checks(results)
    results["loadavg_at_end"] = loadavg()
    results["seconds"] = round(time.time() - started, 1)
    print_table(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    for item in results["checks"]:
        if not item["ok"]:
            log(f"NOT MET: {item['check']}: {item['value']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
