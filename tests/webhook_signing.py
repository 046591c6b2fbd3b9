"""Requests as each provider signs them, made with the provider's own helper where its
SDK has one (Stripe's `WebhookSignature`, Twilio's `RequestValidator`), else by the
algorithm the provider documents (SendGrid's ECDSA P-256 signature, SNS's RSA
signature over its canonical string, with a self-signed certificate)."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import stripe
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import NameOID
from twilio.request_validator import RequestValidator

STRIPE_SECRET = "whsec_test_secret"
TWILIO_TOKEN = "twilio-auth-token"
TWILIO_URL = "https://hooks.example.com/webhooks/twilio"
SNS_TOPIC = "arn:aws:sns:eu-west-1:123456789012:ses-events"
SNS_CERT_URL = "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-test.pem"


def stripe_request(
    event_id: str,
    kind: str,
    obj: dict[str, Any],
    *,
    secret: str = STRIPE_SECRET,
    at: int | None = None,
) -> tuple[bytes, dict[str, str]]:
    """A Stripe event and its Stripe-Signature header (the SDK's own helper)."""
    body = json.dumps({"id": event_id, "object": "event", "type": kind, "data": {"object": obj}})
    header = stripe.WebhookSignature.generate_signature_header(
        body, secret, timestamp=int(time.time()) if at is None else at
    )
    return body.encode(), {"Stripe-Signature": header, "Content-Type": "application/json"}


class SendGridKey:
    """An ECDSA P-256 key as SendGrid's signed event webhook uses: the public half as
    SendGrid shows it (base64 DER), the private half signs timestamp + body."""

    def __init__(self) -> None:
        self.private = ec.generate_private_key(ec.SECP256R1())
        der = self.private.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self.public = base64.b64encode(der).decode()

    def request(
        self, events: list[dict[str, Any]], *, at: int | None = None
    ) -> tuple[bytes, dict[str, str]]:
        body = json.dumps(events)
        stamp = str(int(time.time()) if at is None else at)
        signature = self.private.sign((stamp + body).encode(), ec.ECDSA(hashes.SHA256()))
        return body.encode(), {
            "X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(signature).decode(),
            "X-Twilio-Email-Event-Webhook-Timestamp": stamp,
            "Content-Type": "application/json",
        }


def twilio_request(
    params: dict[str, str], *, token: str = TWILIO_TOKEN, url: str = TWILIO_URL
) -> tuple[bytes, dict[str, str]]:
    """A status callback and its X-Twilio-Signature (the SDK's `compute_signature`)."""
    signature = RequestValidator(token).compute_signature(url, params)
    return urlencode(params).encode(), {
        "X-Twilio-Signature": signature,
        "Content-Type": "application/x-www-form-urlencoded",
    }


class SnsSigner:
    """SNS's signing key and a self-signed certificate of it, served by `fetch` at
    `SNS_CERT_URL` only (no network)."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.amazonaws.com")])
        now = datetime.now(UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=1))
            .sign(self.key, hashes.SHA256())
        )
        self.pem = cert.public_bytes(serialization.Encoding.PEM)
        self.fetched: list[str] = []

    def fetch(self, url: str) -> bytes:
        self.fetched.append(url)
        if url == SNS_CERT_URL:
            return self.pem
        if url.startswith("https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription"):
            return b"<ConfirmSubscriptionResponse/>"
        raise OSError(f"no such URL in this test: {url}")

    def message(
        self,
        message_id: str,
        body: str,
        *,
        kind: str = "Notification",
        version: str = "2",
        topic: str = SNS_TOPIC,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        message: dict[str, Any] = {
            "Type": kind,
            "MessageId": message_id,
            "TopicArn": topic,
            "Message": body,
            "Timestamp": "2026-12-07T12:00:00.000Z",
            "SignatureVersion": version,
            "SigningCertURL": SNS_CERT_URL,
            **(extra or {}),
        }
        if kind == "SubscriptionConfirmation":
            message["Token"] = "tok"
            message["SubscribeURL"] = (
                "https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription&Token=tok"
            )
        names = (
            ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type")
            if kind == "Notification"
            else ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type")
        )
        canonical = "".join(f"{n}\n{message[n]}\n" for n in names if n in message)
        digest = hashes.SHA1() if version == "1" else hashes.SHA256()
        signature = self.key.sign(canonical.encode(), padding.PKCS1v15(), digest)
        message["Signature"] = base64.b64encode(signature).decode()
        return message

    def ses_request(
        self,
        message_id: str,
        event_type: str,
        *,
        ses_id: str,
        tag: str | None = None,
        detail: dict[str, Any] | None = None,
        version: str = "2",
    ) -> tuple[bytes, dict[str, str]]:
        """An SES event (a configuration set's SNS destination) in its SNS message."""
        mail: dict[str, Any] = {"messageId": ses_id, "destination": ["ann@example.com"]}
        if tag is not None:
            mail["tags"] = {"denpyo_key": [tag]}
        inner = {"eventType": event_type, "mail": mail, **(detail or {})}
        message = self.message(message_id, json.dumps(inner), version=version)
        return json.dumps(message).encode(), {"Content-Type": "text/plain; charset=UTF-8"}
