"""The providers' own SDK clients pointed at the fake provider's routes in their API shape."""

from __future__ import annotations

from typing import Any

import sendgrid
import stripe
from twilio.http.http_client import TwilioHttpClient
from twilio.rest import Client

import denpyo
from denpyo.testing import FakeProvider
from waiting import wait_until

Where = FakeProvider | str
"""A fake provider, or the URL of one running in another process."""


def _url(where: Where) -> str:
    return where if isinstance(where, str) else where.url


def stripe_client(provider: Where) -> stripe.StripeClient:
    """Stripe's client on the fake provider (its supported `base_addresses`), no retries."""
    return stripe.StripeClient(
        "sk_test_denpyo", base_addresses={"api": _url(provider)}, max_network_retries=0
    )


def sendgrid_client(provider: Where) -> sendgrid.SendGridAPIClient:
    """SendGrid's client on the fake provider (its supported `host`)."""
    return sendgrid.SendGridAPIClient("SG.denpyo-test", host=_url(provider))


class _ToFake(TwilioHttpClient):
    """Twilio's own HTTP client, sending to the fake provider instead of
    api.twilio.com: the SDK's supported way to swap the transport (`http_client`)."""

    def __init__(self, base: str) -> None:
        super().__init__(timeout=10)
        self.base = base

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        url = url.replace("https://api.twilio.com", self.base, 1)
        return super().request(method, url, *args, **kwargs)


def twilio_client(provider: Where) -> Client:
    """Twilio's client on the fake provider."""
    return Client("ACdenpyo", "token", http_client=_ToFake(_url(provider)))


def submitted(ledger: denpyo.Ledger, channel: str, key: str, payload: Any) -> denpyo.Submission:
    """Submit and send now; the row whatever became of its call."""
    try:
        return ledger.submit(channel, key, payload)
    except denpyo.SubmissionError as exc:
        return exc.submission


def settled(ledger: denpyo.Ledger, channel: str, key: str) -> denpyo.Submission:
    """Run the worker (sends, retries, reconciles) until the row is synced: its
    back-off is short, but on a busy machine it may take more than one pass."""
    row = ledger.get(channel, key)

    def synced() -> bool:
        nonlocal row
        ledger.work(until_idle=True, poll_interval=0.05)
        row = ledger.get(channel, key)
        return row is not None and row.status is denpyo.Status.SYNCED

    wait_until(synced, f"{key} synced", moving=lambda: row, every=0.1)
    assert row is not None
    return row


def channel_and_payload(kind: str, provider: Where) -> tuple[Any, dict[str, Any]]:
    """A channel of `kind` on the fake provider, with a payload it sends: the crash
    tests' sender and their recovery use the same. Verify looks without lag (the
    fake provider's lookups see a call at once)."""
    if kind == "stripe":
        from denpyo.channels.stripe import StripeChannel

        payment = {
            "amount": 4200,
            "currency": "eur",
            "payment_method": "pm_card_visa",
            "confirm": True,
        }
        return StripeChannel(stripe_client(provider)), payment
    if kind == "sendgrid":
        from denpyo.channels.sendgrid import SendGridChannel

        mail = {
            "personalizations": [{"to": [{"email": "customer@example.com"}]}],
            "from": {"email": "shop@example.com"},
            "subject": "Your invoice",
            "content": [{"type": "text/plain", "value": "Thank you."}],
        }
        return SendGridChannel(sendgrid_client(provider), activity_lag=0), mail
    from denpyo.channels.twilio import TwilioChannel

    sms = {"to": "+15005550006", "from_": "+15005550001", "body": "Your code is 4242"}
    return TwilioChannel(twilio_client(provider)), sms
