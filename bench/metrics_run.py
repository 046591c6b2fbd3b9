"""A real run of a worker, its /metrics scraped, and the Grafana dashboard's panels
drawn from the scrapes with matplotlib (Grafana itself is not installable here: the
picture is labelled so).

A fake provider on loopback (20 ms, 4 % 503s, 2 % rejections, 2 % accepted then
dropped), an outage in the middle (60 % 503s for a minute), two channels (one that
verifies, one that cannot, so its dropped calls wait for a person), rows enqueued
at a steady rate, one `denpyo worker --metrics-port` on PostgreSQL. Each panel uses
the expression of docs/grafana/denpyo-dashboard.json, computed over the scrapes.

    python bench/metrics_run.py --seconds 240 --out docs/grafana/denpyo-run.png
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import psycopg
from prometheus_client.parser import text_string_to_metric_families

import denpyo
from denpyo.testing import FakeProvider

POSTGRES = os.environ.get(
    "DENPYO_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
APP = """
import os
import denpyo
from denpyo.channels.http import HttpChannel

ledger = denpyo.Ledger(os.environ["DENPYO_DATABASE_URL"])
_http = HttpChannel(os.environ["PROVIDER"] + "/send", timeout=2.0,
                    lookup_url=os.environ["PROVIDER"] + "/lookup/{idempotency_key}")
ledger.channel("invoice-email", verify=_http.verify, max_attempts=4, lease=10,
               backoff=denpyo.Backoff(initial=1.0, maximum=20.0))(_http.send)
ledger.channel("sms", max_attempts=4, lease=10,
               backoff=denpyo.Backoff(initial=1.0, maximum=20.0))(_http.send)
"""
Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(url: str) -> Series:
    found: Series = {}
    text = httpx.get(url, timeout=5).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def run(seconds: float, interval: float) -> list[tuple[float, Series]]:
    name = f"denpyo_metrics_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(POSTGRES, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = POSTGRES.rsplit("/", 1)[0] + "/" + name
    folder = Path(tempfile.mkdtemp())
    (folder / "metrics_run_app.py").write_text(APP)
    port = free_port()
    scrapes: list[tuple[float, Series]] = []
    provider = FakeProvider(
        latency=0.02, fail_rate=0.04, reject_rate=0.02, drop_rate=0.02, seed=7
    ).start()
    worker = None
    try:
        with denpyo.Ledger(url) as ledger:
            ledger.migrate()
            for channel in ("invoice-email", "sms"):
                ledger.channel(channel)(lambda sub: None)
            env = {
                **os.environ,
                "DENPYO_DATABASE_URL": url,
                "PROVIDER": provider.url,
                "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]),
            }
            worker = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "denpyo.cli",
                    "--app",
                    "metrics_run_app:ledger",
                    "worker",
                    "--metrics-port",
                    str(port),
                ],
                env=env,
                stderr=subprocess.DEVNULL,
            )
            stop = threading.Event()

            def produce() -> None:
                i = 0
                while not stop.is_set():
                    ledger.enqueue_many(
                        "invoice-email", [(f"inv:{i + k}", {"n": i + k}) for k in range(6)]
                    )
                    ledger.enqueue_many("sms", [(f"sms:{i + k}", {"n": i + k}) for k in range(3)])
                    i += 6
                    stop.wait(0.25)

            producer = threading.Thread(target=produce, daemon=True)
            producer.start()
            started = time.monotonic()
            outage = (seconds * 0.4, seconds * 0.65)
            while (now := time.monotonic() - started) < seconds:
                provider.configure(fail_rate=0.6 if outage[0] <= now < outage[1] else 0.04)
                with contextlib.suppress(httpx.TransportError):  # the worker is starting
                    scrapes.append((now, scrape(f"http://127.0.0.1:{port}/metrics")))
                time.sleep(interval)
            stop.set()
            producer.join()
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
        provider.stop()
        with psycopg.connect(POSTGRES, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    return scrapes


def series(scrapes: list[tuple[float, Series]], name: str, by: str | None, **match: str):
    """{label value: [(t, value)]} of one metric, summed by `by` (or all together)."""
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for t, found in scrapes:
        sums: dict[str, float] = defaultdict(float)
        for (metric, labels), value in found.items():
            d = dict(labels)
            if metric == name and all(d.get(k) == v for k, v in match.items()):
                sums[d.get(by, "") if by else name] += value
        for key, value in sums.items():
            out[key].append((t, value))
    return out


def rate(points: list[tuple[float, float]], window: float) -> list[tuple[float, float]]:
    """Per-second increase over the last `window` seconds, as PromQL's rate()."""
    result = []
    for i, (t, v) in enumerate(points):
        j = next((k for k in range(i, -1, -1) if t - points[k][0] >= window), None)
        if j is not None:
            result.append((t, (v - points[j][1]) / (t - points[j][0])))
    return result


