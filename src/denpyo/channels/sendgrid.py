"""`SendGridChannel`: one email per submission, sent with SendGrid's own SDK.

Each submission's payload is the body of SendGrid's ``POST /v3/mail/send``
(``personalizations``, ``from``, ``subject``, ``content``…). The channel adds
``custom_args["denpyo_key"]`` = the row's idempotency key (SendGrid copies custom
arguments onto every event of the message, so the webhooks name the row by it) and
records the ``X-Message-Id`` SendGrid answers as the row's remote id.

SendGrid takes no idempotency key: a second request is a second email. So the
channel is not idempotent, and a row in doubt is never resent unless `verify`
says SendGrid does not have it.

How SendGrid's answers are classified:

- 2xx: delivered to SendGrid, `synced` with the ``X-Message-Id``;
- 429 and 503: `Transient` (with the wait ``X-RateLimit-Reset`` says, for 429);
- other 4xx (a bad address, a bad key, a payload too large): `Rejected`;
- 500, 502, 504, a timeout or a connection lost after the request left: raised as
  `ConnectionError`, ambiguous: the row is verified before any resend;
- a connection that could not be made: `Transient`.

`verify` asks the Email Activity API
(``GET /v3/messages?query=unique_args['denpyo_key']="KEY"``), which only accounts
with the Email Activity add-on have: without it SendGrid answers 403 or 404 and
`verify` answers `Unknown`, so a row in doubt waits for a person (pass
``activity=False`` to register no verify at all). SendGrid's activity takes a while
to show a message: a call made less than `activity_lag` seconds (5 minutes) before
the verify is `Unknown`, never "not delivered". There is no `list_remote`: the
activity list does not return the custom arguments the audit would need.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from denpyo.channels._sdk import by_status, channel_options, in_doubt, never_left
from denpyo.domain.submission import Submission
from denpyo.domain.verdict import Delivered, NotDelivered, Unknown, Verdict
from denpyo.errors import Rejected, Transient
from denpyo.extras import missing

try:
    import python_http_client.exceptions as http_errors
    import sendgrid
except ImportError as exc:  # the extra is not installed
    raise missing("sendgrid", "denpyo.channels.sendgrid", exc) from exc

KEY = "denpyo_key"
"""The custom argument that carries the row's idempotency key."""
_BODY_LIMIT = 300


class SendGridChannel:
    """Send each submission with `client` (a `sendgrid.SendGridAPIClient`).

    Register it with ``ledger.add_channel(name, **channel.options)``. `timeout`
    (seconds) is set on the client when it has none: SendGrid's client waits for
    ever by default, which no lease can cover."""

    def __init__(
        self,
        client: sendgrid.SendGridAPIClient,
        *,
        activity: bool = True,
        activity_lag: float = 300.0,
        timeout: float = 10.0,
    ) -> None:
        self.client = client
        self.activity = activity
        self.activity_lag = activity_lag
        if getattr(client.client, "timeout", None) is None:
            client.client.timeout = timeout

    def __repr__(self) -> str:
        return f"<SendGridChannel {self.client.host}>"

    @property
    def options(self) -> dict[str, Any]:
        """`send` and `verify` (with ``activity=True``), not idempotent, for
        ``ledger.add_channel(name, **channel.options)``."""
        return channel_options(
            self.send,
            self.verify if self.activity else None,
            None,
            idempotent=False,
            idempotency_window=None,
        )

    def body(self, sub: Submission) -> dict[str, Any]:
        """The mail/send body: the payload with the key in its ``custom_args``."""
        payload = sub.payload
        if not isinstance(payload, dict):
            raise Rejected(
                f"the payload is a JSON {type(payload).__name__}, not a mail/send object; "
                "nothing was sent"
            )
        custom = payload.get("custom_args", {})
        if not isinstance(custom, dict):
            raise Rejected("the payload's custom_args is not an object; nothing was sent")
        return {**payload, "custom_args": {**custom, KEY: sub.idempotency_key}}

    def send(self, sub: Submission) -> str | None:
        """Send the email; SendGrid's ``X-Message-Id``, or raise per the module docstring."""
        body = self.body(sub)
        sub.check_lease()  # the last moment: nothing has left yet
        try:
            response = self.client.client.mail.send.post(request_body=body)
        except http_errors.HTTPError as exc:
            raise classified(exc) from exc
        except OSError as exc:  # urllib's URLError, timeouts, resets
            if never_left(exc):
                raise Transient(f"SendGrid could not be reached: {exc!r}") from exc
            raise in_doubt(f"the connection to SendGrid failed: {exc!r}") from exc
        return _header(response.headers, "X-Message-Id")

    def verify(self, sub: Submission) -> Verdict:
        """Find the message by its custom argument in the Email Activity API."""
        quoted = sub.idempotency_key.replace("\\", "\\\\").replace('"', '\\"')
        try:
            response = self.client.client.messages.get(
                query_params={"query": f"unique_args['{KEY}']=\"{quoted}\"", "limit": 10}
            )
            found = json.loads(response.body or b"{}").get("messages") or []
        except http_errors.HTTPError as exc:
            if exc.status_code in (403, 404):
                return Unknown(
                    f"SendGrid's Email Activity API is not open to this account "
                    f"(HTTP {exc.status_code}): it is a paid add-on"
                )
            return Unknown(f"SendGrid's Email Activity API answered {_short(exc)}")
        except (OSError, ValueError) as exc:
            return Unknown(f"SendGrid's Email Activity API could not be asked: {exc!r}")
        if found:
            return Delivered(str(found[0]["msg_id"]).split(".")[0])
        if _younger_than(sub, self.activity_lag):
            return Unknown(
                f"not in the activity yet, but the call is less than {self.activity_lag:g} s "
                "old and SendGrid's activity lags behind"
            )
        return NotDelivered()


def _younger_than(sub: Submission, seconds: float) -> bool:
    """May the row's call have been in flight less than `seconds` ago? Its lease's end
    while it is held (the call may leave until then), else its last change (a settle
    ends the call). A provider whose lookups lag answers "not found" for a younger
    call that it has."""
    last = sub.locked_until or sub.updated_at
    if last is None or seconds <= 0:
        return False
    last = last if last.tzinfo else last.replace(tzinfo=UTC)
    return (datetime.now(UTC) - last).total_seconds() < seconds


def _header(headers: Any, name: str) -> str | None:
    value = headers.get(name) if headers is not None else None
    return str(value) if value else None


def _short(exc: http_errors.HTTPError) -> str:
    body = exc.body.decode("utf-8", "replace") if isinstance(exc.body, bytes) else str(exc.body)
    return f"HTTP {exc.status_code}: {' '.join(body.split())[:_BODY_LIMIT]}"


def classified(exc: http_errors.HTTPError) -> Exception:
    """The signal one of SendGrid's HTTP errors is (the module docstring says which)."""
    what = _short(exc)
    retry_after = None
    reset = _header(exc.headers, "X-RateLimit-Reset")
    if reset is not None:
        try:
            retry_after = max(0.0, float(reset) - time.time())
        except ValueError:
            retry_after = None
    signal = by_status(exc.status_code, what, retry_after=retry_after)
    return signal if signal is not None else in_doubt(what)
