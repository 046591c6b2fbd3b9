"""Render a run's results (bench/results/*/results.json) as docs/benchmarks.md and a plot.

Every number in the report comes from the results file of one run; ratios are
taken per repeat (denpyo and the peer in the same round) and their median shown.
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

LABELS = {
    "fire_and_forget": "fire-and-forget (no DB)",
    "outbox": "hand-written outbox",
    "pgqueuer": "PgQueuer",
    "procrastinate": "Procrastinate",
    "dbos": "DBOS",
    "denpyo": "**denpyo**",
    "denpyo_nocall": "denpyo, no call (the ledger alone; not a peer)",
    "denpyo_store": "denpyo's store alone (no engine, no call; not a peer)",
    "floor_psycopg": "the floor: two statements on bare psycopg (not a peer)",
    "floor_asyncpg": "the floor: two statements on bare asyncpg (not a peer)",
    "floor_call": "the floor with the call: two statements on bare psycopg and the POST "
    "(not a peer)",
}
# Parts of denpyo measured alone, and the floor under them: not peers.
NO_CALL = ["denpyo_nocall", "denpyo_store", "floor_psycopg", "floor_asyncpg"]
FLOOR_CALL = "floor_call"
"""Not a peer: the most any durable worker reaches here, the floor's two statements
around the same call with nothing of denpyo's in between (`bench/peers/floor_call.py`)."""
ORDER = [
    "denpyo",
    FLOOR_CALL,
    *NO_CALL,
    "fire_and_forget",
    "outbox",
    "pgqueuer",
    "procrastinate",
    "dbos",
]
DURABLE_PEERS = ["outbox", "pgqueuer", "procrastinate", "dbos"]
REALISTIC = [(200.0, 256)]
"""(latency ms, calls in flight) with targets of their own: a realistic provider."""


# -- metadata ---------------------------------------------------------------------------


def machine_meta(pg_version: str, probe: dict[str, Any], args: Any, sizes: Any) -> dict[str, Any]:
    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "src"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    return {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "postgresql": pg_version,
        "python": probe.get("python"),
        "versions": probe.get("versions", {}),
        "commit": commit + (" (src/ has uncommitted changes)" if dirty else ""),
        "quick": bool(args.quick),
        "sizes": {k: v for k, v in vars(sizes).items()},
    }


# -- helpers --------------------------------------------------------------------------------


def med(values: Iterable[float]) -> float | None:
    values = list(values)
    return statistics.median(values) if values else None


def fmt_rate(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def spread(values: list[float], fmt: Any = fmt_rate) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return fmt(values[0])
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}–{fmt(max(values))})"


def fmt_ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def ok_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if "error" not in r and r.get("rate")]


def paired_ratio(
    rows: list[dict[str, Any]], a: str, b: str, key: tuple[Any, ...], fields: tuple[str, ...]
) -> float | None:
    """Median over repeats of rate(a)/rate(b), each pair from the same repeat."""
    by: dict[tuple[Any, ...], dict[str, float]] = defaultdict(dict)
    for r in ok_rows(rows):
        if tuple(r[f] for f in fields) == key:
            by[(r["repeat"],)][r["peer"]] = r["rate"]
    ratios = [v[a] / v[b] for v in by.values() if a in v and b in v]
    return med(ratios)


def configs(rows: list[dict[str, Any]]) -> list[tuple[float, int]]:
    return sorted({(r["latency_ms"], r["concurrency"]) for r in rows})


# -- sections -------------------------------------------------------------------------------


def section_dispatch(results: dict[str, Any]) -> list[str]:
    rows = results.get("dispatch", [])
    if not rows:
        return []
    cfgs = configs(rows)
    header = ["peer"] + [f"{lat:g} ms, {c} in flight" for lat, c in cfgs]
    peers = [p for p in ORDER if any(r["peer"] == p for r in rows)]
    body, rss, cpu, ratio_rows = [], [], [], []
    for peer in peers:
        line, rss_line, cpu_line = [LABELS[peer]], [LABELS[peer]], [LABELS[peer]]
        for lat, c in cfgs:
            mine = [
                r
                for r in rows
                if r["peer"] == peer and (r["latency_ms"], r["concurrency"]) == (lat, c)
            ]
            good = ok_rows(mine)
            bad = [r for r in mine if "error" in r or not r.get("ok", True)]
            cell = spread([r["rate"] for r in good])
            if bad:
                cell += f" ⚠ {len(bad)} run(s) failed or miscounted"
            line.append(cell)
            rss_line.append(spread([r["maxrss_kb"] / 1024 for r in mine], lambda v: f"{v:,.0f}"))
            cpu_line.append(_cpu_cell(good))
        body.append(line)
        rss.append(rss_line)
        cpu.append(cpu_line)
    for peer in peers:
        if peer == "denpyo" or peer in NO_CALL:
            continue
        line = [f"denpyo ÷ {LABELS[peer]}"]
        for lat, c in cfgs:
            line.append(
                fmt_ratio(
                    paired_ratio(rows, "denpyo", peer, (lat, c), ("latency_ms", "concurrency"))
                )
            )
        ratio_rows.append(line)
    sizes = {p: sorted({r["n"] for r in rows if r["peer"] == p}) for p in peers}
    n = max(max(v) for v in sizes.values())
    smaller = [f"{LABELS[p]} {v[0]:,}" for p, v in sizes.items() if v and v[0] != n]
    out = [
        "## 1. Dispatch throughput (PostgreSQL)",
        "",
        (
            f"**Smaller runs for the slowest peers** (to fit the time at hand; throughput is "
            f"steady-state, the rate is comparable): {', '.join(smaller)} jobs.\n\n"
            if smaller
            else ""
        )
        + f"{n:,} jobs enqueued beforehand, one transaction each as an application would "
        "(not timed; copied per run with `CREATE DATABASE … TEMPLATE`), then one worker "
        "process is started and timed until every job is recorded as done in the database; "
        "each job is one JSON POST to the loopback provider with an idempotency key, "
        "through one shared aiohttp session "
        "(the same call and client for every peer). Jobs/s, median of the repeats with "
        "(min–max). After each run the harness checks that the database counts N done jobs "
        "and that the provider accepted exactly N distinct keys.",
        "",
        table(header, body),
        "",
        "Ratios, denpyo ÷ peer (median of per-repeat ratios, each pair from the same round):",
        "",
        table(["ratio", *header[1:]], ratio_rows),
        "",
        "Peak RSS of the worker process (MiB, `ru_maxrss` of the child):",
        "",
        table(header, rss),
        "",
        "CPU during the timed run (median; worker = the worker process's own CPU time ÷ wall "
        "time, in cores; provider = the fake provider process; machine = all of the machine's "
        "busy time ÷ wall, out of 2 cores: PostgreSQL is most of the rest):",
        "",
        table(header, cpu),
        "",
        *in_flight(rows, cfgs, peers),
    ]
    return out


def in_flight(
    rows: list[dict[str, Any]], cfgs: list[tuple[float, int]], peers: list[str]
) -> list[str]:
    """Mean calls in flight while timed, by Little's law (jobs/s × the provider's latency,
    a floor: a call takes a little longer than the latency), against those asked for."""
    slow = [(lat, c) for lat, c in cfgs if lat >= 100]
    if not slow:
        return []
    body = []
    for peer in peers:
        if peer in NO_CALL:
            continue
        line = [LABELS[peer]]
        for lat, c in slow:
            rate = med(r["rate"] for r in runs_of(rows, peer, (lat, c)))
            line.append("–" if rate is None else f"{rate * lat / 1000:,.0f} of {c}")
        body.append(line)
    return [
        "Calls in flight, measured: jobs/s × the provider's latency (Little's law; a floor, "
        "since a call takes a little longer than the latency), beside the calls in flight "
        "asked for. A peer below it is held back by something else than its concurrency "
        "setting (its database round trips, its pool, its CPU):",
        "",
        table(["peer", *[f"{lat:g} ms, {c} in flight" for lat, c in slow]], body),
        "",
    ]


