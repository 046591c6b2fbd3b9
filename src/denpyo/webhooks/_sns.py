"""Amazon SNS's HTTP(S) subscriptions: messages signed by SNS (``SignatureVersion`` 1,
RSA with SHA-1, or 2, RSA with SHA-256, over the canonical string SNS documents),
checked here with `cryptography` (boto3 has no validator), with SNS's certificate
fetched only from ``https://sns.<region>.amazonaws.com/…`` through an injectable
fetcher, and only from the topics configured (`sns_topics`).

- ``SubscriptionConfirmation``: with `confirm`, the subscription is confirmed by
  fetching its ``SubscribeURL`` (checked the same way) through the same fetcher;
  without, it is logged with that URL, for a person to confirm.
- ``Notification`` of SES events (an SES configuration set's event destination, or
  an identity's notifications): ``eventType`` / ``notificationType`` (``Delivery``,
  ``Bounce``, ``Complaint``, ``Reject``…) is the kind; the row is named by the
  ``denpyo_key`` message tag (decoded by `denpyo.channels._keys.key_from_ses_tag`),
  else by ``mail.messageId`` (the ``MessageId`` the row recorded). The SNS
  ``MessageId`` is the event's id.
- Any other ``Notification``: a message the SNS channel published, delivered to
  this subscription: its ``MessageId`` is the one the row recorded, and its
  ``denpyo_key`` message attribute names the row.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import threading
import urllib.request
from collections.abc import Callable, Collection
from typing import Any
from urllib.parse import urlsplit

from denpyo.channels._keys import FIELD, key_from_ses_tag
from denpyo.domain.provider_events import ProviderEvent
from denpyo.extras import missing
from denpyo.webhooks._common import Refused, field, json_body, text

log = logging.getLogger("denpyo.webhooks")

Fetcher = Callable[[str], bytes]
"""GET a URL (SNS's certificate, a subscription's SubscribeURL) and return its body."""

HOST = re.compile(r"sns\.[a-z0-9-]+\.amazonaws\.com(\.cn)?")
"""The hosts SNS signs from and confirms at: nothing else is ever fetched."""

SIGNED = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": (
        "Message",
        "MessageId",
        "SubscribeURL",
        "Timestamp",
        "Token",
        "TopicArn",
        "Type",
    ),
    "UnsubscribeConfirmation": (
        "Message",
        "MessageId",
        "SubscribeURL",
        "Timestamp",
        "Token",
        "TopicArn",
        "Type",
    ),
}
"""The fields of each message type in the string SNS signs, in its order."""


def fetch(url: str) -> bytes:
    """The default fetcher: an HTTPS GET of 10 seconds at most."""
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
        return body


class Verifier:
    """Checks SNS messages of `topics`, its certificates fetched by `fetcher` once
    per URL and kept."""

    def __init__(self, topics: Collection[str], fetcher: Fetcher, *, confirm: bool) -> None:
        try:
            import cryptography  # noqa: F401 - checked here, used by `_check`
        except ImportError as exc:
            raise missing("webhooks", "the SNS webhook", exc) from exc
        self.topics = frozenset(topics)
        self.fetcher = fetcher
        self.confirm = confirm
        self._certificates: dict[str, Any] = {}
        self._lock = threading.Lock()

    def events(self, body: bytes) -> list[ProviderEvent]:
        """The events of a request, once its signature is checked; `Refused`
        otherwise. A subscription's confirmation is handled here and gives none."""
        message = json_body(body)
        kind = text(field(message, "Type"))
        if kind not in SIGNED:
            raise Refused(f"not an SNS message: Type {kind!r}")
        topic = text(message.get("TopicArn"))
        if topic not in self.topics:
            raise Refused(f"SNS topic {topic!r} is not one this endpoint reads")
        self._check(message, kind)
        if kind == "SubscriptionConfirmation":
            self._subscribe(message, topic)
            return []
        if kind == "UnsubscribeConfirmation":
            log.warning("SNS topic %s unsubscribed this endpoint", topic)
            return []
        return [_notification(message)]

    def _check(self, message: dict[str, Any], kind: str) -> None:
        from cryptography import x509  # (its import checked by __init__)
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding, rsa

        version = message.get("SignatureVersion")
        algorithm = {"1": hashes.SHA1(), "2": hashes.SHA256()}.get(str(version))
        if algorithm is None:
            raise Refused(f"SNS SignatureVersion {version!r} is neither 1 nor 2")
        url = text(message.get("SigningCertURL"))
        if url is None or not allowed(url):
            raise Refused(f"SNS SigningCertURL {url!r} is not an SNS host's HTTPS URL")
        try:
            signature = base64.b64decode(str(message.get("Signature")), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise Refused(f"SNS Signature is not base64: {exc}") from exc
        canonical = "".join(
            f"{name}\n{message[name]}\n" for name in SIGNED[kind] if message.get(name) is not None
        )
        key = self._certificate(url, x509).public_key()
        if not isinstance(key, rsa.RSAPublicKey):
            raise Refused("SNS's certificate holds no RSA key")
        try:
            key.verify(signature, canonical.encode("utf-8"), padding.PKCS1v15(), algorithm)
        except InvalidSignature as exc:
            raise Refused("SNS Signature does not match") from exc

    def _certificate(self, url: str, x509: Any) -> Any:
        with self._lock:
            known = self._certificates.get(url)
        if known is not None:
            return known
        try:
            certificate = x509.load_pem_x509_certificate(self.fetcher(url))
        except Exception as exc:  # a fetch or a parse: the request cannot be checked
            raise Refused(f"SNS certificate {url}: {type(exc).__name__}: {exc}") from exc
        with self._lock:
            self._certificates[url] = certificate
        return certificate

    def _subscribe(self, message: dict[str, Any], topic: str) -> None:
        url = text(message.get("SubscribeURL"))
        if url is None or not allowed(url):
            raise Refused(f"SNS SubscribeURL {url!r} is not an SNS host's HTTPS URL")
        if not self.confirm:
            log.warning(
                "SNS asks to confirm this endpoint's subscription to %s: open %s "
                "(or run the webhooks with sns_confirm)",
                topic,
                url,
            )
            return
        try:
            self.fetcher(url)
        except Exception as exc:
            raise Refused(f"SNS subscription not confirmed: {type(exc).__name__}: {exc}") from exc
        log.info("SNS subscription to %s confirmed", topic)


def allowed(url: str) -> bool:
    """An HTTPS URL on an SNS host (``sns.<region>.amazonaws.com``)."""
    parts = urlsplit(url)
    return (
        parts.scheme == "https"
        and parts.port is None
        and bool(HOST.fullmatch(parts.hostname or ""))
    )


def _notification(message: dict[str, Any]) -> ProviderEvent:
    message_id = text(message.get("MessageId"))
    if message_id is None:
        raise Refused("an SNS notification has a MessageId")
    body = message.get("Message")
    try:
        inner = json.loads(body) if isinstance(body, str) else None
    except ValueError:
        inner = None
    mail = field(inner, "mail")
    if isinstance(inner, dict) and isinstance(mail, dict):  # an SES event
        kind = text(inner.get("eventType")) or text(inner.get("notificationType")) or "SES"
        tags = field(mail, "tags", FIELD)
        tag = text(tags[0]) if isinstance(tags, list) and tags else None
        try:
            key = None if tag is None else key_from_ses_tag(tag)
        except (binascii.Error, ValueError, UnicodeDecodeError):
            key = None
        return ProviderEvent(
            "ses",
            message_id,
            kind,
            idempotency_key=key,
            remote_id=text(mail.get("messageId")),
            detail=_ses_detail(inner),
        )
    attribute = field(message, "MessageAttributes", FIELD, "Value")
    return ProviderEvent(
        "sns",
        message_id,
        "Notification",
        idempotency_key=text(attribute),
        remote_id=message_id,
    )


def _ses_detail(inner: dict[str, Any]) -> str | None:
    """A bounce's type, a complaint's feedback, a rejection's reason."""
    bounce, complaint = field(inner, "bounce"), field(inner, "complaint")
    if isinstance(bounce, dict):
        return f"{bounce.get('bounceType')}: {bounce.get('bounceSubType')}"
    if isinstance(complaint, dict):
        return text(complaint.get("complaintFeedbackType")) or "complaint"
    return text(field(inner, "reject", "reason")) or text(field(inner, "failure", "errorMessage"))
