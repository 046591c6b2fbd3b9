"""Stripe's webhook: events signed with the endpoint's secret (``Stripe-Signature``),
checked by the Stripe SDK (`stripe.Webhook.construct_event`, with its tolerance of
five minutes), read into the ledger's words.

The events read: ``payment_intent.*``, ``charge.refunded``, ``charge.dispute.*``
and ``refund.*``; each names its row by ``metadata.denpyo_key`` (the Stripe channel
puts the row's idempotency key there), else by its object's id (a payment intent's
``pi_…``, a refund's ``re_…``) or, for a charge or a dispute, the payment intent it
belongs to. Any other event is answered 200 and left alone (subscribe the endpoint
to those only)."""

from __future__ import annotations

import logging
from typing import Any

from denpyo.channels._keys import FIELD
from denpyo.domain.provider_events import ProviderEvent
from denpyo.extras import missing
from denpyo.webhooks._common import Refused, field, json_body, text

log = logging.getLogger("denpyo.webhooks")

READ = ("payment_intent.", "charge.refunded", "charge.dispute.", "refund.")
"""The event types the route reads (a prefix, or the type itself)."""

TOLERANCE = 300
"""Seconds a signature's timestamp may be old: the SDK's default."""


def sdk() -> Any:
    """The Stripe SDK, or the error that names its extra."""
    try:
        import stripe
    except ImportError as exc:
        raise missing("stripe", "the Stripe webhook", exc) from exc
    return stripe


def events(body: bytes, signature: str | None, secret: str) -> list[ProviderEvent]:
    """The event of a request, once its signature is checked; `Refused` otherwise."""
    stripe = sdk()
    if not signature:
        raise Refused("no Stripe-Signature header")
    try:
        stripe.Webhook.construct_event(body, signature, secret, tolerance=TOLERANCE)
    except stripe.SignatureVerificationError as exc:
        raise Refused(f"Stripe-Signature: {exc.user_message or exc}") from exc
    except ValueError as exc:
        raise Refused(f"not a Stripe event: {exc}") from exc
    event = json_body(body)  # the same bytes, signed: read as plain JSON
    kind, event_id = text(field(event, "type")), text(field(event, "id"))
    obj = field(event, "data", "object")
    if kind is None or event_id is None or not isinstance(obj, dict):
        raise Refused("a Stripe event has an id, a type and data.object")
    if not kind.startswith(READ):
        log.info("Stripe event %s (%s) is not one the webhooks read", event_id, kind)
        return []
    return [
        ProviderEvent(
            "stripe",
            event_id,
            kind,
            idempotency_key=text(field(obj, "metadata", FIELD)),
            remote_id=_remote_id(obj),
            detail=_detail(kind, obj),
        )
    ]


def _remote_id(obj: dict[str, Any]) -> str | None:
    """The id a row of the Stripe channel recorded: the payment intent's or the
    refund's own, a charge's or a dispute's payment intent."""
    if obj.get("object") in ("payment_intent", "refund"):
        return text(obj.get("id"))
    return text(obj.get("payment_intent")) or text(obj.get("id"))


def _detail(kind: str, obj: dict[str, Any]) -> str | None:
    """What a person reads about the event: why a payment failed, a dispute's reason,
    the amount refunded."""
    if kind == "payment_intent.payment_failed":
        return text(field(obj, "last_payment_error", "message"))
    if kind.startswith("charge.dispute."):
        return text(obj.get("reason"))
    if kind == "charge.refunded":
        refunded = obj.get("amount_refunded")
        return None if refunded is None else f"amount refunded {refunded} {obj.get('currency')}"
    return None