def _cpu_cell(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "–"
    worker = med(r["child_cpu_s"] / r["wall_s"] for r in rows)
    provider = med(r["provider_cpu_s"] / r["seconds"] for r in rows)
    machine = med(r["machine_busy_s"] / r["wall_s"] for r in rows)
    return f"worker {worker:.2f}, provider {provider:.2f}, machine {machine:.2f}"


def runs_of(rows: list[dict[str, Any]], peer: str, key: tuple[float, int]) -> list[dict[str, Any]]:
    """A peer's good runs at one (latency in ms, calls in flight)."""
    return [
        r for r in ok_rows(rows) if (r["peer"], r["latency_ms"], r["concurrency"]) == (peer, *key)
    ]


def best_durable(rows: list[dict[str, Any]], key: tuple[float, int]) -> str | None:
    """The durable peer with the highest median jobs/s in one configuration."""
    rates = {p: med(r["rate"] for r in runs_of(rows, p, key)) for p in DURABLE_PEERS}
    measured = {p: rate for p, rate in rates.items() if rate is not None}
    return max(measured, key=measured.__getitem__) if measured else None


def durable_cost(cost: dict[str, float], call: dict[str, float]) -> float:
    """What recording adds per job: worker and machine time beyond the bare call's."""
    return cost["worker"] - call["worker"] + cost["rest"] - call["rest"]


def cpu_per_job(rows: list[dict[str, Any]], peer: str, key: tuple[float, int]) -> dict[str, float]:
    """Median µs of CPU per job of a peer's runs in one configuration: its worker, the
    provider, and the rest of the machine (PostgreSQL, the OS); {} if it has no run."""
    mine = runs_of(rows, peer, key)
    if not mine:
        return {}
    # The worker's CPU while timed (its start-up excluded); the rest over the child's
    # whole life, from which its whole CPU is subtracted (so its start-up cancels out).
    return median_per_item(
        mine,
        {
            "worker": lambda r: r.get("cpu_s", r["child_cpu_s"]),
            "provider": lambda r: r["provider_cpu_s"],
            "rest": lambda r: r["machine_busy_s"] - r["child_cpu_s"] - r["provider_cpu_s"],
        },
    )


def median_per_item(
    runs: list[dict[str, Any]], parts: dict[str, Callable[[dict[str, Any]], float]]
) -> dict[str, float]:
    """Median µs per item (job or row, `n` of each run) of each part of the runs' CPU
    seconds, in the order given."""
    return {
        name: med(seconds(r) / r["n"] * 1e6 for r in runs) or 0.0 for name, seconds in parts.items()
    }


def cpu_sum(parts: dict[str, float]) -> str:
    """Parts of a job's (or row's) CPU and their total: "a + b + c = all"."""
    return " + ".join(f"{v:,.0f}" for v in parts.values()) + f" = {sum(parts.values()):,.0f}"


def cores_of(results: dict[str, Any]) -> int:
    return int((results.get("meta") or {}).get("nproc") or 2)


def section_cpu_per_job(results: dict[str, Any]) -> list[str]:
    rows = results.get("dispatch", [])
    keys = [k for k in configs(rows) if k[0] == 0]
    if not keys:
        return []
    body = []
    for peer in ORDER:
        line = [LABELS[peer]]
        for key in keys:
            cost = cpu_per_job(rows, peer, key)
            line.append(cpu_sum(cost) if cost else "–")
        if any(cell != "–" for cell in line[1:]):
            body.append(line)
    return [
        "### Where a job's CPU goes (provider at 0 ms)",
        "",
        "Microseconds of CPU per job, median of the repeats: the worker process + the "
        "provider + the rest of the machine (PostgreSQL and the OS) = all. Fire-and-forget's "
        "worker column is the cost of the call itself, which every peer pays too; a durable "
        "peer's extra worker and database time is what recording costs it. *denpyo, no call* "
        "runs the same worker over the same rows with a channel that returns at once: its "
        "worker column is the ledger's own cost per job, measured directly. *denpyo's store "
        "alone* makes the same claims and settles through the same store under the smallest "
        "loop that keeps them busy, with no engine: the part of that cost that is the "
        "protocol itself (`bench/peers/denpyo_store.py`).",
        "",
        table(["peer", *[f"{lat:g} ms, {c} in flight" for lat, c in keys]], body),
        "",
    ]


def section_provider(results: dict[str, Any]) -> list[str]:
    rows = [r for r in ok_rows(results.get("dispatch", [])) if r["peer"] == "fire_and_forget"]
    if not rows:
        return []
    lines = []
    for lat, c in configs(rows):
        mine = [r for r in rows if (r["latency_ms"], r["concurrency"]) == (lat, c)]
        rate = med(r["rate"] for r in mine)
        cpu = med(r["provider_cpu_s"] / r["seconds"] for r in mine)
        verdict = (
            "**the provider is the bottleneck here** (≥ 0.9 of a core)"
            if cpu is not None and cpu >= 0.9
            else "not saturated"
        )
        lines.append([f"{lat:g} ms, {c} in flight", fmt_rate(rate), f"{cpu:.2f}", verdict])
    return [
        "### Is the provider the bottleneck?",
        "",
        "The fake provider is one Python process (aiohttp) on the same 2 cores. Its own ceiling "
        "is what fire-and-forget reaches; its CPU use (in cores, while the fire-and-forget "
        "run lasted) tells whether it was saturated:",
        "",
        table(["config", "fire-and-forget jobs/s", "provider CPU (cores)", "verdict"], lines),
        "",
    ]


def section_processes(results: dict[str, Any], curve_name: str | None = None) -> list[str]:
    rows = results.get("processes", [])
    if not rows:
        return []
    body = []
    for lat, per in sorted({(r["latency_ms"], r["per_process"]) for r in rows}):
        mine = [r for r in rows if (r["latency_ms"], r["per_process"]) == (lat, per)]
        one = med(r["rate"] for r in ok_rows(mine) if r["peer"] == "denpyo" and r["processes"] == 1)
        for count in sorted({r["processes"] for r in mine}):
            runs = [r for r in mine if r["processes"] == count]
            denpyo = [r for r in runs if r["peer"] == "denpyo"]
            good = ok_rows(denpyo)
            ff = ok_rows([r for r in runs if r["peer"] == "fire_and_forget"])
            by_repeat: dict[int, dict[str, float]] = defaultdict(dict)
            for r in [*good, *ff]:
                by_repeat[r["repeat"]][r["peer"]] = r["rate"]
            ratio = med(
                v["denpyo"] / v["fire_and_forget"] for v in by_repeat.values() if len(v) == 2
            )
            rate = med(r["rate"] for r in good)
            cell = spread([r["rate"] for r in good])
            bad = [r for r in denpyo if "error" in r or not r.get("ok")]
            if bad:
                cell += f" ⚠ {len(bad)} run(s) failed or miscounted"
            cores = med(r["workers_cpu_s"] / r["seconds"] for r in good)
            per_job = med(r["workers_cpu_s"] / r["n"] * 1e6 for r in good)
            ff_per_job = med(r["cpu_s"] / r["n"] * 1e6 for r in ff if "cpu_s" in r)
            busy = med(r["timed_machine_busy_s"] / r["seconds"] for r in good)
            body.append(
                [
                    f"{lat:g} ms",
                    str(count),
                    f"{per} × {count} = {per * count}",
                    cell,
                    spread([r["rate"] for r in ff]),
                    fmt_ratio(ratio),
                    fmt_ratio(rate / one if rate and one else None),
                    "–" if cores is None else f"{cores:.2f}",
                    "–" if per_job is None else f"{per_job:,.0f}",
                    "–" if ff_per_job is None else f"{ff_per_job:,.0f}",
                    "–" if busy is None else f"{busy:.2f}",
                ]
            )
    n = rows[0]["n"]
    return [
        "## 7. Worker processes: `denpyo worker --processes N`",
        "",
        f"{n:,} jobs enqueued beforehand (as in section 1) and held back; "
        "`python -m denpyo.cli --app worker_app:ledger worker --processes N --concurrency C` "
        "is started (N = 1 runs the single worker, no supervisor), and once every process "
        "has started, one UPDATE and a NOTIFY make all rows due at once: timed from there "
        "until the database counts every row synced (interpreter start-up not timed); then "
        "SIGTERM, which must end it with exit code 0. The same HTTP channel and provider "
        "as section 1. Beside it, fire-and-forget in one process with the same calls in "
        "flight in total. C (in flight per process): the worker's default, 16, at 20 ms; 256 "
        "at 200 ms. Jobs/s, median (min–max); workers' CPU: all worker processes' CPU "
        "while timed, ÷ the time (cores) and ÷ the jobs (µs per job), beside "
        "fire-and-forget's (the call alone); machine busy: all of the machine's busy time "
        "while denpyo was timed ÷ that time, out of "
        f"{cores_of(results)} cores (the workers, PostgreSQL, the provider, and whatever "
        "else ran). Where it is near all the cores, more processes cannot go faster.",
        "",
        table(
            [
                "provider latency",
                "processes",
                "in flight",
                "denpyo jobs/s",
                "fire-and-forget jobs/s",
                "denpyo ÷ fire-and-forget",
                "× one process",
                "workers' CPU (cores)",
                "workers' µs CPU per job",
                "fire-and-forget's µs CPU per job",
                "machine busy (cores)",
            ],
            body,
        ),
        "",
        *([f"![worker processes]({curve_name})", ""] if curve_name else []),
    ]


def section_backends(results: dict[str, Any]) -> list[str]:
    rows = list(results.get("backends", []))
    if not rows:
        return []
    if not any(r.get("backend") == "postgresql" for r in rows):
        rows += [r for r in results.get("dispatch", []) if r["peer"] == "denpyo"]
    cfgs = configs([r for r in rows if "latency_ms" in r])
    header = ["denpyo on"] + [f"{lat:g} ms, {c} in flight" for lat, c in cfgs]
    body = []
    for backend in ("postgresql", "sqlite", "mysql"):
        mine = [r for r in rows if r.get("backend") == backend]
        if not mine:
            continue
        line = [backend]
        for lat, c in cfgs:
            cell_rows = [r for r in mine if (r.get("latency_ms"), r.get("concurrency")) == (lat, c)]
            good = ok_rows(cell_rows)
            cell = spread([r["rate"] for r in good])
            if len(good) < len(cell_rows):
                cell += " ⚠ failures"
            if good:
                cell += (
                    f"; {spread([r['maxrss_kb'] / 1024 for r in good], lambda v: f'{v:,.0f}')} MiB"
                )
            line.append(cell)
        body.append(line)
    errors = [f"- {r['backend']}: {r['error'][:300]}" for r in rows if "error" in r]
    return [
        "## 6. The same dispatch on SQLite and MariaDB",
        "",
        "denpyo alone, the same jobs and worker settings as section 1, on each store "
        "(the PostgreSQL row is denpyo's from section 1 unless this section ran it again). "
        "Jobs/s median (min–max); peak RSS.",
        "",
        table(header, body),
        "",
        *errors,
        "",
    ]


def section_inline(results: dict[str, Any]) -> list[str]:
    inline = results.get("inline")
    if not inline:
        return []
    clients = inline.get("httpclients", {})
    lines = [
        "## 2. Inline overhead: `submit()`",
        "",
    ]
    if "median" in clients:
        lines += [
            "Synchronous HTTP clients, sequential POSTs to the provider (requests/s, median): "
            + ", ".join(
                f"{k} {fmt_rate(v)}"
                for k, v in sorted(clients["median"].items(), key=lambda kv: -kv[1])
            )
            + f". The fastest, **{clients['fastest']}**, is used in every column below.",
            "",
        ]
    body = []
    for run in inline.get("runs", []):
        if "error" in run:
            body.append([run["backend"], run["error"][:200], "", "", "", "", "", "", "", ""])
            continue
        us = run["us_per_call"]

        def to_hand(mode: str, us: dict[str, list[float]] = us) -> str:
            """A mode's median per-round ratio to the hand-written call ('–' if the
            run did not measure it)."""
            values = us.get(mode) or []
            return fmt_ratio(
                med(v / h for v, h in zip(values, us["handwritten"], strict=True))
                if values
                else None
            )

        body.append(
            [
                run["backend"],
                spread(us["bare"], _us),
                spread(us["handwritten"], _us),
                spread(us["history"], _us) if us.get("history") else "–",
                spread(us["statements"], _us) if us.get("statements") else "–",
                spread(us["submit"], _us),
                to_hand("submit"),
                to_hand("history"),
                to_hand("statements"),
                fmt_ratio(med(s / b for s, b in zip(us["submit"], us["bare"], strict=True))),
            ]
        )
    lines += [
        "Microseconds per call, sequential, one caller thread, provider at 0 ms. "
        "*bare*: the HTTP call alone; *hand-written*: INSERT and commit, call, UPDATE and "
        "commit (the same durability settings as denpyo's store: SQLite WAL with "
        "`synchronous=FULL`); *with its history*: the same, each transaction also "
        "INSERTing an event row, as denpyo records the created and settle events (the "
        "least a hand-written ledger with the history pays); *denpyo's statements "
        "alone*: the store's own named queries for one inline submit, run on the driver "
        "with nothing of the engine (the floor under `submit()` for this schema: "
        "`bench/submit_floor.py` also shows what each piece of it costs); *submit*: "
        "`ledger.submit()` with a synchronous channel making the same call. Median of "
        "the rounds (min–max).",
        "",
        table(
            [
                "database",
                "bare call",
                "hand-written",
                "hand-written with its history",
                "denpyo's statements alone",
                "submit()",
                "submit ÷ hand-written",
                "with its history ÷ hand-written",
                "statements alone ÷ hand-written",
                "submit ÷ bare",
            ],
            body,
        ),
        "",
    ]
    return lines


def _us(value: float) -> str:
    return f"{value:,.0f} µs"


ENQUEUE_LABELS = {
    ("outbox", "single"): "hand-written outbox: INSERT into its own table, one per transaction",
    ("outbox", "bulk"): "hand-written outbox: INSERT into its own table (three indexes, no "
    "trigger, no history), `executemany` in one transaction",
    ("denpyo", "single"): "**denpyo** `enqueue()` (its own transaction each)",
    (
        "denpyo",
        "single (caller's transaction)",
    ): "**denpyo** `enqueue(conn=…)`, one caller transaction each",
    (
        "denpyo",
        "bulk",
    ): "**denpyo** bulk: no bulk API; `enqueue(conn=…)` in a loop, one transaction",
    ("pgqueuer", "single"): "PgQueuer `enqueue()` one at a time",
    ("pgqueuer", "bulk"): "PgQueuer `enqueue()` with lists (5,000 per call)",
    ("procrastinate", "single"): "Procrastinate `defer_async()`",
    ("procrastinate", "bulk"): "Procrastinate `batch_defer_async()` (1,000 per call)",
    ("dbos", "single"): "DBOS `DBOSClient.enqueue()` (no bulk API)",
}


def section_enqueue(results: dict[str, Any]) -> list[str]:
    rows = results.get("enqueue", [])
    if not rows:
        return []
    body = []
    keys = sorted({(r["peer"], r["mode"]) for r in rows}, key=lambda k: (ORDER.index(k[0]), k[1]))
    for peer, mode in keys:
        mine = [r for r in rows if (r["peer"], r["mode"]) == (peer, mode)]
        good = ok_rows(mine)
        label = ENQUEUE_LABELS.get((peer, mode), f"{peer} {mode}")
        apis = {r["api"] for r in good if r.get("api")}
        if peer == "denpyo" and mode == "hand-written":
            label = "hand-written INSERT of the same rows into denpyo's table, `executemany` "
            label += "in one transaction (not denpyo: the baseline of its bulk enqueue)"
        elif peer == "denpyo" and len(apis) == 1:
            label = f"**denpyo** {mode}: `{apis.pop()}`"
        cell = spread([r["rate"] for r in good])
        if len(good) < len(mine):
            cell += " ⚠ " + next(r["error"][:150] for r in mine if "error" in r)
        body.append(
            [label, cell, spread([r["maxrss_kb"] / 1024 for r in mine], lambda v: f"{v:,.0f}")]
        )
    n = rows[0]["n"]
    return [
        "## 3. Enqueue",
        "",
        f"{n:,} jobs into a fresh PostgreSQL database, one process, rows/s (median, min–max).",
        "",
        table(["how", "rows/s", "peak RSS MiB"], body),
        "",
    ]


def section_memory(results: dict[str, Any]) -> list[str]:
    rows = results.get("memory", [])
    if not rows:
        return []
    body = [
        [
            f"{r['n']:,}",
            f"{r['maxrss_kb'] / 1024:,.0f}" if "maxrss_kb" in r else "–",
            fmt_rate(r.get("rate")) if r.get("rate") else "–",
            "ok" if r.get("ok") else f"⚠ {str(r.get('error', 'check failed'))[:120]}",
        ]
        for r in rows
    ]
    return [
        "## 8. Memory: the worker's peak RSS as the rows dispatched grow",
        "",
        "The same dispatch as section 1 (denpyo, provider at 0 ms, 64 in flight) over more and "
        "more rows, enqueued beforehand with `enqueue_many`: the worker process's peak RSS "
        "(`ru_maxrss`) should not grow with the rows it has dispatched.",
        "",
        table(["rows dispatched", "peak RSS MiB", "jobs/s", "check"], body),
        "",
    ]


def section_partitions(results: dict[str, Any]) -> list[str]:
    """PostgreSQL's partitioned layout against the plain one (bench/partitions.py)."""
    found = results.get("partitions")
    if not found:
        return []
    if "error" in found:
        return ["## 9. PostgreSQL partitions", "", f"⚠ the run failed: {found['error'][-300:]}", ""]
    args = found["args"]
    lines = [
        "## 9. PostgreSQL partitions: the partitioned layout against the plain one",
        "",
        f"{args['days']} days of {args['per_day']:,} settled rows each, written into each "
        f"layout; the hot path measured on {args['rows']:,} new rows after day 1 and after "
        f"day {args['days']}: CPU µs per row, this process's and the database backends'.",
        "",
    ]
    hot = found.get("hot_path_cpu_us_per_row", {})
    if hot:
        body = []
        for layout, figures in hot.items():
            last = f"day {args['days']}"
            for step in ("record", "claim", "settle"):
                body.append(
                    [
                        layout,
                        step,
                        f"{figures['day 1'][step]:,.0f}",
                        f"{figures[last][step]:,.0f}",
                        f"{figures['ratio'][step]:.2f}×",
                    ]
                )
        lines += [table(["layout", "step", "day 1 µs", f"day {args['days']} µs", "ratio"], body)]
        lines += [""]
    drop = found.get("drop_one_day")
    if drop:
        lines += [
            f"Dropping the oldest day: partitioned, archived and dropped whole in "
            f"{drop['archive_total_s']} s ({drop['archive_mb']} MB of Parquet, "
            f"{drop['archive_mb_per_s']} MB/s over the whole run); plain, pruned row by row "
            f"in {drop['plain_prune_s']} s ({drop['plain_prune_rows']:,} rows). The steps:",
            "",
            *[f"- {step}" for step in drop["partition_steps"]],
            "",
        ]
    keys = found.get("key_memory")
    if keys:
        lines += [
            f"The key memory: {keys['bytes_per_key']} bytes per key in denpyo_keys "
            f"({keys['keys']:,} keys); a submit of a key whose row was dropped "
            f"{keys['submit_dropped_key_us']} µs, of a live one {keys['submit_live_key_us']} µs.",
            "",
        ]
    size = found.get("size_over_time")
    if size:
        by_day = {layout: {r["day"]: r["mb"] for r in rows} for layout, rows in size["mb"].items()}
        days = sorted({day for rows in by_day.values() for day in rows})
        body = [[str(day), *[f"{by_day[name].get(day, '–')}" for name in by_day]] for day in days]
        lines += [
            f"Size on disk of the rows and their events, with their indexes, MB (the keys, "
            f"kept for ever by design, apart), "
            f"{size['per_day']:,} rows a day, the last {size['kept_days']} days kept:",
            "",
            table(["day", *by_day], body),
            "",
        ]
    return lines


def section_fleet(results: dict[str, Any]) -> list[str]:
    """Worker processes against a provider's limits and outage (bench/fleet.py)."""
    found = results.get("fleet")
    if not found:
        return []
    title = "## 10. A fleet and its provider's limits"
    if "error" in found:
        return [title, "", f"⚠ the run failed: {found['error'][-300:]}", ""]
    args = found["args"]
    limit = found["provider_limit"]
    lines = [
        title,
        "",
        f"`bench/fleet.py`: {args['processes']} worker processes (`denpyo worker --processes "
        f"{args['processes']}`, `{' '.join(found['worker_options'])}`), each run on a fresh "
        f"database, its rows made due at once. The provider (loopback, in the bench's "
        f"process) accepts {limit} requests in any window of one second and answers the "
        "rest 429 with `Retry-After: 1`. *Worst window*: the most requests that arrived in "
        "any [t, t + 1 s), over the sorted arrival times; *calls/s*: those accepted, from "
        "the first arrival to the last accepted; *rows/s*: rows synced from the release to "
        "the last `synced_at`. A run that heard nothing for "
        f"{args['stall']:g} s is stopped as stalled.",
        "",
    ]
    body = []
    for run in found.get("rate", []):
        downs = sum(1 for e in run.get("events", []) if e["kind"] == "down")
        body.append(
            [
                run["store"] + (" (one file)" if run["store"] == "sqlite" else ""),
                run["case"],
                f"{run['rows']:,}",
                str(run["worst_window"]),
                fmt_rate(run["calls_per_s"]),
                fmt_rate(run["rows_per_s"]),
                str(run["http_429"]),
                f"{run['synced']:,}" + (" ⚠ stalled" if run.get("stalled") else ""),
                str(downs),
                f"{run['machine_busy_cores']:.1f}",
            ]
        )
    if body:
        header = [
            "store",
            "channel",
            "rows",
            "worst window",
            "calls/s",
            "rows/s",
            "429s",
            "synced",
            "went down",
            "machine busy (cores)",
        ]
        lines += [table(header, body), ""]
    cpu = found.get("cpu")
    if cpu:
        per = cpu["us_per_call"]
        lines += [
            f"CPU per call with no limit set: {cpu['rows']:,} rows, one process's "
            "`work(until_idle=True, concurrency=16)` against the fake provider at 0 ms, "
            f"{cpu['rounds']} round(s) alternated; *before* is {cpu['before']}"
            + (" (the same code as after)" if cpu["same_code"] else "")
            + f", *after* the working tree as copied when the run began "
            f"({found['tree']['copied_at']}, code {found['tree']['fingerprint']}). µs of the "
            "worker's CPU per call:",
            "",
            table(
                ["tree", "µs per call", "machine busy (cores)"],
                [
                    [
                        which,
                        ", ".join(f"{v:,.0f}" for v in per[which]),
                        ", ".join(f"{v:.1f}" for v in cpu["machine_busy_cores"][which]),
                    ]
                    for which in ("before", "after")
                ],
            ),
            "",
            f"After ÷ before: {cpu['ratio']:.2f} (medians); per round "
            + ", ".join(f"{r:.2f}" for r in cpu["paired_ratios"])
            + ".",
            "",
        ]
    down = found.get("outage")
    if down:
        recovery = down["recovery_to_last_synced_s"]
        lines += [
            f"Outage: the provider answered 503 (no Retry-After) to every call for "
            f"{down['outage_s']:g} s, then 200; {down['rows']:,} rows, `fleet_rate_limit="
            f"{limit}`, `max_attempts=5`, `down_after` at its default. "
            f"{down['calls_during_outage']} calls during the outage, "
            f"{down['calls_before_down']} before the channel went down"
            + (f" ({down['down_at']:.1f} s after the release)" if down["down_at"] else "")
            + f", {down['calls_while_down']} while it was down (the calls of the workers "
            "that had not yet read it, and the probes, the one that found it up included); "
            f"{down['exhausted']} rows exhausted, at most {down['max_attempts']} attempts "
            f"of any row; {down['synced']:,} of {down['rows']:,} synced"
            + (f", the last {recovery:.1f} s after the provider recovered" if recovery else "")
            + (
                f" — ⚠ stalled: no call and no row synced for {args['stall']:g} s"
                if down.get("stalled")
                else ""
            )
            + ".",
            "",
        ]
    return lines + checks_table(found)


def section_bulk(results: dict[str, Any]) -> list[str]:
    """A person's bulk retry of every row a filter finds, and a worker meanwhile
    (bench/bulk.py)."""
    found = results.get("bulk")
    if not found:
        return []
    title = "## 11. A bulk retry of every row a filter finds"
    if "error" in found:
        return [title, "", f"⚠ the run failed: {found['error'][-300:]}", ""]
    args = found["args"]
    lines = [
        title,
        "",
        f"`bench/bulk.py`: {args['rows']:,} exhausted rows (`failed`, no next attempt) of "
        "channel `bulk`, retried as `denpyo bulk retry --status failed --channel bulk --yes "
        "--batch B` does, on a fresh copy of one template database each time: the *dry run* "
        "(`plan_bulk`: the ids frozen by one INSERT … SELECT, then every row read and its "
        "move computed, B at a time) and the *run* (`run`: one transaction per batch), each "
        "timed on its own. Work per row: deltas of `pg_stat_database` for the copy (commits, "
        "tuples inserted and updated, tuples fetched through indexes, blocks read or hit), "
        "and CPU µs per row of the whole PostgreSQL server and of the bench's process.",
        "",
    ]
    body = []
    for run in found.get("bulk", []):
        for phase, label in (("dry_run", "dry run"), ("run", "run")):
            figures = run[phase]
            db = figures.get("db_per_row")
            body.append(
                [
                    run["store"],
                    f"{run['rows']:,}",
                    str(run["batch"]),
                    str(run["round"]),
                    label,
                    f"{figures['seconds']:.1f}",
                    fmt_rate(figures["rows_per_s"]),
                    f"{db['xact_commit']:.3f}" if db else "–",
                    f"{db['tup_inserted']:.2f} / {db['tup_updated']:.2f}" if db else "–",
                    f"{db['tup_fetched']:.1f}" if db else "–",
                    f"{db['blocks']:.1f}" if db else "–",
                    fmt_rate(figures.get("server_cpu_us_per_row")),
                    fmt_rate(figures["client_cpu_us_per_row"]),
                ]
            )
    if body:
        header = [
            "store",
            "rows",
            "batch",
            "round",
            "phase",
            "s",
            "rows/s",
            "commits / row",
            "tuples ins. / upd. per row",
            "tuples fetched / row",
            "blocks / row",
            "server CPU µs / row",
            "bench CPU µs / row",
        ]
        lines += [table(header, body), ""]
    pairs = found.get("workers", [])
    if pairs:
        rows = [
            [
                str(p["round"]),
                " then ".join(p["order"]),
                fmt_rate(p["alone"]["rate"]),
                fmt_rate(p["during"].get("rate_in_window")),
                fmt_rate(p["during"].get("rate_in_dry_run")),
                fmt_rate(p["during"].get("rate_in_run")),
                f"{p['during']['overlap']:.0%}",
                fmt_ratio(p["ratio"]),
                fmt_rate(p["during"]["bulk"]["run_rows_per_s"]),
            ]
            for p in pairs
        ]
        header = [
            "round",
            "order",
            "alone rows/s",
            "during rows/s",
            "in the dry run",
            "in the run",
            "overlap",
            "during ÷ alone",
            "the bulk's run rows/s",
        ]
        lines += [
            f"The worker meanwhile: `denpyo worker {' '.join(found['worker_options'])}` on "
            f"{args['live']:,} rows of another channel, against the fake provider at 0 ms. "
            "*Alone*: its rows synced per second (first `synced_at` to last); *during*: the "
            "rows it synced in the window the bulk retry ran (started when 10 % were sent), "
            "÷ the window, and within the dry run and the run; *overlap*: the share of the "
            "bulk's time the worker still had rows.",
            "",
            table(header, rows),
            "",
        ]
    return lines + checks_table(found)


def section_tracing(results: dict[str, Any]) -> list[str]:
    """What OpenTelemetry costs the worker (bench/tracing.py)."""
    found = results.get("tracing")
    if not found:
        return []
    title = "## Tracing: what OpenTelemetry costs the worker"
    if "error" in found:
        return [title, "", f"⚠ the run failed: {found['error'][-300:]}", ""]
    args = found["args"]
    rows = [
        [
            row["database"],
            row["way"],
            f"{row['cpu_us_per_call']:.1f}",
            fmt_rate(row["calls_per_s"]),
            fmt_ratio(row["ratio_to_off"]),
        ]
        for row in found["summary"]
    ]
    return [
        title,
        "",
        f"`bench/tracing.py`: {args['rows']:,} calls through an async channel that returns "
        "at once, `work(until_idle=True, concurrency=64)`, the process's CPU time per call "
        f"(median of {args['rounds']} rounds, a process each): *off* is an installation "
        "without OpenTelemetry (`DENPYO_TRACING=off`), *api* the API without an SDK (the "
        "rows written in a remote context), *sdk* the SDK with a `BatchSpanProcessor` and "
        "an exporter that does nothing (the rows written in an application span).",
        "",
        table(["database", "way", "CPU µs / call", "calls/s", "÷ off"], rows),
        "",
        *(
            [
                f"The no-op hooks of the *off* path alone: {hooks['hooks_us_per_attempt']:.2f} µs "
                "per attempt (timeit, best of 5).",
                "",
            ]
            if (hooks := found.get("hooks"))
            else []
        ),
    ]


def checks_table(found: dict[str, Any]) -> list[str]:
    """A scenario's `checks` (what the feature promises, measured) as a table."""
    checks = found.get("checks", [])
    if not checks:
        return []
    rows = [[c["check"], str(c["value"]), "**met**" if c["ok"] else "**not met**"] for c in checks]
    return [table(["check", "measured", ""], rows), ""]


def memory_growth(results: dict[str, Any]) -> float | None:
    """Peak RSS of the largest run ÷ that of the smallest."""
    rows = [r for r in results.get("memory", []) if r.get("ok") and "maxrss_kb" in r]
    if len(rows) < 2:
        return None
    rows.sort(key=lambda r: r["n"])
    return float(rows[-1]["maxrss_kb"]) / float(rows[0]["maxrss_kb"])


def section_recovery(results: dict[str, Any]) -> list[str]:
    rows = results.get("recovery", [])
    if not rows:
        return []
    good = ok_rows(rows)
    body = [
        [
            "provider lookups alone (aiohttp, 16 in flight)",
            spread([r["lookup_rate"] for r in good]),
        ],
        [
            "**denpyo** `reconcile()` (worker default: 16 in flight)",
            spread([r["rate"] for r in good]),
        ],
        [
            "the floor: the same lookups between two hand-written statements on bare "
            "psycopg (not a peer)",
            spread([r["floor_rate"] for r in good if r.get("floor_ok")]),
        ],
        ["ratio reconcile ÷ lookups", fmt_ratio(med(r["rate"] / r["lookup_rate"] for r in good))],
        [
            "ratio the floor ÷ lookups",
            fmt_ratio(med(r["floor_rate"] / r["lookup_rate"] for r in good if r.get("floor_ok"))),
        ],
        [
            "ratio reconcile ÷ the floor",
            fmt_ratio(med(r["rate"] / r["floor_rate"] for r in good if r.get("floor_ok"))),
        ],
    ]
    checks = [
        f"- repeat {r['repeat']}: "
        + ("ok" if r.get("ok") else "⚠ check failed")
        + (
            f" ({r.get('synced')} synced, {r.get('resends')} resends,"
            f" {r.get('lookups_by_reconcile')} lookups)"
            if "synced" in r
            else f" ({r.get('error', '')[:200]})"
        )
        for r in rows
    ]
    return [
        "## 4. Recovery: reconciling in-doubt rows",
        "",
        f"{rows[0]['n']:,} rows left `requesting` with an expired lease (a crashed worker); the "
        "provider had accepted every one of them. `reconcile()` asks the lookup endpoint for "
        "each and settles it `synced` with the provider's id. Rows/s (median, min–max), beside "
        "the provider's own lookup rate measured in the same process just before, and the "
        "floor: as many rows in doubt in the same table (a channel of their own), held, "
        "looked up and settled `synced` with their `verify` event by two hand-written "
        "statements on bare psycopg under the floor's lanes (`bench/peers/floor_call.py`), "
        "nothing of denpyo's in between (`_reconcile_floor` in `bench/child.py`): the most any "
        "reconciler reaches here.",
        "",
        table(["", "rows/s"], body),
        "",
        *checks,
        "",
        *recovery_budget(results),
    ]


def cpu_per_row(rows: list[dict[str, Any]], phase: str) -> dict[str, float] | None:
    """Median µs of CPU per row in one phase of the recovery run (`lookup` or
    `reconcile`): this process, the provider, and the rest of the machine."""
    runs = [{"n": r["n"], **r[f"{phase}_cpu"]} for r in rows if f"{phase}_cpu" in r]
    if not runs:
        return None
    return median_per_item(
        runs,
        {
            "process": lambda r: r["own"],
            "provider": lambda r: r["provider"],
            "rest": lambda r: max(r["machine"] - r["own"] - r["provider"], 0.0),
        },
    )


def recovery_budget(results: dict[str, Any]) -> list[str]:
    """Where a reconciled row's CPU goes, and what 0.8× the lookup rate leaves for the
    ledger: the lookups alone already keep the machine's cores busy."""
    good = ok_rows(results.get("recovery", []))
    lookups, reconcile = cpu_per_row(good, "lookup"), cpu_per_row(good, "reconcile")
    floor = cpu_per_row([r for r in good if r.get("floor_ok")], "floor")
    if not good or lookups is None or reconcile is None:
        return []
    cores = cores_of(results)
    needed = 0.8 * (med(r["lookup_rate"] for r in good) or 0.0)
    if not needed:
        return []
    one_core, all_cores = 1e6 / needed, cores * 1e6 / needed

    room_process = one_core - lookups["process"]
    room_machine = all_cores - sum(lookups.values())
    return [
        "Microseconds of CPU per row, median of the repeats: the measuring process (the "
        "lookup loop, then the reconciler) + the provider + the rest of the machine "
        "(PostgreSQL and the OS) = all.",
        "",
        table(
            ["", "µs per row"],
            [
                ["lookups alone", cpu_sum(lookups)],
                *([["the floor", cpu_sum(floor)]] if floor else []),
                ["`reconcile()`", cpu_sum(reconcile)],
            ],
        ),
        "",
        f"At 0.8× the lookup rate ({fmt_rate(needed)} rows/s) one core has "
        f"{one_core:,.0f} µs per row; the lookup itself takes {lookups['process']:,.0f} of "
        f"them in the reconciler's loop, which leaves **{room_process:,.0f} µs** for the "
        "ledger's work there (measured: "
        f"{reconcile['process'] - lookups['process']:,.0f}). The machine's {cores} cores have "
        f"{all_cores:,.0f} µs per row; the lookups (client, provider, OS) take "
        f"{sum(lookups.values()):,.0f}, which leaves **{room_machine:,.0f} µs** for all of the "
        "ledger's work, in Python and in PostgreSQL (measured: "
        f"{sum(reconcile.values()) - sum(lookups.values()):,.0f}).",
        "",
    ]


def section_scale(results: dict[str, Any]) -> list[str]:
    scale = results.get("scale")
    if not scale:
        return []
    if "error" in scale:
        return ["## 5. Scale", "", f"Failed: {scale['error'][:1000]}", ""]
    levels = scale["levels"]
    body = []
    for level in levels:
        body.append(
            [
                f"{level['rows']:,}",
                f"{level['table_bytes'] / 2**20:,.0f} MiB",
                spread(level["claim_ms"], lambda v: f"{v:.2f} ms"),
                spread(level["status_ms"], lambda v: f"{v:,.1f} ms"),
                "index" if "Index" in level["claim_plan"] else "**seq scan**",
                _status_plan_kind(level["status_plans"]),
            ]
        )
    first, last = levels[0], levels[-1]
    claim_ratio = med(last["claim_ms"]) / med(first["claim_ms"])
    status_ratio = med(last["status_ms"]) / med(first["status_ms"])
    out = [
        "## 5. Scale: claim and status with a big table",
        "",
        "The table is filled with settled rows (98 % synced, 1 % rejected, 1 % failed with no "
        "next attempt, created over a year) by `INSERT … SELECT generate_series`, then "
        "`VACUUM (ANALYZE)`; 2,000 ready rows are added at each size. *claim*: "
        "`ledger.store.claim(limit=16)` (the worker's claim of ready rows, with their "
        "events, in one transaction), 40 times. *status*: "
        f"{scale['levels'][0]['status']}; 5 times. Median (min–max).",
        "",
        table(["rows", "table + indexes", "claim", "status", "claim plan", "status plans"], body),
        "",
        f"From {first['rows']:,} to {last['rows']:,} rows: claim × {claim_ratio:.2f}, "
        f"status × {status_ratio:.2f}.",
        "",
        f"Claim query plan at {last['rows']:,} rows (`EXPLAIN (ANALYZE, BUFFERS)` of "
        f"`{last.get('claim_query', 'find_submissions_ready')}`, rolled back):",
        "",
        "```",
        last["claim_plan"],
        "```",
        "",
        f"Plans of the queries status runs (`count_submissions_by_status` and "
        f"`count_submissions_needs_person` of the store's SQL file; a store without them: "
        f"counts by channel and status, in-doubt count, oldest pending) at "
        f"{last['rows']:,} rows:",
        "",
        "```",
        "\n\n".join(last["status_plans"]),
        "```",
        "",
    ]
    return out


def _status_plan_kind(plans: list[str]) -> str:
    """Per plan: the tables it scans whole, or "index"."""
    kinds = []
    for plan in plans:
        scanned = sorted(set(re.findall(r"Seq Scan on (\w+)", plan)))
        kinds.append("seq scan of " + " and ".join(scanned) if scanned else "index")
    return "; ".join(kinds)


# -- targets --------------------------------------------------------------------------------


def targets(results: dict[str, Any]) -> list[list[str]]:
    out: list[list[str]] = []
    rows = results.get("dispatch", [])

    def verdict(
        value: float | None, goal: float, higher: bool = True, floor: float | None = None
    ) -> str:
        """Met or not; a target that the floor of the same run misses too says so."""
        if value is None:
            return "not measured"
        met = value >= goal if higher else value <= goal
        if met:
            return "**met**"
        if floor is not None and (floor < goal if higher else floor > goal):
            return "**not met**; the floor misses it too"
        return "**not met**"

    def against(key: tuple[float, int], peer: str | None, goal: float, what: str) -> None:
        """denpyo ÷ peer, and beside it the floor with the call ÷ the same peer."""
        if peer is None:
            out.append([what, "–", "not measured"])
            return
        mine = paired_ratio(rows, "denpyo", peer, key, ("latency_ms", "concurrency"))
        floor = paired_ratio(rows, FLOOR_CALL, peer, key, ("latency_ms", "concurrency"))
        measured = fmt_ratio(mine)
        if floor is not None:
            measured += f"; the floor with the call {fmt_ratio(floor)}"
        out.append([what, measured, verdict(mine, goal, floor=floor)])

    for lat, c in configs(rows):
        key = (lat, c)
        if lat == 0:
            best: tuple[str, float] | None = None
            for peer in DURABLE_PEERS:
                rate = med(r["rate"] for r in runs_of(rows, peer, key))
                if rate is not None and (best is None or rate > best[1]):
                    best = (peer, rate)
            against(
                key,
                best[0] if best else None,
                2.0,
                f"dispatch at 0 ms, {c} in flight ≥ 2× the best durable peer"
                + (f" ({LABELS[best[0]]})" if best else ""),
            )
            against(
                key,
                "fire_and_forget",
                0.75,
                f"dispatch at 0 ms, {c} in flight ≥ 0.75× fire-and-forget",
            )
        elif (lat, c) in REALISTIC:  # a realistic provider
            leader = best_durable(rows, key)
            against(
                key,
                "fire_and_forget",
                0.9,
                f"dispatch at {lat:g} ms, {c} in flight ≥ 0.9× fire-and-forget",
            )
            against(
                key,
                leader,
                1.2,
                f"dispatch at {lat:g} ms, {c} in flight ≥ 1.2× the best durable peer"
                + (f" ({LABELS[leader]})" if leader else ""),
            )
        else:
            against(
                key,
                "fire_and_forget",
                0.95,
                f"dispatch at {lat:g} ms, {c} in flight ≥ 0.95× fire-and-forget",
            )
    for run in (results.get("inline") or {}).get("runs", []):
        if "error" in run:
            continue
        us = run["us_per_call"]
        ratio = med(s / h for s, h in zip(us["submit"], us["handwritten"], strict=True))
        # SQLite: denpyo also writes the history, with the same two fsyncs
        goal = 1.5 if run["backend"] == "sqlite" else 1.2
        measured = fmt_ratio(ratio)
        for mode, what in (
            ("statements", "denpyo's statements alone"),
            ("history", "hand-written with its history"),
        ):
            if us.get(mode):
                floor = med(v / h for v, h in zip(us[mode], us["handwritten"], strict=True))
                measured += f"; {what} {fmt_ratio(floor)}"
        out.append(
            [
                f"submit() ≤ {goal:g}× hand-written INSERT/call/UPDATE ({run['backend']})",
                measured,
                verdict(ratio, goal, higher=False),
            ]
        )
    enq = results.get("enqueue", [])
    if enq:

        def rate(peer: str, mode: str) -> float | None:
            return med(r["rate"] for r in ok_rows(enq) if (r["peer"], r["mode"]) == (peer, mode))

        hand = rate("outbox", "single")
        for mode, how in (
            ("single", "`enqueue()`, its own transaction"),
            ("single (caller's transaction)", "`enqueue(conn=…)` in the caller's transaction"),
        ):
            mine = rate("denpyo", mode)
            ratio = mine / hand if mine and hand else None
            out.append(
                [
                    f"single enqueue, {how}, ≥ hand-written INSERT (one per transaction)",
                    fmt_ratio(ratio),
                    verdict(ratio, 1.0),
                ]
            )
        bulk, hand = rate("denpyo", "bulk"), rate("denpyo", "hand-written")
        ratio = bulk / hand if bulk and hand else None
        out.append(
            [
                "bulk enqueue ≥ 1.5× a hand-written `executemany` INSERT of the same rows into "
                "the same table",
                fmt_ratio(ratio),
                verdict(ratio, 1.5),
            ]
        )
    rec = ok_rows(results.get("recovery", []))
    if rec:
        ratio = med(r["rate"] / r["lookup_rate"] for r in rec)
        floor = med(r["floor_rate"] / r["lookup_rate"] for r in rec if r.get("floor_ok"))
        measured = fmt_ratio(ratio) + (f"; the floor {fmt_ratio(floor)}" if floor else "")
        out.append(
            [
                "reconcile ≥ 0.8× the provider's lookup rate",
                measured,
                verdict(ratio, 0.8, floor=floor),
            ]
        )
    scale = results.get("scale") or {}
    if scale.get("levels"):
        first, last = scale["levels"][0], scale["levels"][-1]
        for what in ("claim", "status"):
            ratio = med(last[f"{what}_ms"]) / med(first[f"{what}_ms"])
            out.append(
                [
                    f"{what} flat within 2× from {first['rows']:,} to {last['rows']:,} rows",
                    f"× {ratio:.2f}",
                    verdict(ratio, 2.0, higher=False),
                ]
            )
    growth = memory_growth(results)
    if growth is not None:
        sizes = sorted(r["n"] for r in results["memory"] if r.get("ok"))
        out.append(
            [
                f"the worker's peak RSS flat (within 10 %) from {sizes[0]:,} to {sizes[-1]:,} "
                "rows dispatched",
                f"× {growth:.2f}",
                verdict(growth, 1.1, higher=False),
            ]
        )
    return out


def dispatch_budget(results: dict[str, Any]) -> list[str]:
    """What the dispatch targets at 0 ms would cost, from this run's CPU per job: one
    worker runs on one core, and everything shares the machine's cores."""
    rows = results.get("dispatch", [])
    cores = cores_of(results)
    body = []
    for key in [k for k in configs(rows) if k[0] == 0]:
        ff, mine = cpu_per_job(rows, "fire_and_forget", key), cpu_per_job(rows, "denpyo", key)
        if not ff or not mine:
            continue

        alone = cpu_per_job(rows, "denpyo_nocall", key)
        store = cpu_per_job(rows, "denpyo_store", key)
        floors = [cpu_per_job(rows, p, key) for p in ("floor_psycopg", "floor_asyncpg")]
        rates = {p: med(r["rate"] for r in runs_of(rows, p, key)) or 0.0 for p in ORDER}
        leanest = min(
            (
                (durable_cost(cost, ff), p)
                for p in DURABLE_PEERS
                if (cost := cpu_per_job(rows, p, key))
            ),
            default=None,
        )
        if leanest is None:
            continue  # a run without the durable peers (`--peers`)
        best = max(DURABLE_PEERS, key=lambda p: rates[p])
        goals = [
            ("0.75× fire-and-forget", 0.75 * rates["fire_and_forget"]),
            (f"2× {LABELS[best]}", 2 * rates[best]),
        ]
        for goal, needed in goals:
            if not needed:
                continue
            one_core, all_cores = 1e6 / needed, cores * 1e6 / needed
            body.append(
                [
                    f"{key[1]} in flight: {goal}",
                    fmt_rate(needed),
                    f"{one_core:,.0f} − {ff['worker']:,.0f} = **{one_core - ff['worker']:,.0f}**",
                    " / ".join(
                        [
                            f"{part['worker']:,.0f}" if part else "–"
                            for part in (*floors, store, alone)
                        ]
                        + [f"{mine['worker'] - ff['worker']:,.0f}"]
                    ),
                    f"{all_cores:,.0f} − {sum(ff.values()):,.0f} = "
                    f"**{all_cores - sum(ff.values()):,.0f}**",
                    " / ".join(
                        f"{part['worker'] + part['rest']:,.0f}" if part else "–" for part in floors
                    ),
                    f"{durable_cost(mine, ff):,.0f}",
                    f"{leanest[0]:,.0f} ({LABELS[leanest[1]]})",
                ]
            )
    if not body:
        return []
    return [
        "What the dispatch targets at 0 ms would take, in µs of CPU per job from this run "
        "(section 1, *Where a job's CPU goes*). One worker is one event loop on one core: at "
        "the rate a target needs, a core has the time shown per job, of which the call itself "
        "takes what fire-and-forget's worker spends; the rest is the room for the ledger's "
        f"work in the worker. All {cores} cores are shared by the worker, the provider and "
        "PostgreSQL: their time per job, less what fire-and-forget's run uses (call, "
        "provider, OS), is the room for all the durable work (the worker's part and the "
        "database's). A target is within reach only where the measured figure fits its room. "
        "The ledger's cost in the worker is shown five ways. *floor*, psycopg then asyncpg: "
        "the worker of the same claims and settles (events included) as two hand-written "
        "statements on the bare driver, under the same loop (`bench/peers/floor.py`): what "
        "the driver and the database cost with nothing of denpyo's in the way, and so the "
        "least any design on this database could spend; *store*, the worker of "
        "*denpyo's store alone*: the same claims and settles through the store's API under "
        "the smallest loop that keeps them busy, with no engine (the floor of the protocol "
        "itself); *alone*, the worker of *denpyo, no call* (store and engine); *in the run*, "
        "denpyo's worker less fire-and-forget's. The last two differ because in the run the "
        "worker shares the cores with the provider and PostgreSQL (three busy processes) and "
        "settles in other batch sizes: read them as a range.",
        "",
        table(
            [
                "target",
                "jobs/s needed",
                "one core per job − the call = room",
                "the ledger in the worker: floor psycopg / floor asyncpg / store / alone / "
                "in the run",
                f"{cores} cores per job − call, provider, OS = room",
                "the floor's durable work (worker + database): psycopg / asyncpg",
                "denpyo's durable work",
                "leanest durable peer's",
            ],
            body,
        ),
        "",
    ]


# -- the document -----------------------------------------------------------------------------


def render(results: dict[str, Any], plot_name: str | None, curve_name: str | None = None) -> str:
    meta = results.get("meta", {})
    versions = meta.get("versions", {})
    lines = [
        "# Benchmarks",
        "",
        "Generated by `bench/run.py` from one run; do not edit by hand (run it again). "
        "Numbers are from a shared 2-core machine on which other work (test suites) may have "
        "run at the same time: read them as this machine's, with the spread shown.",
        "",
    ]
    if meta.get("quick"):
        lines += [
            "**This is a `--quick` smoke run with tiny sizes: the numbers mean nothing.**",
            "",
        ]
    lines += [
        "## How it was run",
        "",
        "```",
        meta.get("command", "python bench/run.py"),
        "```",
        "",
        "`make bench` runs `.venv/bin/python bench/run.py --peer-n dbos=2000,procrastinate=3000 "
        "--backend-n 3000` (about 75 minutes on this machine). It creates `bench/.venv-peers` "
        "(the peers and matplotlib, never in the project's venv), starts PostgreSQL if needed "
        "and one fake provider process (`python -m denpyo.testing`) per latency, and runs each "
        "measurement in its own process on a fresh database (`CREATE DATABASE … TEMPLATE` of a "
        "prefilled one for dispatch). Raw results and each process's log: "
        "`bench/results/<date>/` (not committed). `--quick` is the smoke version that the "
        "test suite runs; `--only dispatch,processes,inline,enqueue,recovery,scale,backends` "
        "picks parts.",
        "",
        "## Machine and versions",
        "",
        table(
            ["", ""],
            [
                ["date", str(meta.get("date", "?"))],
                ["cores (nproc)", str(meta.get("nproc", "?"))],
                ["CPU", str(meta.get("cpu", "?"))],
                ["memory", f"{meta.get('memory_gib', '?')} GiB"],
                ["kernel", str(meta.get("kernel", "?"))],
                ["PostgreSQL", str(meta.get("postgresql", "?"))],
                ["MariaDB", str(meta.get("mariadb", "?"))],
                ["Python", str(meta.get("python", "?"))],
                ["denpyo commit", str(meta.get("commit", "?"))],
                ["run took", f"{meta.get('seconds', 0) / 60:.1f} min"],
            ]
            + [[name, version or "not installed"] for name, version in versions.items()],
        ),
        "",
    ]
    unavailable = results.get("unavailable", {})
    if unavailable:
        lines += ["## Not run", ""] + [f"- **{k}**: {v}" for k, v in unavailable.items()] + [""]
    if plot_name:
        lines += [f"![dispatch throughput]({plot_name})", ""]
    lines += section_dispatch(results)
    lines += section_provider(results)
    lines += section_cpu_per_job(results)
    lines += section_inline(results)
    lines += section_enqueue(results)
    lines += section_recovery(results)
    lines += section_scale(results)
    lines += section_backends(results)
    lines += section_processes(results, curve_name)
    lines += section_memory(results)
    lines += section_partitions(results)
    lines += section_fleet(results)
    lines += section_bulk(results)
    lines += section_tracing(results)
    goal_rows = targets(results)
    if goal_rows:
        lines += [
            "## Targets",
            "",
            "Ratios from this run (per-repeat pairs, median).",
            "",
            table(["target", "measured", ""], goal_rows),
            "",
            *dispatch_budget(results),
        ]
    changes = BENCH / "CHANGES.md"
    if changes.exists():  # kept by hand: measured between commits, with its commands
        lines += [changes.read_text().rstrip(), ""]
    notes = list(results.get("notes", []))
    retried = [
        r
        for section in ("dispatch", "enqueue", "recovery", "backends")
        for r in results.get(section, [])
        if r.get("retried")
    ]
    if retried:
        notes.append(
            f"{len(retried)} run(s) were repeated on a fresh database because PostgreSQL "
            "was restarted under them (another session's crash test shares this server)."
        )
    lines += [
        "## Notes on the method",
        "",
        "- Every peer makes the same call with the same client: `bench/common.py:post_job` "
        "(aiohttp, one `ClientSession`, connection limit 2,048: above any calls in flight "
        "measured, so that it caps none); denpyo uses its own `HttpChannel` with the same "
        "limit (its default is 100), which is the same aiohttp call plus classification.",
        "- What bounds the calls in flight, per peer: fire-and-forget runs C lanes; the "
        "outbox claims as many rows as it has room for (C tasks: the call, then its UPDATE "
        "through a pool of 4 connections); PgQueuer `max_concurrent_tasks=C` (one asyncpg "
        "connection for its queries); Procrastinate `concurrency=C` (it fetches one job per "
        "query, one fetch at a time; its psycopg pool at the default size); DBOS "
        "`worker_concurrency=C` (its system database pool at the default 20); denpyo "
        "`concurrency=C`. The table *Calls in flight, measured* shows what each reached.",
        "- Peer settings: PgQueuer drain mode, `max_concurrent_tasks` = in flight, "
        "`batch_size` = half of it (it requires max ≥ 2 × batch); Procrastinate "
        "`run_worker_async(concurrency=C, wait=False)`; DBOS queue with "
        "`worker_concurrency=C` and a 50 ms polling interval (1 s by default), one step per "
        "workflow, jobs enqueued with `DBOSClient`; the hand-written outbox claims with "
        "`FOR UPDATE SKIP LOCKED` as many rows as it has room for and writes one UPDATE per "
        "job through a pool of 4 connections; denpyo `awork(until_idle=True, concurrency=C, "
        "poll_interval=0.05)`.",
        "- Done means: outbox `status = 'sent'`; PgQueuer `pgqueuer_log.status = "
        "'successful'`; Procrastinate `status = 'succeeded'`; DBOS workflow `SUCCESS`; denpyo "
        "`status = 'synced'`. The timed span ends when the worker returns (drain or idle), "
        "for DBOS when a 100 ms poll sees all N workflows done.",
        "- Peak RSS is `ru_maxrss` from `wait4` on the worker's own process (one per run).",
        "- PgQueuer runs on its asyncpg driver: with its psycopg driver (one connection shared "
        "by LISTEN and the queries) it did about 6 jobs/s here.",
        "- Ratios shown as 1.00× may be just under 1 (targets are judged on the exact value).",
        *[f"- {note}" for note in notes],
        "",
    ]
    return "\n".join(lines)


def write(results: dict[str, Any], out: Path, plot: Path, *, python: str) -> None:
    """Write the markdown, and the plot with `python` when it has matplotlib."""
    plot_name: str | None = None
    if results.get("dispatch") or results.get("processes"):
        data = out.parent / f".{out.stem}-plot.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        data.write_text(json.dumps(results, default=str))
        done = subprocess.run(
            [python, str(BENCH / "plot.py"), str(data), str(plot)], capture_output=True, text=True
        )
        data.unlink(missing_ok=True)
        if done.returncode == 0 and results.get("dispatch"):
            plot_name = os.path.relpath(plot, out.parent)
        else:
            results.setdefault("notes", []).append(
                "No plot: " + (done.stderr.strip().splitlines() or ["?"])[-1]
            )
    curve = plot.with_name(f"{plot.stem}-processes{plot.suffix}")
    curve_name = os.path.relpath(curve, out.parent) if curve.exists() else None
    out.write_text(render(results, plot_name, curve_name))


if __name__ == "__main__":
    source = json.loads(Path(sys.argv[1]).read_text())
    target = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "docs" / "benchmarks.md"
    write(source, target, target.with_suffix(".png"), python=sys.executable)
