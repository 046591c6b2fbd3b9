"""The provider pages (docs/providers/stripe.md, sendgrid.md, twilio.md), each block
run as printed with the provider's own SDK pointed at the fake provider. Every backend."""

from __future__ import annotations

from typing import Any

import denpyo
from denpyo.testing import FakeProvider
from doc_pages import named
from providers import sendgrid_client, stripe_client, twilio_client


def run(page: str, marker: str, name: str, **names: Any) -> dict[str, Any]:
    """Run the page's block `name` with `names` defined; returns its namespace."""
    namespace = dict(names)
    code = named(page, marker)[name]
    exec(compile(code, f"{page}: {marker} {name}", "exec"), namespace)
    return namespace


def test_the_stripe_page_pays_and_refunds(ledger: denpyo.Ledger, provider: FakeProvider) -> None:
    client = stripe_client(provider)
    page = run("providers/stripe.md", "stripe", "payments", ledger=ledger, client=client)
    paid = ledger.get("charge", "order:1042")
    assert paid is not None and paid.status is denpyo.Status.SYNCED
    run("providers/stripe.md", "stripe", "refunds", **page)  # the page read on
    refund = ledger.get("refund", "refund:1042")
    assert refund is not None and refund.status is denpyo.Status.SYNCED
    intent, made = (e["payload"] for e in provider.accepted())
    assert (intent["id"], made["payment_intent"]) == (paid.remote_id, paid.remote_id)
    assert made["id"] == refund.remote_id and made["amount"] == 4200


def test_the_sendgrid_page_sends_an_email(ledger: denpyo.Ledger, provider: FakeProvider) -> None:
    run(
        "providers/sendgrid.md", "sendgrid", "mail", ledger=ledger, client=sendgrid_client(provider)
    )
    sub = ledger.get("invoice-email", "invoice:1042")
    [effect] = provider.accepted()
    assert sub is not None and sub.status is denpyo.Status.SYNCED
    assert sub.remote_id == effect["id"]
    assert effect["payload"]["custom_args"] == {"denpyo_key": sub.idempotency_key}


def test_the_twilio_page_sends_a_message(ledger: denpyo.Ledger, provider: FakeProvider) -> None:
    run("providers/twilio.md", "twilio", "sms", ledger=ledger, client=twilio_client(provider))
    sub = ledger.get("otp-sms", "login:7731")
    [effect] = provider.accepted()
    assert sub is not None and sub.status is denpyo.Status.SYNCED
    assert sub.remote_id == effect["id"]
    assert effect["payload"]["status_callback"] == "https://shop.example/denpyo/twilio"
