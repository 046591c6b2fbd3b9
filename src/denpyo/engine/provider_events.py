"""A provider's event, told by its webhook, applied to the ledger (domain/provider_events.py
says what it does to a row; store/provider_events.py writes it in one transaction).

The route that received the event calls `receive` before it answers: when the
provider hears 200, the row is settled already (or the event is kept for the audit).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from denpyo.domain.provider_events import ALERT_REASON, ProviderEvent, Received
from denpyo.domain.text import visible

if TYPE_CHECKING:
    from denpyo.engine.ledger import Ledger

log = logging.getLogger("denpyo.webhooks")


def receive(ledger: Ledger, event: ProviderEvent) -> Received:
    """Record `event` once and apply it to its row; a bounce, a complaint, a dispute or
    a failed delivery on a row raises a `provider_reported` alert. Its detail is stored
    as a provider's error is: where payloads are encrypted, with the values of the
    row's payload it quotes replaced."""
    received = ledger.store.record_provider_event(
        event, actor=f"webhook:{event.provider}", scrub=ledger.flows.unquoted_text
    )
    told = received.event
    if received.duplicate:
        log.info("%s delivered again: recorded once already", visible(told.said))
    elif received.submission is None:
        log.warning(
            "%s (%s) names no row of the ledger: kept for the audit",
            visible(told.said),
            visible(told.kind),
        )
    if received.alert and received.submission is not None:
        sub = received.submission
        message = f"the provider reported {told.kind} ({told.said}) on a {sub.status} call"
        ledger.alerts.raise_alert(
            ALERT_REASON, message if not told.detail else f"{message}: {told.detail}", sub
        )
    return received
