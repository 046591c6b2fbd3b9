"""The chaos run under the distributed SQL profile, on a SERIALIZABLE PostgreSQL,
with the failures a distributed engine gives its clients injected in every worker
(denpyo/testing/faults.py: 40001, 40003 and connection resets, on statements and at
COMMIT), and workers killed: nothing lost, nothing doubled. The database server is
never restarted here (it is shared); the injected resets stand in for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from chaos import run_chaos
from test_chaos import HANG, check

import denpyo
from database_records import POSTGRES, without_profile
from denpyo.testing.faults import ENV

FAULT_RATE = 0.02
"""The share of denpyo's statements and COMMITs that fail in the short run."""


@pytest.fixture
def distributed_url(postgres_empty_url: str) -> Iterator[str]:
    url = without_profile(postgres_empty_url)
    POSTGRES.default_isolation(url.rpartition("/")[2], "serializable")
    url += "?denpyo_profile=distributed"
    with denpyo.Ledger(url) as ledger:
        ledger.migrate()
    yield url


@HANG
def test_chaos_short_distributed(distributed_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, f"1,{FAULT_RATE}")
    check(run_chaos(distributed_url, submissions=1000, restart_database=None))


@HANG
@pytest.mark.slow
def test_chaos_long_distributed(distributed_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, f"2,{FAULT_RATE * 2}")
    check(run_chaos(distributed_url, submissions=20_000, restart_database=None))
