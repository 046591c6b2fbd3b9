"""Twilio's status callbacks: a form POST signed with the account's auth token
(``X-Twilio-Signature`` over the URL Twilio called and the form's fields), checked
by the Twilio SDK (`RequestValidator.validate`).

The URL must be the one Twilio called: behind a proxy or a load balancer it is not
the one this server sees, so give it (`twilio_url`); without it, the request's own
URL is used. Twilio keeps no idempotency key: a callback names its row by
``MessageSid`` (the ``SM…`` the row recorded); its id is the sid and the status
(``SM…:delivered``), since Twilio calls once per status."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from denpyo.domain.provider_events import ProviderEvent
from denpyo.extras import missing
from denpyo.webhooks._common import Refused

SIGNATURE = "X-Twilio-Signature"


def sdk() -> Any:
    """The Twilio SDK's `RequestValidator`, or the error that names its extra."""
    try:
        from twilio.request_validator import RequestValidator
    except ImportError as exc:
        raise missing("twilio", "the Twilio webhook", exc) from exc
    return RequestValidator


def events(body: bytes, signature: str | None, url: str, token: str) -> list[ProviderEvent]:
    """The status callback of a request, once its signature is checked; `Refused`
    otherwise."""
    validator = sdk()
    if not signature:
        raise Refused(f"no {SIGNATURE} header")
    try:
        params = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=True))
    except (UnicodeDecodeError, ValueError) as exc:
        raise Refused(f"not a form: {exc}") from exc
    if not validator(token).validate(url, params, signature):
        raise Refused(f"{SIGNATURE} does not match (is {url} the URL Twilio calls?)")
    sid, status = params.get("MessageSid") or params.get("SmsSid"), params.get("MessageStatus")
    if not sid or not status:
        raise Refused("a Twilio status callback has a MessageSid and a MessageStatus")
    code = params.get("ErrorCode")
    return [
        ProviderEvent(
            "twilio",
            f"{sid}:{status}",
            status,
            remote_id=sid,
            detail=f"error {code}" if code else None,
        )
    ]
