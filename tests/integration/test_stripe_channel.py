"""The Stripe channel with Stripe's own SDK, against the fake provider's Stripe routes,
on every database."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import stripe

import denpyo
from denpyo.channels.stripe import WINDOW, StripeChannel
from denpyo.testing import FakeProvider
from providers import settled, stripe_client, submitted

CARD = {"amount": 4200, "currency": "eur", "payment_method": "pm_card_visa", "confirm": True}


@pytest.fixture
def payments(provider: FakeProvider) -> StripeChannel:
    return StripeChannel(stripe_client(provider))


@pytest.fixture
def charges(ledger: denpyo.Ledger, payments: StripeChannel) -> Iterator[denpyo.Ledger]:
    ledger.add_channel(
        "charge", **payments.options, lease=5, max_attempts=3, backoff=denpyo.Backoff(0.05)
    )
    yield ledger


def submit(ledger: denpyo.Ledger, key: str, payload: Any = None) -> denpyo.Submission:
    return submitted(ledger, "charge", key, CARD if payload is None else payload)


def test_options_make_an_idempotent_channel_with_verify_audit_and_window(
    payments: StripeChannel,
) -> None:
    options = payments.options
    assert options["idempotent"] is True
    assert options["idempotency_window"] == WINDOW < 24 * 3600
    assert {"send", "verify", "list_remote"} <= set(options)


def test_a_payment_is_synced_with_the_intent_id_and_carries_the_key(
    charges: denpyo.Ledger, provider: FakeProvider
) -> None:
    sub = submit(charges, "order:1")
    assert sub.status is denpyo.Status.SYNCED
    [effect] = provider.accepted()
    intent = effect["payload"]
    assert sub.remote_id == intent["id"] and intent["id"].startswith("pi_")
    assert effect["idempotency_key"] == sub.idempotency_key  # the Idempotency-Key header
    assert intent["metadata"] == {
        "denpyo_key": sub.idempotency_key,
        "denpyo_business_key": "order:1",
    }
    assert (intent["amount"], intent["status"]) == (4200, "succeeded")


def test_a_declined_card_is_rejected(charges: denpyo.Ledger, provider: FakeProvider) -> None:
    sub = submit(charges, "order:2", {**CARD, "payment_method": "pm_card_chargeDeclined"})
    assert sub.status is denpyo.Status.REJECTED
    assert sub.last_error is not None and "card_declined" in sub.last_error
    assert provider.accepted() == []


@pytest.mark.parametrize("fault", ["throttle", "unavailable"])
def test_429_and_503_fail_and_are_retried_to_one_payment(
    charges: denpyo.Ledger, provider: FakeProvider, fault: str
) -> None:
    provider.fail_next(fault)
    sub = submit(charges, "order:3")
    assert sub.status is denpyo.Status.FAILED and not sub.in_doubt
    settled(charges, "charge", "order:3")
    assert provider.accepted_keys() == {sub.idempotency_key: 1}


def test_a_500_is_in_doubt_and_verify_settles_it(
    charges: denpyo.Ledger, provider: FakeProvider
) -> None:
    """Stripe: the result of a 500 is indeterminate. Here it did nothing: verify
    answers not found, and the row is resent under its key, once."""
    provider.fail_next("error")
    sub = submit(charges, "order:4")
    assert sub.status is denpyo.Status.FAILED and sub.in_doubt
    settled(charges, "charge", "order:4")
    assert provider.accepted_keys() == {sub.idempotency_key: 1}


def test_a_dropped_reply_is_verified_by_search_and_synced_without_a_second_call(
    charges: denpyo.Ledger, provider: FakeProvider
) -> None:
    provider.fail_next("drop")
    sub = submit(charges, "order:5")
    assert sub.in_doubt
    requests = provider.stats().requests
    row = settled(charges, "charge", "order:5")
    [remote_id] = provider.accepted_ids_for(sub.idempotency_key)
    assert row.remote_id == remote_id
    assert provider.stats().requests == requests  # found by search, not sent again


def test_verify_finds_by_metadata_or_not(
    charges: denpyo.Ledger, provider: FakeProvider, payments: StripeChannel
) -> None:
    sub = submit(charges, "order:6")
    assert payments.verify(sub) == denpyo.Delivered(sub.remote_id)
    provider.reset()
    assert payments.verify(sub) == denpyo.NotDelivered()


def test_a_resend_of_a_payment_search_did_not_see_is_the_first_payment(
    charges: denpyo.Ledger, provider: FakeProvider, payments: StripeChannel
) -> None:
    """What a verify that answers "not found" for a payment Stripe's search does not
    see yet leads to: a resend under the same key, answered with the first object."""
    sub = submit(charges, "order:7")
    assert payments.send(sub) == sub.remote_id
    stats = provider.stats()
    assert (stats.requests, stats.accepted, stats.replayed) == (2, 1, 1)


def test_an_unreachable_stripe_is_transient_and_verify_unknown(ledger: denpyo.Ledger) -> None:
    with FakeProvider() as gone:
        channel = StripeChannel(stripe_client(gone))
    ledger.add_channel("charge", **channel.options)
    sub = submit(ledger, "order:8")
    assert sub.status is denpyo.Status.FAILED and not sub.in_doubt
    assert isinstance(channel.verify(sub), denpyo.Unknown)


def test_a_key_reused_with_other_parameters_is_a_clear_rejection(
    charges: denpyo.Ledger, provider: FakeProvider, payments: StripeChannel
) -> None:
    sub = submit(charges, "order:9")
    changed = denpyo.Submission(
        id=sub.id,
        channel="charge",
        key=sub.key,
        idempotency_key=sub.idempotency_key,
        payload={**CARD, "amount": 1},
        status=denpyo.Status.REQUESTING,
    )
    with pytest.raises(denpyo.Rejected, match="first used with other parameters"):
        payments.send(changed)
    assert provider.accepted_keys() == {sub.idempotency_key: 1}


def test_a_payload_that_is_not_an_object_is_rejected_unsent(
    charges: denpyo.Ledger, provider: FakeProvider
) -> None:
    sub = submit(charges, "order:10", [1, 2])
    assert sub.status is denpyo.Status.REJECTED
    assert provider.stats().requests == 0


def test_list_remote_feeds_the_audit(charges: denpyo.Ledger, provider: FakeProvider) -> None:
    for i in range(3):
        submit(charges, f"order:{i}")
    lost = submit(charges, "lost")
    provider.forget(lost.idempotency_key)
    now = charges.store.now()
    report = charges.audit(
        "charge", since=now - timedelta(hours=1), until=now + timedelta(minutes=1)
    )
    assert report.remote_records == 3
    assert [(d.kind, d.submission.key if d.submission else None) for d in report.discrepancies] == [
        (denpyo.DiscrepancyKind.MISSING_AT_PROVIDER, "lost")
    ]


def test_refunds_are_created_once_and_verified_by_the_intents_refunds(
    charges: denpyo.Ledger, provider: FakeProvider
) -> None:
    paid = submit(charges, "order:11")
    refunds = StripeChannel(stripe_client(provider), kind="refund")
    charges.add_channel("refund", **refunds.options, backoff=denpyo.Backoff(0.05))
    provider.fail_next("drop")
    refund = submitted(charges, "refund", "refund:11", {"payment_intent": paid.remote_id})
    assert refund.in_doubt
    row = settled(charges, "refund", "refund:11")
    [remote_id] = provider.accepted_ids_for(refund.idempotency_key)
    assert row.remote_id == remote_id and remote_id.startswith("re_")


def test_a_hang_past_the_clients_timeout_is_in_doubt_and_found(
    ledger: denpyo.Ledger, provider: FakeProvider
) -> None:
    provider.configure(slow_seconds=5)
    client = stripe.StripeClient(
        "sk_test_denpyo",
        base_addresses={"api": provider.url},
        max_network_retries=0,
        http_client=stripe.RequestsClient(timeout=0.5),
    )
    ledger.add_channel("charge", **StripeChannel(client).options, backoff=denpyo.Backoff(0.05))
    provider.fail_next("slow")
    sub = submit(ledger, "order:12")
    assert sub.status is denpyo.Status.FAILED and sub.in_doubt
    assert "may have been carried out" in (sub.last_error or "")
    row = settled(ledger, "charge", "order:12")
    assert row.remote_id == provider.accepted_ids_for(sub.idempotency_key)[0]
    assert provider.stats().requests == 1
