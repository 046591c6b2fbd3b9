"""The benchmark harness works: `bench/run.py --quick` end to end, in the project's venv.

Each test is one `--quick` run of some of the scenarios, so that the runs (which
mostly wait: on their child processes, the database, a fake provider's latency)
share the suite's workers. Only the peers that need nothing beyond denpyo's own
dependencies run here (fire-and-forget, the hand-written outbox, denpyo, denpyo
with a call that does nothing, denpyo's store alone and the floors under it);
nothing is installed. It checks that every scenario completes and that the
report is well formed, never how fast anything is.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PEERS = [
    "fire_and_forget",
    "outbox",
    "denpyo",
    "denpyo_nocall",
    "denpyo_store",
    "floor_psycopg",
    "floor_asyncpg",
    "floor_call",
]


def _tables(markdown: str) -> list[list[list[str]]]:
    """Each markdown table as rows of cells (the separator row dropped)."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*markdown.splitlines(), ""]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r"-+", cell) for cell in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables


# Only a hang stops a run: a busy machine makes it longer, not wrong.
HANG = pytest.mark.timeout(1800)
VERDICTS = ("**met**", "**not met**", "**not met**; the floor misses it too", "not measured")


def quick_run(tmp_path: Path, only: str, peers: list[str]) -> tuple[dict[str, Any], str]:
    """`bench/run.py --quick --only ONLY` in the project's venv: its raw results and
    its report."""
    out = tmp_path / "benchmarks.md"
    env = dict(os.environ)
    if "DENPYO_TEST_POSTGRES_URL" in env:
        env["DENPYO_BENCH_POSTGRES_URL"] = env["DENPYO_TEST_POSTGRES_URL"]
    if "DENPYO_TEST_MYSQL_URL" in env:
        env["DENPYO_BENCH_MYSQL_URL"] = env["DENPYO_TEST_MYSQL_URL"]
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "run.py"),
            "--quick",
            "--only",
            only,
            "--python",
            sys.executable,
            "--peers",
            ",".join(peers),
            "--dispatch-n",
            "100",
            "--scale-levels",
            "1000,3000",
            "--out",
            str(out),
            "--results-dir",
            str(tmp_path / "results"),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [results_file] = (tmp_path / "results").glob("*/results.json")
    return json.loads(results_file.read_text()), out.read_text()


def well_formed(markdown: str, headings: list[str]) -> list[list[list[str]]]:
    """The report has these sections, every table's rows the header's width and every
    target a verdict; its tables."""
    for heading in [*headings, "## Targets"]:
        assert heading in markdown
    tables = _tables(markdown)
    assert tables
    for table in tables:
        assert len({len(row) for row in table}) == 1, table  # every row has the header's width
    targets = next(t for t in tables if t[0][0] == "target")
    assert all(row[2] in VERDICTS for row in targets[1:])
    return tables


@HANG
def test_every_peer_dispatches_and_recovers_and_is_reported(tmp_path: Path) -> None:
    """The peers' dispatch against each other, recovery, and the report's tables and
    targets for them."""
    results, markdown = quick_run(tmp_path, "dispatch,recovery", PEERS)
    dispatch = results["dispatch"]
    assert {row["peer"] for row in dispatch} == set(PEERS)
    for row in dispatch:
        assert "error" not in row, row
        assert row["ok"], row  # N done in the database, N distinct keys at the provider
        assert row["rate"] > 0 and row["maxrss_kb"] > 0
    realistic = {
        row["peer"] for row in dispatch if (row["latency_ms"], row["concurrency"]) == (200, 256)
    }
    # the peers that make calls, and the floor with the call
    assert realistic == {"fire_and_forget", "outbox", "denpyo", "floor_call"}
    assert all(row["ok"] and row["floor_ok"] for row in results["recovery"])
    assert all(row["reconcile_cpu"]["own"] > 0 for row in results["recovery"])
    tables = well_formed(
        markdown, ["## 1. Dispatch throughput", "### Where a job's CPU goes", "## 4. Recovery"]
    )
    throughput = next(t for t in tables if t[0][0] == "peer")
    assert len(throughput) == 1 + len(PEERS)
    for row in throughput[1:]:
        assert re.match(r"[\d,.]+", row[1]), row
    targets = next(t for t in tables if t[0][0] == "target")
    budget = next(t for t in tables if t[0][:2] == ["target", "jobs/s needed"])
    assert len(budget) > 1  # what the dispatch targets would take, from this run's CPU
    assert all(re.match(r"[\d,]+ / [\d,]+ / ", row[3]) for row in budget[1:])  # the floors
    assert any("200 ms, 256 in flight ≥ 1.2× the best durable peer" in row[0] for row in targets)
    in_flight = next(t for t in tables if t[0] == ["peer", "200 ms, 256 in flight"])
    assert [row[0] for row in in_flight[1:]][:1] == ["**denpyo**"]
    recovery = next(t for t in tables if t[0][1] == "µs per row")
    assert [row[0] for row in recovery[1:]] == ["lookups alone", "the floor", "`reconcile()`"]
    assert "leaves **" in markdown.split("## 4. Recovery")[1].split("## 5.")[0]


