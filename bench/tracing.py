"""What OpenTelemetry costs the worker: CPU per call without it, with the API alone,
and with the SDK (scenario `tracing` of run.py).

    PYTHONPATH=src .venv/bin/python bench/tracing.py [--quick] [--rows 20000]
        [--rounds 3] [--databases sqlite,postgresql] [--json FILE]

Three ways, each in a process of its own (the global tracer provider can be set
once per process, and `off` must never import OpenTelemetry):

- `off`: `DENPYO_TRACING=off`, exactly the path of an installation without
  `opentelemetry-api` (engine/tracing.py: every hook a constant no-op); the rows
  keep no trace context;
- `api`: the API installed, no SDK (its no-op tracer): the rows are enqueued
  inside a remote context, as an instrumented web framework leaves it, so each
  keeps a traceparent, each attempt carries it on, and `traced`/`inject` run;
- `sdk`: the SDK's `TracerProvider` with a `BatchSpanProcessor` and an exporter
  that does nothing, set as the global provider; the rows are enqueued inside an
  application span, so each attempt is a recorded span with its parent, its link
  and its attributes, and each claim and settle batch a span too.

For each database (a fresh one per run; PostgreSQL at DENPYO_BENCH_POSTGRES_URL):
`--rows` rows are enqueued by `enqueue_many` (not measured), then `work(until_idle=True,
concurrency=64)` sends them through an async channel that returns at once (so the
engine's own cost is all there is to see) and the process's CPU time
(`time.process_time()`, every thread: the loop, the database threads, the batch
processor's) is read around it, the SDK's `force_flush` included. CPU µs per call
= that ÷ rows; `--rounds` rounds, the three ways alternated, the median reported,
and each way's ratio to `off`.

Then, on its own, what the hooks themselves cost on the `off` path: a flow of one
step with the hooks `Flows.attempt` calls (`attempt_span`, `current`, `attempted`,
`end`, in its `try`), against the same flow bare, both stepped by the engine's
`step`, timed by `timeit` (200,000 times, best of 5), in a process with
`DENPYO_TRACING=off`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WAYS = ("off", "api", "sdk")
PG_URL = os.environ.get(
    "DENPYO_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
CHANNEL = "bench"


# -- one run (a child process) ---------------------------------------------------------------


def fresh_database(database: str, folder: str) -> tuple[str, Any]:
    """A new empty database and how to drop it."""
    name = f"denpyo_bench_tracing_{uuid.uuid4().hex[:10]}"
    if database == "sqlite":
        return f"sqlite:///{folder}/{name}.db", lambda: None
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")

    def drop() -> None:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    return f"{PG_URL.rsplit('/', 1)[0]}/{name}", drop


def request_context(way: str) -> Any:
    """What is current while the rows are enqueued: nothing (`off`), a remote
    context (`api`), an application span (`sdk`)."""
    import contextlib

    if way == "off":
        return contextlib.nullcontext()
    from opentelemetry import trace

    if way == "api":
        remote = trace.SpanContext(
            0x4BF92F3577B34DA6A3CE929D0E0E4736,
            0x00F067AA0BA902B7,
            is_remote=True,
            trace_flags=trace.TraceFlags(1),
        )
        return trace.use_span(trace.NonRecordingSpan(remote))
    return trace.get_tracer("bench").start_as_current_span("POST /orders")


def sdk_provider() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Nothing(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Nothing()))
    return provider


def child(way: str, database: str, rows: int) -> dict[str, Any]:
    provider = None
    if way == "sdk":
        from opentelemetry import trace

        provider = sdk_provider()
        trace.set_tracer_provider(provider)
    import denpyo
    from denpyo.engine import tracing

    assert tracing.ENABLED is (way != "off"), "DENPYO_TRACING not as the way needs"
    with tempfile.TemporaryDirectory() as folder:
        url, drop = fresh_database(database, folder)
        try:
            with denpyo.Ledger(url) as ledger:
                ledger.migrate()

                async def send(sub: denpyo.Submission) -> str:
                    return "r"

                ledger.channel(CHANNEL, down_after=None)(send)
                with request_context(way):
                    for start in range(0, rows, 10_000):
                        end = min(rows, start + 10_000)
                        items = [(f"order:{i}", {"order": i}) for i in range(start, end)]
                        ledger.enqueue_many(CHANNEL, items)
                wall, cpu = time.perf_counter(), time.process_time()
                report = ledger.work(until_idle=True, concurrency=64)
                if provider is not None:
                    provider.force_flush()
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                assert report.outcomes.get("synced") == rows, report.summary()
        finally:
            drop()
    if provider is not None:
        provider.shutdown()
    return {
        "way": way,
        "database": database,
        "rows": rows,
        "cpu_s": cpu,
        "wall_s": wall,
        "cpu_us_per_call": cpu / rows * 1e6,
        "calls_per_s": rows / wall,
    }


def hooks_child() -> dict[str, Any]:
    """µs per attempt of the no-op hooks, beside the same one-step flow without them."""
    import timeit

    from denpyo.domain.policy import AttemptDecision
    from denpyo.domain.status import Status
    from denpyo.domain.submission import Submission
    from denpyo.engine import tracing
    from denpyo.engine.flows import step

    assert not tracing.ENABLED
    sub = Submission(1, CHANNEL, "order:1", "idem", {}, Status.REQUESTING)
    decided = AttemptDecision(Status.SYNCED)

    def flow() -> Any:
        return (yield "call")

    def attempt() -> Any:
        """As `Flows.attempt` wraps its call: the span, current during the call, told
        the outcome, ended in `finally`."""
        span = tracing.attempt_span(CHANNEL, sub, inline=False)
        try:
            result = yield "call"
            with span.current():
                pass
            span.attempted(1, decided, sub, None)
            return result
        except Exception as exc:
            span.failed(exc)
            raise
        finally:
            span.end()

    def bare() -> None:
        running = flow()
        step(running)
        step(running, "r")

    def hooked() -> None:
        running = attempt()
        step(running)
        step(running, "r")

    n = 200_000
    best = {f.__name__: min(timeit.repeat(f, number=n, repeat=5)) / n * 1e6 for f in (bare, hooked)}
    return {
        "bare_us": best["bare"],
        "hooked_us": best["hooked"],
        "hooks_us_per_attempt": best["hooked"] - best["bare"],
    }


# -- the rounds --------------------------------------------------------------------------------


def one_run(way: str, database: str, rows: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("DENPYO_TRACING", None)
    if way in ("off", "hooks"):
        env["DENPYO_TRACING"] = "off"
    done = subprocess.run(
        [sys.executable, __file__, "--child", way, "--databases", database, "--rows", str(rows)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise SystemExit(f"{way} on {database} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per database and way: the median CPU µs per call and calls/s, and the ratio to off."""
    table = []
    for database in dict.fromkeys(run["database"] for run in runs):
        by_way = {
            way: [run for run in runs if (run["database"], run["way"]) == (database, way)]
            for way in WAYS
        }
        medians = {
            way: statistics.median(r["cpu_us_per_call"] for r in by_way[way]) for way in WAYS
        }
        for way, mine in by_way.items():
            table.append(
                {
                    "database": database,
                    "way": way,
                    "rounds": len(mine),
                    "cpu_us_per_call": medians[way],
                    "calls_per_s": statistics.median(run["calls_per_s"] for run in mine),
                    "ratio_to_off": medians[way] / medians["off"],
                }
            )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 rows, one round")
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--child", choices=(*WAYS, "hooks"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "hooks":
        print(json.dumps(hooks_child()))
        return
    if args.child:
        print(json.dumps(child(args.child, args.databases, args.rows)))
        return
    if args.quick:
        args.rows, args.rounds = 1_000, 1
    databases = [d for d in args.databases.split(",") if d]
    runs = []
    for n in range(args.rounds):
        for database in databases:
            order = WAYS if n % 2 == 0 else WAYS[::-1]  # alternated: no way always first
            for way in order:
                runs.append(one_run(way, database, args.rows))
                print(
                    f"round {n + 1} {database} {way}: "
                    f"{runs[-1]['cpu_us_per_call']:.1f} µs CPU per call",
                    flush=True,
                )
    table = summary(runs)
    hooks = one_run("hooks", "none", 0)
    print(f"\nCPU µs per call, median of {args.rounds} rounds of {args.rows:,} calls")
    print(f"{'database':<12}{'way':<6}{'µs/call':>9}{'calls/s':>10}{'÷ off':>8}")
    for row in table:
        print(
            f"{row['database']:<12}{row['way']:<6}{row['cpu_us_per_call']:>9.1f}"
            f"{row['calls_per_s']:>10,.0f}{row['ratio_to_off']:>8.2f}"
        )
    print(
        f"\nthe no-op hooks (off): {hooks['hooks_us_per_attempt']:.3f} µs per attempt "
        f"({hooks['hooked_us']:.3f} with them, {hooks['bare_us']:.3f} without)"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "args": {"rows": args.rows, "rounds": args.rounds, "databases": databases},
                    "runs": runs,
                    "summary": table,
                    "hooks": hooks,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
