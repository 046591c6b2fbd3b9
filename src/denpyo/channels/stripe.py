"""`StripeChannel`: payment intents or refunds created with Stripe's own SDK.

Each submission's payload is the parameters of the create call (``amount``,
``currency``, ``payment_method``, ``confirm``…; for a refund ``payment_intent``,
``amount``…). The channel sends them with the header ``Idempotency-Key`` = the
row's idempotency key, and ``metadata["denpyo_key"]`` = the same key (and
``metadata["denpyo_business_key"]`` = the row's business key), so that the call
can be found again: `verify` searches for it, the audit reads it back, and the
webhooks (denpyo.webhooks) name the row by it. The row's remote id is the object's
id (``pi_…``, ``re_…``).

Stripe keeps an idempotency key 24 hours: a second create with it answers the
first object, and with other parameters an ``idempotency_error``. The channel is
declared idempotent with a window of 23 hours (an hour's margin): a row in doubt
is resent under its key inside it, verified past it.

How Stripe's answers are classified (never "did not arrive" unless certain):

- the object: delivered, the row becomes `synced` with its id;
- a declined card (`CardError`), an invalid request (400, 404), an idempotency
  error, a bad key or a missing permission (401, 403): `Rejected`;
- 429 (`RateLimitError`), 503, 409 (a request with the same key still running),
  and a connection that could not be made: `Transient`, retried after back-off;
- 500, 502, 504 (Stripe: "the result of a 500 is indeterminate"), a timeout or a
  connection lost after the request left: raised as `ConnectionError`, which the
  engine records as ambiguous: the row is verified before any resend.

`verify` (payment intents): the Search API, ``metadata['denpyo_key']:'KEY'``.
Stripe's search may take up to a minute to see a new object, so "not found" may
be a call Stripe has: the row is then resent under its key, which Stripe answers
with the first object (a call that young is well inside the 24 hours Stripe keeps
a key): never a second payment. Search is not available in every region (not in
India): there verify answers `Unknown`. `verify` (refunds: they have no search):
the refunds of the payload's ``payment_intent`` (or ``charge``), by their
metadata. `list_remote` lists by creation time, newest first, every page.

The SDK's own retries (``max_network_retries``) resend under the same key, so they
are harmless; keep them short beside the channel's `lease`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime
from typing import Any, Literal

from denpyo.channels._sdk import by_status, channel_options, in_doubt, never_left
from denpyo.domain.audit import RemoteRecord
from denpyo.domain.submission import Submission
from denpyo.domain.verdict import Delivered, NotDelivered, Unknown, Verdict
from denpyo.errors import ConfigurationError, Rejected, Transient
from denpyo.extras import missing

try:
    import stripe
except ImportError as exc:  # the extra is not installed
    raise missing("stripe", "denpyo.channels.stripe", exc) from exc

KEY = "denpyo_key"
"""The metadata field that carries the row's idempotency key."""
BUSINESS_KEY = "denpyo_business_key"
"""The metadata field that carries the row's business key (for `audit(adopt=True)`)."""
WINDOW = 23 * 3600.0
"""Stripe keeps an idempotency key 24 hours; the channel counts on 23."""

Kind = Literal["payment_intent", "refund"]


