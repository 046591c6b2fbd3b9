"""A sender using Stripe's SDK really killed (SIGKILL) after Stripe accepted the
payment and before the ledger recorded it: after recovery, one payment, not two."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import stripe

import denpyo
from denpyo.channels.stripe import StripeChannel
from denpyo.testing import FakeProvider
from waiting import wait_until

LEASE = 1.0

CHILD = textwrap.dedent(
    """
    import sys, time, pathlib
    import stripe
    import denpyo
    from denpyo.channels.stripe import StripeChannel

    db, url, marker, lease = sys.argv[1:]
    ledger = denpyo.Ledger(db)
    client = stripe.StripeClient("sk_test_denpyo", base_addresses={"api": url},
                                 max_network_retries=0)
    payments = StripeChannel(client)

    def send(sub):
        intent = payments.send(sub)
        pathlib.Path(marker).write_text(intent)
        time.sleep(120)  # killed here: Stripe has the payment, the ledger does not know
        return intent

    options = {**payments.options, "send": send}
    ledger.add_channel("charge", **options, lease=float(lease))
    ledger.submit("charge", "order:42", {"amount": 4200, "currency": "eur",
                                         "payment_method": "pm_card_visa", "confirm": True})
    """
)


@pytest.fixture
def provider() -> FakeProvider:  # type: ignore[misc]
    with FakeProvider() as running:
        yield running


def kill_after_acceptance(tmp_path: Path, db_url: str, provider: FakeProvider) -> None:
    script, marker = tmp_path / "sender.py", tmp_path / "marker"
    script.write_text(CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), db_url, provider.url, str(marker), str(LEASE)]
    )
    try:
        wait_until(marker.exists, "Stripe accepting the payment",
                   alive=lambda: child.poll() is None, every=0.02)  # fmt: skip
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL


def recovered(db_url: str, provider: FakeProvider, **channel: float) -> denpyo.Submission:
    """A new process's ledger: wait out the dead sender's lease, then reconcile until
    the row is settled."""
    client = stripe.StripeClient(
        "sk_test_denpyo", base_addresses={"api": provider.url}, max_network_retries=0
    )
    with denpyo.Ledger(db_url) as ledger:
        payments = StripeChannel(client, **channel)
        ledger.add_channel("charge", **payments.options, lease=LEASE)
        row = ledger.get("charge", "order:42")

        def settled() -> bool:
            nonlocal row
            ledger.reconcile()
            row = ledger.get("charge", "order:42")
            return row is not None and row.status is denpyo.Status.SYNCED

        wait_until(settled, "the payment reconciled", moving=lambda: row, every=0.2)
    assert row is not None
    return row


def test_a_payment_accepted_before_a_crash_is_found_by_search_not_made_twice(
    tmp_path: Path, db_url: str, provider: FakeProvider
) -> None:
    kill_after_acceptance(tmp_path, db_url, provider)
    assert provider.stats().accepted == 1
    row = recovered(db_url, provider, search_lag=0)
    [intent] = provider.accepted_ids_for(row.idempotency_key)
    assert row.remote_id == intent
    stats = provider.stats()
    assert (stats.requests, stats.accepted, stats.duplicates) == (1, 1, 0)


def test_while_search_cannot_answer_the_payment_is_not_made_twice(
    tmp_path: Path, db_url: str, provider: FakeProvider
) -> None:
    """Search that cannot answer (down here) leaves the row in doubt: no resend on a
    guess; once it answers, the payment is found."""
    kill_after_acceptance(tmp_path, db_url, provider)
    provider.configure(lookup_unknown_rate=1.0)
    client = stripe.StripeClient(
        "sk_test_denpyo", base_addresses={"api": provider.url}, max_network_retries=0
    )
    with denpyo.Ledger(db_url) as ledger:
        payments = StripeChannel(client, search_lag=0)
        ledger.add_channel("charge", **payments.options, lease=LEASE)
        wait_until(
            lambda: (r := ledger.get("charge", "order:42")) is not None and r.in_doubt,
            "the dead sender's lease running out",
            every=0.1,
        )
        ledger.reconcile()
        row = ledger.get("charge", "order:42")
        assert row is not None and row.in_doubt, (row, ledger.events(row.id))
    assert provider.stats().requests == 1
    provider.configure(lookup_unknown_rate=0.0)
    row = recovered(db_url, provider, search_lag=0)
    assert provider.accepted_keys() == {row.idempotency_key: 1}
    assert provider.stats().requests == 1
