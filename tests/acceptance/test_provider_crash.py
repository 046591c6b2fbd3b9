"""A sender using a provider's own SDK (Stripe, SendGrid, Twilio) really killed
(SIGKILL) after the provider accepted the call and before the ledger recorded it:
after recovery, one payment, email or message, not two. Every backend."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import denpyo
from denpyo.testing import FakeProvider
from providers import channel_and_payload
from waiting import wait_until

LEASE = 1.0

CHILD = textwrap.dedent(
    """
    import sys, time, pathlib
    import denpyo
    sys.path.insert(0, {tests!r})
    import providers

    kind, db, url, marker, lease = sys.argv[1:]
    ledger = denpyo.Ledger(db)

    channel, payload = providers.channel_and_payload(kind, url)

    def send(sub):
        remote_id = channel.send(sub)
        pathlib.Path(marker).write_text(remote_id)
        time.sleep(120)  # killed here: the provider has the call, the ledger does not know
        return remote_id

    ledger.add_channel(kind, **{{**channel.options, "send": send}}, lease=float(lease))
    ledger.submit(kind, "order:42", payload)
    """
)
TESTS = str(Path(__file__).resolve().parents[1])
KINDS = ["stripe", "sendgrid", "twilio"]


@pytest.fixture
def provider() -> FakeProvider:  # type: ignore[misc]
    with FakeProvider() as running:
        yield running


def kill_after_acceptance(tmp_path: Path, db_url: str, provider: FakeProvider, kind: str) -> None:
    script, marker = tmp_path / "sender.py", tmp_path / "marker"
    script.write_text(CHILD.format(tests=TESTS))
    child = subprocess.Popen(
        [sys.executable, str(script), kind, db_url, provider.url, str(marker), str(LEASE)]
    )
    try:
        wait_until(
            marker.exists,
            "the provider accepting the call",
            alive=lambda: child.poll() is None,
            every=0.02,
        )
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL


def recovered(db_url: str, provider: FakeProvider, kind: str) -> denpyo.Submission:
    """A new process's ledger: reconcile (once the dead sender's lease has run out)
    until the row is settled."""
    channel, _ = channel_and_payload(kind, provider)
    with denpyo.Ledger(db_url) as ledger:
        ledger.add_channel(kind, **channel.options, lease=LEASE)
        row = ledger.get(kind, "order:42")

        def settled() -> bool:
            nonlocal row
            ledger.reconcile()
            row = ledger.get(kind, "order:42")
            return row is not None and row.status is denpyo.Status.SYNCED

        wait_until(settled, "the call reconciled", moving=lambda: row, every=0.2)
    assert row is not None
    return row


@pytest.mark.parametrize("kind", KINDS)
def test_a_call_accepted_before_a_crash_is_found_not_made_twice(
    tmp_path: Path, db_url: str, provider: FakeProvider, kind: str
) -> None:
    kill_after_acceptance(tmp_path, db_url, provider, kind)
    assert provider.stats().accepted == 1
    row = recovered(db_url, provider, kind)
    [effect] = provider.accepted()
    assert row.remote_id == effect["id"]
    stats = provider.stats()
    assert (stats.requests, stats.accepted, stats.duplicates) == (1, 1, 0)


@pytest.mark.parametrize("kind", KINDS)
def test_while_verify_cannot_answer_the_call_is_not_made_twice(
    tmp_path: Path, db_url: str, provider: FakeProvider, kind: str
) -> None:
    """A verify that cannot answer (the provider's lookup down) leaves the row in
    doubt: no resend on a guess; once it answers, the call is found."""
    kill_after_acceptance(tmp_path, db_url, provider, kind)
    provider.configure(lookup_unknown_rate=1.0)
    channel, _ = channel_and_payload(kind, provider)
    with denpyo.Ledger(db_url) as ledger:
        ledger.add_channel(kind, **channel.options, lease=LEASE)

        def in_doubt() -> bool:
            row = ledger.get(kind, "order:42")
            return row is not None and row.in_doubt

        wait_until(in_doubt, "the dead sender's lease running out", every=0.1)
        ledger.reconcile()
        assert in_doubt()
    assert provider.stats().requests == 1
    provider.configure(lookup_unknown_rate=0.0)
    recovered(db_url, provider, kind)
    assert len(provider.accepted()) == provider.stats().requests == 1
