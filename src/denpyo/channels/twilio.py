"""`TwilioChannel`: one SMS (or WhatsApp) message per submission, with Twilio's SDK.

Each submission's payload names the message: ``to``, ``body`` and either ``from_``
or ``messaging_service_sid`` (any other parameter of ``messages.create`` is
passed as it is). The row's remote id is the message's ``sid`` (``SM…``); with
`status_callback`, Twilio reports the message's fate there (the webhooks find the
row by that sid).

**Not idempotent**: Twilio's Messages API takes no idempotency key, so a second
request is a second SMS. The channel is registered not idempotent: a call that may
have arrived (a timeout, a dropped connection, a 5xx other than 503, a crash) is
never resent unless `verify` says Twilio does not have it; when `verify` cannot
tell, the row waits for a person.

How Twilio's answers are classified:

- the message resource: `synced` with its sid;
- 429 and 503: `Transient`, retried after back-off;
- other 4xx (an invalid number 21211, an unverified sender, a bad account): `Rejected`;
- 500, 502, 504, a timeout or a connection lost after the request left: ambiguous;
- a connection that could not be made: `Transient`.

`verify` lists the messages sent to ``to`` (and from ``from_`` when the payload
names it) since a day before the row was created (Twilio's ``DateSent>`` filter
keeps whole days) and matches the ``body`` and sender among those created since
the row was: one match is `Delivered` with its sid; none is `NotDelivered` (Twilio
creates the resource before it answers the create, so the list has no lag); more
than one is `Unknown`, since two rows with the same text to the same number cannot
be told apart. There is no `list_remote`: a message carries no key to compare.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from denpyo.channels._sdk import by_status, channel_options, in_doubt, never_left
from denpyo.domain.submission import Submission
from denpyo.domain.verdict import Delivered, NotDelivered, Unknown, Verdict
from denpyo.errors import Rejected, Transient
from denpyo.extras import missing

try:
    from twilio.base.exceptions import TwilioException, TwilioRestException
    from twilio.rest import Client
except ImportError as exc:  # the extra is not installed
    raise missing("twilio", "denpyo.channels.twilio", exc) from exc

_LOOKBACK = 500
"""Messages of one recipient read at most by a verify."""
_SKEW = timedelta(minutes=5)
"""How much earlier than the row's creation Twilio's clock may date its message."""


class TwilioChannel:
    """Send each submission with `client` (a `twilio.rest.Client`).

    Register it with ``ledger.add_channel(name, **channel.options)``."""

    def __init__(self, client: Client, *, status_callback: str | None = None) -> None:
        self.client = client
        self.status_callback = status_callback

    def __repr__(self) -> str:
        return f"<TwilioChannel {self.client.account_sid}>"

    @property
    def options(self) -> dict[str, Any]:
        """`send` and `verify`, not idempotent, for
        ``ledger.add_channel(name, **channel.options)``."""
        return channel_options(
            self.send, self.verify, None, idempotent=False, idempotency_window=None
        )

    def params(self, sub: Submission) -> dict[str, Any]:
        """The create call's parameters: the payload (and `status_callback`)."""
        payload = sub.payload
        if not isinstance(payload, dict) or not payload.get("to") or not payload.get("body"):
            raise Rejected(
                "the payload must be an object with 'to', 'body' and 'from_' or "
                "'messaging_service_sid'; nothing was sent"
            )
        params = dict(payload)
        if self.status_callback is not None:
            params.setdefault("status_callback", self.status_callback)
        return params

    def send(self, sub: Submission) -> str:
        """Create the message; its sid, or raise per the module docstring."""
        params = self.params(sub)
        sub.check_lease()  # the last moment: nothing has left yet
        try:
            message = self.client.messages.create(**params)
        except TwilioRestException as exc:
            raise classified(exc) from exc
        except (TwilioException, OSError) as exc:
            if never_left(exc):
                raise Transient(f"Twilio could not be reached: {exc!r}") from exc
            raise in_doubt(f"the call to Twilio failed: {exc!r}") from exc
        except Exception as exc:  # requests' own errors, not OSErrors
            if never_left(exc):
                raise Transient(f"Twilio could not be reached: {exc!r}") from exc
            raise
        return str(message.sid)

    def verify(self, sub: Submission) -> Verdict:
        """Find the message by recipient, sender and text (the module docstring)."""
        payload = sub.payload if isinstance(sub.payload, dict) else {}
        if not payload.get("to") or not payload.get("body"):
            return Unknown("the payload names no 'to' and 'body' to look for")
        since = (sub.created_at or datetime.now(UTC)) - _SKEW
        since = since if since.tzinfo else since.replace(tzinfo=UTC)
        filters: dict[str, Any] = {
            "to": payload["to"],
            "date_sent_after": since - timedelta(days=1),
        }
        if payload.get("from_"):
            filters["from_"] = payload["from_"]
        try:
            listed = self.client.messages.list(**filters, limit=_LOOKBACK, page_size=100)
        except Exception as exc:  # a verify never raises for Twilio's trouble
            return Unknown(f"Twilio's message list could not be read: {exc!r}")
        service = payload.get("messaging_service_sid")
        found = [
            m
            for m in listed
            if m.body == payload["body"]
            and (service is None or m.messaging_service_sid == service)
            and (m.date_created is None or m.date_created >= since)
        ]
        if len(found) == 1:
            return Delivered(str(found[0].sid))
        if not found:
            if len(listed) >= _LOOKBACK:
                return Unknown(f"more than {_LOOKBACK} messages to {payload['to']}: not all read")
            return NotDelivered()
        return Unknown(
            f"{len(found)} messages with this text went to {payload['to']} since the row "
            f"was created ({', '.join(str(m.sid) for m in found[:5])}); which is this row's "
            "cannot be told"
        )


def classified(exc: TwilioRestException) -> Exception:
    """The signal one of Twilio's HTTP errors is (the module docstring says which)."""
    what = f"HTTP {exc.status} (Twilio error {exc.code}): {exc.msg}"
    signal = by_status(exc.status, what)
    return signal if signal is not None else in_doubt(what)
