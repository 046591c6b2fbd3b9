"""Crash safety: kill -9 of workers at any instant, and a database restart, lose
nothing and double nothing. The short run is in the default suite (3,000
submissions, sized so that workers are killed several times); the long one
(`make chaos`) runs 100,000."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from chaos import ChaosFigures, run_chaos

import denpyo


def restart_postgres() -> None:
    version = subprocess.run(["ls", "/etc/postgresql"], capture_output=True, text=True).stdout
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version.split()[0], "main", "restart"],
        check=True,
    )


def restart_mariadb() -> None:
    subprocess.run(["mariadb-admin", "-uroot", "shutdown"], check=True)
    subprocess.run(
        [
            "start-stop-daemon",
            "--start",
            "--oknodo",
            "--background",
            "--exec",
            "/usr/sbin/mariadbd",
        ],
        check=True,
    )
    for _ in range(120):
        if subprocess.run(["mariadb-admin", "-uroot", "ping"], capture_output=True).returncode == 0:
            return
        time.sleep(0.5)
    raise RuntimeError("MariaDB did not come back")


RESTARTS: dict[str, Callable[[], None] | None] = {
    "postgresql": restart_postgres,
    "mysql": restart_mariadb,
    "sqlite": None,  # no server to restart; kills still apply
}


# Rows arrive at 50 a second, in bursts every 2.5 s; calls take 0.3 s and each
# worker makes up to 8 at once. The workers keep up, so a row whose lease runs out
# is reconciled at once, as in production, not after a backlog; and for a while
# after each burst each worker holds rows it claimed ahead. Faults every
# 0.8-1.6 s, half of them pauses of 3.5-6 s (past the 3 s lease).
STEADY: dict[str, Any] = {
    "concurrency": 8,
    "latency": 0.3,
    "enqueue_rate": 50.0,
    "enqueue_every": 2.5,
}
PAUSES: dict[str, Any] = {
    **STEADY,
    "lease": 3.0,
    "kill_every": (0.8, 1.6),
    "pause_share": 0.5,
}
LONG_PAUSES: dict[str, Any] = {**PAUSES, "pause_share": 0.6}  # about 30 pauses in 3,000 rows
# No kills: in the run's first two thirds, every worker's connections dropped 3
# times, every worker's traffic black-holed twice and one worker's alone twice,
# for lease + 1.5 s.
CUTS: dict[str, Any] = {
    **STEADY,
    "lease": 2.0,
    "kill_every": (0.5, 1.0),
    "kills": False,
    "cut_connections": True,
}


def check(figures: ChaosFigures, *, explained_duplicates: int = 0) -> None:
    """The guarantees after the run. `explained_duplicates`: the doubles the run
    allows (with a provider that does not honour keys: the calls that were on the
    wire when their worker was paused)."""
    print(f"\nchaos: {figures.lines()}")
    for double in figures.doubles:
        print(double)
    assert figures.notes == []
    assert figures.unsettled == 0, "every row ends synced or rejected"
    assert figures.synced == figures.provider_accepted, "honest counts"
    assert figures.duplicates == explained_duplicates, "no double effect but those explained"
    assert figures.lost == 0, "nothing the provider accepted is missing from the ledger"
    assert figures.synced + figures.rejected == figures.submissions
    assert figures.kills + figures.pauses + figures.cuts + figures.blackholes + figures.partitions


# The runs end by themselves when nothing moves (run_chaos's `stall`): the test's
# timeout only stops a hang, and a slow machine is not one.
HANG = pytest.mark.timeout(1800)
# `make test` runs this file two tests at a time (`-n 2 --dist loadgroup`): the runs
# that restart PostgreSQL share one group, so that one never restarts it under the
# other; MariaDB's and SQLite's run beside them.
RESTARTS_POSTGRESQL = pytest.mark.xdist_group("restarts-postgresql")


# Each short run in the default suite on one database (kills and pauses on
# PostgreSQL, cut connections on MariaDB), the other's in `make chaos` with the
# long runs: the default suite stays under ten minutes.
@HANG
@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("postgresql", marks=RESTARTS_POSTGRESQL),
        pytest.param("mysql", marks=pytest.mark.slow),
    ],
    indirect=True,
)
def test_chaos_short(db_url: str, backend: str) -> None:
    check(run_chaos(db_url, submissions=3000, restart_database=RESTARTS[backend]))


@HANG
@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("postgresql", marks=RESTARTS_POSTGRESQL),
        pytest.param("mysql", marks=pytest.mark.slow),
    ],
    indirect=True,
)
def test_chaos_pauses_short(db_url: str, backend: str, tmp_path: Path) -> None:
    """Workers also paused (SIGSTOP) past their lease, then resumed: a call the
    engine starts for a row whose lease ran out while it was paused is a double.
    Only a call already on the wire when its worker stopped may go out twice."""
    figures = run_chaos(
        db_url, submissions=1000, restart_database=RESTARTS[backend], log_dir=tmp_path, **PAUSES
    )
    check(figures, explained_duplicates=figures.duplicates_in_flight_at_pause)
    assert figures.pauses > 0


@HANG
@pytest.mark.parametrize(
    "backend", [pytest.param("postgresql", marks=pytest.mark.slow), "mysql"], indirect=True
)
def test_chaos_cut_connections_short(db_url: str, tmp_path: Path) -> None:
    """Connections to the database dropped, and black-holed past the lease (for
    every worker, or for one while the others run on and take over its rows): the
    worker processes themselves never stall, so nothing may be sent twice, and the
    same processes finish the work once the network is back."""
    figures = run_chaos(db_url, submissions=1500, log_dir=tmp_path, **CUTS)
    check(figures)
    assert (figures.cuts, figures.blackholes, figures.partitions) == (3, 2, 2)
    assert figures.exited == 0 and figures.finished_by_workers, "the same workers finish"


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("backend", ["postgresql", "mysql"], indirect=True)
def test_chaos_long(db_url: str, backend: str) -> None:
    check(run_chaos(db_url, submissions=100_000, restart_database=RESTARTS[backend]))


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("backend", ["postgresql", "mysql"], indirect=True)
def test_chaos_pauses_long(db_url: str, backend: str, tmp_path: Path) -> None:
    """4 workers, lease 3 s, about 30 pauses of 3.5-6 s among the kills, and a restart."""
    figures = run_chaos(
        db_url,
        submissions=3000,
        restart_database=RESTARTS[backend],
        log_dir=tmp_path,
        **LONG_PAUSES,
    )
    check(figures, explained_duplicates=figures.duplicates_in_flight_at_pause)
    assert figures.pauses >= 20


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("backend", ["postgresql", "mysql"], indirect=True)
def test_chaos_pauses_provider_honours_keys_long(db_url: str, backend: str, tmp_path: Path) -> None:
    """The same run with a provider that honours idempotency keys: a call on the wire
    at a pause and its resend under the same key make one effect. No double at all."""
    figures = run_chaos(
        db_url,
        submissions=3000,
        restart_database=RESTARTS[backend],
        log_dir=tmp_path,
        honour_keys=True,
        **LONG_PAUSES,
    )
    check(figures)
    assert figures.pauses >= 20


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("backend", ["postgresql", "mysql"], indirect=True)
def test_chaos_cut_connections_long(db_url: str, tmp_path: Path) -> None:
    figures = run_chaos(
        db_url,
        submissions=5000,
        log_dir=tmp_path,
        **{**CUTS, "cuts": 10, "blackholes": 5, "partitions": 8},
    )
    check(figures)
    assert figures.exited == 0 and figures.finished_by_workers, "the same workers finish"


@HANG
def test_chaos_sqlite_processes_on_one_host(tmp_path: Path) -> None:
    """Several worker processes on one SQLite file, killed at random: no server to restart."""
    url = f"sqlite:///{tmp_path}/chaos.db"
    with denpyo.Ledger(url) as ledger:
        ledger.migrate()
    check(run_chaos(url, submissions=1500, workers=3))