class StripeChannel:
    """Create one Stripe object per submission with `client` (a `stripe.StripeClient`):
    ``kind="payment_intent"`` (the default) or ``"refund"``.

    Register it with ``ledger.add_channel(name, **channel.options, lease=…)``."""

    def __init__(
        self,
        client: stripe.StripeClient,
        *,
        kind: Kind = "payment_intent",
    ) -> None:
        if kind not in ("payment_intent", "refund"):
            raise ConfigurationError(f"kind must be 'payment_intent' or 'refund', not {kind!r}")
        self.client = client
        self.kind: Kind = kind
        self._service: Any = (
            client.v1.payment_intents if kind == "payment_intent" else client.v1.refunds
        )

    def __repr__(self) -> str:
        return f"<StripeChannel {self.kind}>"

    @property
    def options(self) -> dict[str, Any]:
        """`send`, `verify`, `list_remote`, ``idempotent=True`` and the window, for
        ``ledger.add_channel(name, **channel.options)``."""
        return channel_options(
            self.send, self.verify, self.list_remote, idempotent=True, idempotency_window=WINDOW
        )

    # -- the call ---------------------------------------------------------------------

    def params(self, sub: Submission) -> dict[str, Any]:
        """The create call's parameters: the payload, with the keys in its metadata. A
        payload that cannot carry them is refused before anything is sent."""
        payload = sub.payload
        if not isinstance(payload, dict):
            raise Rejected(
                f"the payload is a JSON {type(payload).__name__}, not an object of "
                f"{self.kind} parameters; nothing was sent"
            )
        metadata = payload.get("metadata", {})
        if not isinstance(metadata, dict):
            raise Rejected("the payload's metadata is not an object; nothing was sent")
        # Both fit Stripe's limits: a key of 40 characters, a value of 500 (a
        # business key has at most 255, an idempotency key is a UUID).
        keys = {KEY: sub.idempotency_key, BUSINESS_KEY: sub.key}
        return {**payload, "metadata": {**metadata, **keys}}

    def send(self, sub: Submission) -> str:
        """Create the object under the row's key; its id, or raise per the module
        docstring."""
        params = self.params(sub)
        sub.check_lease()  # the last moment: nothing has left yet
        try:
            made = self._service.create(
                params=params, options={"idempotency_key": sub.idempotency_key}
            )
        except stripe.StripeError as exc:
            raise classified(exc) from exc
        return str(made.id)

    # -- verify and the audit ----------------------------------------------------------

    def verify(self, sub: Submission) -> Verdict:
        """Find the object by its ``denpyo_key`` metadata: Delivered with its id,
        NotDelivered (a resend under the key is safe even if search lags), or Unknown
        when Stripe cannot answer now."""
        if self.kind == "refund" and not _refunded(sub):
            return Unknown("the refund's payload names no payment_intent or charge to list")
        try:
            found = self._find(sub)
        except stripe.StripeError as exc:
            return Unknown(f"Stripe could not be asked: {describe(exc)}")
        return Delivered(found[0]) if found else NotDelivered()

    def _find(self, sub: Submission) -> list[str]:
        """The ids of the objects that carry the row's key, oldest first."""
        key = sub.idempotency_key
        if self.kind == "payment_intent":
            quoted = key.replace("\\", "\\\\").replace("'", "\\'")
            result = self._service.search(
                params={"query": f"metadata['{KEY}']:'{quoted}'", "limit": 10}
            )
            matches = list(result.auto_paging_iter())
        else:
            listed = self._service.list(params={**_refunded(sub), "limit": 100})
            matches = [r for r in listed.auto_paging_iter() if _key_of(r) == key]
        matches.sort(key=lambda o: (o.created, o.id))
        return [str(o.id) for o in matches]

    def list_remote(self, since: datetime, until: datetime) -> Iterator[RemoteRecord]:
        """The objects created in [since, until) that carry a ``denpyo_key``, every
        page; Stripe's times are whole seconds, so each object falls in one window."""
        start, end = since.timestamp(), until.timestamp()
        listed = self._service.list(
            params={
                "created": {"gte": math.floor(start), "lt": math.ceil(end)},
                "limit": 100,
            }
        )
        for made in listed.auto_paging_iter():
            key = _key_of(made)
            if key is None or not start <= made.created < end:
                continue
            yield RemoteRecord(key, str(made.id), key=_metadata(made).get(BUSINESS_KEY))


def _refunded(sub: Submission) -> dict[str, Any]:
    """What a refund's payload refunds: its ``payment_intent`` and/or ``charge``."""
    payload = sub.payload if isinstance(sub.payload, dict) else {}
    return {k: payload[k] for k in ("payment_intent", "charge") if payload.get(k)}


def _metadata(made: Any) -> dict[str, Any]:
    """An object's metadata as a dict (the SDK's objects are dicts before version 13,
    objects with `to_dict()` after)."""
    try:
        metadata = made["metadata"]
    except KeyError:
        return {}
    if metadata is None:
        return {}
    to_dict = getattr(metadata, "to_dict", None)
    return dict(to_dict() if callable(to_dict) else metadata)


def _key_of(made: Any) -> str | None:
    value = _metadata(made).get(KEY)
    return str(value) if value else None


def describe(exc: stripe.StripeError) -> str:
    """Stripe's error in one line: status, type, code, message, request id."""
    error = getattr(exc, "error", None)
    parts = [
        f"HTTP {exc.http_status}" if exc.http_status else type(exc).__name__,
        getattr(error, "type", None),
        exc.code,
        getattr(error, "decline_code", None),
    ]
    text = " ".join(str(p) for p in parts if p)
    message = exc.user_message or str(exc._message or "") or str(exc)
    request = f" (request {exc.request_id})" if exc.request_id else ""
    return f"{text}: {' '.join(message.split()).rstrip('.')}{request}"


def classified(exc: stripe.StripeError) -> Exception:
    """The signal one of Stripe's errors is (the module docstring says which)."""
    what = describe(exc)
    if isinstance(exc, stripe.IdempotencyError):
        return Rejected(
            f"Stripe refused the idempotency key: it was first used with other "
            f"parameters (the payload changed, or another call shares the key): {what}"
        )
    if isinstance(exc, stripe.CardError):
        return Rejected(f"card declined: {what}")
    if isinstance(exc, stripe.APIConnectionError):
        if never_left(exc):
            return Transient(f"Stripe could not be reached: {what}")
        return in_doubt(f"the connection to Stripe failed: {what}")
    if exc.http_status == 409:
        return Transient(f"a request with the same key is still running at Stripe: {what}")
    signal = by_status(exc.http_status, what)
    if signal is not None:
        return signal
    return in_doubt(what)
