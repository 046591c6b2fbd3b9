"""Failover: the PostgreSQL primary dies mid-run and its standby is promoted.

The tests make their own pair of servers (pg_pair.py: initdb, a streaming standby
made with pg_basebackup through a TCP proxy, free ports, a temporary folder; the
machine's own server is never touched) and connect with the multi-host URL
(`postgresql://…@h:p1,h:p2/db?target_session_attrs=read-write`). The primary is
stopped with `-m immediate` and the standby promoted; the workers follow the URL
to it by themselves.

- Synchronous standby: the chaos harness (4 worker processes killed at random, a
  provider that does not honour keys, a channel with verify), the failover a third
  of the way: every row settled, synced = the provider's accepted count, 0 doubled,
  0 lost. The long run (`-m slow`) adds pauses past the lease.
- Asynchronous standby, 5 s behind when the primary dies: the calls of those 5 s
  were made and their rows are gone (printed, as measured); `audit(adopt=True)`
  brings that to 0, and a second submit of each adopted key sends nothing.
- The start-up warning and alert for a primary whose commits a failover could
  lose; a weak `synchronous_commit` raised for denpyo's sessions; reads from the
  standby (`read_url`, `--read-db`).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import psycopg
import pytest
from chaos import CHANNEL, WORKER, run_chaos, start_provider
from click.testing import CliRunner
from pg_pair import PgPair, postgres_bin
from test_chaos import PAUSES, STEADY, check

import denpyo
from dashboard_client import client
from denpyo import RemoteRecord
from denpyo.channels.http import HttpChannel
from denpyo.cli import main as cli
from denpyo.engine import operator as op
from denpyo.testing import FakeProviderClient
from denpyo.web import create_app
from waiting import wait_until

pytestmark = pytest.mark.skipif(
    postgres_bin() is None, reason="no PostgreSQL server binaries to make a primary and standby"
)


@pytest.mark.timeout(1800)  # a hang: the run itself ends when nothing moves
def test_failover_to_a_synchronous_standby_loses_nothing(tmp_path: Path) -> None:
    with PgPair(synchronous=True) as pair:
        with denpyo.Ledger(pair.url) as ledger:
            ledger.migrate()
        figures = run_chaos(
            pair.url,
            submissions=600,
            restart_database=pair.fail_over,
            log_dir=tmp_path,
            **STEADY,
        )
        assert pair.promoted
    check(figures)
    assert figures.restarts == 1


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_failover_to_a_synchronous_standby_long(tmp_path: Path) -> None:
    """3,000 rows, workers killed and paused past their lease (SIGSTOP), the primary
    lost a third of the way: only the calls on the wire at a pause may go out twice."""
    with PgPair(synchronous=True) as pair:
        with denpyo.Ledger(pair.url) as ledger:
            ledger.migrate()
        figures = run_chaos(
            pair.url,
            submissions=3000,
            restart_database=pair.fail_over,
            log_dir=tmp_path,
            **PAUSES,
        )
    check(figures, explained_duplicates=figures.duplicates_in_flight_at_pause)
    assert figures.restarts == 1 and figures.pauses > 0


def _list_remote(client: FakeProviderClient) -> Callable[[datetime, datetime], list[RemoteRecord]]:
    """The provider's records, with the business key each call carried (the
    harness's payload names its order): what `audit --adopt` needs."""

    def list_remote(start: datetime, end: datetime) -> list[RemoteRecord]:
        return [
            RemoteRecord(
                e["idempotency_key"], e["id"], f"order:{e['payload']['order']}", e["payload"]
            )
            for e in client.accepted()
            if start.timestamp() <= e["at"] < end.timestamp()
        ]

    return list_remote


def _wait(what: Callable[[], bool], client: FakeProviderClient, ledger: denpyo.Ledger) -> None:
    """Until `what()` holds, while calls reach the provider or rows change status."""

    def moving() -> object:
        try:
            return len(client.accepted()), ledger.store.count_by_status()
        except denpyo.StoreError:
            return None  # the primary is gone, the standby not yet promoted

    wait_until(what, "the workers", moving=moving, every=0.2)


