"""Alerts: a submission that needs a person, told to callbacks and the log."""

from __future__ import annotations

import logging
from collections.abc import Callable

from denpyo.domain.alert import Alert
from denpyo.domain.redaction import Redaction
from denpyo.domain.submission import Submission

__all__ = ["Alert", "AlertHandler", "Alerts"]

log = logging.getLogger("denpyo.alerts")

AlertHandler = Callable[[Alert], None]


class Alerts:
    """Fan an alert out to the log and every registered callback.

    Both get the alert through `redaction` (the ledger's): its row's payload
    redacted, its message and the row's last error scrubbed of the hidden values,
    since a pager or a chat is no place for a card number. A callback that raises
    is logged and skipped: an alerting bug must not undo or block the settle that
    caused the alert (it is already committed).
    """

    def __init__(self, redaction: Redaction | None = None) -> None:
        self.handlers: list[AlertHandler] = []
        self.redaction = Redaction.default() if redaction is None else redaction

    def add(self, handler: AlertHandler) -> AlertHandler:
        self.handlers.append(handler)
        return handler

    def raise_alert(self, reason: str, message: str, submission: Submission | None) -> Alert:
        return self.tell(Alert(reason, message, submission))

    def tell(self, alert: Alert) -> Alert:
        """Log and hand out `alert`, redacted; returns what was told."""
        alert = self.redaction.alert(alert)
        log.warning("%s", alert)
        for handler in self.handlers:
            try:
                handler(alert)
            except Exception:
                log.exception("alert handler %r failed", handler)
        return alert
