"""The CPU a call pays for payloads encrypted at rest, A/B (scenario `sealing` of run.py).

    PYTHONPATH=src .venv/bin/python bench/sealing.py [--quick] [--rows 20000]
        [--rounds 3] [--stores sqlite,postgresql] [--json FILE]

For each store and round, the same work twice, once with payloads in clear (no key)
and once sealed (one key, `Ledger(payload_key=...)`), the order alternated round by
round, each on a fresh migrated database (PostgreSQL: `CREATE DATABASE … TEMPLATE`
of one migrated once; SQLite: a new file):

1. enqueue: `--rows` rows of the bench's payload (`common.job_payload`: an e-mail
   address, a template, an order number; 68 bytes of JSON) by `enqueue_many`, in
   chunks of 1,000 (PostgreSQL: COPY). Timed with `time.perf_counter()`, and this
   process's CPU (`time.process_time()`) around it: µs per row.
2. worker: `Ledger.work(until_idle=True, concurrency=16)` with a channel whose call
   does nothing (an `async def` returning an id): what is measured is the ledger's
   own work per call (claim, open the payload, settle), not a provider. Calls per
   second (rows ÷ wall time) and this process's CPU µs per call. Checked: every row
   synced.

What sealing adds is the median over the rounds of (sealed − clear) within a round
(the machine drifts from round to round more than the two modes differ): the CPU
encryption costs a call on enqueue and in the worker, and the ratio of throughputs.
The database server's CPU is not counted: sealing is client-side, and the server
stores about 90 bytes more per row. Also the cost of the crypto alone, per payload:
`Sealing.stored` (seal) and `Rows.parse_payload` (open) timed over 20,000 payloads.

The code measured is a copy of src/ taken as the command starts (the working tree may
be edited meanwhile). `--quick`: 500 rows, one round, a few seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from common import job_payload, run_on_a_copy  # noqa: E402

SNAPSHOT = "DENPYO_SEALING_TREE"
"""Set in the run that measures: the folder whose `src/` it imports (a copy)."""
PG_URL = os.environ.get(
    "DENPYO_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
CHANNEL = "bench"
CHUNK = 1000
CONCURRENCY = 16
MODES = ("clear", "sealed")
KEY = "s1_HBvbX8CIepeIRQhV7zBoz81iTxLTXaW3fsbCbXUE="
"""A fixed key: the bench measures, it keeps nothing secret."""


def log(message: str) -> None:
    print(f"[sealing {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Databases:
    """Fresh migrated databases of one store, dropped after use."""

    def __init__(self, store: str, folder: Path) -> None:
        import denpyo

        self.store, self.folder = store, folder
        self.template = f"bench_sealing_t_{uuid.uuid4().hex[:8]}"
        if store == "postgresql":
            self._admin(f"CREATE DATABASE {self.template}")
            with denpyo.Ledger(self._url(self.template)) as ledger:
                ledger.migrate()

    def _url(self, name: str) -> str:
        return PG_URL.rsplit("/", 1)[0] + f"/{name}"

    def _admin(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(statement)

    @contextmanager
    def fresh(self) -> Iterator[str]:
        import denpyo

        name = f"bench_sealing_{uuid.uuid4().hex[:8]}"
        if self.store == "sqlite":
            path = self.folder / f"{name}.db"
            url = f"sqlite:///{path}"
            with denpyo.Ledger(url) as ledger:
                ledger.migrate()
            try:
                yield url
            finally:
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{path}{suffix}").unlink(missing_ok=True)
            return
        self._admin(f"CREATE DATABASE {name} TEMPLATE {self.template}")
        try:
            yield self._url(name)
        finally:
            self._admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def close(self) -> None:
        if self.store == "postgresql":
            self._admin(f"DROP DATABASE IF EXISTS {self.template} WITH (FORCE)")


def one_run(url: str, mode: str, rows: int) -> dict[str, Any]:
    """Enqueue `rows` rows, then send them all, on a fresh database."""
    import denpyo

    async def send(sub: denpyo.Submission) -> str:
        return "r"

    with denpyo.Ledger(url, payload_key=KEY if mode == "sealed" else None) as ledger:
        ledger.channel(CHANNEL, down_after=None)(send)
        items = [(f"job:{n}", job_payload(n)) for n in range(rows)]
        wall, cpu = time.perf_counter(), time.process_time()
        for start in range(0, rows, CHUNK):
            ledger.enqueue_many(CHANNEL, items[start : start + CHUNK])
        enqueue = (time.perf_counter() - wall, time.process_time() - cpu)
        wall, cpu = time.perf_counter(), time.process_time()
        report = ledger.work(until_idle=True, concurrency=CONCURRENCY)
        work = (time.perf_counter() - wall, time.process_time() - cpu)
        synced = sum(
            n for _, status, n in ledger.store.count_by_status() if status.value == "synced"
        )
        sample = ledger.store.payload_batch(0, 1)[0].text
    return {
        "mode": mode,
        "rows": rows,
        "ok": synced == rows and report.outcomes.get("synced") == rows,
        "stored_sample_bytes": len(sample.encode()),
        "enqueue_s": round(enqueue[0], 4),
        "enqueue_cpu_us_per_row": round(enqueue[1] / rows * 1e6, 1),
        "work_s": round(work[0], 4),
        "calls_per_s": round(rows / work[0], 1),
        "work_cpu_us_per_call": round(work[1] / rows * 1e6, 1),
    }


def crypto_alone(n: int = 20_000) -> dict[str, float]:
    """µs per payload of sealing one (`Sealing.stored`) and opening one (`parse_payload`
    of the stored text, as a SQLite or MariaDB row gives it), and of parsing one in
    clear, for comparison."""
    from denpyo.domain.limits import encode_payload
    from denpyo.store import NewSubmission
    from denpyo.store.rows import Rows
    from denpyo.store.sealing import Sealing, payload_codec

    sealing = Sealing(payload_codec(KEY))
    news = [
        NewSubmission(CHANNEL, f"job:{i}", "idem", encode_payload(job_payload(i))) for i in range(n)
    ]
    started = time.process_time()
    stored = [sealing.stored(new) for new in news]
    seal = time.process_time() - started
    rows = Rows()
    rows.sealing = sealing
    started = time.process_time()
    for new, text in zip(news, stored, strict=True):
        rows.parse_payload(text, new.channel, new.key)
    opened = time.process_time() - started
    started = time.process_time()
    for new in news:
        rows.parse_payload(new.payload_json, new.channel, new.key)
    clear = time.process_time() - started
    return {
        "seal_us": round(seal / n * 1e6, 2),
        "open_us": round(opened / n * 1e6, 2),
        "parse_clear_us": round(clear / n * 1e6, 2),
        "payload_bytes": len(news[0].payload_json),
        "stored_bytes": len(stored[0]),
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per store: the medians of each mode, and what sealing adds: the median over the
    rounds of (sealed − clear) within a round, which the machine's drift from round to
    round does not move as much as it moves each mode's median."""
    measures = ("enqueue_cpu_us_per_row", "calls_per_s", "work_cpu_us_per_call")
    found: dict[str, Any] = {}
    for store in sorted({run["store"] for run in runs}):
        mine = [run for run in runs if run["store"] == store]
        medians = {
            mode: {
                name: round(statistics.median(run[name] for run in mine if run["mode"] == mode), 1)
                for name in measures
            }
            for mode in MODES
        }
        pairs = [
            ({run["mode"]: run for run in mine if run["round"] == n})
            for n in sorted({run["round"] for run in mine})
        ]

        def added(name: str, pairs: list[dict[str, Any]] = pairs) -> list[float]:
            return sorted(round(pair["sealed"][name] - pair["clear"][name], 1) for pair in pairs)

        enqueue, work = added("enqueue_cpu_us_per_row"), added("work_cpu_us_per_call")
        found[store] = {
            **medians,
            "enqueue_cpu_us_added": round(statistics.median(enqueue), 1),
            "enqueue_cpu_us_added_per_round": enqueue,
            "work_cpu_us_added": round(statistics.median(work), 1),
            "work_cpu_us_added_per_round": work,
            "throughput_ratio": round(
                statistics.median(
                    pair["sealed"]["calls_per_s"] / pair["clear"]["calls_per_s"] for pair in pairs
                ),
                3,
            ),
        }
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    p.add_argument("--rows", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--stores", default="sqlite,postgresql")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    if SNAPSHOT not in os.environ:
        return run_on_a_copy(__file__, sys.argv[1:] if argv is None else argv, SNAPSHOT)
    from fleet import fingerprint, git

    import denpyo

    tree = Path(os.environ[SNAPSHOT])
    assert Path(denpyo.__file__).resolve().is_relative_to(tree.resolve()), denpyo.__file__
    os.environ.pop("DENPYO_PAYLOAD_KEYS", None)  # "clear" is no key at all
    rows = args.rows or (500 if args.quick else 20_000)
    rounds = args.rounds or (1 if args.quick else 3)
    started = time.time()
    results: dict[str, Any] = {
        "args": {"rows": rows, "rounds": rounds, "stores": args.stores, "quick": args.quick},
        "nproc": os.cpu_count(),
        "loadavg_at_start": float(Path("/proc/loadavg").read_text().split()[0]),
        "tree": {
            "copied_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "head": git("rev-parse", "--short", "HEAD"),
            "fingerprint": fingerprint(tree / "src"),
        },
        "crypto": crypto_alone(2_000 if args.quick else 20_000),
        "runs": [],
    }
    folder = Path(tempfile.mkdtemp(prefix="denpyo-sealing-"))
    for store in args.stores.split(","):
        dbs = Databases(store, folder)
        try:
            for n in range(rounds):
                for mode in MODES if n % 2 == 0 else MODES[::-1]:
                    with dbs.fresh() as url:
                        run = {"store": store, "round": n, **one_run(url, mode, rows)}
                    log(json.dumps(run))
                    results["runs"].append(run)
        finally:
            dbs.close()
    results["summary"] = summary(results["runs"])
    results["ok"] = all(run["ok"] for run in results["runs"])
    results["seconds"] = round(time.time() - started, 1)
    print(json.dumps({"crypto": results["crypto"], "summary": results["summary"]}, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
