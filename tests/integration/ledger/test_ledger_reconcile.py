"""Reconcile: a row whose lease ran out is settled by its verdict; a live lease
is left alone."""

from __future__ import annotations

import pytest
from ledger_helpers import Script, ok

import denpyo
from denpyo import Delivered, NotDelivered, Status, Submission, Unknown


def _expire_lease(ledger: denpyo.Ledger, sub: Submission) -> None:
    """What a crash leaves: `requesting`, held by a sender that is gone, lease run out."""
    from denpyo.domain.moves import Move

    [moved] = ledger.store.move(
        [
            Move(
                sub.id,
                Status.REQUESTING,
                Status.REQUESTING,
                "dead",
                holder=sub.locked_by,
                new_holder=sub.locked_by,
                lease=0,
                retry_in=0,
                keep_error=True,
            )
        ]
    )
    assert moved is not None and moved.in_doubt


@pytest.mark.parametrize(
    ("verdict", "status", "calls"),
    [
        (Delivered("remote-x"), Status.SYNCED, 0),
        (NotDelivered(), Status.SYNCED, 1),
        (Unknown("lookup said 503"), Status.REQUESTING, 0),
    ],
)
def test_reconcile_settles_expired_leases_by_verdict(
    ledger: denpyo.Ledger, verdict: denpyo.Verdict, status: Status, calls: int
) -> None:
    alerts: list[denpyo.Alert] = []
    ledger.on_alert(alerts.append)
    channel = Script(ok)
    ledger.channel("c", verify=lambda sub: verdict)(channel)
    ledger.enqueue("c", "k", {})
    [held] = ledger.store.claim("c", holder="crashed-worker", limit=1, lease=60)
    _expire_lease(ledger, held)
    report = ledger.reconcile()
    assert report.reconciled == 1
    sub = ledger.get("c", "k")
    assert sub is not None and sub.status is status and len(channel.calls) == calls
    if isinstance(verdict, Unknown):
        assert sub.in_doubt and sub.next_attempt_at is not None
        assert [a.reason for a in alerts] == ["in_doubt"] and "503" in alerts[0].message
    if isinstance(verdict, Delivered):
        assert sub.remote_id == "remote-x"


def test_a_verify_that_finds_the_call_names_its_remote_id_in_the_event(
    ledger: denpyo.Ledger,
) -> None:
    ledger.channel("c", verify=lambda sub: Delivered("remote-found"))(ok)
    ledger.enqueue("c", "k", {})
    [held] = ledger.store.claim("c", holder="crashed-worker", limit=1, lease=60)
    _expire_lease(ledger, held)
    assert ledger.reconcile().reconciled == 1
    [verify] = [e for e in ledger.events(held.id) if e.kind == "verify"]
    assert verify.to_status is Status.SYNCED
    assert verify.detail == "verify: delivered, remote id remote-found"


def test_live_leases_are_left_alone(ledger: denpyo.Ledger) -> None:
    ledger.channel("c", verify=lambda sub: NotDelivered())(ok)
    ledger.enqueue("c", "k", {})
    ledger.store.claim("c", holder="busy-worker", limit=1, lease=60)
    assert ledger.reconcile().reconciled == 0
    assert ledger.work(until_idle=True, poll_interval=0.01).attempted == 0
