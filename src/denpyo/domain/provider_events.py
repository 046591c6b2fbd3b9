"""What a provider told by webhook, and what it does to the row it names. Pure.

A provider that has a call says so by webhook (a Stripe event, a SendGrid event, a
Twilio status callback, an SES notification). The event names its row by the
idempotency key the channel gave the provider (``denpyo_key``), else by the remote
id the row recorded. What it does to that row:

- a row in doubt or failed (`requesting` or `failed`, not resolved by a person):
  the provider has the call, so it becomes `synced` with the provider's id, by the
  very move a verify answering `Delivered` makes (`Move.verified_delivered`, guarded
  by the holder read: a worker settling the row at the same instant wins or loses
  whole, never both);
- any other row (`synced`, `rejected`, or resolved by a person): the event is added
  to its history, its status unchanged; a `rejected` row keeps its status too (the
  provider refused the call, and a later event about it is only told);
- a bounce, a complaint, a dispute or a failed delivery raises an alert
  (`provider_reported`) on the row, whatever its status;
- no row: the event is kept with no row, and the audit lists it.

Each (provider, event id) is recorded once: providers deliver again until they are
answered, and a second delivery changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from denpyo.domain.limits import storable_text
from denpyo.domain.moves import Move
from denpyo.domain.status import Status
from denpyo.domain.submission import Submission
from denpyo.errors import InvalidInput

PROVIDERS = frozenset({"stripe", "sendgrid", "twilio", "ses", "sns"})
"""The providers whose webhooks denpyo reads (denpyo.webhooks)."""

ALERT_REASON = "provider_reported"
"""The alert a bounce, a complaint, a dispute or a failed delivery raises."""

TROUBLE = (
    "bounce",
    "bounced",
    "complaint",
    "dispute",
    "dropped",
    "failed",
    "undelivered",
    "spamreport",
    "reject",
)
"""Words in an event's kind that raise an alert (Stripe's ``charge.dispute.created``,
SES's ``Bounce``, SendGrid's ``bounce`` and ``dropped``, Twilio's ``undelivered``)."""

EVENT_ID_MAX = 255
"""The longest event id kept (a UNIQUE column); a longer one is cut there."""


@dataclass(frozen=True, slots=True)
class ProviderEvent:
    """One event a provider delivered: who said it (`provider`), its own id (`event_id`,
    unique per provider), what it says (`kind`: ``payment_intent.succeeded``,
    ``Bounce``, ``delivered``…), the row it names (`idempotency_key` and/or
    `remote_id`) and a short `detail`. `received_at` and `submission_id` are set once
    it is recorded."""

    provider: str
    event_id: str
    kind: str
    idempotency_key: str | None = None
    remote_id: str | None = None
    detail: str | None = None
    submission_id: int | None = None
    received_at: datetime | None = None

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise InvalidInput(
                f"unknown provider {self.provider!r}: one of {', '.join(sorted(PROVIDERS))}"
            )
        if not self.event_id or not self.kind:
            raise InvalidInput("a provider's event needs its id and its kind")
        object.__setattr__(self, "event_id", self.event_id[:EVENT_ID_MAX])
        object.__setattr__(self, "kind", self.kind[:64])
        if self.idempotency_key is not None and len(self.idempotency_key) > 64:
            object.__setattr__(self, "idempotency_key", None)  # no row has such a key
        for name in ("remote_id", "detail"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, storable_text(value))

    @property
    def said(self) -> str:
        """How the row's history names it: the provider's event and its id."""
        return f"{self.provider} event {self.event_id}"

    @property
    def alarming(self) -> bool:
        """A bounce, a complaint, a dispute or a failed delivery: a person should look."""
        kind = self.kind.lower()
        return any(word in kind for word in TROUBLE)

    def history_line(self, detail: str | None) -> str:
        """The history line it adds to a row that it does not move, with its `detail`
        as it may be stored about that row."""
        line = f"{self.kind}, told by the provider's webhook ({self.said})"
        return line if not detail else f"{line}: {detail}"


@dataclass(frozen=True, slots=True)
class Received:
    """What recording an event did: `duplicate` (delivered before: nothing written),
    `submission` (its row after it, None: no row), `confirmed` (it moved the row to
    `synced`)."""

    event: ProviderEvent
    submission: Submission | None
    duplicate: bool = False
    confirmed: bool = False

    @property
    def alert(self) -> bool:
        """Whether it raises an alert: a first delivery of an alarming event on a row."""
        return not self.duplicate and self.submission is not None and self.event.alarming


def confirming_move(sub: Submission, event: ProviderEvent, actor: str) -> Move | None:
    """The move that makes a row the provider has `synced` (a verify's Delivered),
    its history saying "confirmed by the provider's webhook"; None when the event only
    adds to its history (synced, rejected, or resolved by a person)."""
    if sub.status not in (Status.REQUESTING, Status.FAILED) or sub.resolution is not None:
        return None
    note = f"confirmed by the provider's webhook ({event.said}: {event.kind})"
    return Move.verified_delivered(sub, actor, event.remote_id, note)