def quantile(scrapes: list[tuple[float, Series]], q: float, window: float):
    """histogram_quantile(q, sum by (le) (rate(..._bucket[window]))), one point per scrape."""
    buckets = series(scrapes, "denpyo_call_duration_seconds_bucket", "le")
    les = sorted(buckets, key=lambda le: float(le))
    rates = {le: dict(rate(buckets[le], window)) for le in les}
    out = []
    for t in sorted(set().union(*[r.keys() for r in rates.values()])):
        counts = [(float(le), rates[le].get(t, 0.0)) for le in les]
        total = counts[-1][1]
        if total <= 0:
            continue
        rank, prev_le, prev_c = q * total, 0.0, 0.0
        for le, c in counts:
            if c >= rank:
                top = le if le != float("inf") else prev_le
                out.append((t, prev_le + (top - prev_le) * (rank - prev_c) / max(c - prev_c, 1e-9)))
                break
            prev_le, prev_c = le, c
    return out


def draw(scrapes: list[tuple[float, Series]], out: Path, window: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 2, figsize=(14, 10.5), constrained_layout=True)
    fig.suptitle(
        "denpyo — the Grafana dashboard's panels from a real run's /metrics scrapes\n"
        "(drawn with matplotlib, not Grafana: Grafana is not installable on this machine)",
        fontsize=12,
    )

    def panel(ax: Any, title: str, lines: dict[str, list[tuple[float, float]]], unit: str) -> None:
        for label, points in sorted(lines.items()):
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], label=label, lw=1.3)
        ax.set_title(title, fontsize=10, loc="left")
        ax.set_xlabel("seconds into the run")
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")

    calls = series(scrapes, "denpyo_calls_total", "outcome")
    panel(
        axes[0][0],
        "Calls per second by outcome  sum by (outcome) (rate(denpyo_calls_total[30s]))",
        {k: rate(v, window) for k, v in calls.items()},
        "calls/s",
    )
    panel(
        axes[0][1],
        "Call duration  histogram_quantile(q, sum by (le) (rate(..._bucket[30s])))",
        {f"p{int(q * 100)}": quantile(scrapes, q, window) for q in (0.5, 0.95, 0.99)},
        "s",
    )
    attention = {
        f"need a person {k}": v
        for k, v in series(scrapes, "denpyo_needs_person", "channel").items()
    }
    attention |= {
        f"in doubt {k}": v for k, v in series(scrapes, "denpyo_in_doubt", "channel").items()
    }
    panel(axes[1][0], "Need a person, in doubt  max by (channel) (...)", attention, "rows")
    alerts = series(scrapes, "denpyo_alerts_total", "reason")
    panel(
        axes[1][1],
        "Alerts by reason  sum by (reason) (increase(denpyo_alerts_total[30s]))",
        {k: [(t, r * window) for t, r in rate(v, window)] for k, v in alerts.items()},
        "alerts",
    )
    panel(
        axes[2][0],
        "Rows by status  max by (status) (denpyo_rows)",
        series(scrapes, "denpyo_rows", "status"),
        "rows",
    )
    panel(
        axes[2][1],
        "Oldest pending row  max by (channel) (denpyo_oldest_pending_seconds)",
        series(scrapes, "denpyo_oldest_pending_seconds", "channel"),
        "s",
    )
    for row in axes:
        for ax in row:
            ax.axvspan(*OUTAGE, color="red", alpha=0.07)
    fig.savefig(out, dpi=90)


OUTAGE = (0.0, 0.0)


def main() -> None:
    global OUTAGE
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=240)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--out", default="docs/grafana/denpyo-run.png")
    parser.add_argument("--scrapes", default=None, help="Keep (or reuse) the scrapes as JSON.")
    args = parser.parse_args()
    OUTAGE = (args.seconds * 0.4, args.seconds * 0.65)
    if args.scrapes and Path(args.scrapes).exists():
        raw = json.loads(Path(args.scrapes).read_text())
        scrapes = [(t, {(n, tuple(map(tuple, labels))): v for n, labels, v in s}) for t, s in raw]
    else:
        scrapes = run(args.seconds, args.interval)
        if args.scrapes:
            raw = [(t, [(n, list(labels), v) for (n, labels), v in s.items()]) for t, s in scrapes]
            Path(args.scrapes).write_text(json.dumps(raw))
    draw(scrapes, Path(args.out), window=30.0)
    print(f"{len(scrapes)} scrapes; drawn to {args.out}")


if __name__ == "__main__":
    main()