def test_failover_to_an_asynchronous_standby_loses_calls_that_the_audit_adopts(
    tmp_path: Path,
) -> None:
    """The standby falls 5 s behind (its replication link black-holed) while the
    workers send, and the primary dies: the calls of those 5 s were made and their
    rows are gone. `audit(adopt=True)` records each as its key's synced row; a
    second submit of each key sends nothing. What was lost is printed."""
    provider, provider_url = start_provider(honour_keys=False, latency=0.05)
    client = FakeProviderClient(provider_url)
    workers: list[subprocess.Popen[bytes]] = []
    try:
        with PgPair(synchronous=False) as pair:
            ledger = denpyo.Ledger(pair.url)
            ledger.migrate()
            http = HttpChannel(
                url=f"{provider_url}/send", lookup_url=f"{provider_url}/lookup/{{idempotency_key}}"
            )
            ledger.channel(CHANNEL, verify=http.verifier, list_remote=_list_remote(client))(
                http.send
            )
            for n in range(2):
                workers.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            str(WORKER),
                            pair.url,
                            provider_url,
                            "--lease",
                            "2",
                            "--concurrency",
                            "8",
                            "--log",
                            str(tmp_path / f"worker-{n}.log"),
                        ]
                    )
                )

            def enqueue(first: int, last: int) -> None:
                rows = [(f"order:{n}", {"order": n, "total": 1000 + n}) for n in range(first, last)]
                ledger.enqueue_many(CHANNEL, rows)

            enqueue(0, 200)
            _wait(lambda: len(client.accepted()) >= 150, client, ledger)
            pair.fall_behind(5.0)
            enqueue(200, 400)
            _wait(lambda: len(client.accepted()) >= 350, client, ledger)
            pair.fail_over()
            # The workers follow the URL to the promoted standby and settle what it has.
            _wait(lambda: _settled(ledger), client, ledger)
            for worker in workers:
                worker.terminate()
                worker.wait()
            accepted = client.accepted()
            lost = _unknown(ledger, {e["idempotency_key"] for e in accepted})
            doubled = len(accepted) - len({e["idempotency_key"] for e in accepted})
            print(
                f"\nasynchronous failover: provider accepted {len(accepted)} calls, "
                f"the promoted ledger lost {len(lost)}, {doubled} doubled"
            )
            assert lost, "the standby was 5 s behind while calls were made"

            report = ledger.audit(CHANNEL, adopt=True)
            assert report.adopted == len(lost)
            assert not _unknown(ledger, {e["idempotency_key"] for e in client.accepted()}), "0 lost"

            before = len(client.accepted())
            for found in report.discrepancies:
                if found.adopted:
                    assert found.submission is not None
                    again = ledger.submit(CHANNEL, found.submission.key, found.submission.payload)
                    assert again.status is denpyo.Status.SYNCED
            assert len(client.accepted()) == before, "an adopted key sends nothing"
            assert ledger.audit(CHANNEL).adopted == 0
            ledger.close()
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
        provider.terminate()
        provider.wait()
        if provider.stdout is not None:
            provider.stdout.close()


def _unknown(ledger: denpyo.Ledger, keys: set[str]) -> set[str]:
    """The idempotency keys the ledger has no row of."""
    return keys - {
        sub.idempotency_key for sub in ledger.store.get_by_idempotency_keys(sorted(keys))
    }


def _settled(ledger: denpyo.Ledger) -> bool:
    counts = ledger.store.count_by_status()
    return bool(counts) and all(
        status in (denpyo.Status.SYNCED, denpyo.Status.REJECTED) for _, status, n in counts if n
    )