@HANG
def test_the_other_core_scenarios_run_and_are_reported(tmp_path: Path) -> None:
    """Worker processes, inline overhead, enqueue, scale, the other databases and
    memory, with the peers they need; the report's sections and targets for them."""
    results, markdown = quick_run(
        tmp_path,
        "processes,inline,enqueue,scale,backends,memory",
        ["fire_and_forget", "outbox", "denpyo"],
    )
    processes = results["processes"]
    assert {(row["peer"], row["processes"]) for row in processes} == {
        ("denpyo", 2),
        ("fire_and_forget", 2),
    }
    for row in processes:
        assert "error" not in row and row["ok"], row  # all synced once, and exit code 0
    assert all("error" not in run for run in results["inline"]["runs"])
    assert {run["backend"] for run in results["inline"]["runs"]} == {"sqlite", "postgresql"}
    assert all("error" not in row for row in results["enqueue"])
    assert [level["rows"] for level in results["scale"]["levels"]] == [1000, 3000]
    assert any(row["backend"] == "sqlite" and row.get("ok") for row in results["backends"])
    assert [row["n"] for row in results["memory"]] == [100, 1000]
    assert all(row["ok"] and row["maxrss_kb"] > 0 for row in results["memory"])
    tables = well_formed(
        markdown,
        [
            "## 2. Inline overhead",
            "## 3. Enqueue",
            "## 5. Scale",
            "## 6. The same dispatch on SQLite and MariaDB",
            "## 7. Worker processes",
            "## 8. Memory",
        ],
    )
    targets = next(t for t in tables if t[0][0] == "target")
    assert any("peak RSS flat" in row[0] for row in targets)
    workers = next(t for t in tables if t[0][:2] == ["provider latency", "processes"])
    assert [row[1] for row in workers[1:]] == ["2"]


# The scenarios bench/run.py hands to a script of their own, each run alone: what
# its results must hold and the heading of its section (None: it has none of its own).


def _partitions(partitions: dict[str, Any]) -> None:
    assert set(partitions["hot_path_cpu_us_per_row"]) == {"plain", "partitioned"}
    assert partitions["drop_one_day"]["partition_steps"]  # a day dropped whole
    assert set(partitions["size_over_time"]["mb"]) == {"plain", "partitioned"}


def _fleet(fleet: dict[str, Any]) -> None:
    assert {(run["store"], run["case"]) for run in fleet["rate"]} == {
        ("postgresql", "fleet_rate_limit=50"),
        ("sqlite", "fleet_rate_limit=50"),
    }
    assert all(run["arrivals"] > 0 and run["worst_window"] > 0 for run in fleet["rate"])
    assert len(fleet["cpu"]["us_per_call"]["after"]) == 1 and fleet["cpu"]["ratio"] > 0
    assert fleet["outage"]["calls_during_outage"] > 0
    assert fleet["checks"]  # judged in the report, not here: this test never times anything


def _bulk(bulk: dict[str, Any]) -> None:
    assert {(run["store"], run["batch"]) for run in bulk["bulk"]} == {
        ("postgresql", 500),
        ("postgresql", 2000),
        ("sqlite", 500),
        ("sqlite", 2000),
    }
    assert all(run["run"]["rows_per_s"] > 0 for run in bulk["bulk"])
    assert [pair["during"]["bulk"]["action"]["done"] for pair in bulk["workers"]] == [2000]
    # done = rows, one retry event per row, the counts right: correctness, not timing
    assert bulk["checks"] and all(check["ok"] for check in bulk["checks"]), bulk["checks"]


def _sealing(sealing: dict[str, Any]) -> None:
    assert sealing["ok"], sealing  # every row synced, both ways
    assert set(sealing["summary"]) == {"sqlite", "postgresql"}
    assert {(run["store"], run["mode"]) for run in sealing["runs"]} == {
        (store, mode) for store in ("sqlite", "postgresql") for mode in ("clear", "sealed")
    }


def _replication(replication: dict[str, Any]) -> None:
    assert {setup: got["at_risk"] for setup, got in replication.items()} == {
        "alone": False,
        "async": True,
        "sync": False,
        "sync_remote_write": False,
    }
    assert all(got["worker_calls_per_s"] > 0 for got in replication.values())


def _tracing(tracing: dict[str, Any]) -> None:
    assert tracing  # what it costs is the report's to say


SCRIPTS: dict[str, tuple[Callable[[dict[str, Any]], None], str | None]] = {
    "partitions": (_partitions, "## 9. PostgreSQL partitions"),
    "fleet": (_fleet, "## 10. A fleet and its provider's limits"),
    "bulk": (_bulk, "## 11. A bulk retry of every row a filter finds"),
    "sealing": (_sealing, None),
    "tracing": (_tracing, "## Tracing: what OpenTelemetry costs the worker"),
    "replication": (_replication, None),
}


@HANG
@pytest.mark.parametrize("scenario", list(SCRIPTS))
def test_a_scenario_of_its_own_script_runs_and_is_reported(tmp_path: Path, scenario: str) -> None:
    """A scenario that bench/run.py hands to a script of its own (partitions, a fleet,
    a bulk retry, sealing, tracing, a replicated database) completes and its section
    is written; never how fast anything is."""
    results, markdown = quick_run(tmp_path, scenario, ["denpyo"])
    check, heading = SCRIPTS[scenario]
    assert "error" not in results[scenario], results[scenario]
    check(results[scenario])
    if heading is not None:
        assert heading in markdown
