"""The providers' own SDK clients pointed at the fake provider's routes in their API shape."""

from __future__ import annotations

from typing import Any

import sendgrid
import stripe
from twilio.http.http_client import TwilioHttpClient
from twilio.rest import Client

from denpyo.testing import FakeProvider


def stripe_client(provider: FakeProvider) -> stripe.StripeClient:
    """Stripe's client on the fake provider (its supported `base_addresses`), no retries."""
    return stripe.StripeClient(
        "sk_test_denpyo", base_addresses={"api": provider.url}, max_network_retries=0
    )


def sendgrid_client(provider: FakeProvider) -> sendgrid.SendGridAPIClient:
    """SendGrid's client on the fake provider (its supported `host`)."""
    return sendgrid.SendGridAPIClient("SG.denpyo-test", host=provider.url)


class _ToFake(TwilioHttpClient):
    """Twilio's own HTTP client, sending to the fake provider instead of
    api.twilio.com: the SDK's supported way to swap the transport (`http_client`)."""

    def __init__(self, base: str) -> None:
        super().__init__(timeout=10)
        self.base = base

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        url = url.replace("https://api.twilio.com", self.base, 1)
        return super().request(method, url, *args, **kwargs)


def twilio_client(provider: FakeProvider) -> Client:
    """Twilio's client on the fake provider."""
    return Client("ACdenpyo", "token", http_client=_ToFake(provider.url))
