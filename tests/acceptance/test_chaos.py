"""SPEC §10.4: kill -9 of workers at any instant, and a database restart, lose
nothing and double nothing. The short run is in the default suite (5,000
submissions, sized so that workers are killed a few dozen times); the long one
(`make chaos`) runs 100,000."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

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


def check(figures: ChaosFigures) -> None:
    print(f"\nchaos: {figures.lines()}")
    assert figures.notes == []
    assert figures.unsettled == 0, "every row ends synced or rejected"
    assert figures.synced == figures.provider_accepted, "honest counts"
    assert figures.duplicates == 0, "no double effect"
    assert figures.lost == 0, "nothing the provider accepted is missing from the ledger"
    assert figures.synced + figures.rejected == figures.submissions
    assert figures.kills > 0


@pytest.mark.parametrize("backend", ["postgresql", "mysql"], indirect=True)
def test_chaos_short(db_url: str, backend: str) -> None:
    check(run_chaos(db_url, submissions=5000, restart_database=RESTARTS[backend]))


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("backend", ["postgresql", "mysql"], indirect=True)
def test_chaos_long(db_url: str, backend: str) -> None:
    check(run_chaos(db_url, submissions=100_000, restart_database=RESTARTS[backend], deadline=3000))


def test_chaos_sqlite_processes_on_one_host(tmp_path: Path) -> None:
    """Several worker processes on one SQLite file, killed at random: no server to restart."""
    url = f"sqlite:///{tmp_path}/chaos.db"
    with denpyo.Ledger(url) as ledger:
        ledger.migrate()
    check(run_chaos(url, submissions=1500, workers=3))
