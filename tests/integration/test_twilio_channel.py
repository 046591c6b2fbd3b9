"""The Twilio channel with Twilio's own SDK, against the fake provider's Twilio
routes, on every database."""

from __future__ import annotations

from typing import Any

import pytest

import denpyo
from denpyo.channels.twilio import TwilioChannel
from denpyo.testing import FakeProvider
from providers import settled, submitted, twilio_client

SMS = {"to": "+15005550006", "from_": "+15005550001", "body": "Your code is 4242"}


@pytest.fixture
def texts(provider: FakeProvider) -> TwilioChannel:
    return TwilioChannel(twilio_client(provider), status_callback="https://shop.example/twilio")


@pytest.fixture
def sms(ledger: denpyo.Ledger, texts: TwilioChannel) -> denpyo.Ledger:
    ledger.add_channel("sms", **texts.options, lease=5, backoff=denpyo.Backoff(0.05))
    return ledger


def submit(ledger: denpyo.Ledger, key: str, payload: Any = None) -> denpyo.Submission:
    return submitted(ledger, "sms", key, SMS if payload is None else payload)


def test_not_idempotent_with_verify(texts: TwilioChannel) -> None:
    options = texts.options
    assert options["idempotent"] is False and "verify" in options
    assert "list_remote" not in options and "idempotency_window" not in options


def test_a_message_is_synced_with_its_sid(sms: denpyo.Ledger, provider: FakeProvider) -> None:
    sub = submit(sms, "otp:1")
    assert sub.status is denpyo.Status.SYNCED
    [effect] = provider.accepted()
    assert sub.remote_id == effect["id"] and sub.remote_id.startswith("SM")
    message = effect["payload"]
    assert (message["to"], message["from"], message["body"]) == (
        "+15005550006",
        "+15005550001",
        "Your code is 4242",
    )
    assert message["status_callback"] == "https://shop.example/twilio"


def test_an_invalid_number_is_rejected(sms: denpyo.Ledger, provider: FakeProvider) -> None:
    provider.fail_next("decline")
    sub = submit(sms, "otp:2")
    assert sub.status is denpyo.Status.REJECTED and "21211" in (sub.last_error or "")
    assert provider.accepted() == []


@pytest.mark.parametrize("fault", ["throttle", "unavailable"])
def test_429_and_503_fail_and_are_retried_to_one_message(
    sms: denpyo.Ledger, provider: FakeProvider, fault: str
) -> None:
    provider.fail_next(fault)
    sub = submit(sms, "otp:3")
    assert sub.status is denpyo.Status.FAILED and not sub.in_doubt
    settled(sms, "sms", "otp:3")
    assert len(provider.accepted()) == 1


@pytest.mark.parametrize("fault", ["error", "drop"])
def test_a_500_or_a_lost_reply_is_verified_before_any_resend(
    sms: denpyo.Ledger, provider: FakeProvider, fault: str
) -> None:
    provider.fail_next(fault)
    sub = submit(sms, "otp:4")
    assert sub.status is denpyo.Status.FAILED and sub.in_doubt
    row = settled(sms, "sms", "otp:4")
    [effect] = provider.accepted()
    assert row.remote_id == effect["id"]


def test_two_like_messages_cannot_be_told_apart_and_wait_for_a_person(
    sms: denpyo.Ledger, provider: FakeProvider, texts: TwilioChannel
) -> None:
    first = submit(sms, "otp:5")
    provider.fail_next("drop")
    second = submit(sms, "otp:6")
    assert first.status is denpyo.Status.SYNCED and second.in_doubt
    verdict = texts.verify(second)
    assert isinstance(verdict, denpyo.Unknown) and "cannot be told" in verdict.why
    sms.reconcile()
    assert len(provider.accepted()) == 2  # never a third on a guess


def test_verify_is_unknown_when_twilio_cannot_answer(
    sms: denpyo.Ledger, provider: FakeProvider, texts: TwilioChannel
) -> None:
    sub = submit(sms, "otp:7")
    provider.configure(lookup_unknown_rate=1.0)
    assert isinstance(texts.verify(sub), denpyo.Unknown)
    provider.configure(lookup_unknown_rate=0.0)
    assert texts.verify(sub) == denpyo.Delivered(sub.remote_id)
    provider.reset()
    assert texts.verify(sub) == denpyo.NotDelivered()


def test_a_hang_past_the_clients_timeout_is_in_doubt_and_found(
    ledger: denpyo.Ledger, provider: FakeProvider
) -> None:
    provider.configure(slow_seconds=5)
    client = twilio_client(provider)
    client.http_client.timeout = 0.5
    ledger.add_channel("sms", **TwilioChannel(client).options, backoff=denpyo.Backoff(0.05))
    provider.fail_next("slow")
    sub = submit(ledger, "otp:8")
    assert sub.status is denpyo.Status.FAILED and sub.in_doubt
    row = settled(ledger, "sms", "otp:8")
    [effect] = provider.accepted()
    assert row.remote_id == effect["id"] and provider.stats().requests == 1
