"""A sender really killed (SIGKILL) at the dangerous instants, on SQLite and PostgreSQL.

The child process records the submission and calls the fake provider over
HTTP; its channel then stops (sleeps) at the instant under test and the parent
kills it there. The parent then waits out the lease and reconciles.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import denpyo
from denpyo.channels.http import HttpChannel
from denpyo.testing import FakeProvider
from waiting import wait_until

LEASE = 1.0

CHILD = textwrap.dedent(
    """
    import sys, time, pathlib
    import denpyo
    from denpyo.channels.http import HttpChannel

    db, url, instant, marker, lease = sys.argv[1:]
    ledger = denpyo.Ledger(db)
    http = HttpChannel(url=url + "/send", lookup_url=url + "/lookup/{idempotency_key}")

    async def send(sub):
        if instant == "before-send":
            pathlib.Path(marker).write_text("recorded, not sent")
            time.sleep(120)  # killed here: the row is committed, nothing left
        remote_id = await http.send(sub)
        pathlib.Path(marker).write_text(remote_id)
        time.sleep(120)  # killed here: the provider accepted, the ledger has not recorded it
        return remote_id

    ledger.channel("invoice-email", lease=float(lease))(send)
    ledger.submit("invoice-email", "order:42", {"to": "customer@example.com", "total": 4200})
    """
)


def crash_child(tmp_path: Path, db_url: str, provider: FakeProvider, instant: str) -> None:
    script, marker = tmp_path / "sender.py", tmp_path / "marker"
    script.write_text(CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), db_url, provider.url, instant, str(marker), str(LEASE)]
    )
    try:
        wait_until(
            marker.exists,
            "the sender reaching the dangerous instant",
            alive=lambda: child.poll() is None,
            every=0.02,
        )
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL


def recovering_ledger(db_url: str, provider: FakeProvider, *, verify: bool) -> denpyo.Ledger:
    ledger = denpyo.Ledger(db_url)
    http = HttpChannel(url=provider.send_url, lookup_url=provider.lookup_url)
    ledger.channel("invoice-email", verify=http.verifier if verify else None, lease=LEASE)(
        http.send
    )
    return ledger


def wait_out_the_lease(ledger: denpyo.Ledger) -> denpyo.Submission:
    sub = ledger.get("invoice-email", "order:42")
    assert sub is not None and sub.status is denpyo.Status.REQUESTING

    def in_doubt() -> bool:
        nonlocal sub
        sub = ledger.get("invoice-email", "order:42")
        return sub is not None and sub.in_doubt

    wait_until(in_doubt, "the lease running out", every=0.1)
    assert sub is not None
    return sub


def test_crash_after_acceptance_is_reconciled_without_a_second_request(
    tmp_path: Path, db_url: str, provider: FakeProvider
) -> None:
    crash_child(tmp_path, db_url, provider, "after-accept")
    assert provider.stats().accepted == 1
    with recovering_ledger(db_url, provider, verify=True) as ledger:
        in_doubt = wait_out_the_lease(ledger)
        # its call left, but nothing says so yet: counted once verify finds it
        assert in_doubt.attempts == 0 and in_doubt.remote_id is None
        report = ledger.reconcile()
        assert report.reconciled == 1
        sub = ledger.get("invoice-email", "order:42")
    [remote_id] = provider.accepted_ids_for(in_doubt.idempotency_key)
    assert sub is not None and sub.status is denpyo.Status.SYNCED and sub.remote_id == remote_id
    stats = provider.stats()
    assert (stats.requests, stats.accepted, stats.duplicates) == (1, 1, 0)
    assert sub.attempts == stats.requests  # the one call, counted once


def test_crash_before_the_request_leaves_is_resent_once(
    tmp_path: Path, db_url: str, provider: FakeProvider
) -> None:
    crash_child(tmp_path, db_url, provider, "before-send")
    assert provider.stats().requests == 0
    with recovering_ledger(db_url, provider, verify=True) as ledger:
        in_doubt = wait_out_the_lease(ledger)
        ledger.reconcile()
        sub = ledger.get("invoice-email", "order:42")
    # one call: the one the killed sender held never started
    assert sub is not None and sub.status is denpyo.Status.SYNCED and sub.attempts == 1
    assert provider.accepted_keys() == {in_doubt.idempotency_key: 1}
    assert provider.stats().requests == sub.attempts


def test_crash_without_verify_is_alerted_and_never_resent(
    tmp_path: Path, db_url: str, provider: FakeProvider
) -> None:
    crash_child(tmp_path, db_url, provider, "after-accept")
    alerts: list[denpyo.Alert] = []
    with recovering_ledger(db_url, provider, verify=False) as ledger:
        ledger.on_alert(alerts.append)
        wait_out_the_lease(ledger)
        for _ in range(3):
            ledger.reconcile()
            ledger.work(until_idle=True, poll_interval=0.01)
        sub = ledger.get("invoice-email", "order:42")
    assert sub is not None and sub.status is denpyo.Status.REQUESTING and sub.in_doubt
    assert [a.reason for a in alerts] == ["in_doubt"]
    assert provider.stats().requests == 1


@pytest.fixture
def provider() -> FakeProvider:  # type: ignore[misc]
    with FakeProvider() as running:
        yield running
