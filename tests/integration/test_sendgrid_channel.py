"""The SendGrid channel with SendGrid's own SDK, against the fake provider's SendGrid
routes, on every database."""

from __future__ import annotations

from typing import Any

import pytest

import denpyo
from denpyo.channels.sendgrid import SendGridChannel
from denpyo.testing import FakeProvider
from providers import sendgrid_client, settled, submitted

MAIL = {
    "personalizations": [{"to": [{"email": "customer@example.com"}]}],
    "from": {"email": "shop@example.com"},
    "subject": "Your invoice",
    "content": [{"type": "text/plain", "value": "Thank you."}],
}


@pytest.fixture
def mailer(provider: FakeProvider) -> SendGridChannel:
    return SendGridChannel(sendgrid_client(provider), activity_lag=0)


@pytest.fixture
def mail(ledger: denpyo.Ledger, mailer: SendGridChannel) -> denpyo.Ledger:
    ledger.add_channel("mail", **mailer.options, lease=5, backoff=denpyo.Backoff(0.05))
    return ledger


def submit(ledger: denpyo.Ledger, key: str, payload: Any = None) -> denpyo.Submission:
    return submitted(ledger, "mail", key, MAIL if payload is None else payload)


def test_not_idempotent_with_verify_and_no_audit(mailer: SendGridChannel) -> None:
    options = mailer.options
    assert options["idempotent"] is False and "idempotency_window" not in options
    assert "verify" in options and "list_remote" not in options
    assert "verify" not in SendGridChannel(mailer.client, activity=False).options


def test_an_email_is_synced_with_the_message_id_and_carries_the_key(
    mail: denpyo.Ledger, provider: FakeProvider
) -> None:
    sub = submit(mail, "invoice:1")
    assert sub.status is denpyo.Status.SYNCED
    [effect] = provider.accepted()
    assert sub.remote_id == effect["id"]  # the X-Message-Id header
    assert effect["payload"]["custom_args"] == {"denpyo_key": sub.idempotency_key}
    assert effect["payload"]["subject"] == "Your invoice"


def test_a_bad_address_is_rejected(mail: denpyo.Ledger, provider: FakeProvider) -> None:
    provider.fail_next("decline")
    sub = submit(mail, "invoice:2")
    assert sub.status is denpyo.Status.REJECTED and "HTTP 400" in (sub.last_error or "")
    assert provider.accepted() == []


@pytest.mark.parametrize("fault", ["throttle", "unavailable"])
def test_429_and_503_fail_and_are_retried_to_one_email(
    mail: denpyo.Ledger, provider: FakeProvider, fault: str
) -> None:
    provider.fail_next(fault)
    sub = submit(mail, "invoice:3")
    assert sub.status is denpyo.Status.FAILED and not sub.in_doubt
    settled(mail, "mail", "invoice:3")
    assert provider.accepted_keys() == {sub.idempotency_key: 1}


@pytest.mark.parametrize("fault", ["error", "drop"])
def test_a_500_or_a_lost_reply_is_verified_before_any_resend(
    mail: denpyo.Ledger, provider: FakeProvider, fault: str
) -> None:
    """A 500 that did nothing is found missing and sent again, once; a lost reply
    whose email went is found in the activity and never sent twice."""
    provider.fail_next(fault)
    sub = submit(mail, "invoice:4")
    assert sub.status is denpyo.Status.FAILED and sub.in_doubt
    row = settled(mail, "mail", "invoice:4")
    assert provider.accepted_keys() == {sub.idempotency_key: 1}
    assert row.remote_id == provider.accepted_ids_for(sub.idempotency_key)[0]


def test_verify_is_unknown_without_the_activity_api_or_while_it_lags(
    mail: denpyo.Ledger, provider: FakeProvider, mailer: SendGridChannel
) -> None:
    sub = submit(mail, "invoice:5")
    assert mailer.verify(sub) == denpyo.Delivered(sub.remote_id)
    provider.configure(lookup_unknown_rate=1.0)
    assert isinstance(mailer.verify(sub), denpyo.Unknown)
    provider.configure(lookup_unknown_rate=0.0)
    provider.reset()
    assert mailer.verify(sub) == denpyo.NotDelivered()
    lagging = SendGridChannel(mailer.client)  # five minutes of lag
    fresh = mail.get("mail", "invoice:5")
    assert isinstance(lagging.verify(fresh), denpyo.Unknown)


def test_a_hang_past_the_timeout_is_in_doubt_and_found(
    ledger: denpyo.Ledger, provider: FakeProvider
) -> None:
    provider.configure(slow_seconds=5)
    mailer = SendGridChannel(sendgrid_client(provider), activity_lag=0, timeout=0.5)
    ledger.add_channel("mail", **mailer.options, backoff=denpyo.Backoff(0.05))
    provider.fail_next("slow")
    sub = submit(ledger, "invoice:6")
    assert sub.status is denpyo.Status.FAILED and sub.in_doubt
    row = settled(ledger, "mail", "invoice:6")
    assert row.remote_id == provider.accepted_ids_for(sub.idempotency_key)[0]
    assert provider.stats().requests == 1
