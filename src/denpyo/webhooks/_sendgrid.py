"""SendGrid's signed event webhook: a JSON array of events signed with the account's
ECDSA key (``X-Twilio-Email-Event-Webhook-Signature`` over the
``X-Twilio-Email-Event-Webhook-Timestamp`` and the body), checked by the SendGrid
SDK (`EventWebhook.verify_signature`), and a timestamp older (or newer) than five
minutes refused: a recorded request replayed later is not taken.

Each event names its row by ``denpyo_key`` (the SendGrid channel's ``custom_args``,
which SendGrid copies into every event), else by its message id (the part of
``sg_message_id`` before its first dot is the ``X-Message-Id`` the row recorded).
``sg_event_id`` is the event's id."""

from __future__ import annotations

import binascii
import time
from typing import Any

from denpyo.channels._keys import FIELD
from denpyo.domain.provider_events import ProviderEvent
from denpyo.extras import missing
from denpyo.webhooks._common import Refused, json_body, text

SIGNATURE = "X-Twilio-Email-Event-Webhook-Signature"
TIMESTAMP = "X-Twilio-Email-Event-Webhook-Timestamp"
TOLERANCE = 300
"""Seconds between the signature's timestamp and now, either way."""


def sdk() -> Any:
    """The SendGrid SDK's verifier (`EventWebhook`), or the error that names its extra."""
    try:
        from sendgrid.helpers.eventwebhook import EventWebhook
    except ImportError as exc:
        raise missing("sendgrid", "the SendGrid webhook", exc) from exc
    return EventWebhook


def events(
    body: bytes, signature: str | None, timestamp: str | None, public_key: str
) -> list[ProviderEvent]:
    """The events of a request, once its signature and timestamp are checked;
    `Refused` otherwise. `public_key`: the key SendGrid shows (base64 DER, no PEM
    lines)."""
    verifier = sdk()
    if not signature or not timestamp:
        raise Refused(f"no {SIGNATURE} or {TIMESTAMP} header")
    try:
        stale = abs(time.time() - int(timestamp)) > TOLERANCE
    except ValueError as exc:
        raise Refused(f"{TIMESTAMP} is not a time: {timestamp!r}") from exc
    try:
        payload = body.decode("utf-8")
        verified = verifier(public_key).verify_signature(payload, signature, timestamp)
    except (UnicodeDecodeError, binascii.Error, ValueError) as exc:
        raise Refused(f"{SIGNATURE}: {exc}") from exc
    if not verified:
        raise Refused(f"{SIGNATURE} does not match")
    if stale:
        raise Refused(f"{TIMESTAMP} is more than {TOLERANCE} s away from now")
    batch = json_body(body)
    if not isinstance(batch, list):
        raise Refused("SendGrid's events come as a JSON array")
    return [_event(item) for item in batch]


def _event(item: Any) -> ProviderEvent:
    event_id, kind = text(_get(item, "sg_event_id")), text(_get(item, "event"))
    if event_id is None or kind is None:
        raise Refused("a SendGrid event has an sg_event_id and an event")
    message = text(_get(item, "sg_message_id"))
    return ProviderEvent(
        "sendgrid",
        event_id,
        kind,
        idempotency_key=text(_get(item, FIELD)),
        remote_id=None if message is None else message.split(".", 1)[0],
        detail=text(_get(item, "reason")) or text(_get(item, "response")),
    )


def _get(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else None
