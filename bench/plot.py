"""The dispatch plot: jobs/s per peer and configuration, median with min–max bars;
and, when the run measured worker processes, their curve beside it
(``benchmarks-processes.png``: jobs/s against processes, denpyo and fire-and-forget).

Run by `report.py` with the peers' interpreter (matplotlib lives there, not in
the project's venv): ``python bench/plot.py results.json docs/benchmarks.png``.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ORDER = ["denpyo", "fire_and_forget", "outbox", "pgqueuer", "procrastinate", "dbos"]
LABELS = {
    "denpyo": "denpyo",
    "fire_and_forget": "fire-and-forget",
    "outbox": "hand-written outbox",
    "pgqueuer": "PgQueuer",
    "procrastinate": "Procrastinate",
    "dbos": "DBOS",
}


def main(source: str, target: str) -> None:
    results = json.loads(Path(source).read_text())
    if results.get("dispatch"):
        dispatch(results, target)
    if results.get("processes"):
        processes(results, processes_path(target))


def processes_path(target: str) -> str:
    path = Path(target)
    return str(path.with_name(f"{path.stem}-processes{path.suffix}"))


def processes(results: dict[str, Any], target: str) -> None:
    rows = [r for r in results["processes"] if "error" not in r and r.get("rate")]
    configs = sorted({(r["latency_ms"], r["per_process"]) for r in rows})
    fig, axes = plt.subplots(1, len(configs), figsize=(5 * len(configs), 4.5), dpi=110)
    for ax, (lat, per) in zip([axes] if len(configs) == 1 else axes, configs, strict=True):
        series: dict[str, dict[int, float]] = {}
        for peer, style in (("denpyo", "o-"), ("fire_and_forget", "s--")):
            mine = [
                r
                for r in rows
                if (r["latency_ms"], r["per_process"], r["peer"]) == (lat, per, peer)
            ]
            counts = sorted({r["processes"] for r in mine})
            series[peer] = {
                n: statistics.median(r["rate"] for r in mine if r["processes"] == n) for n in counts
            }
            label = (
                f"denpyo, {per} in flight per process"
                if peer == "denpyo"
                else "fire-and-forget, the same in flight (one process)"
            )
            ax.plot(counts, list(series[peer].values()), style, label=label)
        # At each count the higher figure goes above its point and the lower below
        # its own, so that two close points never have their labels swapped or
        # covering each other (a tie: fire-and-forget's above).
        for peer, other in (("denpyo", "fire_and_forget"), ("fire_and_forget", "denpyo")):
            for x, y in series[peer].items():
                theirs = series[other].get(x)
                above = theirs is None or y > theirs or (y == theirs and peer != "denpyo")
                ax.annotate(
                    f"{y:,.0f}",
                    (x, y),
                    fontsize=7,
                    xytext=(5, 5 if above else -5),
                    va="bottom" if above else "top",
                    textcoords="offset points",
                )
        ax.set_xticks(sorted({r["processes"] for r in rows}))
        ax.set_xlabel("worker processes")
        ax.set_ylabel("jobs/s (median)")
        ax.set_title(f"provider at {lat:g} ms")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("denpyo worker --processes N, PostgreSQL (higher is better)")
    fig.tight_layout()
    fig.savefig(target)


def dispatch(results: dict[str, Any], target: str) -> None:
    rows = [r for r in results["dispatch"] if "error" not in r and r.get("rate")]
    configs = sorted({(r["latency_ms"], r["concurrency"]) for r in rows})
    peers = [p for p in ORDER if any(r["peer"] == p for r in rows)]
    fig, ax = plt.subplots(figsize=(10, 5.5), dpi=110)
    width = 0.8 / max(len(peers), 1)
    for i, peer in enumerate(peers):
        medians, lows, highs = [], [], []
        for config in configs:
            rates = [
                r["rate"]
                for r in rows
                if r["peer"] == peer and (r["latency_ms"], r["concurrency"]) == config
            ]
            m = statistics.median(rates) if rates else 0.0
            medians.append(m)
            lows.append(m - min(rates) if rates else 0.0)
            highs.append(max(rates) - m if rates else 0.0)
        xs = [x + (i - (len(peers) - 1) / 2) * width for x in range(len(configs))]
        bars = ax.bar(
            xs,
            medians,
            width,
            yerr=[lows, highs],
            capsize=3,
            label=LABELS[peer],
            edgecolor="black" if peer == "denpyo" else None,
            linewidth=1.5 if peer == "denpyo" else 0,
        )
        for bar, value, high in zip(bars, medians, highs, strict=True):
            ax.annotate(  # above the whisker, which would cross a label at the bar's top
                f"{value:,.0f}",
                (bar.get_x() + bar.get_width() / 2, value + high),
                ha="center",
                va="bottom",
                fontsize=7,
                rotation=90,
                xytext=(0, 3),
                textcoords="offset points",
            )
    ax.set_xticks(range(len(configs)))
    ax.set_xticklabels([f"{lat:g} ms provider latency\n{c} in flight" for lat, c in configs])
    ax.set_ylabel("jobs/s (median, min–max)")
    n = rows[0]["n"] if rows else 0
    ax.set_title(f"Dispatch throughput, one worker, {n:,} jobs, PostgreSQL (higher is better)")
    ax.set_yscale("log")
    low, top = ax.get_ylim()
    ax.set_ylim(low, top * 1.6)  # room for the labels over the tallest whiskers
    # below the axis, where no bar is
    ax.legend(fontsize=8, ncols=len(peers), loc="upper center", bbox_to_anchor=(0.5, -0.14))
    ax.grid(axis="y", alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(target)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