def test_a_worker_says_at_start_when_a_failover_could_lose_its_commits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A primary with only asynchronous standbys: a warning, a `durability_at_risk`
    alert and a line in `denpyo status`; with a synchronous standby, none."""
    for synchronous in (False, True):
        with PgPair(synchronous=synchronous) as pair:
            with denpyo.Ledger(pair.url) as ledger:
                ledger.migrate()
                alerts: list[denpyo.Alert] = []
                ledger.on_alert(alerts.append)
                ledger.channel(CHANNEL)(lambda sub: "r1")
                caplog.clear()
                ledger.work(until_idle=True)
                status = CliRunner().invoke(cli, ["--db", pair.url, "status"])
            risky = [a for a in alerts if a.reason == "durability_at_risk"]
            assert status.exit_code == 0, status.output
            if synchronous:
                assert not risky
                assert "1 standby, synchronous (denpyo_standby)" in status.output
            else:
                (alert,) = risky
                assert "1 standby streaming, none synchronous" in alert.message
                assert alert.message in caplog.text
                assert "durability at risk: 1 standby streaming" in " ".join(status.output.split())


def test_denpyo_raises_a_weak_synchronous_commit_for_its_own_sessions() -> None:
    """A role whose commits are acknowledged before they are on disk (`off`): denpyo's
    own sessions commit with `on`; stronger settings are left as they are."""
    with PgPair(synchronous=True) as pair:
        with psycopg.connect(pair.primary_url, autocommit=True) as conn:
            conn.execute("CREATE ROLE hasty LOGIN SUPERUSER")
            conn.execute("ALTER ROLE hasty SET synchronous_commit = off")
            conn.execute("CREATE ROLE careful LOGIN SUPERUSER")
            conn.execute("ALTER ROLE careful SET synchronous_commit = remote_apply")
        hasty = pair.primary_url.replace("postgres@", "hasty@")
        with psycopg.connect(hasty) as conn:
            assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)
        with denpyo.Ledger(hasty) as ledger:
            durability = ledger.store.durability()
            assert durability is not None and durability.synchronous_commit == "on"
            assert durability.risk is None
        with denpyo.Ledger(pair.primary_url.replace("postgres@", "careful@")) as ledger:
            durability = ledger.store.durability()
            assert durability is not None and durability.synchronous_commit == "remote_apply"


def test_the_people_on_call_read_from_a_standby(tmp_path: Path) -> None:
    """`read_url` (`--read-db`): status, list, show and the dashboard read the
    standby, say how far behind it is, and every write goes to the primary."""
    with PgPair(synchronous=True) as pair:
        with denpyo.Ledger(pair.primary_url, read_url=pair.standby_url) as ledger:
            ledger.migrate()
            ledger.channel(CHANNEL)(lambda sub: "r1")
            ledger.enqueue_many(CHANNEL, [(f"order:{n}", {"order": n}) for n in range(5)])
            pair.wait_replayed()
            assert ledger.reader is not ledger.store
            assert ledger.replica_lag() == 0.0
            report = op.status(ledger)
            assert report.standby == pair.standby_url and report.standby_lag == 0.0
            assert report.totals[denpyo.Status.REQUESTING] == 5
            assert op.history(ledger, f"{CHANNEL}:order:3").submission.payload == {"order": 3}
            app = create_app(ledger, token="a-token-long-enough-1234")
            page = client(app).get(
                "/", headers={"authorization": "Bearer a-token-long-enough-1234"}
            )
            # the page folds the chart on the primary first: for the instant before
            # the standby replays that commit, it shows the age of the last one
            assert re.search(r"standby, \d+\.\d s behind", page.text)
        run = CliRunner().invoke(
            cli, ["--db", pair.primary_url, "--read-db", pair.standby_url, "status"]
        )
        assert run.exit_code == 0, run.output
        assert re.search(
            rf"read from the standby {re.escape(pair.standby_url)}, \d+\.\d s behind the primary",
            " ".join(run.output.split()),
        )
        run = CliRunner().invoke(
            cli, ["--db", pair.primary_url, "--read-db", "mysql://root@127.0.0.1/test", "status"]
        )
        assert run.exit_code == 2 and "is not a postgresql database" in run.output
